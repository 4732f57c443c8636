// The language-model head and its cross-entropy, fused: the summed token loss
// of logits = hidden @ weight^T without ever holding the [T, vocab] logits.
//
// For Llama-3.2-1B (vocab 128256) and 16k tokens the materialised path holds
// 3.9 GiB of bf16 logits, 7.8 GiB of fp32 logits, 7.8 GiB of fp32
// log-probabilities saved for the backward, then their gradients (a measured
// peak of 23.5 GiB for the head's loss + backward; fused: 2.3 GiB). The fused path
// works on chunks of supervised tokens: per chunk it computes the logits, the
// loss and at once the gradients (of hidden and of weight), then drops the
// chunk's logits. What it keeps for the backward is the two gradients, as large
// as hidden and weight themselves.
#pragma once

#include "models/grad_scale_check.h"
#include "models/fused_ops.h"
#include "models/grad_sink_linear.h"
#include "models/loss_chunking.h"

#include <ATen/ATen.h>

#include <cstdint>

namespace fptrain::models {

inline constexpr int64_t kIgnoreIndex = -100;  // targets equal to it are not supervised

// logits = hidden @ weight^T in the model dtype, then / divisor in the model
// dtype when divisor != 1 (Granite's logits_scaling), then cap * tanh(logits /
// cap) op by op in the model dtype when final_softcap > 0 (Gemma 2), as
// transformers computes them; CausalLM::logits and both loss paths use exactly
// these operations.
at::Tensor lm_head_logits(const at::Tensor& hidden, const at::Tensor& weight, double logits_scale_divisor,
                          double final_softcap = 0.0);

// Where the fused loss sends the weight's gradient instead of returning it: its
// slot in the trainer's flat gradients (models/grad_sinks.h). Without a sink the
// forward keeps the [V, H] gradient until the backward returns it and autograd's
// AccumulateGrad adds it into the slot: two [V, H] tensors live at the backward's
// start (three with an fp32 sum over several chunks). With one, each chunk's GEMM
// writes into the slot at once, already times the backward's grad_output (the
// GEMM's alpha, in fp32, one rounding per chunk; beta = 0 for the step's first
// write, else 1, as sink_linear), and nothing [V, H] outlives the forward.
struct WeightGradSink {
  GradSink sink;            // the weight's slot; `written` is shared with whatever else writes it
  double grad_scale = 1.0;  // the grad_output the backward will receive (the trainer's 1 / denominator)
  GradScaleCheck check;     // the backward's check of grad_scale (verify() before reading the slot)
};

// Sum over t with targets[t] != -100 of cross_entropy(logits[t], targets[t]),
// logits as lm_head_logits computes them, the cross-entropy in fp32. Returns an
// fp32 scalar on hidden's device, differentiable with respect to hidden and
// weight (a torch::autograd::Function; no graph when neither requires grad or
// grad mode is off, and then no gradient is computed either).
//
//   hidden   [T, H], floating point (the final norm's output, in the model dtype)
//   weight   [V, H], same dtype and device (lm_head, or the tied embedding)
//   targets  [T] int64 on the same device; each -100 or in [0, V)
//   chunk_tokens  supervised tokens per chunk; <= 0 lets choose_chunks
//                 (models/loss_chunking.h) decide
//   targets_cpu   optional host copy of targets (same values). It tells which
//                 tokens are supervised; without it a CUDA `targets` is copied to
//                 the host once, which waits for the work queued before it.
//
// Only supervised tokens are computed: they are gathered (a view when they are
// one run) and cut into chunks, so ignored tokens cost no matmul at all. The
// forward computes the gradients at grad_output = 1 and keeps them; the backward
// scales them by grad_output in place and hands them over, so it may run once
// (no retain_graph). Temporaries are chunk-sized, plus (without a weight_sink) an
// fp32 accumulator for the weight's gradient when the model dtype is 16-bit.
//   weight_sink   optional: with a slot, and when weight's gradient is computed, the
//                 forward writes that gradient there (WeightGradSink) and the
//                 backward returns none for weight; it checks that its grad_output
//                 is weight_sink->grad_scale (on a device through check.verify()).
//                 So a forward in grad mode has written the slot: run its backward.
//   softmax_path  each chunk's softmax and gradient: kAuto the in-place kernel
//                 (models/cuda/cross_entropy_kernels.cu) for 16-bit logits on an
//                 sm_90 GPU, else ATen; kCuda the kernel (an error where it does
//                 not apply); kReference ATen (log_softmax in fp32, then exp).
// Throws std::invalid_argument for bad shapes, dtypes, devices and targets.
at::Tensor linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& targets,
                                double logits_scale_divisor = 1.0, int64_t chunk_tokens = 0,
                                const at::Tensor& targets_cpu = {}, double final_softcap = 0.0,
                                WeightGradSink* weight_sink = nullptr,
                                FusedPath softmax_path = FusedPath::kAuto);

// The materialised path the fused one replaces, kept as the reference: all
// logits (lm_head_logits), cast to fp32, at::cross_entropy_loss with sum
// reduction and ignore index -100; autograd does the rest.
at::Tensor reference_linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight,
                                          const at::Tensor& targets, double logits_scale_divisor = 1.0,
                                          double final_softcap = 0.0);

}  // namespace fptrain::models
