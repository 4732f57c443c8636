// Fused lm_head + cross-entropy. Per chunk of supervised tokens:
//
//   logits   = hidden_c @ weight^T            model dtype  [n, V]   (÷ divisor, model dtype)
//   logp     = log_softmax(logits) in fp32                  [n, V]
//   loss_t   = -logp[t, target_t]
//   dlogits  = exp(logp) - onehot(target), in fp32, cast to the model dtype (÷ divisor)
//              (on CUDA in 16 bits one kernel forms loss_t and dlogits from the
//              logits, written over them: models/cuda/cross_entropy_kernels.cu)
//   grad_hidden_c  = dlogits @ weight                        [n, H]
//   grad_weight   += dlogits^T @ hidden_c                    [V, H], summed in fp32
//
// which is what autograd does through the materialised path (cross_entropy's
// backward is softmax - onehot per supervised row and zero elsewhere), in the
// same dtypes and the same order of roundings, at grad_output = 1. The backward
// multiplies by the real grad_output (the trainer's 1 / supervised count).
// With a weight sink the weight's gradient goes instead into the sink's slot,
// chunk by chunk, at the announced grad_output (WeightGradSink).
#include "models/linear_cross_entropy.h"

#include "models/cuda/fused_ops_cuda.h"

#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace fptrain::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument("linear_cross_entropy: " + what); }

void check_arguments(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                     double divisor) {
  if (!hidden.defined() || hidden.dim() != 2 || !at::isFloatingType(hidden.scalar_type())) {
    fail("hidden must be a floating-point [T, H] tensor");
  }
  if (!weight.defined() || weight.dim() != 2 || weight.size(1) != hidden.size(1)) {
    fail("weight must be [V, H] with H = " + std::to_string(hidden.size(1)) + "; got " +
         (weight.defined() ? c10::str(weight.sizes()) : std::string("none")));
  }
  if (weight.scalar_type() != hidden.scalar_type() || weight.device() != hidden.device()) {
    fail(std::string("weight is ") + c10::toString(weight.scalar_type()) + " on " + weight.device().str() +
         " but hidden is " + c10::toString(hidden.scalar_type()) + " on " + hidden.device().str());
  }
  if (!targets.defined() || targets.dim() != 1 || targets.scalar_type() != at::kLong ||
      targets.size(0) != hidden.size(0) || targets.device() != hidden.device()) {
    fail("targets must be int64 [T] with T = " + std::to_string(hidden.size(0)) + " on " + hidden.device().str());
  }
  if (!std::isfinite(divisor) || divisor == 0.0) fail("logits_scale_divisor must be finite and non-zero");
}

// Which tokens are supervised, and everything else the autograd function needs
// that is not a differentiable input.
struct Plan {
  at::Tensor rows;    // int64 [S] on the device: the supervised positions, when they are not one run
  int64_t first = 0;  // otherwise they are first, first + 1, ..., first + S - 1
  int64_t count = 0;  // S
  at::Tensor targets;  // int64 [T] on the device
  double divisor = 1.0;
  double softcap = 0.0;  // Gemma 2's final soft-cap (0: none)
  int64_t chunk = 1;
  bool grad_hidden = false, grad_weight = false;
  bool inplace_kernel = false;  // the chunks' softmax and gradient by cuda::cross_entropy_inplace
  // One chunk of 16-bit values on CUDA: its GEMM is autograd's single GEMM (fp32
  // accumulation, one rounding), written straight in the model dtype, so no fp32
  // [V, H] sum is needed (4 bytes per head weight at the step's peak: 2.3 GiB for
  // Qwen's 152k vocabulary at hidden 4096).
  bool weight_grad_in_one_gemm = false;
  WeightGradSink* sink = nullptr;  // the weight's gradient goes there (grad_weight only)

  // The supervised rows of x ([T, ...]): a view when they are one run.
  at::Tensor select(const at::Tensor& x) const {
    return rows.defined() ? x.index_select(0, rows) : x.narrow(0, first, count);
  }
};

// Reads the host copy of the targets: checks every value and finds the
// supervised positions. Their index goes to the device through pinned memory,
// without waiting for the device.
void find_supervised(Plan& plan, const at::Tensor& host_targets, int64_t vocab, const at::Device& device) {
  const at::Tensor host = host_targets.contiguous();
  const int64_t* t = host.const_data_ptr<int64_t>();
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < host.numel(); ++i) {
    if (t[i] == kIgnoreIndex) continue;
    if (t[i] < 0 || t[i] >= vocab) {
      fail("target " + std::to_string(t[i]) + " at position " + std::to_string(i) + " is neither -100 nor in [0, " +
           std::to_string(vocab) + ")");
    }
    rows.push_back(i);
  }
  plan.count = static_cast<int64_t>(rows.size());
  if (rows.empty() || rows.back() - rows.front() + 1 == plan.count) {
    plan.first = rows.empty() ? 0 : rows.front();
    return;
  }
  at::Tensor index = at::empty({plan.count}, at::TensorOptions().dtype(at::kLong).pinned_memory(device.is_cuda()));
  std::copy(rows.begin(), rows.end(), index.mutable_data_ptr<int64_t>());
  plan.rows = index.to(device, /*non_blocking=*/true);
}

// One chunk's logits, computed exactly as lm_head_logits does (the in-place ops
// give the same values as its out-of-place ones; the chunk's logits are ours
// alone). With a soft-cap, `tanh` keeps tanh(logits / cap) for the backward, in
// the GEMM's buffer.
at::Tensor chunk_logits(const at::Tensor& hidden_chunk, const at::Tensor& weight, const Plan& plan,
                        at::Tensor& tanh) {
  at::Tensor logits = at::linear(hidden_chunk, weight);
  if (plan.divisor != 1.0) logits.div_(plan.divisor);
  if (plan.softcap > 0) {
    tanh = logits.div_(plan.softcap).tanh_();
    logits = tanh * plan.softcap;
  }
  return logits;
}

// d(loss)/d(final logits) to d(loss)/d(GEMM output), in place: with a soft-cap
// the backward of cap * tanh(z / cap) op by op (x cap, tanh_backward, ÷ cap),
// then ÷ divisor, each in the model dtype, as autograd through lm_head_logits.
void logits_grad_to_gemm_output(at::Tensor& dlogits, const Plan& plan, const at::Tensor& tanh) {
  if (plan.softcap > 0) at::tanh_backward_out(dlogits, dlogits.mul_(plan.softcap), tanh).div_(plan.softcap);
  if (plan.divisor != 1.0) dlogits.div_(plan.divisor);
}

// d(sum of the chunk's losses) / d(logits) as autograd forms it through the
// materialised path: softmax - onehot in fp32 (exp of the log-probabilities,
// and exp(logp) - 1 at the target, computed before any rounding), cast to the
// model dtype (the backward of .to(kFloat)); then logits_grad_to_gemm_output.
// Consumes logp.
at::Tensor chunk_logits_grad(at::Tensor logp, const at::Tensor& picked, const at::Tensor& target_column,
                             at::ScalarType dtype, const Plan& plan, const at::Tensor& tanh) {
  at::Tensor dlogits;
  if (dtype == at::kFloat) {
    dlogits = logp.exp_();
  } else {
    dlogits = at::empty(logp.sizes(), logp.options().dtype(dtype));
    at::exp_out(dlogits, logp);  // exp in fp32, one rounding to the model dtype
    logp.reset();
  }
  dlogits.scatter_(1, target_column, (picked.exp() - 1.0).to(dtype));
  logits_grad_to_gemm_output(dlogits, plan, tanh);
  return dlogits;
}

// The ATen path of one chunk (the reference): fp32 log-probabilities, the
// losses into loss_out, then (want_grad) the gradient of the GEMM's output.
at::Tensor chunk_loss_and_grad_ops(const at::Tensor& hidden_chunk, const at::Tensor& weight,
                                   const at::Tensor& targets_chunk, const Plan& plan, at::Tensor& loss_out,
                                   bool want_grad) {
  at::Tensor tanh;
  at::Tensor logp = at::log_softmax(chunk_logits(hidden_chunk, weight, plan, tanh), 1, at::kFloat);
  const at::Tensor target_column = targets_chunk.unsqueeze(1);
  const at::Tensor picked = logp.gather(1, target_column);  // [n, 1] log-probability of the target
  at::neg_out(loss_out, picked.squeeze(1));
  if (!want_grad) return {};
  return chunk_logits_grad(std::move(logp), picked, target_column, hidden_chunk.scalar_type(), plan, tanh);
}

// The same with the in-place kernel: the chunk holds only its logits (2 bytes
// a logit in 16 bits; the ATen path about 10 at its log_softmax), which become
// the gradient, rounded once as chunk_logits_grad rounds it.
at::Tensor chunk_loss_and_grad_inplace(const at::Tensor& hidden_chunk, const at::Tensor& weight,
                                       const at::Tensor& targets_chunk, const Plan& plan, at::Tensor& loss_out,
                                       bool want_grad) {
  at::Tensor tanh;
  at::Tensor logits = chunk_logits(hidden_chunk, weight, plan, tanh);
  cuda::cross_entropy_inplace(logits, targets_chunk.contiguous(), loss_out, want_grad);
  if (!want_grad) return {};
  logits_grad_to_gemm_output(logits, plan, tanh);
  return logits;
}

// One chunk's losses into loss_out and, when want_grad, the gradient of its
// GEMM's output (in the model dtype): the kernel's path or ATen's.
at::Tensor chunk_loss_and_grad(const at::Tensor& hidden_chunk, const at::Tensor& weight,
                               const at::Tensor& targets_chunk, const Plan& plan, at::Tensor& loss_out,
                               bool want_grad) {
  const auto path = plan.inplace_kernel ? chunk_loss_and_grad_inplace : chunk_loss_and_grad_ops;
  return path(hidden_chunk, weight, targets_chunk, plan, loss_out, want_grad);
}

// sum += dlogits^T @ hidden_chunk, with `sum` in fp32 (fp64 for an fp64 model).
//
// Why summing the chunks in fp32 and rounding once at the end is at least as
// accurate as autograd's single GEMM: autograd computes grad_weight =
// dlogits^T @ hidden over all T tokens in one GEMM, which multiplies the 16-bit
// inputs exactly, accumulates in fp32 and rounds each element to the model dtype
// once. Here the same 16-bit dlogits and hidden values go in; on CUDA each
// chunk's GEMM adds straight into the fp32 buffer (cuBLAS with an fp32 C and
// beta = 1, no 16-bit intermediate), on the CPU the chunk operands are widened
// to fp32 first (a product of two bf16/fp16 values is exact in fp32). So every
// element is again an fp32 sum of the same exact products, in another order,
// rounded to the model dtype once. Accumulating in the model dtype instead would
// round once per chunk.
void accumulate_weight_grad(at::Tensor& sum, const at::Tensor& dlogits, const at::Tensor& hidden_chunk) {
  if (sum.scalar_type() == dlogits.scalar_type()) {
    sum.addmm_(dlogits.t(), hidden_chunk);
  } else if (sum.is_cuda()) {
    at::addmm_out(sum, sum, dlogits.t(), hidden_chunk, sum.scalar_type());
  } else {
    sum.addmm_(dlogits.t().to(sum.scalar_type()), hidden_chunk.to(sum.scalar_type()));
  }
}

// slot (+)= grad_scale * dlogits^T @ hidden_chunk in one GEMM: the scale is its
// alpha (applied in fp32), the step's first write overwrites (beta = 0: the slot's
// stale values are not read), later chunks and micro-batches add (beta = 1), as
// Liger accumulates its chunks and as sink_linear its micro-batches.
void write_to_sink(WeightGradSink& s, at::Tensor slot, const at::Tensor& dlogits,
                   const at::Tensor& hidden_chunk) {
  at::addmm_out(slot, slot, dlogits.t(), hidden_chunk, /*beta=*/s.sink.written ? 1.0 : 0.0, /*alpha=*/s.grad_scale);
  s.sink.written = true;
}

// The sink's slot, made to exist; nothing supervised: a zero gradient (where the
// step has not written it yet: later writers, the tied embedding's backward, add to it).
at::Tensor sink_slot(WeightGradSink& s, const at::Tensor& weight, int64_t supervised) {
  const at::Tensor slot = s.sink.grad(/*need=*/true);
  if (!slot.defined() || slot.sizes() != weight.sizes() || slot.scalar_type() != weight.scalar_type() ||
      slot.device() != weight.device() || !slot.is_contiguous())
    throw std::logic_error("linear_cross_entropy: the weight sink's slot must be a contiguous tensor like the weight");
  if (supervised == 0 && !s.sink.written) {
    slot.zero_();
    s.sink.written = true;
  }
  return slot;
}

bool is_16_bit(const at::Tensor& t) { return t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf; }

// Whether the chunks run the in-place kernel: 16-bit logits on a GPU it is built for.
bool use_inplace_kernel(FusedPath path, const at::Tensor& hidden) {
  const std::string device = hidden.device().str();
  std::string blocker;
  if (!fused_cuda_kernels_built()) blocker = "the CUDA kernels are not in this build (FPTRAIN_CUDA=OFF)";
  else if (!hidden.is_cuda()) blocker = "hidden is on " + device;
  else if (!is_16_bit(hidden)) blocker = std::string("dtype ") + c10::toString(hidden.scalar_type()) + " (not 16-bit)";
  else if (!fused_cuda_kernels_available(hidden.device())) blocker = "device " + device + " is not an sm_90 GPU";
  switch (path) {
    case FusedPath::kReference: return false;
    case FusedPath::kAuto: return blocker.empty();
    case FusedPath::kCuda:
      if (!blocker.empty()) fail("the in-place cross-entropy kernel does not apply: " + blocker);
      return true;
  }
  fail("unknown softmax path");
}

at::Tensor take_tensor(AutogradContext* ctx, const char* key) {
  at::IValue& slot = ctx->saved_data[key];
  at::Tensor t = slot.isTensor() ? std::move(slot).toTensor() : at::Tensor();
  slot = at::IValue();
  return t;
}

class LinearCrossEntropyFunction : public torch::autograd::Function<LinearCrossEntropyFunction> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const Plan& plan) {
    const int64_t S = plan.count, H = hidden.size(1);
    const at::ScalarType dtype = hidden.scalar_type();
    at::Tensor token_loss = at::empty({S}, hidden.options().dtype(at::kFloat));
    at::Tensor grad_hidden, grad_hidden_rows, grad_weight_sum;
    if (plan.grad_hidden) {
      grad_hidden = at::zeros(hidden.sizes(), hidden.options());  // ignored tokens: zero rows
      grad_hidden_rows = plan.rows.defined() ? at::empty({S, H}, hidden.options())
                                             : grad_hidden.narrow(0, plan.first, S);
    }
    const bool one_gemm = plan.weight_grad_in_one_gemm;
    at::Tensor grad_weight, slot;
    if (plan.sink != nullptr) slot = sink_slot(*plan.sink, weight, S);
    else if (plan.grad_weight && !one_gemm) {
      grad_weight_sum = at::zeros(weight.sizes(), weight.options().dtype(dtype == at::kDouble ? at::kDouble : at::kFloat));
    }
    if (S > 0) {
      const at::Tensor h = plan.select(hidden), t = plan.select(plan.targets);
      const bool want_grad = plan.grad_hidden || plan.grad_weight;
      for (int64_t start = 0; start < S; start += plan.chunk) {
        const int64_t n = std::min(plan.chunk, S - start);
        const at::Tensor hidden_chunk = h.narrow(0, start, n), targets_chunk = t.narrow(0, start, n);
        at::Tensor loss_out = token_loss.narrow(0, start, n);
        const at::Tensor dlogits = chunk_loss_and_grad(hidden_chunk, weight, targets_chunk, plan, loss_out, want_grad);
        if (!want_grad) continue;
        if (plan.grad_hidden) {
          at::Tensor out = grad_hidden_rows.narrow(0, start, n);
          at::mm_out(out, dlogits, weight);
        }
        if (plan.sink != nullptr) write_to_sink(*plan.sink, slot, dlogits, hidden_chunk);
        else if (one_gemm) grad_weight = at::mm(dlogits.t(), hidden_chunk);
        else if (plan.grad_weight) accumulate_weight_grad(grad_weight_sum, dlogits, hidden_chunk);
      }
      if (plan.grad_hidden && plan.rows.defined()) grad_hidden.index_copy_(0, plan.rows, grad_hidden_rows);
    }
    if (one_gemm && !grad_weight.defined()) grad_weight = at::zeros_like(weight);  // nothing supervised
    if (grad_weight_sum.defined()) {
      grad_weight = grad_weight_sum.scalar_type() == dtype ? grad_weight_sum : grad_weight_sum.to(dtype);
      grad_weight_sum.reset();
    }
    ctx->saved_data["grad_hidden"] = grad_hidden;
    ctx->saved_data["grad_weight"] = grad_weight;
    ctx->saved_data["supervised"] = S;
    ctx->saved_data["consumed"] = false;
    ctx->saved_data["sink"] = reinterpret_cast<int64_t>(plan.sink);
    return token_loss.sum();
  }

  // Scales the saved gradients by grad_output in place and hands them over.
  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    TORCH_CHECK(!ctx->saved_data["consumed"].toBool(),
                "linear_cross_entropy: a second backward through the same loss; the first one took the saved "
                "gradients (retain_graph is not supported)");
    ctx->saved_data["consumed"] = true;
    at::Tensor grad_hidden = take_tensor(ctx, "grad_hidden");
    at::Tensor grad_weight = take_tensor(ctx, "grad_weight");
    // With a sink the weight's gradient is in its slot already, at the announced scale; the
    // undefined one returned still reaches its AccumulateGrad, whose hooks run as usual.
    if (auto* sink = reinterpret_cast<WeightGradSink*>(ctx->saved_data["sink"].toInt()))
      sink->check.expect(grad_outputs[0], sink->grad_scale);
    // With nothing supervised the gradients are exact zeros whatever grad_output is.
    if (ctx->saved_data["supervised"].toInt() > 0 && grad_outputs[0].defined()) {
      // A [1] tensor, not a 0-dim one: type promotion then computes in fp32 and
      // rounds each product once, instead of first rounding grad_output to bf16.
      const at::Tensor scale = grad_outputs[0].reshape({1});
      if (grad_hidden.defined()) grad_hidden.mul_(scale);
      if (grad_weight.defined()) grad_weight.mul_(scale);
    }
    return {grad_hidden, grad_weight, at::Tensor()};
  }
};

}  // namespace

at::Tensor lm_head_logits(const at::Tensor& hidden, const at::Tensor& weight, double logits_scale_divisor,
                          double final_softcap) {
  at::Tensor logits = at::linear(hidden, weight);
  if (logits_scale_divisor != 1.0) logits = logits / logits_scale_divisor;
  if (final_softcap > 0) logits = at::tanh(logits / final_softcap) * final_softcap;
  return logits;
}

at::Tensor linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                double logits_scale_divisor, int64_t chunk_tokens, const at::Tensor& targets_cpu,
                                double final_softcap, WeightGradSink* weight_sink, FusedPath softmax_path) {
  check_arguments(hidden, weight, targets, logits_scale_divisor);
  if (!(final_softcap >= 0) || !std::isfinite(final_softcap)) fail("final_softcap must be finite and >= 0");
  at::Tensor host_targets = targets_cpu;
  if (host_targets.defined()) {
    if (!host_targets.is_cpu() || host_targets.scalar_type() != at::kLong || host_targets.sizes() != targets.sizes()) {
      fail("targets_cpu must be an int64 CPU copy of targets " + c10::str(targets.sizes()));
    }
  } else {
    host_targets = targets.is_cpu() ? targets : targets.to(at::kCPU);  // waits for the device
  }
  Plan plan;
  find_supervised(plan, host_targets, weight.size(0), hidden.device());
  plan.targets = targets;
  plan.divisor = logits_scale_divisor;
  plan.softcap = final_softcap;
  const bool grad_mode = c10::GradMode::is_enabled();
  plan.grad_hidden = grad_mode && hidden.requires_grad();
  plan.grad_weight = grad_mode && weight.requires_grad();
  if (plan.grad_weight && weight_sink != nullptr && weight_sink->sink.grad) plan.sink = weight_sink;
  plan.inplace_kernel = use_inplace_kernel(softmax_path, hidden);
  ChunkRequest request;
  request.tokens = hidden.size(0);
  request.supervised = plan.count;
  request.hidden = hidden.size(1);
  request.vocab = weight.size(0);
  request.chunk_tokens = chunk_tokens;
  request.inplace_kernel = plan.inplace_kernel;
  request.model_dtype_gemm = plan.grad_weight && !plan.sink && weight.is_cuda() && is_16_bit(hidden);
  const ChunkChoice choice = choose_chunks(request);
  plan.chunk = choice.chunk;
  plan.weight_grad_in_one_gemm = choice.weight_grad_in_one_gemm;
  return LinearCrossEntropyFunction::apply(hidden, weight, plan);
}

at::Tensor reference_linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight,
                                          const at::Tensor& targets, double logits_scale_divisor,
                                          double final_softcap) {
  check_arguments(hidden, weight, targets, logits_scale_divisor);
  const at::Tensor logits = lm_head_logits(hidden, weight, logits_scale_divisor, final_softcap).to(at::kFloat);
  return at::cross_entropy_loss(logits, targets, /*weight=*/{}, at::Reduction::Sum, kIgnoreIndex);
}

}  // namespace fptrain::models
