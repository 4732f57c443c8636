#include "tokenizer/tokenizer_config.h"

#include <nlohmann/json.hpp>

#include <limits>
#include <stdexcept>

#include "tokenizer/tokenizer_json_util.h"

namespace fptrain::tokenizer {
namespace {

// A token given as "content" or as an AddedToken object. Named special tokens
// default to special and not normalized, as transformers builds them.
std::optional<AddedToken> parse_token(const JsonNode& v) {
  if (v.is_null()) return std::nullopt;
  AddedToken t;
  t.special = true;
  t.normalized = false;
  if (v.is_string()) {
    t.content = v.string();
  } else if (v.is_object()) {
    t.content = v.required("content").string();
    t.lstrip = v.boolean_or("lstrip", false);
    t.rstrip = v.boolean_or("rstrip", false);
    t.single_word = v.boolean_or("single_word", false);
    t.normalized = v.boolean_or("normalized", false);
    t.special = v.boolean_or("special", true);
  } else {
    v.fail("must be a string or an AddedToken object");
  }
  return t;
}

void read_named_tokens(const JsonNode& j, TokenizerConfig& config) {
  // A key given as null resets the token (special_tokens_map.json is read after the config).
  if (j.json().contains("bos_token")) config.bos_token = parse_token(j["bos_token"]);
  if (j.json().contains("eos_token")) config.eos_token = parse_token(j["eos_token"]);
  if (j.json().contains("unk_token")) config.unk_token = parse_token(j["unk_token"]);
  if (j.json().contains("pad_token")) config.pad_token = parse_token(j["pad_token"]);
  for (const char* key : {"additional_special_tokens", "extra_special_tokens"}) {
    if (!j[key].is_array()) continue;
    for (const JsonNode& v : j[key].elements()) {
      if (auto t = parse_token(v)) config.extra_special_tokens.push_back(*t);
    }
  }
}

// An added_tokens_decoder key: a token id in decimal.
int32_t parse_id_key(const std::string& key, const JsonNode& entry) {
  int64_t id = -1;
  if (!key.empty() && key.size() <= 10 && key.find_first_not_of("0123456789") == std::string::npos) id = std::stoll(key);
  if (id < 0 || id > std::numeric_limits<int32_t>::max()) entry.fail("the key is not a token id");
  return static_cast<int32_t>(id);
}

}  // namespace

TokenizerConfig read_tokenizer_config(const std::filesystem::path& dir) {
  TokenizerConfig config;
  const auto config_path = dir / "tokenizer_config.json";
  bool has_added_tokens_decoder = false;
  if (std::filesystem::exists(config_path)) {
    const std::string file = config_path.string();
    const nlohmann::json json = read_json_file(file);
    const JsonNode j(json, file);
    if (!j.is_object()) j.fail("expected a JSON object");
    if (j["tokenizer_class"].is_string()) config.tokenizer_class = j["tokenizer_class"].string();
    read_named_tokens(j, config);
    config.add_bos_token = j.optional_boolean("add_bos_token");
    config.add_eos_token = j.optional_boolean("add_eos_token");
    config.legacy = j.optional_boolean("legacy");
    config.add_prefix_space = j.optional_boolean("add_prefix_space");
    if (j["added_tokens_decoder"].is_object()) {
      has_added_tokens_decoder = true;
      config.has_added_tokens_decoder = true;
      for (const auto& [key, value] : j["added_tokens_decoder"].entries()) {
        auto t = parse_token(value);
        if (!t) continue;
        if (value.is_object()) {  // AddedToken's own defaults when a flag is absent
          t->special = value.boolean_or("special", false);
          t->normalized = value.boolean_or("normalized", !t->special);
        }
        t->id = parse_id_key(key, value);
        config.added_tokens.push_back(*t);
      }
    }
  }
  const auto map_path = dir / "special_tokens_map.json";
  if (!has_added_tokens_decoder && std::filesystem::exists(map_path)) {
    const std::string file = map_path.string();
    const nlohmann::json json = read_json_file(file);
    const JsonNode j(json, file);
    if (!j.is_object()) j.fail("expected a JSON object");
    read_named_tokens(j, config);
  }
  return config;
}

}  // namespace fptrain::tokenizer
