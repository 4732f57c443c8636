#include "tokenizer/tokenizer_json_util.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

namespace fptrain::tokenizer {

std::string json_type(const nlohmann::json& spec, const std::string& file, const std::string& component) {
  if (!spec.is_object() || !spec.contains("type") || !spec["type"].is_string()) {
    throw std::runtime_error(file + ": " + component + " has no \"type\" string: " + spec.dump().substr(0, 200));
  }
  return spec["type"].get<std::string>();
}

const nlohmann::json& json_field(const nlohmann::json& spec, const std::string& key, const std::string& file,
                                 const std::string& component) {
  if (!spec.is_object() || !spec.contains(key)) {
    throw std::runtime_error(file + ": " + component + " is missing \"" + key + "\"");
  }
  return spec[key];
}

std::string json_string(const nlohmann::json& spec, const std::string& key, const std::string& file,
                        const std::string& component) {
  const auto& v = json_field(spec, key, file, component);
  if (!v.is_string()) throw std::runtime_error(file + ": " + component + " \"" + key + "\" is not a string");
  return v.get<std::string>();
}

std::unique_ptr<Regex> json_pattern(const nlohmann::json& spec, const std::string& file,
                                    const std::string& component) {
  const auto& p = json_field(spec, "pattern", file, component);
  try {
    if (p.is_object() && p.contains("String") && p["String"].is_string()) {
      return std::make_unique<Regex>(p["String"].get<std::string>(), /*literal=*/true);
    }
    if (p.is_object() && p.contains("Regex") && p["Regex"].is_string()) {
      return std::make_unique<Regex>(p["Regex"].get<std::string>());
    }
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(file + ": " + component + ": " + e.what());
  }
  throw std::runtime_error(file + ": " + component + " \"pattern\" must be {\"String\": ...} or {\"Regex\": ...}");
}

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::stringstream buffer;
  buffer << in.rdbuf();
  try {
    return nlohmann::json::parse(buffer.str());
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error(path + ": invalid JSON: " + e.what());
  }
}

}  // namespace fptrain::tokenizer
