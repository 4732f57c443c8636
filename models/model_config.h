// The model hyper-parameters fptrain reads from a Hugging Face config.json.
// One struct serves LlamaForCausalLM, MistralForCausalLM, GraniteForCausalLM,
// Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM, Gemma2ForCausalLM and
// Gemma3ForCausalLM (Gemma 3's text model).
#pragma once

#include <nlohmann/json.hpp>

#include "common/enum_names.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace fptrain::models {

enum class Family { kLlama, kMistral, kGranite, kQwen2, kQwen3, kPhi3, kGemma2, kGemma3 };

enum class RopeType { kDefault, kLinear, kLlama3, kLongRope };

}  // namespace fptrain::models

namespace fptrain::common {
template <>
struct EnumNames<models::RopeType> {
  static constexpr std::array<EnumEntry<models::RopeType>, 4> table = {{{models::RopeType::kDefault, "default"},
                                                                       {models::RopeType::kLinear, "linear"},
                                                                       {models::RopeType::kLlama3, "llama3"},
                                                                       {models::RopeType::kLongRope, "longrope"}}};
};
}  // namespace fptrain::common

namespace fptrain::models {

struct RopeConfig {
  double theta = 10000.0;
  RopeType type = RopeType::kDefault;
  double factor = 1.0;                  // linear and llama3
  double low_freq_factor = 1.0;         // llama3
  double high_freq_factor = 4.0;        // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3, longrope
  // longrope (Phi-3): per-frequency divisors for contexts up to / beyond the
  // original length, and the scale of cos and sin.
  std::vector<double> short_factor, long_factor;
  double attention_factor = 1.0;
  bool factors_given = false;  // longrope: factor and attention_factor were in the file (else derived)
  // Dimensions of each head that rotate: int(head_dim x partial_rotary_factor)
  // (Phi-4-mini); 0: all.
  int64_t rotary_dim = 0;
  double partial_rotary_factor = 1.0;
};

struct ModelConfig {
  Family family = Family::kLlama;
  std::string architecture;  // e.g. "LlamaForCausalLM"

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // defaults to hidden_size / num_attention_heads
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  // Gemma 3: the sliding layers' own RoPE (rope_local_base_freq); `rope` is the
  // full-attention layers' (with its scaling).
  std::optional<RopeConfig> rope_local;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // biases on q, k, v and o (Llama, Granite, Qwen3: attention_bias)
  bool qkv_bias = false;        // biases on q, k and v: attention_bias, or always (Qwen2, without o)
  bool mlp_bias = false;
  bool qk_norm = false;         // RMSNorm of each head of q and k before RoPE (Qwen3)
  bool fused_projections = false;  // one qkv_proj and one gate_up_proj per layer (Phi-3)
  std::optional<int64_t> sliding_window;  // the window of the sliding layers; none = full causal
  // Per layer: whether it attends within sliding_window (Mistral: every
  // layer; Qwen: layer_types, or the layers from max_window_layers on).
  std::vector<bool> sliding_layers;
  // transformers applies it to attention probabilities in training; fptrain
  // does not, so a caller should tell the user when it is non-zero.
  double attention_dropout = 0.0;

  // Gemma 2 and 3: RMSNorm as (1 + weight) in fp32, norms before and after the
  // attention and the MLP, GELU (tanh) gating, embeddings x sqrt(hidden) in the
  // model dtype, tanh soft-capping of attention scores and of the final logits
  // (0: none; cap * tanh(x / cap)).
  bool gemma = false;
  double attn_logit_softcap = 0.0;
  double final_logit_softcap = 0.0;

  // Granite; 1.0 for the other families.
  double embedding_multiplier = 1.0;
  double residual_multiplier = 1.0;
  double logits_scaling = 1.0;
  std::optional<double> attention_multiplier;  // softmax scale override (Gemma: query_pre_attn_scalar^-0.5)

  std::string dtype = "float32";  // "float32" | "bfloat16" | "float16" (torch_dtype / dtype)
  // A bitsandbytes 4-bit checkpoint (quantization_config: NF4, double quantisation):
  // each projection weight is stored as packed codes and statistics (models/nf4_checkpoint.h).
  bool bnb_nf4 = false;
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> pad_token_id;

  nlohmann::json raw;  // the file as read, written back on save

  double softmax_scale() const;    // attention_multiplier or 1/sqrt(head_dim)
  int64_t window(int64_t layer) const;  // the attention window of a layer; 0 = full causal
  int64_t num_parameters() const;  // counted from the shapes, tied embeddings once
};

// Parses a config.json document; `source` names it in errors. Accepts the
// transformers v4 form (rope_theta, rope_scaling, torch_dtype) and the v5 form
// (rope_parameters, dtype). Unsupported architectures or options throw
// std::runtime_error naming the key and the value.
ModelConfig parse_model_config(const nlohmann::json& doc, const std::string& source);
ModelConfig load_model_config(const std::filesystem::path& config_json);

// The config.json to write next to saved weights (transformers loads it).
nlohmann::json model_config_to_json(const ModelConfig& config);

}  // namespace fptrain::models
