// AdamW over the model's parameters, through LibTorch's fused kernel
// (at::_fused_adamw_, CUDA and CPU). With master weights, the optimizer keeps
// fp32 copies of low-precision model weights plus fp32 moments and writes the
// rounded result back into the model after every step.
#pragma once

#include "trainer/config.h"

#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace fptrain::trainer {

class AdamW {
 public:
  // `params` are the model's leaf tensors (requires_grad), in a fixed order.
  AdamW(std::vector<std::string> names, std::vector<at::Tensor> params, const OptimizerSection& options);

  // With master weights: adds the model's current (low-precision) gradients into
  // fp32 accumulators and releases them, so gradient accumulation over
  // micro-batches sums in fp32. Call after each micro-batch's backward; a no-op
  // without master weights.
  void accumulate_gradients();

  // Global L2 norm of all gradients, as torch.nn.utils.clip_grad_norm_ computes it;
  // when max_norm > 0 the gradients are scaled by min(1, max_norm / (norm + 1e-6)).
  // Stays on the device (no host synchronization). Call after backward, before step().
  at::Tensor clip_grad_norm(double max_norm);

  // One update with learning rate `lr`; clears the gradients.
  void step(double lr);
  void zero_grad();

  int64_t steps_taken() const { return steps_taken_; }
  bool has_master_weights() const { return master_; }

  // Everything needed to continue bit-identically, keyed by
  // "<kind>.<parameter name>" with kind in {weight, exp_avg, exp_avg_sq}.
  // `weight` holds the master copy (or the parameter itself without master weights).
  std::vector<std::pair<std::string, at::Tensor>> state() const;
  // Restores state() output (tensors on any device; copied in place) and the step count.
  // `source` names where the tensors come from (the checkpoint file) in errors.
  void load_state(const std::vector<std::pair<std::string, at::Tensor>>& tensors, int64_t steps_taken,
                  const std::string& source = "optimizer state");

 private:
  void gather_master_grads();

  std::vector<std::string> names_;
  std::vector<at::Tensor> params_;     // the model's tensors
  std::vector<at::Tensor> weights_;    // what AdamW updates: fp32 masters or params_
  std::vector<at::Tensor> grads_;      // gradients matching weights_ (valid between clip and step)
  std::vector<at::Tensor> accumulators_;  // fp32 gradient sums over micro-batches (master weights only)
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_;
  at::Tensor step_tensor_;             // float scalar on the device, shared by all parameters
  OptimizerSection options_;
  bool master_ = false;
  int64_t steps_taken_ = 0;
};

}  // namespace fptrain::trainer
