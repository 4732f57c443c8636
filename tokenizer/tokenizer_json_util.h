// Checked accessors for tokenizer.json / tokenizer_config.json fields: a missing
// or mistyped field throws with the file, the component and the key.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/regex.h"

namespace fptrain::tokenizer {

// The component's "type" string.
std::string json_type(const nlohmann::json& spec, const std::string& file, const std::string& component);

const nlohmann::json& json_field(const nlohmann::json& spec, const std::string& key, const std::string& file,
                                 const std::string& component);

std::string json_string(const nlohmann::json& spec, const std::string& key, const std::string& file,
                        const std::string& component);

// A "pattern" field, {"String": "..."} (literal) or {"Regex": "..."}.
std::unique_ptr<Regex> json_pattern(const nlohmann::json& spec, const std::string& file,
                                    const std::string& component);

// Reads and parses a JSON file, naming it in errors.
nlohmann::json read_json_file(const std::string& path);

}  // namespace fptrain::tokenizer
