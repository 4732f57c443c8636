// The fused element-wise ops (see fused_ops.h): argument checks, the choice of
// path, the autograd Functions, and the reference path in ATen. The kernels
// are in models/cuda/; a build without FPTRAIN_CUDA links
// models/cuda/fused_ops_cuda_stub.cpp instead (kernels_built() is false there).
#include "models/fused_ops.h"

#include "models/cuda/fused_ops_cuda.h"

#include <torch/csrc/autograd/custom_function.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace fptrain::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// "" when the kernels can run on these tensors (undefined ones are skipped), else why not.
std::string cuda_blocker(const std::vector<at::Tensor>& tensors) {
  if (!fused_cuda_kernels_built()) return "the CUDA kernels are not in this build (FPTRAIN_CUDA=OFF)";
  const at::Tensor& first = tensors.front();
  if (!first.is_cuda()) return "the tensors are on " + first.device().str();
  const at::ScalarType dtype = first.scalar_type();
  if (dtype != at::kFloat && dtype != at::kBFloat16 && dtype != at::kHalf) {
    return std::string("dtype ") + c10::toString(dtype) + " (the kernels take float32, bfloat16, float16)";
  }
  for (const at::Tensor& t : tensors) {
    if (!t.defined()) continue;
    if (t.device() != first.device()) return "the tensors are on different devices";
    if (t.scalar_type() != dtype) {
      return std::string("the tensors have different dtypes (") + c10::toString(dtype) + " and " +
             c10::toString(t.scalar_type()) + ")";
    }
  }
  if (!fused_cuda_kernels_available(first.device())) return "device " + first.device().str() + " is not an sm_90 GPU";
  return "";
}

bool use_cuda(FusedPath path, const std::string& blocker, const char* op) {
  switch (path) {
    case FusedPath::kReference: return false;
    case FusedPath::kAuto: return blocker.empty();
    case FusedPath::kCuda:
      if (!blocker.empty()) throw std::invalid_argument(std::string(op) + ": the CUDA path does not apply: " + blocker);
      return true;
  }
  throw std::invalid_argument(std::string(op) + ": unknown path");
}

// [rows, cols] view (or copy) with a unit column stride; row stride free.
at::Tensor rows_of(const at::Tensor& t, int64_t cols) {
  at::Tensor r = t.reshape({-1, cols});
  if (r.stride(1) != 1 || (r.size(0) > 1 && r.stride(0) < cols)) r = r.contiguous();
  return r;
}

// ---- RMSNorm ------------------------------------------------------------------

struct RmsNormGrads {
  at::Tensor x, update, weight;
};

// The reference backward, in ATen, with the kernel's formulas and roundings.
// s, grad_y, grad_sum [rows, H]; rstd [rows]. one_plus: Gemma's (1 + w) form.
RmsNormGrads reference_rms_norm_backward(const at::Tensor& s, const at::Tensor& weight, const at::Tensor& rstd,
                                         const at::Tensor& grad_y, const at::Tensor& grad_sum, bool want_update,
                                         double update_scale, bool want_weight, bool one_plus) {
  const at::ScalarType dtype = s.scalar_type();
  const at::Tensor x32 = s.to(at::kFloat);
  const at::Tensor r = rstd.view({-1, 1});
  // The normalised value's gradient. autograd of weight * normalised.to(dtype):
  // grad_y * weight in the dtype, widened by ToCopyBackward; of Gemma's
  // (normalised * (1 + w32)).to(dtype): grad_y widened, times 1 + w in fp32.
  const at::Tensor g = one_plus ? grad_y.to(at::kFloat) * (weight.to(at::kFloat) + 1.0)
                                : (grad_y * weight).to(at::kFloat);
  const at::Tensor dot = (g * x32).sum(-1, /*keepdim=*/true);
  const at::Tensor coef = dot * r * r * r * (1.0 / static_cast<double>(s.size(-1)));
  RmsNormGrads out;
  out.x = (g * r - x32 * coef).to(dtype);
  if (grad_sum.defined()) out.x = out.x + grad_sum;
  if (want_update) out.update = update_scale != 1.0 ? out.x * update_scale : out.x;
  if (want_weight) {  // the normalised value as the product read it: rounded (Llama) or fp32 (Gemma)
    const at::Tensor normalised = one_plus ? x32 * r : (x32 * r).to(dtype).to(at::kFloat);
    out.weight = (grad_y.to(at::kFloat) * normalised).sum(0).to(weight.scalar_type());
  }
  return out;
}

// The forward of both variants: sum (with an update) and normed, and the
// fp32 rstd per row that the backward needs.
struct RmsNormForward {
  at::Tensor sum, normed, rstd;
};

RmsNormForward rms_norm_forward(const at::Tensor& x, const at::Tensor& update, const at::Tensor& weight, double eps,
                                double update_scale, bool cuda, bool one_plus) {
  const bool has_update = update.defined();
  RmsNormForward f;
  if (cuda) {
    const int64_t H = x.size(-1);
    const auto r = cuda::rms_norm_forward(x.contiguous().view({-1, H}),
                                          has_update ? update.contiguous().view({-1, H}) : at::Tensor(),
                                          weight.contiguous(), eps, update_scale, one_plus);
    if (has_update) f.sum = r.sum.view(x.sizes());
    f.normed = r.y.view(x.sizes());
    f.rstd = r.rstd;
  } else {
    // Exactly CausalLM's residual add and models/rms_norm.cpp's operations
    // (Gemma: models/gemma_ops.cpp's gemma_rms_norm).
    if (has_update) f.sum = update_scale != 1.0 ? x + update * update_scale : x + update;
    const at::Tensor& s = has_update ? f.sum : x;
    const at::Tensor x32 = s.to(at::kFloat);
    const at::Tensor variance = x32.pow(2).mean(-1, /*keepdim=*/true);
    const at::Tensor r = at::rsqrt(variance + eps);
    f.normed = one_plus ? (x32 * r * (weight.to(at::kFloat) + 1.0)).to(s.scalar_type())
                        : weight * (x32 * r).to(s.scalar_type());
    f.rstd = r.reshape({-1});
  }
  return f;
}

// The backward of both variants, for the normalised input s (x, or the sum).
// grad_y undefined: the normalised output was not used.
RmsNormGrads rms_norm_backward(const at::Tensor& s, const at::Tensor& weight, const at::Tensor& rstd,
                               const at::Tensor& grad_y, const at::Tensor& grad_sum, bool want_update,
                               double update_scale, bool want_weight, bool cuda, bool one_plus) {
  RmsNormGrads g;
  if (!grad_y.defined()) {  // only the sum was used downstream
    if (grad_sum.defined()) {
      g.x = grad_sum;
      if (want_update) g.update = update_scale != 1.0 ? grad_sum * update_scale : grad_sum;
    }
    return g;
  }
  const int64_t H = s.size(-1);
  const at::Tensor s2 = s.contiguous().view({-1, H});
  const at::Tensor gy2 = grad_y.contiguous().view({-1, H});
  const at::Tensor gs2 = grad_sum.defined() ? grad_sum.contiguous().view({-1, H}) : at::Tensor();
  if (cuda) {
    const auto r = cuda::rms_norm_backward(s2, weight.contiguous(), rstd, gy2, gs2, want_update, update_scale,
                                           want_weight, one_plus);
    g = {r.grad_x, r.grad_update, r.grad_weight};
  } else {
    g = reference_rms_norm_backward(s2, weight, rstd, gy2, gs2, want_update, update_scale, want_weight, one_plus);
  }
  g.x = g.x.view(s.sizes());
  if (g.update.defined()) g.update = g.update.view(s.sizes());
  return g;
}

// Inputs x, weight. Output normed. one_plus: Gemma's (1 + w) form.
class RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight, double eps,
                            bool cuda, bool one_plus) {
    const RmsNormForward f = rms_norm_forward(x, at::Tensor(), weight, eps, 1.0, cuda, one_plus);
    ctx->save_for_backward({x, weight, f.rstd});
    ctx->saved_data["cuda"] = cuda;
    ctx->saved_data["one_plus"] = one_plus;
    return f.normed;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const RmsNormGrads g = rms_norm_backward(saved[0], saved[1], saved[2], grads[0], at::Tensor(), false, 1.0,
                                             ctx->needs_input_grad(1), ctx->saved_data["cuda"].toBool(),
                                             ctx->saved_data["one_plus"].toBool());
    return {g.x, g.weight, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// Inputs residual, update, weight. Outputs {sum, normed}. one_plus: Gemma's (1 + w) form.
class AddRmsNormFunction : public torch::autograd::Function<AddRmsNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& residual, const at::Tensor& update,
                               const at::Tensor& weight, double eps, double update_scale, bool cuda, bool one_plus) {
    ctx->set_materialize_grads(false);  // an unused output's gradient stays undefined, not zeros
    const RmsNormForward f = rms_norm_forward(residual, update, weight, eps, update_scale, cuda, one_plus);
    ctx->save_for_backward({f.sum, weight, f.rstd});
    ctx->saved_data["update_scale"] = update_scale;
    ctx->saved_data["cuda"] = cuda;
    ctx->saved_data["one_plus"] = one_plus;
    return {f.sum, f.normed};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const RmsNormGrads g =
        rms_norm_backward(saved[0], saved[1], saved[2], grads[1], grads[0], ctx->needs_input_grad(1),
                          ctx->saved_data["update_scale"].toDouble(), ctx->needs_input_grad(2),
                          ctx->saved_data["cuda"].toBool(), ctx->saved_data["one_plus"].toBool());
    return {g.x, g.update, g.weight, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

void check_rms_norm_args(const char* op, const at::Tensor& x, const at::Tensor& weight) {
  if (!x.defined() || x.dim() < 1 || !at::isFloatingType(x.scalar_type())) {
    throw std::invalid_argument(std::string(op) + ": x must be a floating-point tensor [..., H]");
  }
  if (!weight.defined() || weight.dim() != 1 || weight.size(0) != x.size(-1) || weight.device() != x.device()) {
    throw std::invalid_argument(std::string(op) + ": weight must be [H] = [" + std::to_string(x.size(-1)) +
                                "] on " + x.device().str() + "; got " +
                                (weight.defined() ? c10::str(at::IntArrayRef(weight.sizes())) + " on " + weight.device().str()
                                                  : std::string("none")));
  }
}

std::string rms_norm_blocker(const std::vector<at::Tensor>& tensors) {
  std::string why = cuda_blocker(tensors);
  if (why.empty() && tensors.front().size(-1) > cuda::rms_norm_max_cols()) {
    why = "rows of " + std::to_string(tensors.front().size(-1)) + " elements (the kernels take at most " +
          std::to_string(cuda::rms_norm_max_cols()) + ")";
  }
  return why;
}

// ---- rotary embeddings --------------------------------------------------------

// The transposed rotation, as autograd forms it through apply_rotary:
// grad * cos + [(grad * sin)[h:], -(grad * sin)[:h]].
at::Tensor reference_rotary_backward(const at::Tensor& grad, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = grad.size(-1) / 2;
  const at::Tensor gs = grad * sin;
  return grad * cos + at::cat({gs.narrow(-1, half, half), -gs.narrow(-1, 0, half)}, -1);
}

// Inputs q, k [T, H, D]; cos, sin [T, 1, D]. Outputs {q, k} rotated.
class RotaryFunction : public torch::autograd::Function<RotaryFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                               const at::Tensor& sin, bool cuda) {
    ctx->set_materialize_grads(false);
    variable_list out(2);
    if (cuda) {
      std::tie(out[0], out[1]) = run_cuda(q, k, cos, sin, /*inverse=*/false);
    } else {
      const RotaryTables tables{cos, sin};
      out[0] = apply_rotary(q, tables);
      out[1] = apply_rotary(k, tables);
    }
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["cuda"] = cuda;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool cuda = ctx->saved_data["cuda"].toBool();
    variable_list out(5);
    if (!grads[0].defined() && !grads[1].defined()) return out;
    if (cuda) {
      std::tie(out[0], out[1]) = run_cuda(grads[0], grads[1], saved[0], saved[1], /*inverse=*/true);
    } else {
      for (int i = 0; i < 2; ++i) {
        if (grads[i].defined()) out[i] = reference_rotary_backward(grads[i], saved[0], saved[1]);
      }
    }
    return out;
  }

 private:
  static std::pair<at::Tensor, at::Tensor> run_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                                                    const at::Tensor& sin, bool inverse) {
    auto unit_last = [](const at::Tensor& t) { return t.defined() && t.stride(-1) != 1 ? t.contiguous() : t; };
    const int64_t D = cos.size(-1);
    return cuda::rotary(unit_last(q), unit_last(k), cos.reshape({-1, D}).contiguous(),
                        sin.reshape({-1, D}).contiguous(), inverse);
  }
};

// ---- SwiGLU -------------------------------------------------------------------

struct SwigluGrads {
  at::Tensor gate, up;
};

// The gate's activation as the model writes it: silu, or Gemma's gelu_pytorch_tanh.
at::Tensor reference_activation(const at::Tensor& gate, bool gelu_tanh) {
  return gelu_tanh ? at::gelu(gate, "tanh") : at::silu(gate);
}

// autograd of act(gate) * up: grad_up = grad * act(gate); grad_gate =
// act's backward (silu_backward, gelu_backward) of grad * up.
SwigluGrads reference_swiglu_backward(const at::Tensor& grad, const at::Tensor& gate, const at::Tensor& up,
                                      bool gelu_tanh) {
  const at::Tensor da = grad * up;
  return {gelu_tanh ? at::gelu_backward(da, gate, "tanh") : at::silu_backward(da, gate),
          grad * reference_activation(gate, gelu_tanh)};
}

// Whether the CUDA backward may write an input's gradient over the saved input (as Liger's
// SwiGLU does): it must be an intermediate of this graph — nothing but the backward reads it
// after the forward; a leaf may be the caller's own tensor — and laid out as its gradient is
// returned. Saves two [T, I] buffers at the MLP's backward (0.5 GiB at 12k tokens of a 7B).
bool grad_may_overwrite(const at::Tensor& t) { return t.grad_fn() != nullptr && t.is_contiguous(); }

// An input overwritten with its gradient: a second backward through the same graph
// (retain_graph) now fails autograd's version check instead of reading gradients as inputs.
void mark_overwritten(const at::Tensor& t) { t.unsafeGetTensorImpl()->bump_version(); }

// Inputs gate, up. Output act(gate) * up (gelu_tanh: Gemma's activation, else silu).
class SwigluFunction : public torch::autograd::Function<SwigluFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate, const at::Tensor& up, bool cuda,
                            bool gelu_tanh) {
    at::Tensor out;
    if (cuda) {
      const int64_t I = gate.size(-1);
      out = cuda::swiglu_forward(rows_of(gate, I), rows_of(up, I), gelu_tanh).view(gate.sizes());
    } else {
      out = reference_activation(gate, gelu_tanh) * up;
    }
    ctx->save_for_backward({gate, up});
    ctx->saved_data["cuda"] = cuda;
    ctx->saved_data["gelu_tanh"] = gelu_tanh;
    ctx->saved_data["overwrite"] = cuda && grad_may_overwrite(gate) && grad_may_overwrite(up);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& gate = saved[0];
    const at::Tensor& up = saved[1];
    const bool gelu_tanh = ctx->saved_data["gelu_tanh"].toBool();
    variable_list out(4);
    if (!grads[0].defined()) return out;
    if (ctx->saved_data["cuda"].toBool()) {
      const int64_t I = gate.size(-1);
      const bool overwrite = ctx->saved_data["overwrite"].toBool();
      auto grad_buffer = [&](const at::Tensor& t) {  // each element is read before it is written
        return overwrite ? t : at::empty(t.sizes(), t.options().memory_format(at::MemoryFormat::Contiguous));
      };
      const at::Tensor grad_gate = grad_buffer(gate), grad_up = grad_buffer(up);
      cuda::swiglu_backward(rows_of(grads[0], I), rows_of(gate, I), rows_of(up, I), grad_gate.view({-1, I}),
                            grad_up.view({-1, I}), gelu_tanh);
      if (overwrite) {
        mark_overwritten(gate);
        mark_overwritten(up);
      }
      out[0] = grad_gate;
      out[1] = grad_up;
    } else {
      const SwigluGrads g = reference_swiglu_backward(grads[0], gate, up, gelu_tanh);
      out[0] = g.gate;
      out[1] = g.up;
    }
    return out;
  }
};

// gate_up [..., 2I]: gate = first half, up = second half.
class SwigluPackedFunction : public torch::autograd::Function<SwigluPackedFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& gate_up, bool cuda, bool gelu_tanh) {
    const int64_t I = gate_up.size(-1) / 2;
    const at::Tensor gate = gate_up.narrow(-1, 0, I), up = gate_up.narrow(-1, I, I);
    at::Tensor out;
    if (cuda) {
      out = cuda::swiglu_forward(rows_of(gate, I), rows_of(up, I), gelu_tanh).view(gate.sizes());
    } else {
      out = reference_activation(gate, gelu_tanh) * up;
    }
    ctx->save_for_backward({gate_up});
    ctx->saved_data["cuda"] = cuda;
    ctx->saved_data["gelu_tanh"] = gelu_tanh;
    ctx->saved_data["overwrite"] = cuda && grad_may_overwrite(gate_up);
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor gate_up = ctx->get_saved_variables()[0];
    const int64_t I = gate_up.size(-1) / 2;
    const at::Tensor gate = gate_up.narrow(-1, 0, I), up = gate_up.narrow(-1, I, I);
    const bool gelu_tanh = ctx->saved_data["gelu_tanh"].toBool();
    variable_list out(3);
    if (!grads[0].defined()) return out;
    if (ctx->saved_data["cuda"].toBool()) {
      const bool overwrite = ctx->saved_data["overwrite"].toBool();
      const at::Tensor grad = overwrite ? gate_up
                                        : at::empty(gate_up.sizes(),
                                                    gate_up.options().memory_format(at::MemoryFormat::Contiguous));
      const at::Tensor grad2 = grad.view({-1, 2 * I});
      cuda::swiglu_backward(rows_of(grads[0], I), rows_of(gate, I), rows_of(up, I), grad2.narrow(1, 0, I),
                            grad2.narrow(1, I, I), gelu_tanh);
      if (overwrite) mark_overwritten(gate_up);
      out[0] = grad;
    } else {
      const SwigluGrads g = reference_swiglu_backward(grads[0], gate, up, gelu_tanh);
      out[0] = at::cat({g.gate, g.up}, -1);
    }
    return out;
  }
};

// The entry points of both weight forms and both activations (one_plus, gelu_tanh: Gemma's).
at::Tensor rms_norm_op(const char* op, const at::Tensor& x, const at::Tensor& weight, double eps, FusedPath path,
                       bool one_plus) {
  check_rms_norm_args(op, x, weight);
  const bool cuda = use_cuda(path, rms_norm_blocker({x, weight}), op);
  return RmsNormFunction::apply(x, weight, eps, cuda, one_plus);
}

AddRmsNormOutput add_rms_norm_op(const char* op, const at::Tensor& residual, const at::Tensor& update,
                                 const at::Tensor& weight, double eps, double update_scale, FusedPath path,
                                 bool one_plus) {
  check_rms_norm_args(op, residual, weight);
  if (!update.defined() || update.sizes() != residual.sizes() || update.device() != residual.device()) {
    throw std::invalid_argument(std::string(op) + ": update must have the residual's shape " +
                                c10::str(at::IntArrayRef(residual.sizes())) + " and device");
  }
  const bool cuda = use_cuda(path, rms_norm_blocker({residual, update, weight}), op);
  const variable_list out = AddRmsNormFunction::apply(residual, update, weight, eps, update_scale, cuda, one_plus);
  return {out[0], out[1]};
}

at::Tensor gated_op(const char* op, const at::Tensor& gate, const at::Tensor& up, FusedPath path, bool gelu_tanh) {
  if (!gate.defined() || !up.defined() || gate.dim() < 1 || gate.sizes() != up.sizes() ||
      gate.device() != up.device()) {
    throw std::invalid_argument(std::string(op) + ": gate and up must be tensors of one shape [..., I] on one device");
  }
  const bool cuda = use_cuda(path, cuda_blocker({gate, up}), op);
  return SwigluFunction::apply(gate, up, cuda, gelu_tanh);
}

at::Tensor gated_packed_op(const char* op, const at::Tensor& gate_up, FusedPath path, bool gelu_tanh) {
  if (!gate_up.defined() || gate_up.dim() < 1 || gate_up.size(-1) % 2 != 0) {
    throw std::invalid_argument(std::string(op) + ": gate_up must be [..., 2I]");
  }
  const bool cuda = use_cuda(path, cuda_blocker({gate_up}), op);
  return SwigluPackedFunction::apply(gate_up, cuda, gelu_tanh);
}

}  // namespace

bool fused_cuda_kernels_built() { return cuda::kernels_built(); }

bool fused_cuda_kernels_available(const at::Device& device) {
  return cuda::device_supported(device);
}

at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, FusedPath path) {
  return rms_norm_op("fused_rms_norm", x, weight, eps, path, /*one_plus=*/false);
}

at::Tensor fused_gemma_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps, FusedPath path) {
  return rms_norm_op("fused_gemma_rms_norm", x, weight, eps, path, /*one_plus=*/true);
}

AddRmsNormOutput fused_add_rms_norm(const at::Tensor& residual, const at::Tensor& update, const at::Tensor& weight,
                                    double eps, double update_scale, FusedPath path) {
  return add_rms_norm_op("fused_add_rms_norm", residual, update, weight, eps, update_scale, path, /*one_plus=*/false);
}

AddRmsNormOutput fused_add_gemma_rms_norm(const at::Tensor& residual, const at::Tensor& update,
                                          const at::Tensor& weight, double eps, double update_scale, FusedPath path) {
  return add_rms_norm_op("fused_add_gemma_rms_norm", residual, update, weight, eps, update_scale, path,
                         /*one_plus=*/true);
}

RotaryOutput fused_rotary(const at::Tensor& q, const at::Tensor& k, const RotaryTables& tables, FusedPath path) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("fused_rotary: " + what); };
  if (!q.defined() || !k.defined() || q.dim() != 3 || k.dim() != 3) fail("q and k must be [T, heads, head_dim]");
  const int64_t T = q.size(0), D = q.size(2);
  if (k.size(0) != T || k.size(2) != D) {
    fail("q " + c10::str(at::IntArrayRef(q.sizes())) + " and k " + c10::str(at::IntArrayRef(k.sizes())) + " differ in tokens or head_dim");
  }
  if (D % 2 != 0) fail("head_dim must be even; got " + std::to_string(D));
  at::Tensor cos = tables.cos, sin = tables.sin;
  if (!cos.defined() || !sin.defined()) fail("the tables are missing");
  if (cos.dim() == 2) cos = cos.unsqueeze(1);
  if (sin.dim() == 2) sin = sin.unsqueeze(1);
  const std::vector<int64_t> table_shape{T, 1, D};
  if (cos.sizes() != at::IntArrayRef(table_shape) || sin.sizes() != at::IntArrayRef(table_shape)) {
    fail("cos and sin must be [T, 1, head_dim] = " + c10::str(at::IntArrayRef(table_shape)) + "; got " + c10::str(at::IntArrayRef(cos.sizes())) +
         " and " + c10::str(at::IntArrayRef(sin.sizes())));
  }
  if (q.device() != k.device() || cos.device() != q.device() || sin.device() != q.device()) {
    fail("q, k and the tables must be on one device");
  }
  const bool cuda = use_cuda(path, cuda_blocker({q, k, cos, sin}), "fused_rotary");
  const variable_list out = RotaryFunction::apply(q, k, cos, sin, cuda);
  return {out[0], out[1]};
}

at::Tensor fused_swiglu(const at::Tensor& gate, const at::Tensor& up, FusedPath path) {
  return gated_op("fused_swiglu", gate, up, path, /*gelu_tanh=*/false);
}

at::Tensor fused_swiglu_packed(const at::Tensor& gate_up, FusedPath path) {
  return gated_packed_op("fused_swiglu_packed", gate_up, path, /*gelu_tanh=*/false);
}

at::Tensor fused_geglu(const at::Tensor& gate, const at::Tensor& up, FusedPath path) {
  return gated_op("fused_geglu", gate, up, path, /*gelu_tanh=*/true);
}

at::Tensor fused_geglu_packed(const at::Tensor& gate_up, FusedPath path) {
  return gated_packed_op("fused_geglu_packed", gate_up, path, /*gelu_tanh=*/true);
}

}  // namespace fptrain::models
