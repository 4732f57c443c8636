// The gradient sinks of a model's projection weights (models/grad_sink_linear.h):
// one per projection, each the weight's gradient slot in the trainer's flat
// gradients. The trainer builds them with the optimizer and hands them to the
// model's op set; the model never sees the gradient storage.
#pragma once

#include "models/decoder_ops.h"

#include <functional>
#include <vector>

namespace fptrain::models {

class GradSinks {
 public:
  // `projections`: every projection of the model (CausalLM::projections()),
  // slots 0..n-1; `slot_of(weight)`: where its gradient lives (the trainer's
  // gradient storage).
  GradSinks(const std::vector<Projection>& projections, const std::function<GradSlot(const at::Tensor&)>& slot_of);
  // The same with each weight's .grad as it is now, a fixed view. Throws
  // std::logic_error when a weight has no contiguous .grad view.
  explicit GradSinks(const std::vector<Projection>& projections);

  GradSink* at(int64_t slot) { return &sinks_[static_cast<size_t>(slot)]; }

  // Before a step's first backward: the views hold the last step's values, to
  // be overwritten (the trainer does not zero them).
  void begin_step();
  // After its last: zeroes the views no backward wrote this step (where storage exists).
  void finish_step();
  // The weights whose gradients go through the sinks.
  std::vector<const at::Tensor*> params() const;

 private:
  std::vector<GradSink> sinks_;
};

}  // namespace fptrain::models
