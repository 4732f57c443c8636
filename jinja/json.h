// JSON in and out. In: the caller's nlohmann::ordered_json variables become
// values, with tags on the strings the caller marked. Out: Python's
// json.dumps, which is what transformers' tojson filter calls.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "jinja/value.h"

namespace fptrain::jinja {

// Converts `json`; every string at or below a JSON pointer listed in `tags`
// (relative to `json`, "" = json itself) carries that tag; the deepest listed pointer wins.
Value from_json(const nlohmann::ordered_json& json, const std::map<std::string, int32_t>& tags);

struct JsonOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: one line
  std::optional<std::string> item_separator, key_separator;  // nullopt: Python's defaults
  bool sort_keys = false;
};

// json.dumps(value, ...). Throws TypeError for what Python cannot serialize.
std::string to_json(const Value& value, const JsonOptions& options);

}  // namespace fptrain::jinja
