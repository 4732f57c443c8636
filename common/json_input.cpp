#include "common/json_input.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace fptrain::common {
namespace {

template <class Json>
Json parse_bounded(std::string_view text, const std::string& what, int max_depth) {
  // Checked before parsing: nlohmann's parser itself is iterative, but the
  // value it would build could not be printed or destroyed without recursion.
  if (json_nesting_exceeds(text, max_depth))
    throw std::invalid_argument(what + ": invalid JSON: nested deeper than " + std::to_string(max_depth) + " levels");
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    // The parser quotes the token it stopped at, which may be a whole
    // (megabytes long) string: keep the message readable.
    std::string message = e.what();
    constexpr size_t kMaxMessage = 300;
    if (message.size() > kMaxMessage) {
      size_t cut = kMaxMessage;
      while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
      message = message.substr(0, cut) + "...";
    }
    throw std::invalid_argument(what + ": invalid JSON: " + message);
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument(path + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw std::invalid_argument(path + ": cannot read");
  return ss.str();
}

template <class Json>
std::string excerpt(const Json& value, size_t max_chars) {
  std::string s = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > max_chars) {
    size_t cut = max_chars;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // keep UTF-8 whole
    s = s.substr(0, cut) + "...";
  }
  return s;
}

}  // namespace

bool json_nesting_exceeds(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

nlohmann::json parse_json(std::string_view text, const std::string& what, int max_depth) {
  return parse_bounded<nlohmann::json>(text, what, max_depth);
}

nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& what, int max_depth) {
  return parse_bounded<nlohmann::ordered_json>(text, what, max_depth);
}

nlohmann::json read_json_file(const std::string& path, int max_depth) {
  return parse_json(read_file(path), path, max_depth);
}

nlohmann::ordered_json read_ordered_json_file(const std::string& path, int max_depth) {
  return parse_ordered_json(read_file(path), path, max_depth);
}

std::string json_excerpt(const nlohmann::json& value, size_t max_chars) { return excerpt(value, max_chars); }
std::string json_excerpt(const nlohmann::ordered_json& value, size_t max_chars) {
  return excerpt(value, max_chars);
}

std::string cut_text(std::string_view text, size_t max_chars) {
  if (text.size() <= max_chars) return std::string(text);
  size_t cut = max_chars;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return std::string(text.substr(0, cut)) + "...";
}

std::string quoted_excerpt(std::string_view text, size_t max_chars) {
  // Only a bounded prefix is quoted, so a huge string costs nothing.
  const size_t take = std::min(text.size(), max_chars + 4);
  std::string out = excerpt(nlohmann::json(std::string(text.substr(0, take))), max_chars + 2);
  if (take < text.size() && out.size() >= 3 && out.compare(out.size() - 3, 3, "...") != 0) out += "...";
  return out;
}

}  // namespace fptrain::common
