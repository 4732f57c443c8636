// The op set of an activation-checkpointed block (a decoder layer, or the MLP
// block of selective checkpointing), which runs twice: first without autograd,
// then again in the backward to rebuild its graph. This decorator owns the
// block's tape, so that the second run skips what the backward never reads:
//   - the products of the projections that feed only a residual add (o and
//     down): the first run keeps the residual after the attention, and the
//     block's output is nothing but the root of the gradients;
//   - where the backend can replay it, the attention's forward: the first run
//     keeps its output and statistics.
// Gradients equal the plain run's bit for bit. One instance per block and forward.
#pragma once

#include "models/decoder_ops.h"

namespace fptrain::models {

class RecomputeOps : public ForwardingOps {
 public:
  explicit RecomputeOps(std::shared_ptr<const DecoderOps> inner);

  // Call at the start of each run of the block: without autograd it records;
  // with autograd after a recording it replays; else it passes through.
  void begin_run();

  AddRmsNormOutput add_norm(const at::Tensor& residual, const at::Tensor& update, const at::Tensor& weight,
                            double eps, double scale) const override;
  // A projection that feeds only the residual: the inner set's replay. Groups never feed
  // only the residual: both runs compute them as the inner set does.
  at::Tensor linear(const at::Tensor& x, const Projection& p) const override;
  at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const attention::VarlenSpec& spec) const override;

 private:
  enum class Pass { kPlain, kRecord, kReplay };
  Pass pass_ = Pass::kPlain;
  bool recorded_ = false;
  // The tape: written by the recording run, consumed by the replay. Mutable:
  // the ops are const to the model, the tape is the decorator's own state.
  mutable attention::AttentionRecord attention_;
  mutable at::Tensor attention_residual_;  // residual + o(attention) of the first run
};

}  // namespace fptrain::models
