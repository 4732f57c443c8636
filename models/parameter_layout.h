// Which parameters a model configuration implies: Hugging Face names, shapes,
// and the decoder layer each belongs to, in the order the model uses them
// (embeddings, layer 0, 1, ..., final norm, lm_head), which is also the order
// checkpoint shards and optimizer buffers are filled in. Free of LibTorch.
#pragma once

#include "models/model_config.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fptrain::models {

struct ParameterInfo {
  std::string name;            // "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;
  int64_t layer = -1;          // decoder layer index; -1 for embeddings, final norm and lm_head
  int64_t numel() const;
};

// Every parameter of the config in model order. lm_head.weight is absent when
// the embeddings are tied.
std::vector<ParameterInfo> parameter_layout(const ModelConfig& config);

// The same as a map name -> shape, and the names alone in model order.
std::map<std::string, std::vector<int64_t>> expected_parameter_shapes(const ModelConfig& config);
std::vector<std::string> parameter_names_in_model_order(const ModelConfig& config);

// "model.layers.<layer>." — the prefix of a decoder layer's parameter names.
std::string layer_prefix(int64_t layer);
// The decoder layer a name belongs to (it holds "model.layers.<layer>."; adapter names
// too), -1 for the others.
int64_t layer_of_name(const std::string& name);

// Per name, which backward op produces the gradient, as ids equal for neighbours of one
// op and different where the op changes (optim::FlatLayout's gradient groups). Within a
// decoder layer the attention's input projections (q, k, v, fused qkv, and q_norm / k_norm)
// are one op, as their gradients all come after the attention core's backward, and the
// MLP's (gate, up, fused gate_up) another; every other module (o, down, each norm, the
// embeddings, lm_head) is its own. A module's weight and bias, and its LoRA adapter's
// lora_A and lora_B ("base_model.model.<module>.lora_A.weight"), share its op.
std::vector<int64_t> backward_op_groups(const std::vector<std::string>& names);

// Tensors transformers may store in a checkpoint that are not parameters
// (rotary inv_freq buffers; lm_head.weight when the embeddings are tied).
bool is_ignorable_checkpoint_tensor(const std::string& name, const ModelConfig& config);

}  // namespace fptrain::models
