// config.json -> ModelConfig, following the defaults of transformers'
// LlamaConfig, MistralConfig, GraniteConfig, Qwen2Config and Qwen3Config and its RoPE standardisation
// (modeling_rope_utils): a v4 `rope_scaling` dict wins over `rope_parameters`,
// `type` is an old spelling of `rope_type`, a top-level `rope_theta` fills in a
// missing one, and llama3's original_max_position_embeddings falls back to
// max_position_embeddings.
#include "models/model_config.h"

#include "models/parameter_layout.h"

#include "common/json_input.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace fptrain::models {
namespace {

using nlohmann::json;

// Reads typed keys from one JSON object; every error names the file and the key.
class KeyReader {
 public:
  KeyReader(const json& obj, std::string source, std::string prefix = "")
      : obj_(obj), source_(std::move(source)), prefix_(std::move(prefix)) {}

  bool has(const std::string& key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }

  [[noreturn]] void fail(const std::string& key, const std::string& problem) const {
    std::string msg = source_ + ": key '" + prefix_ + key + "'";
    if (obj_.contains(key)) msg += " (value " + common::json_excerpt(obj_.at(key)) + ")";
    throw std::runtime_error(msg + ": " + problem);
  }

  int64_t integer(const std::string& key) const {
    if (!has(key)) fail(key, "required key is missing");
    const json& v = obj_.at(key);
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(key, "integer out of range");
      return v.get<int64_t>();
    }
    if (v.is_number_integer()) return v.get<int64_t>();
    // transformers accepts 4096.0 where it means 4096; nothing else.
    if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()) {
      const double d = v.get<double>();
      // [-2^63, 2^63): the doubles that convert to int64 without overflow.
      if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) fail(key, "integer out of range");
      return static_cast<int64_t>(d);
    }
    fail(key, "expected an integer");
  }
  int64_t integer(const std::string& key, int64_t fallback) const {
    return has(key) ? integer(key) : fallback;
  }
  int64_t positive(const std::string& key) const {
    const int64_t v = integer(key);
    if (v <= 0) fail(key, "must be positive");
    return v;
  }
  int64_t positive(const std::string& key, int64_t fallback) const {
    return has(key) ? positive(key) : fallback;
  }
  // A size in (0, limit]: larger values describe no model that could be loaded
  // (and would overflow the shape arithmetic), so the file is corrupt.
  int64_t size(const std::string& key, int64_t limit) const {
    const int64_t v = positive(key);
    if (v > limit) fail(key, "larger than any model fptrain can load (at most " + std::to_string(limit) + ")");
    return v;
  }
  int64_t size(const std::string& key, int64_t limit, int64_t fallback) const {
    return has(key) ? size(key, limit) : fallback;
  }

  double number(const std::string& key) const {
    if (!has(key)) fail(key, "required key is missing");
    const json& v = obj_.at(key);
    if (!v.is_number()) fail(key, "expected a number");
    return v.get<double>();
  }
  double number(const std::string& key, double fallback) const {
    return has(key) ? number(key) : fallback;
  }

  bool boolean(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = obj_.at(key);
    if (!v.is_boolean()) fail(key, "expected true or false");
    return v.get<bool>();
  }

  std::string string(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const json& v = obj_.at(key);
    if (!v.is_string()) fail(key, "expected a string");
    return v.get<std::string>();
  }

  std::optional<int64_t> optional_integer(const std::string& key) const {
    if (!has(key)) return std::nullopt;
    return integer(key);
  }

  std::vector<int64_t> integer_or_list(const std::string& key) const {
    if (!has(key)) return {};
    const json& v = obj_.at(key);
    if (!v.is_array()) return {integer(key)};
    std::vector<int64_t> out;
    for (const json& item : v) {
      if (!item.is_number_integer() ||
          (item.is_number_unsigned() && item.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())))
        fail(key, "expected an integer or a list of integers");
      out.push_back(item.get<int64_t>());
    }
    return out;
  }

 private:
  const json& obj_;
  std::string source_;
  std::string prefix_;
};

struct ArchitectureInfo {
  const char* architecture;
  const char* model_type;
  Family family;
  int64_t default_max_position_embeddings;
};

constexpr ArchitectureInfo kArchitectures[] = {
    {"LlamaForCausalLM", "llama", Family::kLlama, 2048},
    {"MistralForCausalLM", "mistral", Family::kMistral, 4096 * 32},
    {"GraniteForCausalLM", "granite", Family::kGranite, 2048},
    {"Qwen2ForCausalLM", "qwen2", Family::kQwen2, 32768},
    {"Qwen3ForCausalLM", "qwen3", Family::kQwen3, 32768},
    {"Phi3ForCausalLM", "phi3", Family::kPhi3, 4096},
    {"Gemma2ForCausalLM", "gemma2", Family::kGemma2, 8192},
    {"Gemma3ForCausalLM", "gemma3_text", Family::kGemma3, 131072},
};

std::string supported_architectures() {
  std::string out;
  for (const auto& a : kArchitectures) out += (out.empty() ? "" : ", ") + std::string(a.architecture);
  return out;
}

const ArchitectureInfo& resolve_architecture(const json& doc, const KeyReader& keys) {
  if (keys.has("architectures")) {
    const json& list = doc.at("architectures");
    if (!list.is_array() || list.empty())
      keys.fail("architectures", "expected a non-empty list of class names");
    for (const json& name : list) {
      if (!name.is_string()) keys.fail("architectures", "expected a list of strings");
      for (const auto& a : kArchitectures)
        if (name.get<std::string>() == a.architecture) return a;
    }
    keys.fail("architectures", "unsupported architecture; supported: " + supported_architectures());
  }
  if (keys.has("model_type")) {
    const std::string type = keys.string("model_type", "");
    for (const auto& a : kArchitectures)
      if (type == a.model_type) return a;
    keys.fail("model_type", "unsupported model_type; supported: llama, mistral, granite, qwen2, qwen3, phi3, gemma2, gemma3_text");
  }
  keys.fail("architectures", "neither 'architectures' nor 'model_type' is given");
}

std::string family_key_prefix(Family f) {
  switch (f) {
    case Family::kLlama: return "Llama";
    case Family::kMistral: return "Mistral";
    case Family::kGranite: return "Granite";
    case Family::kQwen2: return "Qwen2";
    case Family::kQwen3: return "Qwen3";
    case Family::kPhi3: return "Phi3";
    case Family::kGemma2: return "Gemma2";
    case Family::kGemma3: return "Gemma3";
  }
  return "?";
}

std::vector<double> number_list(const json& params, const KeyReader& keys, const std::string& key, size_t count) {
  if (!keys.has(key) || !params.at(key).is_array()) keys.fail(key, "expected a list of numbers");
  std::vector<double> out;
  for (const json& v : params.at(key)) {
    if (!v.is_number()) keys.fail(key, "expected a list of numbers");
    out.push_back(v.get<double>());
  }
  if (out.size() != count) keys.fail(key, "expected " + std::to_string(count) + " numbers (head_dim / 2)");
  return out;
}

// Phi-3's LongRoPE (transformers' _compute_longrope_parameters). Phi3Config's
// top-level original_max_position_embeddings (default 4096) wins over the dict's.
void parse_longrope(const json& params, const KeyReader& keys, const KeyReader& top, int64_t max_position_embeddings,
                    int64_t head_dim, RopeConfig& rope) {
  rope.type = RopeType::kLongRope;
  rope.short_factor = number_list(params, keys, "short_factor", static_cast<size_t>(head_dim / 2));
  rope.long_factor = number_list(params, keys, "long_factor", static_cast<size_t>(head_dim / 2));
  rope.original_max_position_embeddings = top.positive("original_max_position_embeddings", 4096);
  const double original = static_cast<double>(rope.original_max_position_embeddings);
  rope.factors_given = keys.has("factor") || keys.has("attention_factor");
  rope.factor = keys.number("factor", static_cast<double>(max_position_embeddings) / original);
  rope.attention_factor = keys.has("attention_factor") ? keys.number("attention_factor")
                          : rope.factor <= 1.0         ? 1.0
                                                       : std::sqrt(1 + std::log(rope.factor) / std::log(original));
}

RopeConfig parse_rope_params(const json& params, const std::string& source, const std::string& where,
                             const KeyReader& top, double default_theta, int64_t max_position_embeddings,
                             Family family, int64_t head_dim);

// The RoPE dict as transformers sees it after standardisation.
RopeConfig parse_rope(const json& doc, const KeyReader& top, int64_t max_position_embeddings,
                      const std::string& source, Family family, int64_t head_dim) {
  json params = json::object();
  std::string where = "rope_parameters";
  const bool has_scaling = top.has("rope_scaling") &&
                           !(doc.at("rope_scaling").is_object() && doc.at("rope_scaling").empty());
  if (has_scaling) {  // v4 spelling; transformers lets a non-empty one win
    if (!doc.at("rope_scaling").is_object()) top.fail("rope_scaling", "expected an object or null");
    params = doc.at("rope_scaling");
    where = "rope_scaling";
  } else if (top.has("rope_parameters")) {
    if (!doc.at("rope_parameters").is_object()) top.fail("rope_parameters", "expected an object or null");
    params = doc.at("rope_parameters");
  }
  return parse_rope_params(params, source, where, top, top.number("rope_theta", 10000.0), max_position_embeddings,
                           family, head_dim);
}

// One RoPE dict (`where` names it in errors): its type and their parameters;
// `default_theta` when it has no rope_theta.
RopeConfig parse_rope_params(const json& params, const std::string& source, const std::string& where,
                             const KeyReader& top, double default_theta, int64_t max_position_embeddings,
                             Family family, int64_t head_dim) {
  const KeyReader keys(params, source, where + ".");
  RopeConfig rope;
  rope.theta = keys.number("rope_theta", default_theta);
  if (rope.theta <= 0) keys.fail("rope_theta", "must be positive");

  // Partial rotary embeddings (Phi-4-mini): the first int(head_dim x factor)
  // dimensions of each head rotate, the rest pass; transformers' Phi3 applies
  // them, its other families would not.
  const double partial = keys.number("partial_rotary_factor", top.number("partial_rotary_factor", 1.0));
  if (partial != 1.0) {
    const KeyReader& where_given = keys.has("partial_rotary_factor") ? keys : top;
    if (family != Family::kPhi3)
      where_given.fail("partial_rotary_factor", "partial rotary embeddings are supported for Phi3ForCausalLM only");
    const auto dim = static_cast<int64_t>(static_cast<double>(head_dim) * partial);  // Python's int()
    if (!(partial > 0 && partial < 1) || dim < 2 || dim % 2 != 0)
      where_given.fail("partial_rotary_factor", "must be in (0, 1) and give an even number of rotated dimensions "
                                                "(head_dim " + std::to_string(head_dim) + ")");
    rope.rotary_dim = dim;
    rope.partial_rotary_factor = partial;
    head_dim = dim;  // the frequencies (and LongRoPE's factors) are the rotated part's
  }

  const std::string type_key = keys.has("rope_type") ? "rope_type" : "type";
  const std::string type = keys.string(type_key, "default");
  if (type == common::enum_name(RopeType::kDefault)) {
    rope.type = RopeType::kDefault;
  } else if (type == common::enum_name(RopeType::kLinear)) {
    rope.type = RopeType::kLinear;
    rope.factor = keys.number("factor");
    if (rope.factor <= 0) keys.fail("factor", "must be positive");
  } else if (type == common::enum_name(RopeType::kLlama3)) {
    rope.type = RopeType::kLlama3;
    rope.factor = keys.number("factor");
    rope.low_freq_factor = keys.number("low_freq_factor");
    rope.high_freq_factor = keys.number("high_freq_factor");
    // A top-level original_max_position_embeddings takes priority (as in transformers).
    rope.original_max_position_embeddings =
        top.has("original_max_position_embeddings")
            ? top.positive("original_max_position_embeddings")
            : keys.positive("original_max_position_embeddings", max_position_embeddings);
    if (rope.factor <= 0) keys.fail("factor", "must be positive");
    if (!(rope.high_freq_factor > rope.low_freq_factor))
      keys.fail("high_freq_factor", "must be greater than low_freq_factor");
  } else if (type == "longrope" || (family == Family::kPhi3 && (type == "su" || type == "yarn"))) {
    parse_longrope(params, keys, top, max_position_embeddings, head_dim, rope);  // Phi3Config calls su/yarn longrope
  } else {
    keys.fail(type_key, "unsupported RoPE type; supported: default, linear, llama3, longrope");
  }
  return rope;
}

// layer_types: full_attention or sliding_attention, one per layer.
void parse_layer_types(const json& doc, const KeyReader& keys, ModelConfig& c) {
  const json& types = doc.at("layer_types");
  if (!types.is_array() || static_cast<int64_t>(types.size()) != c.num_hidden_layers)
    keys.fail("layer_types", "expected a list of " + std::to_string(c.num_hidden_layers) + " layer types");
  for (size_t i = 0; i < types.size(); ++i) {
    const std::string t = types[i].is_string() ? types[i].get<std::string>() : "";
    if (t != "full_attention" && t != "sliding_attention")
      keys.fail("layer_types", "entry " + std::to_string(i) + ": expected full_attention or sliding_attention");
    c.sliding_layers[i] = t == "sliding_attention";
  }
}

// Sliding layers need a window: transformers cannot run such a model otherwise.
void check_windows(const KeyReader& keys, const ModelConfig& c, const std::string& why_none) {
  const bool any = std::find(c.sliding_layers.begin(), c.sliding_layers.end(), true) != c.sliding_layers.end();
  if (any && !c.sliding_window)
    keys.fail("layer_types", "has sliding_attention layers but no window (" + why_none +
                             "): transformers cannot run such a model");
}

// A soft-cap: the class default when the key is absent, none when null.
double softcap(const json& doc, const KeyReader& keys, const std::string& key, double fallback) {
  if (!doc.contains(key)) return fallback;
  if (!keys.has(key)) return 0.0;
  const double cap = keys.number(key);
  if (!(cap > 0)) keys.fail(key, "must be positive (or null for none)");
  return cap;
}

void parse_gemma_windows(const json& doc, const KeyReader& keys, ModelConfig& c);

// Gemma 2: (1 + w) norms, sandwich norms, GELU (tanh) gating, scaled embeddings,
// soft-capped scores and logits, query_pre_attn_scalar as the scale's base.
void parse_gemma(const json& doc, const KeyReader& keys, ModelConfig& c) {
  const bool gemma3 = c.family == Family::kGemma3;
  c.gemma = true;
  c.qk_norm = gemma3;
  c.attention_bias = keys.boolean("attention_bias", false);
  c.qkv_bias = c.attention_bias;
  if (keys.boolean("use_bidirectional_attention", false))
    keys.fail("use_bidirectional_attention", "bidirectional attention is not supported (fptrain trains causal decoders)");
  // Gemma 3's attention never applies attn_logit_softcapping (transformers
  // passes it nowhere), whatever the file says.
  c.attn_logit_softcap = gemma3 ? 0.0 : softcap(doc, keys, "attn_logit_softcapping", 50.0);
  c.final_logit_softcap = softcap(doc, keys, "final_logit_softcapping", gemma3 ? 0.0 : 30.0);
  const double scalar = keys.number("query_pre_attn_scalar", 256.0);
  if (!(scalar > 0)) keys.fail("query_pre_attn_scalar", "must be positive");
  c.attention_multiplier = 1.0 / std::sqrt(scalar);
  parse_gemma_windows(doc, keys, c);
}

// Gemma 3: one RoPE for the full-attention layers (rope_theta, default 1e6,
// and the scaling) and one for the sliding layers (rope_local_base_freq,
// default 1e4). v5 nests them in rope_parameters by layer type; v4 writes
// rope_theta, rope_local_base_freq and rope_scaling, which transformers merges
// into the full-attention one.
void parse_gemma3_rope(const json& doc, const KeyReader& keys, const std::string& source, ModelConfig& c) {
  // transformers starts both from {"rope_type": "default"}: a v4 rope_scaling that
  // spells its type "type" then leaves the type default, as it does there.
  json full = {{"rope_type", "default"}}, sliding = {{"rope_type", "default"}};
  if (keys.has("rope_parameters")) {
    const json& p = doc.at("rope_parameters");
    if (!p.is_object()) keys.fail("rope_parameters", "expected an object or null");
    if (p.contains("full_attention") && p.at("full_attention").is_object()) full = p.at("full_attention");
    if (p.contains("sliding_attention") && p.at("sliding_attention").is_object()) sliding = p.at("sliding_attention");
  }
  if (keys.has("rope_scaling")) {
    if (!doc.at("rope_scaling").is_object()) keys.fail("rope_scaling", "expected an object or null");
    full.update(doc.at("rope_scaling"));
  }
  const double global = keys.number("rope_theta", 1e6), local = keys.number("rope_local_base_freq", 1e4);
  c.rope = parse_rope_params(full, source, "rope_parameters.full_attention", keys, global, c.max_position_embeddings,
                             c.family, c.head_dim);
  c.rope_local = parse_rope_params(sliding, source, "rope_parameters.sliding_attention", keys, local,
                                   c.max_position_embeddings, c.family, c.head_dim);
}

// Qwen2 and Qwen3: the window is sliding_window when use_sliding_window is
// set; which layers slide comes from layer_types, else the layers from
// max_window_layers on (the configs' __post_init__).
void parse_qwen_windows(const json& doc, const KeyReader& keys, ModelConfig& c) {
  if (keys.boolean("use_sliding_window", false))
    c.sliding_window = !doc.contains("sliding_window") ? std::optional<int64_t>(4096)
                       : keys.has("sliding_window")    ? std::optional<int64_t>(keys.positive("sliding_window"))
                                                       : std::nullopt;
  c.sliding_layers.assign(static_cast<size_t>(c.num_hidden_layers), false);
  if (keys.has("layer_types")) {
    parse_layer_types(doc, keys, c);
  } else if (c.sliding_window) {
    const int64_t first = keys.integer("max_window_layers", 28);
    for (int64_t l = std::max<int64_t>(first, 0); l < c.num_hidden_layers; ++l) c.sliding_layers[static_cast<size_t>(l)] = true;
  }
  check_windows(keys, c, "use_sliding_window is false or sliding_window null");
}

// Gemma 2 and 3: a window of sliding_window (default 4096; null: none) on the
// layers layer_types names; by default every layer but each pattern-th, the
// pattern 2 for Gemma 2 and sliding_window_pattern (default 6) for Gemma 3.
void parse_gemma_windows(const json& doc, const KeyReader& keys, ModelConfig& c) {
  if (!doc.contains("sliding_window")) c.sliding_window = 4096;
  else if (keys.has("sliding_window")) c.sliding_window = keys.positive("sliding_window");
  c.sliding_layers.assign(static_cast<size_t>(c.num_hidden_layers), false);
  if (keys.has("layer_types")) {
    parse_layer_types(doc, keys, c);
  } else {
    const std::string key = keys.has("sliding_window_pattern") ? "sliding_window_pattern" : "_sliding_window_pattern";
    const int64_t pattern = c.family == Family::kGemma3 ? keys.positive(key, 6) : 2;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) c.sliding_layers[static_cast<size_t>(l)] = (l + 1) % pattern != 0;
  }
  check_windows(keys, c, "sliding_window is null");
}

// A pre-quantised checkpoint: bitsandbytes' 4-bit NF4 with double quantisation
// (QLoRA's storage, what transformers' save_pretrained writes for load_in_4bit) is
// read as it is stored; anything else (8-bit, FP4, single quantisation, GPTQ, AWQ,
// FP8, ...) is refused by name.
bool parse_quantization(const json& q, const std::string& source) {
  if (!q.is_object())
    throw std::runtime_error(source + ": key 'quantization_config' (value " + common::json_excerpt(q) +
                             "): expected an object");
  const KeyReader keys(q, source, "quantization_config.");
  const std::string method = keys.string("quant_method", "unknown");
  const std::string original = "; use the original checkpoint (bf16/fp16/fp32 weights): with adapter.type: qlora "
                               "fptrain quantises it to NF4 itself while it loads";
  if (method != "bitsandbytes") keys.fail("quant_method", "a " + method + " checkpoint is not read" + original);
  if (keys.boolean("load_in_8bit", false)) keys.fail("load_in_8bit", "8-bit checkpoints are not read" + original);
  if (!keys.boolean("load_in_4bit", false)) keys.fail("load_in_4bit", "only 4-bit (NF4) checkpoints are read");
  if (keys.string("bnb_4bit_quant_type", "fp4") != "nf4")
    keys.fail("bnb_4bit_quant_type", "only NF4 checkpoints are read (QLoRA's type)" + original);
  if (!keys.boolean("bnb_4bit_use_double_quant", false))
    keys.fail("bnb_4bit_use_double_quant", "only double-quantised NF4 checkpoints are read (QLoRA's storage)" +
                                               original);
  if (keys.string("bnb_4bit_quant_storage", "uint8") != "uint8")
    keys.fail("bnb_4bit_quant_storage", "only uint8 storage is read");
  if (keys.has("llm_int8_skip_modules")) {  // bitsandbytes never quantises the head; any other module is refused
    const json& skip = q.at("llm_int8_skip_modules");
    if (!skip.is_array()) keys.fail("llm_int8_skip_modules", "expected a list of module names");
    for (const json& m : skip)
      if (!m.is_string() || m.get<std::string>() != "lm_head")
        keys.fail("llm_int8_skip_modules", "projections kept in full precision are not read; only lm_head may be "
                                           "listed");
  }
  return true;
}

std::string parse_dtype(const KeyReader& keys) {
  // v5 writes "dtype", v4 "torch_dtype"; absent means the weights are float32.
  const std::string key = keys.has("dtype") ? "dtype" : "torch_dtype";
  std::string name = keys.string(key, "float32");
  if (name.rfind("torch.", 0) == 0) name = name.substr(6);
  if (name == "float" ) name = "float32";
  if (name == "half") name = "float16";
  if (name == "float32" || name == "bfloat16" || name == "float16") return name;
  keys.fail(key, "unsupported dtype; supported: float32, bfloat16, float16");
}

}  // namespace

ModelConfig parse_model_config(const json& doc, const std::string& source) {
  if (!doc.is_object()) throw std::runtime_error(source + ": expected a JSON object at the top level");
  const KeyReader keys(doc, source);
  ModelConfig c;
  const ArchitectureInfo& arch = resolve_architecture(doc, keys);
  c.family = arch.family;
  c.architecture = arch.architecture;
  if (keys.has("quantization_config")) c.bnb_nf4 = parse_quantization(doc.at("quantization_config"), source);

  if (arch.family == Family::kGemma2 || arch.family == Family::kGemma3) {  // an old hidden_act means the same
    const std::string key = keys.has("hidden_activation") ? "hidden_activation" : "hidden_act";
    if (keys.string(key, "gelu_pytorch_tanh") != "gelu_pytorch_tanh")
      keys.fail(key, "unsupported activation; Gemma takes gelu_pytorch_tanh");
  } else if (keys.string("hidden_act", "silu") != "silu") {
    keys.fail("hidden_act", "unsupported activation; only silu is supported");
  }

  // Upper bounds far above every released model keep the shape arithmetic
  // (heads x head_dim, vocab x hidden, per-layer loops) in range.
  constexpr int64_t kMaxWidth = int64_t{1} << 20, kMaxCount = int64_t{1} << 16;
  c.vocab_size = keys.size("vocab_size", std::numeric_limits<int32_t>::max());  // token ids are int32
  c.hidden_size = keys.size("hidden_size", kMaxWidth);
  c.intermediate_size = keys.size("intermediate_size", kMaxWidth);
  c.num_hidden_layers = keys.size("num_hidden_layers", kMaxCount);
  c.num_attention_heads = keys.size("num_attention_heads", kMaxCount);
  // The classes' defaults when the key is absent: MistralConfig 8 KV heads,
  // Qwen2Config and Qwen3Config 32; an explicit null means one per query head.
  const bool kv_absent = !doc.contains("num_key_value_heads");
  const int64_t kv_default = kv_absent && c.family == Family::kMistral ? 8
                             : kv_absent && (c.family == Family::kQwen2 || c.family == Family::kQwen3) ? 32
                             : kv_absent && (c.family == Family::kGemma2 || c.family == Family::kGemma3) ? 4
                                                                                                       : c.num_attention_heads;
  c.num_key_value_heads = keys.size("num_key_value_heads", kMaxCount, kv_default);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    keys.fail("num_key_value_heads", "must divide num_attention_heads (" +
                                         std::to_string(c.num_attention_heads) + ")");
  if (keys.has("head_dim")) {
    c.head_dim = keys.size("head_dim", kMaxWidth);
  } else if (c.family == Family::kQwen3 || c.family == Family::kGemma2 || c.family == Family::kGemma3) {
    c.head_dim = c.family == Family::kQwen3 ? 128 : 256;  // the classes' defaults, not hidden / heads
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      keys.fail("hidden_size", "is not a multiple of num_attention_heads (" +
                                   std::to_string(c.num_attention_heads) + ") and head_dim is not given");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  c.max_position_embeddings = keys.positive("max_position_embeddings", arch.default_max_position_embeddings);
  c.rms_norm_eps = keys.number("rms_norm_eps", 1e-6);
  if (c.rms_norm_eps <= 0) keys.fail("rms_norm_eps", "must be positive");
  c.tie_word_embeddings =
      keys.boolean("tie_word_embeddings", c.family == Family::kGemma2 || c.family == Family::kGemma3);

  if (c.family == Family::kMistral) {
    // MistralForCausalLM has no projection biases; a config asking for them
    // describes weights transformers would silently drop.
    for (const char* key : {"attention_bias", "mlp_bias"})
      if (keys.boolean(key, false)) keys.fail(key, "MistralForCausalLM has no biases");
    // transformers' default window is 4096; an explicit null means full attention.
    if (!doc.contains("sliding_window")) {
      c.sliding_window = 4096;
    } else if (keys.has("sliding_window")) {
      c.sliding_window = keys.positive("sliding_window");
    }
    c.sliding_layers.assign(static_cast<size_t>(c.num_hidden_layers), c.sliding_window.has_value());
  } else if (c.family == Family::kPhi3) {
    // Phi3: no biases, fused qkv and gate_up weights, one window for every layer when set.
    c.fused_projections = true;
    if (keys.has("sliding_window")) c.sliding_window = keys.positive("sliding_window");
    c.sliding_layers.assign(static_cast<size_t>(c.num_hidden_layers), c.sliding_window.has_value());
    for (const char* key : {"resid_pdrop", "embd_pdrop"})
      if (keys.number(key, 0.0) != 0.0) keys.fail(key, "dropout is not supported (fptrain trains without it)");
  } else if (c.family == Family::kQwen2 || c.family == Family::kQwen3) {
    // Qwen2: q, k, v biases and no o bias, always; Qwen3: attention_bias on all four.
    c.attention_bias = c.family == Family::kQwen3 && keys.boolean("attention_bias", false);
    c.qkv_bias = c.family == Family::kQwen2 || c.attention_bias;
    if (keys.boolean("mlp_bias", false)) keys.fail("mlp_bias", c.architecture + " has no MLP biases");
    c.qk_norm = c.family == Family::kQwen3;
    parse_qwen_windows(doc, keys, c);
  } else if (c.family == Family::kGemma2 || c.family == Family::kGemma3) {
    if (keys.boolean("mlp_bias", false)) keys.fail("mlp_bias", c.architecture + " has no MLP biases");
    parse_gemma(doc, keys, c);
  } else {
    c.attention_bias = keys.boolean("attention_bias", false);
    c.qkv_bias = c.attention_bias;
    c.mlp_bias = keys.boolean("mlp_bias", false);
  }
  if (c.sliding_layers.empty()) c.sliding_layers.assign(static_cast<size_t>(c.num_hidden_layers), false);

  if (c.family == Family::kGranite) {
    c.embedding_multiplier = keys.number("embedding_multiplier", 1.0);
    c.residual_multiplier = keys.number("residual_multiplier", 1.0);
    c.logits_scaling = keys.number("logits_scaling", 1.0);
    if (c.logits_scaling == 0) keys.fail("logits_scaling", "must not be zero");
    // Granite always scales scores by attention_multiplier (default 1.0, not 1/sqrt(d)).
    c.attention_multiplier = keys.number("attention_multiplier", 1.0);
  }

  c.attention_dropout = keys.number("attention_dropout", 0.0);
  if (c.attention_dropout < 0 || c.attention_dropout >= 1) keys.fail("attention_dropout", "must be in [0, 1)");

  if (c.family == Family::kGemma3) {
    parse_gemma3_rope(doc, keys, source, c);
  } else {
    c.rope = parse_rope(doc, keys, c.max_position_embeddings, source, c.family, c.head_dim);
  }
  c.dtype = parse_dtype(keys);
  // Llama, Mistral and Granite default to bos 1 and eos 2 when the key is
  // absent, Qwen to none; null means none.
  const bool qwen = c.family == Family::kQwen2 || c.family == Family::kQwen3;
  const bool gemma = c.gemma;  // Gemma: bos 2, eos 1, pad 0
  c.bos_token_id = doc.contains("bos_token_id") ? keys.optional_integer("bos_token_id")
                   : qwen                        ? std::nullopt
                                                 : std::optional<int64_t>(gemma ? 2 : 1);
  c.eos_token_ids = doc.contains("eos_token_id") ? keys.integer_or_list("eos_token_id")
                    : qwen                        ? std::vector<int64_t>{}
                    : c.family == Family::kPhi3   ? std::vector<int64_t>{32000}
                                                  : std::vector<int64_t>{gemma ? 1 : 2};
  // Phi3Config's pad default is 32000, Gemma2Config's 0; the others' none.
  c.pad_token_id = doc.contains("pad_token_id") ? keys.optional_integer("pad_token_id")
                   : c.family == Family::kPhi3  ? std::optional<int64_t>(32000)
                   : gemma                      ? std::optional<int64_t>(0)
                                                : std::nullopt;
  if (c.pad_token_id && (*c.pad_token_id < 0 || *c.pad_token_id >= c.vocab_size))
    keys.fail("pad_token_id", "outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
  c.raw = doc;
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& config_json) {
  std::ifstream in(config_json, std::ios::binary);
  if (!in) throw std::runtime_error(config_json.string() + ": cannot open the model config");
  std::ostringstream text;
  text << in.rdbuf();
  json doc;
  try {
    doc = common::parse_json(text.str(), config_json.string());
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());  // "<file>: invalid JSON: ..."
  }
  return parse_model_config(doc, config_json.string());
}

int64_t ModelConfig::window(int64_t layer) const {
  const auto l = static_cast<size_t>(layer);
  return l < sliding_layers.size() && sliding_layers[l] ? sliding_window.value_or(0) : 0;
}

double ModelConfig::softmax_scale() const {
  if (attention_multiplier) return *attention_multiplier;
  return 1.0 / std::sqrt(static_cast<double>(head_dim));
}

int64_t ModelConfig::num_parameters() const {
  int64_t total = 0;
  for (const auto& [name, shape] : expected_parameter_shapes(*this)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    total += n;
  }
  return total;
}

namespace {

// A RoPE's type and parameters as transformers writes them ({} for default);
// LongRoPE's original context goes to the top level of `out`.
json rope_to_json(const RopeConfig& r, json& out) {
  json rope = json::object();
  if (r.type == RopeType::kLinear) {
    rope = {{"rope_type", "linear"}, {"factor", r.factor}};
  } else if (r.type == RopeType::kLlama3) {
    rope = {{"rope_type", "llama3"},
            {"factor", r.factor},
            {"low_freq_factor", r.low_freq_factor},
            {"high_freq_factor", r.high_freq_factor},
            {"original_max_position_embeddings", r.original_max_position_embeddings}};
  } else if (r.type == RopeType::kLongRope) {
    rope = {{"rope_type", "longrope"}, {"short_factor", r.short_factor}, {"long_factor", r.long_factor}};
    if (r.factors_given) {  // else transformers derives them again, equally
      rope["factor"] = r.factor;
      rope["attention_factor"] = r.attention_factor;
    }
    out["original_max_position_embeddings"] = r.original_max_position_embeddings;
  }
  if (r.partial_rotary_factor != 1.0) {  // Phi3Config reads it from the RoPE dict
    if (rope.empty()) rope = {{"rope_type", "default"}};
    rope["partial_rotary_factor"] = r.partial_rotary_factor;
  }
  return rope;
}

// The dtype and token ids, after the RoPE.
json finish_config_json(const ModelConfig& c, bool v4, json& out) {
  out.erase("torch_dtype");
  out.erase("dtype");
  out[v4 ? "torch_dtype" : "dtype"] = c.dtype;
  out["bos_token_id"] = c.bos_token_id ? json(*c.bos_token_id) : json(nullptr);
  if (c.eos_token_ids.empty()) {
    out["eos_token_id"] = nullptr;
  } else if (c.eos_token_ids.size() == 1) {
    out["eos_token_id"] = c.eos_token_ids[0];
  } else {
    out["eos_token_id"] = c.eos_token_ids;
  }
  out["pad_token_id"] = c.pad_token_id ? json(*c.pad_token_id) : json(nullptr);
  return out;
}

}  // namespace

json model_config_to_json(const ModelConfig& c) {
  json out = c.raw.is_object() ? c.raw : json::object();
  out.erase("quantization_config");  // what fptrain saves is full precision (a 4-bit base merged, or dequantised)
  // Keep the spelling the source used (v4 or v5) so the file round-trips.
  const bool v4 = !out.contains("rope_parameters") &&
                  (out.contains("rope_scaling") || out.contains("rope_theta") || out.contains("torch_dtype"));

  std::string model_type = "llama";
  for (const auto& a : kArchitectures)
    if (a.family == c.family) model_type = a.model_type;
  out["architectures"] = json::array({c.architecture.empty() ? family_key_prefix(c.family) + "ForCausalLM"
                                                             : c.architecture});
  out["model_type"] = model_type;
  out["vocab_size"] = c.vocab_size;
  out["hidden_size"] = c.hidden_size;
  out["intermediate_size"] = c.intermediate_size;
  out["num_hidden_layers"] = c.num_hidden_layers;
  out["num_attention_heads"] = c.num_attention_heads;
  out["num_key_value_heads"] = c.num_key_value_heads;
  out["head_dim"] = c.head_dim;
  out["max_position_embeddings"] = c.max_position_embeddings;
  out["rms_norm_eps"] = c.rms_norm_eps;
  if (c.gemma) {
    out.erase("hidden_act");
    out["hidden_activation"] = "gelu_pytorch_tanh";
    if (c.family == Family::kGemma2)  // Gemma 3 ignores the key: it stays as the file had it
      out["attn_logit_softcapping"] = c.attn_logit_softcap > 0 ? json(c.attn_logit_softcap) : json(nullptr);
    out["final_logit_softcapping"] = c.final_logit_softcap > 0 ? json(c.final_logit_softcap) : json(nullptr);
    out["sliding_window"] = c.sliding_window ? json(*c.sliding_window) : json(nullptr);
    std::vector<std::string> types;
    for (bool s : c.sliding_layers) types.push_back(s ? "sliding_attention" : "full_attention");
    out["layer_types"] = types;
    if (!out.contains("query_pre_attn_scalar")) out["query_pre_attn_scalar"] = 256;
  } else {
    out["hidden_act"] = "silu";
  }
  out["tie_word_embeddings"] = c.tie_word_embeddings;
  out["attention_dropout"] = c.attention_dropout;
  if (c.family == Family::kMistral) {
    out["sliding_window"] = c.sliding_window ? json(*c.sliding_window) : json(nullptr);
  } else if (c.family == Family::kQwen3) {
    out["attention_bias"] = c.attention_bias;
  } else if (c.family == Family::kPhi3) {
    out["sliding_window"] = c.sliding_window ? json(*c.sliding_window) : json(nullptr);
  } else if (c.family == Family::kGemma2 || c.family == Family::kGemma3) {
    out["attention_bias"] = c.attention_bias;
  } else if (c.family != Family::kQwen2) {
    out["attention_bias"] = c.attention_bias;
    out["mlp_bias"] = c.mlp_bias;
  }
  if (c.family == Family::kGranite) {
    out["embedding_multiplier"] = c.embedding_multiplier;
    out["residual_multiplier"] = c.residual_multiplier;
    out["logits_scaling"] = c.logits_scaling;
    out["attention_multiplier"] = c.attention_multiplier.value_or(1.0);
  }

  json rope = rope_to_json(c.rope, out);
  out.erase("rope_scaling");
  out.erase("rope_parameters");
  out.erase("rope_theta");
  if (c.rope_local) {  // Gemma 3: one RoPE per layer type
    json local = rope_to_json(*c.rope_local, out);
    if (v4) {
      out["rope_theta"] = c.rope.theta;
      out["rope_local_base_freq"] = c.rope_local->theta;
      out["rope_scaling"] = rope.empty() ? json(nullptr) : rope;
    } else {
      if (rope.empty()) rope = {{"rope_type", "default"}};
      if (local.empty()) local = {{"rope_type", "default"}};
      rope["rope_theta"] = c.rope.theta;
      local["rope_theta"] = c.rope_local->theta;
      out.erase("rope_local_base_freq");
      out["rope_parameters"] = {{"full_attention", rope}, {"sliding_attention", local}};
    }
  } else if (v4) {
    out["rope_theta"] = c.rope.theta;
    out["rope_scaling"] = rope.empty() ? json(nullptr) : rope;
  } else {
    if (rope.empty()) rope = {{"rope_type", "default"}};
    rope["rope_theta"] = c.rope.theta;
    out["rope_parameters"] = rope;
  }
  return finish_config_json(c, v4, out);
}


}  // namespace fptrain::models
