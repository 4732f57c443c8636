// Backend "hopper": our kernels behind a torch::autograd::Function.
#include "attention/hopper_backend.h"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <torch/csrc/autograd/custom_function.h>

#include "attention/cuda/hopper_kernels.h"

namespace fptrain::attention {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// What the backward needs of the forward's spec, kept in the autograd context.
void save_spec(AutogradContext* ctx, const VarlenSpec& spec) {
  ctx->saved_data["max_seqlen"] = spec.max_seqlen;
  ctx->saved_data["causal"] = spec.causal;
  ctx->saved_data["window"] = spec.window;
  ctx->saved_data["scale"] = spec.softmax_scale;
  ctx->saved_data["softcap"] = spec.softcap;
}

VarlenSpec saved_spec(AutogradContext* ctx, const at::Tensor& cu) {
  VarlenSpec s;
  s.cu_seqlens = cu;
  s.max_seqlen = ctx->saved_data["max_seqlen"].toInt();
  s.causal = ctx->saved_data["causal"].toBool();
  s.window = ctx->saved_data["window"].toInt();
  s.softmax_scale = ctx->saved_data["scale"].toDouble();
  s.softcap = ctx->saved_data["softcap"].toDouble();
  return s;
}

// The spec's tensors and scalars as autograd arguments (a VarlenSpec is not one).
VarlenSpec spec_from(const at::Tensor& cu, int64_t max_seqlen, bool causal, int64_t window, double scale,
                     double softcap) {
  VarlenSpec s;
  s.cu_seqlens = cu;
  s.max_seqlen = max_seqlen;
  s.causal = causal;
  s.window = window;
  s.softmax_scale = scale;
  s.softcap = softcap;
  return s;
}

class HopperAttention : public torch::autograd::Function<HopperAttention> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& cu_seqlens, int64_t max_seqlen, bool causal, int64_t window,
                            double scale, double softcap) {
    const VarlenSpec spec = spec_from(cu_seqlens, max_seqlen, causal, window, scale, softcap);
    auto [out, lse] = cuda::attention_forward(q, k, v, spec);
    ctx->save_for_backward({q, k, v, out, lse, cu_seqlens});
    save_spec(ctx, spec);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const VarlenSpec spec = saved_spec(ctx, saved[5]);
    // torch.use_deterministic_algorithms(True) selects the atomic-free backward.
    const bool deterministic = at::globalContext().deterministicAlgorithms();
    auto [dq, dk, dv] = cuda::attention_backward(grad_outputs[0], saved[0], saved[1], saved[2], saved[3], saved[4],
                                                 spec, deterministic);
    return {dq, dk, dv, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// The replay of a recorded forward: returns the recorded output (computing
// nothing) and saves what HopperAttention saves, so the backward is its own.
class HopperAttentionReplay : public torch::autograd::Function<HopperAttentionReplay> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& cu_seqlens, int64_t max_seqlen, bool causal, int64_t window,
                            double scale, double softcap, const AttentionRecord& record) {
    ctx->save_for_backward({q, k, v, record.out, record.lse, cu_seqlens});
    save_spec(ctx, spec_from(cu_seqlens, max_seqlen, causal, window, scale, softcap));
    return record.out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    variable_list grads = HopperAttention::backward(ctx, std::move(grad_outputs));
    grads.emplace_back();  // the record
    return grads;
  }
};

}  // namespace

at::Tensor hopper_varlen_attention_recorded(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const VarlenSpec& spec, AttentionRecord& record) {
  auto [out, lse] = cuda::attention_forward(q, k, v, spec);
  record.out = out;
  record.lse = lse;
  return out;
}

at::Tensor hopper_varlen_attention_replayed(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const VarlenSpec& spec, const AttentionRecord& record) {
  return HopperAttentionReplay::apply(q, k, v, spec.cu_seqlens, spec.max_seqlen, spec.causal, spec.window,
                                      spec.softmax_scale, spec.softcap, record);
}

bool hopper_kernels_available() {
  if (!at::globalContext().hasCUDA() || at::cuda::device_count() == 0) return false;
  const cudaDeviceProp* prop = at::cuda::getCurrentDeviceProperties();
  return prop->major == 9 && prop->minor == 0;
}

bool hopper_kernels_support(int64_t head_dim, at::ScalarType dtype) {
  return (head_dim == 64 || head_dim == 128 || head_dim == 256) && (dtype == at::kBFloat16 || dtype == at::kHalf) &&
         hopper_kernels_available();
}

at::Tensor hopper_varlen_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const VarlenSpec& spec) {
  return HopperAttention::apply(q, k, v, spec.cu_seqlens, spec.max_seqlen, spec.causal, spec.window,
                                spec.softmax_scale, spec.softcap);
}

}  // namespace fptrain::attention
