// Parsing JSON that comes from files we do not control (config.json,
// tokenizer files, safetensors headers, JSONL lines). Nesting is bounded so a
// hostile file cannot exhaust the stack (printing or destroying a deeply nested
// value recurses), and values quoted in error messages are bounded in length.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace fptrain::common {

// Deeper than any real configuration or tokenizer file.
inline constexpr int kMaxJsonDepth = 128;

// Parses `text`; throws std::invalid_argument "<what>: invalid JSON: ..." on a
// syntax error or nesting deeper than `max_depth`.
nlohmann::json parse_json(std::string_view text, const std::string& what, int max_depth = kMaxJsonDepth);
nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& what,
                                          int max_depth = kMaxJsonDepth);

// Reads and parses a file; the error names the file.
nlohmann::json read_json_file(const std::string& path, int max_depth = kMaxJsonDepth);
nlohmann::ordered_json read_ordered_json_file(const std::string& path, int max_depth = kMaxJsonDepth);

// A value for an error message: its JSON text cut to `max_chars` ("..." added).
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 80);
std::string json_excerpt(const nlohmann::ordered_json& value, size_t max_chars = 80);
// A string from a file for an error message: JSON-quoted (control characters
// and invalid UTF-8 made visible) and cut to `max_chars` ("..." added).
std::string quoted_excerpt(std::string_view text, size_t max_chars = 80);
// `text` itself when it has at most `max_chars` bytes, else its first
// max_chars bytes (whole UTF-8 characters) and "...".
std::string cut_text(std::string_view text, size_t max_chars = 200);

// Whether `text` nests arrays/objects deeper than `max_depth` (strings are skipped).
bool json_nesting_exceeds(std::string_view text, int max_depth);

}  // namespace fptrain::common
