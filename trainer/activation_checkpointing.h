// Activation checkpointing: a decoder layer runs without keeping its
// activations in the forward pass and is recomputed, with autograd, when the
// backward pass reaches it. Gradients equal the non-checkpointed ones (the
// recomputation repeats the same operations on the same inputs). The block's
// two runs go through a RecomputeOps (models/recompute_ops.h), which skips in
// the recomputation what the backward never reads: the products of o and down,
// and with our attention kernels the attention's forward, from what the first
// run keeps.
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

// checkpointed_layer over one of the model's blocks: both runs of `run` go
// through one RecomputeOps over `ops` (which a shared_ptr must own).
at::Tensor recomputed_block(const at::Tensor& hidden, const models::DecoderOps& ops,
                            const models::CausalLM::BlockFn& run, const std::vector<at::Tensor>& params,
                            bool preserve_rng = false);

// model.activation_checkpointing: auto. What a micro-batch of T tokens keeps for
// the backward, estimated per mode from the model's shapes (bytes per token and
// layer, b = bytes of the dtype; Q = heads x head_dim, KV = kv heads x head_dim):
//   attention block  b (3H + 3Q + 4KV)   norm input and output, q k v, rotated q k, output
//   MLP block        b (2H + 3I)          residual, norm output, gate, up, their product
//   none             T L (attention + MLP)
//   selective        T L (attention + b H)        the MLP's input only; the MLP is recomputed
//   every layer      T L b (2H + Q) + T (attention + MLP)  layer inputs, residuals after the attention
//                                                         and (hopper) attention outputs; one layer
//                                                         recomputed at a time
// plus 2 GiB for the head (chunked cross-entropy) and workspaces, and 20% for
// what the estimate misses. The cheapest mode that fits the device memory free
// after set-up is taken, per micro-batch.
class AutoCheckpointing {
 public:
  AutoCheckpointing(int64_t layers, int64_t hidden, int64_t q, int64_t kv, int64_t intermediate, int64_t dtype_bytes,
                    int64_t free_bytes);
  // None, selective or every layer for a micro-batch of `tokens`.
  Checkpointing choose(int64_t tokens) const;
  int64_t none_max_tokens() const { return none_max_; }
  int64_t selective_max_tokens() const { return selective_max_; }
  std::string describe() const;

 private:
  int64_t free_ = 0, none_max_ = 0, selective_max_ = 0;
};

// Layer i is checkpointed when every_k > 0 and i % every_k == 0.
inline bool is_checkpointed_layer(int64_t layer, int64_t every_k) { return every_k > 0 && layer % every_k == 0; }

}  // namespace fptrain::trainer
