// Reading tokenizer.json / tokenizer_config.json: JsonNode is a value of the
// file together with the file name and its key path, so that every missing or
// mistyped field is reported with both, e.g.
//   tokenizer.json: model.vocab["abc"]: expected an integer, got a string
// instead of nlohmann's bare type_error. Reading a field never throws anything
// but std::runtime_error with such a message.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/regex.h"

namespace fptrain::tokenizer {

class JsonNode {
 public:
  // `value` must outlive the node and every node taken from it. `path` is the
  // node's key path in the file ("" for the document itself).
  JsonNode(const nlohmann::json& value, std::string file, std::string path = "");

  const nlohmann::json& json() const { return *value_; }
  const std::string& file() const { return file_; }
  // The key path for messages ("the document" for the root).
  std::string where() const;

  bool is_null() const { return value_->is_null(); }  // also an absent field
  bool is_object() const { return value_->is_object(); }
  bool is_array() const { return value_->is_array(); }
  bool is_string() const { return value_->is_string(); }

  // Whether this is an object holding `key` with a non-null value.
  bool has(const std::string& key) const;
  // The field `key` of an object ("path.key"); an absent field (or any field
  // of a non-object) is a null node with that path.
  JsonNode operator[](const std::string& key) const;
  // The same for an object used as a map: path `path["key"]`.
  JsonNode entry(const std::string& key) const;
  // A field that must be present (not null).
  JsonNode required(const std::string& key) const;

  // Array elements (path `path[i]`); throws unless this is an array.
  std::vector<JsonNode> elements() const;
  // Object members as map entries; throws unless this is an object.
  std::vector<std::pair<std::string, JsonNode>> entries() const;

  // Typed values: throw "<file>: <path>: expected <type>, got <type>".
  std::string string() const;
  int64_t integer() const;
  // An integer in [min, max]; else "<file>: <path>: <value> is outside [min, max]" + `why`.
  int64_t integer_in(int64_t min, int64_t max, const std::string& why = "") const;
  uint64_t unsigned_integer() const;
  bool boolean() const;
  double number() const;

  // Field `key` of this object, or `fallback` when absent or null.
  std::string string_or(const std::string& key, const std::string& fallback) const;
  bool boolean_or(const std::string& key, bool fallback) const;
  std::optional<bool> optional_boolean(const std::string& key) const;

  // A component's "type" string (required).
  std::string type() const;
  // A "pattern" field, {"String": "..."} (literal) or {"Regex": "..."}.
  std::unique_ptr<Regex> pattern() const;

  // Throws std::runtime_error "<file>: <path>: <problem>".
  [[noreturn]] void fail(const std::string& problem) const;

 private:
  [[noreturn]] void expected(const char* what) const;

  const nlohmann::json* value_;
  std::string file_;
  std::string path_;
};

// Reads and parses a tokenizer JSON file with bounded nesting; errors
// (std::runtime_error) name the file.
nlohmann::json read_json_file(const std::string& path);

}  // namespace fptrain::tokenizer
