#include "tokenizer/tokenizer_config.h"

#include <nlohmann/json.hpp>

#include <stdexcept>

#include "tokenizer/tokenizer_json_util.h"

namespace fptrain::tokenizer {
namespace {

// A token given as "content" or as an AddedToken object. Named special tokens
// default to special and not normalized, as transformers builds them.
std::optional<AddedToken> parse_token(const nlohmann::json& v, const std::string& file, const std::string& key) {
  if (v.is_null()) return std::nullopt;
  AddedToken t;
  t.special = true;
  t.normalized = false;
  if (v.is_string()) {
    t.content = v.get<std::string>();
  } else if (v.is_object()) {
    t.content = json_string(v, "content", file, key);
    t.lstrip = v.value("lstrip", false);
    t.rstrip = v.value("rstrip", false);
    t.single_word = v.value("single_word", false);
    t.normalized = v.value("normalized", false);
    t.special = v.value("special", true);
  } else {
    throw std::runtime_error(file + ": \"" + key + "\" must be a string or an AddedToken object");
  }
  return t;
}

std::optional<bool> optional_bool(const nlohmann::json& j, const std::string& key, const std::string& file) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  if (!j[key].is_boolean()) throw std::runtime_error(file + ": \"" + key + "\" must be true or false");
  return j[key].get<bool>();
}

void read_named_tokens(const nlohmann::json& j, const std::string& file, TokenizerConfig& config) {
  if (j.contains("bos_token")) config.bos_token = parse_token(j["bos_token"], file, "bos_token");
  if (j.contains("eos_token")) config.eos_token = parse_token(j["eos_token"], file, "eos_token");
  if (j.contains("unk_token")) config.unk_token = parse_token(j["unk_token"], file, "unk_token");
  if (j.contains("pad_token")) config.pad_token = parse_token(j["pad_token"], file, "pad_token");
  for (const char* key : {"additional_special_tokens", "extra_special_tokens"}) {
    if (!j.contains(key) || !j[key].is_array()) continue;
    for (const auto& v : j[key]) {
      if (auto t = parse_token(v, file, key)) config.extra_special_tokens.push_back(*t);
    }
  }
}

}  // namespace

TokenizerConfig read_tokenizer_config(const std::filesystem::path& dir) {
  TokenizerConfig config;
  const auto config_path = dir / "tokenizer_config.json";
  bool has_added_tokens_decoder = false;
  if (std::filesystem::exists(config_path)) {
    const std::string file = config_path.string();
    const nlohmann::json j = read_json_file(file);
    if (!j.is_object()) throw std::runtime_error(file + ": expected a JSON object");
    if (j.contains("tokenizer_class") && j["tokenizer_class"].is_string()) {
      config.tokenizer_class = j["tokenizer_class"].get<std::string>();
    }
    read_named_tokens(j, file, config);
    config.add_bos_token = optional_bool(j, "add_bos_token", file);
    config.add_eos_token = optional_bool(j, "add_eos_token", file);
    config.legacy = optional_bool(j, "legacy", file);
    config.add_prefix_space = optional_bool(j, "add_prefix_space", file);
    if (j.contains("added_tokens_decoder") && j["added_tokens_decoder"].is_object()) {
      has_added_tokens_decoder = true;
      config.has_added_tokens_decoder = true;
      for (const auto& [key, value] : j["added_tokens_decoder"].items()) {
        auto t = parse_token(value, file, "added_tokens_decoder." + key);
        if (!t) continue;
        if (value.is_object()) {  // AddedToken's own defaults when a flag is absent
          t->special = value.value("special", false);
          t->normalized = value.value("normalized", !t->special);
        }
        try {
          t->id = std::stoi(key);
        } catch (const std::exception&) {
          throw std::runtime_error(file + ": added_tokens_decoder key '" + key + "' is not an id");
        }
        config.added_tokens.push_back(*t);
      }
    }
  }
  const auto map_path = dir / "special_tokens_map.json";
  if (!has_added_tokens_decoder && std::filesystem::exists(map_path)) {
    const std::string file = map_path.string();
    const nlohmann::json j = read_json_file(file);
    if (!j.is_object()) throw std::runtime_error(file + ": expected a JSON object");
    read_named_tokens(j, file, config);
  }
  return config;
}

}  // namespace fptrain::tokenizer
