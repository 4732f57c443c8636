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
//   extra            Gemma's norms after attention and MLP: b 2H
//   scores           a backend that materialises the scores (reference) keeps, per layer,
//                    score_bytes for each of the S = sum of L_i^2 scores of the micro-batch
//   none             L (T (attention + MLP + extra) + S scores)
//   selective        L (T (attention + b H + extra) + S scores)   the MLP's input only; MLP recomputed
//   every layer      T L b (2H + Q) + T (attention + MLP + extra) + S scores  layer inputs, residuals
//                                 after the attention and (hopper) attention outputs; one layer
//                                 recomputed at a time
// plus 2 GiB for the head (chunked cross-entropy) and workspaces, and 20% for
// what the estimate misses. Per micro-batch, layer by layer, the cheapest plan that
// fits the device memory free after set-up: no recomputation; else the MLPs of as
// few layers as fit (selective on those); else every MLP and as few whole layers
// as fit; else every layer.
struct ActivationShape {
  int64_t layers = 0, hidden = 0, q = 0, kv = 0, intermediate = 0, dtype_bytes = 2;
  int64_t extra_per_token = 0;  // bytes per token and layer beyond Llama's layer (Gemma's extra norms)
  int64_t score_bytes = 0;      // bytes kept per attention score (all heads) and layer; 0: flash kernels
};

// What auto recomputes for one micro-batch: layers [0, recomputed) whole, the MLPs of
// the next `selective` layers, nothing in the rest.
struct LayerPlan {
  int64_t recomputed = 0, selective = 0;
  bool operator==(const LayerPlan& o) const { return recomputed == o.recomputed && selective == o.selective; }
};

class AutoCheckpointing {
 public:
  AutoCheckpointing(const ActivationShape& shape, int64_t free_bytes);
  // The plan for a micro-batch of `tokens` whose documents have `scores` = sum of
  // squared lengths (counted only where score_bytes > 0).
  LayerPlan plan(int64_t tokens, int64_t scores = 0) const;
  int64_t none_max_tokens() const { return none_max_; }
  int64_t selective_max_tokens() const { return selective_max_; }
  std::string describe() const;

 private:
  double cost(const LayerPlan& p, int64_t tokens, int64_t scores) const;
  int64_t free_ = 0, none_max_ = 0, selective_max_ = 0, layers_ = 0;
  // Bytes per token and layer kept by a plain, a selective and a recomputed layer.
  double none_ = 0, selective_ = 0, recomputed_ = 0;
  double budget_ = 0, score_bytes_ = 0;
};

// The estimate's inputs for a model in `dtype` on `backend`: the reference backend keeps, per
// score and layer, the fp32 softmax and its dtype copy for every query head (and a soft cap's
// tanh), and the mask; Gemma's two extra norms and q/k norms (Qwen3, Gemma 3) their outputs.
ActivationShape activation_shape(const models::ModelConfig& config, at::ScalarType dtype,
                                 attention::Backend backend);

// The micro-batch's sum of squared document lengths (a materialised attention's scores).
int64_t attention_scores(const std::vector<int32_t>& cu_seqlens);

// Layer i is checkpointed when every_k > 0 and i % every_k == 0.
inline bool is_checkpointed_layer(int64_t layer, int64_t every_k) { return every_k > 0 && layer % every_k == 0; }

}  // namespace fptrain::trainer
