// The gradient sinks of a model's projection weights (models/grad_sink_linear.h):
// one per projection, each the weight's gradient slot in the trainer's flat
// gradients; optionally one more for the head weight (lm_head, or the tied
// embedding), which the fused loss writes (models/linear_cross_entropy.h), and
// one for the input embedding (models/grad_sink_embedding.h; the head's when tied). The
// trainer builds them with the optimizer and hands them to the model's op set and
// loss options; the model never sees the gradient storage.
#pragma once

#include "models/decoder_ops.h"
#include "models/linear_cross_entropy.h"

#include <functional>
#include <memory>
#include <vector>

namespace fptrain::models {

class GradSinks {
 public:
  // `projections`: every projection of the model (CausalLM::projections()),
  // slots 0..n-1; `slot_of(weight)`: where its gradient lives (the trainer's
  // gradient storage).
  // `head`: the head weight, whose sink head() is (none when null); `embedding`:
  // the input embedding's weight, whose sink embedding() is (the head's when they
  // are one tensor; none when null).
  GradSinks(const std::vector<Projection>& projections, const std::function<GradSlot(const at::Tensor&)>& slot_of,
            const at::Tensor* head = nullptr, const at::Tensor* embedding = nullptr);
  // The same with each weight's .grad as it is now, a fixed view. Throws
  // std::logic_error when a weight has no contiguous .grad view.
  explicit GradSinks(const std::vector<Projection>& projections, const at::Tensor* head = nullptr);

  GradSink* at(int64_t slot) { return &sinks_[static_cast<size_t>(slot)]; }
  // The head weight's sink for the fused loss (LossOptions::head_grad_sink); null without one.
  WeightGradSink* head() { return head_.get(); }
  // The input embedding's sink (models/grad_sink_embedding.h); null without one.
  GradSink* embedding() { return embedding_; }

  // Before a step's first forward: the views hold the last step's values, to be
  // overwritten (the trainer does not zero them). `head_grad_scale`: the grad_output
  // every loss of the step will be backpropagated with (the head's sink applies it
  // in the forward).
  void begin_step(double head_grad_scale = 1.0);
  // After its last backward: checks the head's grad_output (std::logic_error) and
  // zeroes the views nothing wrote this step (where storage exists).
  void finish_step();
  // The weights whose gradients go through the sinks (the embedding's, then the head's, last).
  std::vector<const at::Tensor*> params() const;

 private:
  std::vector<GradSink> sinks_;
  std::unique_ptr<WeightGradSink> head_;
  std::unique_ptr<GradSink> own_embedding_;  // when not tied to the head
  GradSink* embedding_ = nullptr;
};

}  // namespace fptrain::models
