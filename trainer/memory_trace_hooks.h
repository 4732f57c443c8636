// The memory trace's phase labels on the model, applied from outside for the
// traced step only (the model stays maths): an op-set decorator names each op's
// allocations (attention, mlp, norm, embedding), wrappers around the layer and MLP
// runners name the layer ("forward L3"; the same block run again in the backward
// is "recompute L3") and hang a hook on each block's output whose gradient starts
// that block's backward on autograd's thread ("backward L3", then its "mlp" and
// "attention"). Labels are trainer/memory_phase.h's; nothing is read unless a trace
// records.
#pragma once

#include "models/causal_lm.h"

#include <ATen/ATen.h>

#include <memory>

namespace fptrain::trainer {

class ModelPhaseLabels {
 public:
  // Decorates `model`'s ops and runners; the destructor puts the previous ones back.
  explicit ModelPhaseLabels(models::CausalLM& model);
  ~ModelPhaseLabels();
  ModelPhaseLabels(const ModelPhaseLabels&) = delete;
  ModelPhaseLabels& operator=(const ModelPhaseLabels&) = delete;

 private:
  models::CausalLM& model_;
  std::shared_ptr<const models::DecoderOps> ops_;
  models::CausalLM::BlockRunner layer_runner_, mlp_runner_;
};

// When the backward reaches `t` (its gradient is ready), the backward's thread takes
// the stage `stage` (or, with `op_only`, the op `stage` within its stage). No-op for a
// tensor that needs no gradient.
void label_backward_at(const at::Tensor& t, const std::string& stage, bool op_only = false);

}  // namespace fptrain::trainer
