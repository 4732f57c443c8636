#include "models/parameter_layout.h"

#include "common/strings.h"

#include <set>
#include <utility>

namespace fptrain::models {
namespace {

// The module a parameter or adapter tensor belongs to: "model.layers.3.self_attn.q_proj" for
// its ".weight", ".bias" and ".lora_A.weight".
std::string module_of(const std::string& name) {
  std::string module = name.substr(0, name.rfind('.'));
  for (const std::string adapter : {".lora_A", ".lora_B"})
    if (common::ends_with(module, adapter)) return module.substr(0, module.size() - adapter.size());
  return module;
}

// The same key for parameters whose gradients one backward op produces.
std::string backward_op_key(const std::string& name) {
  static const std::set<std::string> attention_inputs = {"q_proj", "k_proj", "v_proj", "qkv_proj", "q_norm", "k_norm"};
  static const std::set<std::string> mlp_inputs = {"gate_proj", "up_proj", "gate_up_proj"};
  const std::string module = module_of(name);
  const int64_t layer = layer_of_name(name);
  if (layer < 0) return module;
  const std::string short_name = module.substr(module.rfind('.') + 1);
  if (attention_inputs.count(short_name)) return layer_prefix(layer) + "attention inputs";
  if (mlp_inputs.count(short_name)) return layer_prefix(layer) + "mlp inputs";
  return module;
}

}  // namespace

int64_t ParameterInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string layer_prefix(int64_t layer) { return "model.layers." + std::to_string(layer) + "."; }

int64_t layer_of_name(const std::string& name) {
  const std::string key = "model.layers.";
  for (size_t at = name.find(key); at != std::string::npos; at = name.find(key, at + 1)) {
    if (at > 0 && name[at - 1] != '.') continue;
    size_t i = at + key.size(), end = i;
    while (end < name.size() && name[end] >= '0' && name[end] <= '9') ++end;
    if (end > i && end < name.size() && name[end] == '.') return std::stoll(name.substr(i, end - i));
  }
  return -1;
}

std::vector<ParameterInfo> parameter_layout(const ModelConfig& c) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  std::vector<ParameterInfo> out;
  out.push_back({"model.embed_tokens.weight", {V, H}, -1});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = layer_prefix(l);
    if (c.fused_projections) {  // Phi-3: no biases, qkv and gate_up in one weight each
      out.push_back({p + "self_attn.qkv_proj.weight", {q + 2 * kv, H}, l});
      out.push_back({p + "self_attn.o_proj.weight", {H, q}, l});
      out.push_back({p + "mlp.gate_up_proj.weight", {2 * I, H}, l});
      out.push_back({p + "mlp.down_proj.weight", {H, I}, l});
      out.push_back({p + "input_layernorm.weight", {H}, l});
      out.push_back({p + "post_attention_layernorm.weight", {H}, l});
      continue;
    }
    const std::pair<const char*, std::vector<int64_t>> attn[] = {
        {"q_proj", {q, H}}, {"k_proj", {kv, H}}, {"v_proj", {kv, H}}, {"o_proj", {H, q}}};
    for (const auto& [proj, shape] : attn) {
      out.push_back({p + "self_attn." + proj + ".weight", shape, l});
      const bool o = std::string(proj) == "o_proj";
      if (o ? c.attention_bias : c.qkv_bias) out.push_back({p + "self_attn." + proj + ".bias", {shape[0]}, l});
    }
    if (c.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {c.head_dim}, l});
      out.push_back({p + "self_attn.k_norm.weight", {c.head_dim}, l});
    }
    const std::pair<const char*, std::vector<int64_t>> mlp[] = {
        {"gate_proj", {I, H}}, {"up_proj", {I, H}}, {"down_proj", {H, I}}};
    for (const auto& [proj, shape] : mlp) {
      out.push_back({p + "mlp." + proj + ".weight", shape, l});
      if (c.mlp_bias) out.push_back({p + "mlp." + proj + ".bias", {shape[0]}, l});
    }
    out.push_back({p + "input_layernorm.weight", {H}, l});
    out.push_back({p + "post_attention_layernorm.weight", {H}, l});
    if (c.gemma) {  // the norms around the MLP
      out.push_back({p + "pre_feedforward_layernorm.weight", {H}, l});
      out.push_back({p + "post_feedforward_layernorm.weight", {H}, l});
    }
  }
  out.push_back({"model.norm.weight", {H}, -1});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {V, H}, -1});
  return out;
}

std::map<std::string, std::vector<int64_t>> expected_parameter_shapes(const ModelConfig& config) {
  std::map<std::string, std::vector<int64_t>> out;
  for (auto& p : parameter_layout(config)) out.emplace(std::move(p.name), std::move(p.shape));
  return out;
}

std::vector<std::string> parameter_names_in_model_order(const ModelConfig& config) {
  std::vector<std::string> out;
  for (auto& p : parameter_layout(config)) out.push_back(std::move(p.name));
  return out;
}

std::vector<int64_t> backward_op_groups(const std::vector<std::string>& names) {
  std::vector<int64_t> out;
  std::string previous;
  for (const std::string& name : names) {
    const std::string key = backward_op_key(name);
    out.push_back(out.empty() ? 0 : out.back() + (key != previous ? 1 : 0));
    previous = key;
  }
  return out;
}

bool is_ignorable_checkpoint_tensor(const std::string& name, const ModelConfig& c) {
  const std::string inv_freq = "rotary_emb.inv_freq";
  if (common::ends_with(name, inv_freq)) return true;
  return c.tie_word_embeddings && name == "lm_head.weight";
}

}  // namespace fptrain::models
