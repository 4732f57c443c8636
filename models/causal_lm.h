// The decoder-only language model that serves Llama, Mistral and Granite.
// Input is packed: token ids [T] with no batch dimension, boundaries in cu_seqlens.
#pragma once

#include "attention/varlen_attention.h"
#include "models/model_config.h"

#include <ATen/ATen.h>

#include <map>
#include <string>

namespace fptrain::models {

// Parameters by their Hugging Face names ("model.layers.0.self_attn.q_proj.weight").
using TensorMap = std::map<std::string, at::Tensor>;

struct PackedInput {
  at::Tensor input_ids;     // int64 [T] on the model's device
  at::Tensor position_ids;  // int64 [T], restarting at 0 per example
  at::Tensor cu_seqlens;    // int32 [B+1] on the model's device
  int64_t max_seqlen = 0;
};

struct LossOutput {
  at::Tensor loss_sum;        // fp32 scalar: sum of token cross-entropies
  at::Tensor num_supervised;  // int64 scalar, on device (no host sync)
};

class CausalLM {
 public:
  CausalLM(ModelConfig config, TensorMap parameters, attention::Backend backend);

  const ModelConfig& config() const { return config_; }
  TensorMap& parameters() { return params_; }
  const TensorMap& parameters() const { return params_; }

  at::Tensor hidden_states(const PackedInput& input) const;  // [T, hidden], after the final norm
  at::Tensor logits(const PackedInput& input) const;         // [T, vocab]
  // labels [T] int64 in Hugging Face's unshifted convention (-100 = ignored);
  // position t predicts labels[t+1].
  LossOutput loss(const PackedInput& input, const at::Tensor& labels) const;

 private:
  ModelConfig config_;
  TensorMap params_;
  attention::Backend backend_;
};

}  // namespace fptrain::models
