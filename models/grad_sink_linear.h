// A linear layer whose weight gradient the backward GEMM writes straight into
// the weight's slot of the trainer's flat gradients.
//
// With plain autograd the weight gradient of a training step is computed into
// a temporary and AccumulateGrad then adds it to the parameter's .grad (a view
// of the flat buffer, zeroed before the step): a full extra pass over every
// weight's gradient plus the zeroing (on a 7B, ~13 ms of a ~230 ms step). With a
// sink the step's first contribution is written by the GEMM itself (mm_out: no
// zeroing, no add), bit-identical to the plain path; later micro-batches of
// the step add theirs in the GEMM's epilogue (addmm_, beta = 1: no temporary,
// and the sum is rounded once where AccumulateGrad rounds twice).
#pragma once

#include <ATen/ATen.h>

#include <functional>

namespace fptrain::models {

// The weight's gradient view in the trainer's gradient storage, which may not
// exist between steps (optim/flat_gradients.h): slot(true) makes it exist (the
// backward is about to write it), slot(false) is undefined while it does not.
using GradSlot = std::function<at::Tensor(bool need)>;

struct GradSink {
  const at::Tensor* param = nullptr;  // the weight; its post-accumulate-grad hooks fire on each write
  GradSlot grad;                      // its gradient view; empty: plain autograd
  bool written = false;               // holds this step's gradient (else stale: overwrite, or zero at the end)
};

// at::linear(x, weight, bias) for a 2-D x, with the weight gradient sent to
// `sink` when it is non-null and has a grad view (the bias gradient and the
// input gradient go through autograd as usual).
at::Tensor sink_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, GradSink* sink);

// The same projection in an activation checkpoint's recomputation, where its
// output feeds only the layer's output, which there is nothing but the root of
// the gradients (the last projection of a layer or of an MLP block): its
// backward needs the input and the weight, never the product, so the GEMM is
// skipped. Returns zeros of the output's shape; the backward is sink_linear's
// (`sink` may be null: plain autograd for the weight).
at::Tensor replayed_sink_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                GradSink* sink);

}  // namespace fptrain::models
