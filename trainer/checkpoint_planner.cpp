#include "trainer/checkpoint_planner.h"

#include <algorithm>
#include <cstdio>

namespace fptrain::trainer {

AutoCheckpointing::AutoCheckpointing(const ActivationShape& m, int64_t free_bytes, Recompute recompute)
    : recompute_(recompute), free_(free_bytes), layers_(m.layers) {
  const double b = static_cast<double>(m.dtype_bytes), extra = static_cast<double>(m.extra_per_token);
  const double attention = b * static_cast<double>(3 * m.hidden + 3 * m.q + 4 * m.kv);
  const double mlp = b * static_cast<double>(2 * m.hidden + 3 * m.intermediate);
  none_ = attention + mlp + extra;
  selective_ = attention + b * static_cast<double>(m.hidden) + extra;
  replayed_ = b * static_cast<double>(2 * m.hidden + (m.attention_replayed ? m.q : 0));
  plain_ = b * static_cast<double>(m.hidden);
  budget_ = (static_cast<double>(free_bytes) - 2.0 * (1 << 30)) / 1.2;
  score_bytes_ = static_cast<double>(m.score_bytes);
  none_max_ = max_tokens({0, 0, 0});
  selective_max_ = max_tokens({0, layers_, 0});
  replayed_max_ = max_tokens({layers_, 0, recompute_ == Recompute::kPlain ? layers_ : 0});
  plain_max_ = max_tokens({layers_, 0, recompute_ == Recompute::kReplay ? 0 : layers_});
}

// Kept bytes of a plan: each layer's share, the scores of the layers not recomputed
// whole, and while a whole layer is recomputed in the backward its full activations.
double AutoCheckpointing::cost(const LayerPlan& p, int64_t tokens, int64_t scores) const {
  const double T = static_cast<double>(tokens), S = static_cast<double>(scores) * score_bytes_;
  const double kept = static_cast<double>(layers_ - p.recomputed - p.selective);
  const double replayed = static_cast<double>(p.recomputed - p.plain);
  double bytes = T * (replayed * replayed_ + static_cast<double>(p.plain) * plain_ +
                      static_cast<double>(p.selective) * selective_ + kept * none_);
  bytes += static_cast<double>(layers_ - p.recomputed) * S;
  if (p.recomputed > 0) bytes += T * none_ + S;
  return bytes;
}

// The largest token count (no scores) whose cost fits: the quotient, then exact
// against cost() itself, so that the plan at the threshold and one past agree with it.
int64_t AutoCheckpointing::max_tokens(const LayerPlan& p) const {
  if (budget_ <= 0) return 0;
  int64_t t = static_cast<int64_t>(budget_ / cost(p, 1, 0));
  while (fits(p, t + 1, 0)) ++t;
  while (t > 0 && !fits(p, t, 0)) --t;
  return t;
}

int64_t AutoCheckpointing::fewest_plain(int64_t whole, int64_t selective, int64_t tokens, int64_t scores) const {
  if (recompute_ == Recompute::kReplay) return 0;
  if (recompute_ == Recompute::kPlain) return whole;
  for (int64_t p = 0; p < whole; ++p)
    if (fits({whole, selective, p}, tokens, scores)) return p;
  return whole;  // nothing fits: the least memory there is
}

// Candidates from fastest to slowest: MLPs recomputed in 0..L layers, then whole layers
// 1..L-1 with every other layer's MLP recomputed, then every layer, replayed where it
// fits and plain on as many layers as needed; the first that fits. (Under
// model.recompute: plain, the whole layers are plain throughout.)
LayerPlan AutoCheckpointing::plan(int64_t tokens, int64_t scores) const {
  for (int64_t s = 0; s <= layers_; ++s)
    if (fits({0, s, 0}, tokens, scores)) return {0, s, 0};
  const bool all_plain = recompute_ == Recompute::kPlain;
  for (int64_t r = 1; r < layers_; ++r) {
    const LayerPlan p{r, layers_ - r, all_plain ? r : 0};
    if (fits(p, tokens, scores)) return p;
  }
  return {layers_, 0, fewest_plain(layers_, 0, tokens, scores)};
}

// every_<k>'s layers are fixed; only replayed or plain is left to choose, by the same budget.
LayerPlan AutoCheckpointing::every_k_plan(int64_t every_k, int64_t tokens, int64_t scores) const {
  const int64_t whole = checkpointed_layers(layers_, every_k);
  return {whole, 0, fewest_plain(whole, 0, tokens, scores)};
}

ActivationShape activation_shape(const models::ModelConfig& c, at::ScalarType dtype, attention::Backend backend) {
  ActivationShape m;
  m.layers = c.num_hidden_layers;
  m.hidden = c.hidden_size;
  m.q = c.num_attention_heads * c.head_dim;
  m.kv = c.num_key_value_heads * c.head_dim;
  m.intermediate = c.intermediate_size;
  m.dtype_bytes = static_cast<int64_t>(c10::elementSize(dtype));
  m.extra_per_token = m.dtype_bytes * ((c.gemma ? 2 * m.hidden : 0) + (c.qk_norm ? m.q + m.kv : 0));
  m.attention_replayed = backend == attention::Backend::kHopper;  // attention::varlen_attention_recorded
  if (backend == attention::Backend::kReference) {
    const int64_t per_head = 4 + m.dtype_bytes + (c.attn_logit_softcap > 0 ? m.dtype_bytes : 0);
    m.score_bytes = c.num_attention_heads * per_head + 1;
  }
  return m;
}

int64_t attention_scores(const std::vector<int32_t>& cu_seqlens) {
  int64_t sum = 0;
  for (size_t i = 1; i < cu_seqlens.size(); ++i) {
    const int64_t len = cu_seqlens[i] - cu_seqlens[i - 1];
    sum += len * len;
  }
  return sum;
}

std::string AutoCheckpointing::plain_clause(int64_t replayed_max, int64_t plain_max) const {
  char buf[256];
  if (recompute_ == Recompute::kReplay) return "; model.recompute: replay (no layer recomputes plain)";
  if (recompute_ == Recompute::kPlain) {
    std::snprintf(buf, sizeof buf,
                  "; model.recompute: plain (whole layers keep only their input): fits up to %lld tokens",
                  static_cast<long long>(plain_max));
    return buf;
  }
  std::snprintf(buf, sizeof buf,
                "; with every checkpointed layer replayed up to %lld tokens, above that as many layers as needed "
                "recompute plain (keeping only their input), which fits up to %lld tokens",
                static_cast<long long>(replayed_max), static_cast<long long>(plain_max));
  return buf;
}

std::string AutoCheckpointing::describe() const {
  char buf[384];
  std::snprintf(buf, sizeof buf,
                "activation checkpointing auto: %.1f GiB free after set-up; micro-batches of up to %lld tokens run "
                "without it, up to %lld with the MLPs of as few layers recomputed as fit, larger ones recompute "
                "as few whole layers as fit%s",
                static_cast<double>(free_) / (1 << 30), static_cast<long long>(none_max_),
                static_cast<long long>(selective_max_),
                score_bytes_ > 0 ? " (fewer with long documents: the attention backend keeps its scores)" : "");
  return buf + plain_clause(replayed_max_, plain_max_);
}

std::string AutoCheckpointing::describe_every_k(int64_t every_k) const {
  const int64_t whole = checkpointed_layers(layers_, every_k);
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "activation checkpointing every_%lld (%lld of %lld layers): %.1f GiB free after set-up",
                static_cast<long long>(every_k), static_cast<long long>(whole), static_cast<long long>(layers_),
                static_cast<double>(free_) / (1 << 30));
  return buf + plain_clause(max_tokens({whole, 0, 0}), max_tokens({whole, 0, whole}));
}

}  // namespace fptrain::trainer
