// What activation checkpointing recomputes, per micro-batch, from an estimate of
// what each layer keeps for the backward and the device memory free after set-up
// (model.activation_checkpointing: auto, and every_<k>'s replayed-or-plain choice).
//
// Bytes per token and layer (b = bytes of the dtype; Q = heads x head_dim,
// KV = kv heads x head_dim; T tokens, L layers):
//   attention block  b (3H + 3Q + 4KV)   norm input and output, q k v, rotated q k, output
//   MLP block        b (2H + 3I)          residual, norm output, gate, up, their product
//   extra            Gemma's norms after attention and MLP: b 2H; q/k norms' outputs b (Q + KV)
//   scores           a backend that materialises the scores (reference) keeps, per layer,
//                    score_bytes for each of the S = sum of L_i^2 scores of the micro-batch
//   replayed layer   b (2H + Q)   its input, the residual after the attention and (hopper)
//                                 the attention's output (statistics: negligible); b 2H on
//                                 backends that cannot replay the attention
//   plain layer      b H          its input only
// What a plan keeps:
//   none             L (T (attention + MLP + extra) + S scores)
//   selective        L (T (attention + b H + extra) + S scores)   the MLP's input only; MLP recomputed
//   every layer      T (L - P) b (2H + Q) + T P b H + T (attention + MLP + extra) + S scores:
//                    L - P layers replayed, P plain; one layer recomputed at a time
// plus 2 GiB for the head's chunk (the fused cross-entropy's per-chunk logits, about
// 512 MiB in fp32, and their gradient; the head's weight gradient goes straight into
// its bucket, which the caller counts with the gradients) and workspaces, and 20% for
// what the estimate misses.
#pragma once

#include "attention/varlen_attention.h"
#include "models/model_config.h"
#include "trainer/config.h"

#include <ATen/ATen.h>

#include <string>
#include <vector>

namespace fptrain::trainer {

struct ActivationShape {
  int64_t layers = 0, hidden = 0, q = 0, kv = 0, intermediate = 0, dtype_bytes = 2;
  int64_t extra_per_token = 0;  // bytes per token and layer beyond Llama's layer (Gemma's extra norms)
  int64_t score_bytes = 0;      // bytes kept per attention score (all heads) and layer; 0: flash kernels
  // A replayed layer keeps the attention's output (the backend replays it: hopper); else
  // the recomputation runs the attention's forward again and the tape is b 2H.
  bool attention_replayed = true;
};

// What is recomputed for one micro-batch: `recomputed` whole layers, of which the
// first `plain` (in layer order) recompute plain and the others replayed; the MLPs
// of the next `selective` layers; nothing in the rest. Under auto the whole layers
// are [0, recomputed); under every_<k> they are 0, k, 2k, ... (recomputed = their count).
struct LayerPlan {
  int64_t recomputed = 0, selective = 0, plain = 0;
  bool operator==(const LayerPlan& o) const {
    return recomputed == o.recomputed && selective == o.selective && plain == o.plain;
  }
};

class AutoCheckpointing {
 public:
  // `recompute`: auto chooses replayed or plain per layer; replay never goes plain
  // (today's every layer is the last resort); plain recomputes every whole layer plain.
  AutoCheckpointing(const ActivationShape& shape, int64_t free_bytes, Recompute recompute = Recompute::kAuto);
  // model.activation_checkpointing: auto. The plan for a micro-batch of `tokens` whose
  // documents have `scores` = sum of squared lengths (counted only where score_bytes > 0):
  // the cheapest in compute that fits.
  LayerPlan plan(int64_t tokens, int64_t scores = 0) const;
  // every_<k>: layers 0, k, 2k, ... recomputed; how many of them (the first) go plain.
  LayerPlan every_k_plan(int64_t every_k, int64_t tokens, int64_t scores = 0) const;
  // The largest micro-batch (without scores) that fits each plan.
  int64_t none_max_tokens() const { return none_max_; }
  int64_t selective_max_tokens() const { return selective_max_; }
  int64_t replayed_max_tokens() const { return replayed_max_; }  // every layer replayed; beyond, layers go plain
  int64_t plain_max_tokens() const { return plain_max_; }        // every layer plain; beyond, nothing fits
  std::string describe() const;                       // auto's thresholds, for the log
  std::string describe_every_k(int64_t every_k) const;  // every_<k>'s

 private:
  double cost(const LayerPlan& p, int64_t tokens, int64_t scores) const;
  bool fits(const LayerPlan& p, int64_t tokens, int64_t scores) const { return cost(p, tokens, scores) <= budget_; }
  int64_t max_tokens(const LayerPlan& p) const;
  // Of `whole` recomputed layers (and `selective` MLPs), the fewest plain ones that fit.
  int64_t fewest_plain(int64_t whole, int64_t selective, int64_t tokens, int64_t scores) const;
  std::string plain_clause(int64_t replayed_max, int64_t plain_max) const;

  Recompute recompute_ = Recompute::kAuto;
  int64_t free_ = 0, layers_ = 0;
  int64_t none_max_ = 0, selective_max_ = 0, replayed_max_ = 0, plain_max_ = 0;
  // Bytes per token and layer kept by a layer without recomputation, a selective one,
  // a replayed and a plain recomputed one.
  double none_ = 0, selective_ = 0, replayed_ = 0, plain_ = 0;
  double budget_ = 0, score_bytes_ = 0;
};

// The estimate's inputs for a model in `dtype` on `backend`: the reference backend keeps, per
// score and layer, the fp32 softmax and its dtype copy for every query head (and a soft cap's
// tanh), and the mask; Gemma's two extra norms and q/k norms (Qwen3, Gemma 3) their outputs.
ActivationShape activation_shape(const models::ModelConfig& config, at::ScalarType dtype,
                                 attention::Backend backend);

// The micro-batch's sum of squared document lengths (a materialised attention's scores).
int64_t attention_scores(const std::vector<int32_t>& cu_seqlens);

// How many of L layers every_<k> checkpoints: 0, k, 2k, ...
inline int64_t checkpointed_layers(int64_t layers, int64_t every_k) {
  return every_k > 0 ? (layers + every_k - 1) / every_k : 0;
}

}  // namespace fptrain::trainer
