#include "tokenizer/tokenizer_json_util.h"

#include <limits>
#include <stdexcept>

#include "common/json_input.h"

namespace fptrain::tokenizer {
namespace {

const nlohmann::json& null_json() {
  static const nlohmann::json kNull;
  return kNull;
}

// "a string", "an object", ... for messages.
std::string type_phrase(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::object: return "an object";
    case nlohmann::json::value_t::array: return "an array";
    case nlohmann::json::value_t::string: return "a string";
    case nlohmann::json::value_t::boolean: return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned: return "an integer";
    case nlohmann::json::value_t::number_float: return "a number";
    default: return v.type_name();
  }
}

bool is_identifier(const std::string& key) {
  if (key.empty() || key.size() > 64) return false;
  for (size_t i = 0; i < key.size(); ++i) {
    const char c = key[i];
    const bool ok = c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

}  // namespace

JsonNode::JsonNode(const nlohmann::json& value, std::string file, std::string path)
    : value_(&value), file_(std::move(file)), path_(std::move(path)) {}

std::string JsonNode::where() const { return path_.empty() ? "the document" : path_; }

void JsonNode::fail(const std::string& problem) const {
  throw std::runtime_error(file_ + ": " + where() + ": " + problem);
}

void JsonNode::expected(const char* what) const {
  std::string got = type_phrase(*value_);
  if (value_->is_string() || value_->is_number() || value_->is_boolean()) got += " (" + common::json_excerpt(*value_) + ")";
  if (value_->is_null() && !path_.empty()) fail(std::string("missing; expected ") + what);
  fail(std::string("expected ") + what + ", got " + got);
}

bool JsonNode::has(const std::string& key) const {
  if (!value_->is_object()) return false;
  auto it = value_->find(key);
  return it != value_->end() && !it->is_null();
}

JsonNode JsonNode::operator[](const std::string& key) const {
  std::string path = is_identifier(key) ? (path_.empty() ? key : path_ + "." + key)
                                        : path_ + "[" + common::quoted_excerpt(key) + "]";
  if (value_->is_object()) {
    auto it = value_->find(key);
    if (it != value_->end()) return JsonNode(*it, file_, std::move(path));
  }
  return JsonNode(null_json(), file_, std::move(path));
}

JsonNode JsonNode::entry(const std::string& key) const {
  std::string path = path_ + "[" + common::quoted_excerpt(key) + "]";
  if (value_->is_object()) {
    auto it = value_->find(key);
    if (it != value_->end()) return JsonNode(*it, file_, std::move(path));
  }
  return JsonNode(null_json(), file_, std::move(path));
}

JsonNode JsonNode::required(const std::string& key) const {
  if (!value_->is_object()) expected("an object");
  JsonNode child = (*this)[key];
  if (child.is_null()) fail("missing \"" + common::cut_text(key) + "\"");
  return child;
}

std::vector<JsonNode> JsonNode::elements() const {
  if (!value_->is_array()) expected("an array");
  std::vector<JsonNode> out;
  out.reserve(value_->size());
  for (size_t i = 0; i < value_->size(); ++i) out.emplace_back((*value_)[i], file_, path_ + "[" + std::to_string(i) + "]");
  return out;
}

std::vector<std::pair<std::string, JsonNode>> JsonNode::entries() const {
  if (!value_->is_object()) expected("an object");
  std::vector<std::pair<std::string, JsonNode>> out;
  out.reserve(value_->size());
  for (auto it = value_->begin(); it != value_->end(); ++it)
    out.emplace_back(it.key(), JsonNode(it.value(), file_, path_ + "[" + common::quoted_excerpt(it.key()) + "]"));
  return out;
}

std::string JsonNode::string() const {
  if (!value_->is_string()) expected("a string");
  return value_->get<std::string>();
}

int64_t JsonNode::integer() const {
  if (value_->is_number_unsigned()) {
    if (value_->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(common::json_excerpt(*value_) + " is too large");
    return value_->get<int64_t>();
  }
  if (!value_->is_number_integer()) expected("an integer");
  return value_->get<int64_t>();
}

int64_t JsonNode::integer_in(int64_t min, int64_t max, const std::string& why) const {
  const int64_t v = integer();
  if (v < min || v > max)
    fail(std::to_string(v) + " is outside [" + std::to_string(min) + ", " + std::to_string(max) + "]" + why);
  return v;
}

uint64_t JsonNode::unsigned_integer() const {
  if (value_->is_number_unsigned()) return value_->get<uint64_t>();
  if (!value_->is_number_integer() || value_->get<int64_t>() < 0) expected("a non-negative integer");
  return static_cast<uint64_t>(value_->get<int64_t>());
}

bool JsonNode::boolean() const {
  if (!value_->is_boolean()) expected("true or false");
  return value_->get<bool>();
}

double JsonNode::number() const {
  if (!value_->is_number()) expected("a number");
  return value_->get<double>();
}

std::string JsonNode::string_or(const std::string& key, const std::string& fallback) const {
  const JsonNode child = (*this)[key];
  return child.is_null() ? fallback : child.string();
}

bool JsonNode::boolean_or(const std::string& key, bool fallback) const {
  const JsonNode child = (*this)[key];
  return child.is_null() ? fallback : child.boolean();
}

std::optional<bool> JsonNode::optional_boolean(const std::string& key) const {
  const JsonNode child = (*this)[key];
  if (child.is_null()) return std::nullopt;
  return child.boolean();
}

std::string JsonNode::type() const {
  if (!value_->is_object()) expected("an object with a \"type\"");
  return required("type").string();
}

std::unique_ptr<Regex> JsonNode::pattern() const {
  const JsonNode p = required("pattern");
  const bool literal = p.has("String");
  if (!p.is_object() || !(literal || p.has("Regex")))
    p.fail("must be {\"String\": ...} or {\"Regex\": ...}");
  const std::string text = p[literal ? "String" : "Regex"].string();
  try {
    return std::make_unique<Regex>(text, literal);
  } catch (const std::invalid_argument& e) {
    p.fail(e.what());
  }
}

nlohmann::json read_json_file(const std::string& path) {
  try {
    return common::read_json_file(path);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());  // "<path>: cannot open" / "<path>: invalid JSON: ..."
  }
}

}  // namespace fptrain::tokenizer
