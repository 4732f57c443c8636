// Activation checkpointing: a decoder layer runs without keeping its
// activations in the forward pass and is recomputed, with autograd, when the
// backward pass reaches it. Gradients equal the non-checkpointed ones (the
// recomputation repeats the same operations on the same inputs). The block's
// two runs go through a RecomputeOps (models/recompute_ops.h), which skips in
// the recomputation what the backward never reads: the products of o and down,
// and with our attention kernels the attention's forward, from what the first
// run keeps ("replayed"). A "plain" recomputation keeps only the input and runs
// the block again as it is (more compute, the least memory). Which layers go
// plain is the planner's choice (trainer/checkpoint_planner.h).
#pragma once

#include "models/causal_lm.h"
#include "trainer/config.h"

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <vector>

namespace fptrain::trainer {

using LayerFunction = std::function<at::Tensor(const at::Tensor& hidden)>;

// Returns run(hidden), differentiable with respect to `hidden` and `params`
// (the leaf tensors `run` reads), storing only `hidden` for the backward pass.
// `run` is called again during backward, so it must capture what it needs by value.
// `preserve_rng`: the recomputation runs with the device generator's state of the
// first run, so it draws the same random numbers (dropout), as torch.utils.checkpoint.
at::Tensor checkpointed_layer(const at::Tensor& hidden, LayerFunction run, const std::vector<at::Tensor>& params,
                              bool preserve_rng = false);

// How a checkpointed block's recomputation gets what the backward needs.
enum class Recomputation {
  kReplayed,  // the first run keeps a tape (RecomputeOps): the recomputation skips part of the forward
  kPlain,     // the first run keeps nothing but the input: the recomputation runs the whole block
};

// checkpointed_layer over one of the model's blocks (`ops`: a shared_ptr must own
// it). Replayed: both runs of `run` go through one RecomputeOps over `ops`; plain:
// both run on `ops` itself. Either way the gradients are the non-checkpointed bits.
at::Tensor recomputed_block(const at::Tensor& hidden, const models::DecoderOps& ops,
                            const models::CausalLM::BlockFn& run, const std::vector<at::Tensor>& params,
                            Recomputation how = Recomputation::kReplayed, bool preserve_rng = false);

// Layer i is checkpointed when every_k > 0 and i % every_k == 0.
inline bool is_checkpointed_layer(int64_t layer, int64_t every_k) { return every_k > 0 && layer % every_k == 0; }

}  // namespace fptrain::trainer
