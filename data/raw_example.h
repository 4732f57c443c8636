// One JSONL line after parsing, before tokenization, and the ways a line can
// be bad.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/data_options.h"

namespace fptrain::data {

struct Message {
  std::string role;  // system, user, assistant, tool, ...
  std::string content;  // the text (empty when the message has none, e.g. only tool_calls)
  // Whether this turn is trained on (chat loss mask; assistant turns only).
  bool supervised = false;
  // The message object as the line gave it (tool_calls, name, ...), passed to
  // the chat template as is; null for messages the parser built.
  nlohmann::ordered_json fields;
};

struct RawExample {
  ExampleFormat format = ExampleFormat::kAuto;
  std::vector<Message> messages;   // messages; alpaca and conversational prompt/completion with a template
  nlohmann::ordered_json tools, documents;  // messages: the line's "tools" / "documents" (null when absent)
  std::string prompt, completion;  // prompt_completion; alpaca: instruction, output
  std::string text;                // text; alpaca: input
  std::vector<int32_t> input_ids;  // tokens
  std::vector<int32_t> labels;     // tokens, optional (empty: every token supervised)
};

// Why an example was skipped. The first kBadLineReasons are bad lines (subject
// to the bad-line policy); the rest are skips of well-formed lines.
enum class SkipReason {
  kMalformedJson,
  kInvalidUtf8,
  kMissingField,
  kWrongType,
  kInvalidValue,  // e.g. unknown role, turn order a template cannot render, id out of range
  kZeroSupervised,
};
inline constexpr int kNumSkipReasons = 6;
inline bool is_bad_line(SkipReason r) { return r != SkipReason::kZeroSupervised; }

// Thrown by parsing/rendering for a bad line; the message names the problem
// (the caller adds file and line).
class BadLine : public std::runtime_error {
 public:
  BadLine(SkipReason reason, const std::string& what) : std::runtime_error(what), reason_(reason) {}
  SkipReason reason() const { return reason_; }

 private:
  SkipReason reason_;
};

}  // namespace fptrain::data

namespace fptrain::common {
template <>
struct EnumNames<data::SkipReason> {
  static constexpr std::array<EnumEntry<data::SkipReason>, 6> table = {{
      {data::SkipReason::kMalformedJson, "malformed_json"},
      {data::SkipReason::kInvalidUtf8, "invalid_utf8"},
      {data::SkipReason::kMissingField, "missing_field"},
      {data::SkipReason::kWrongType, "wrong_type"},
      {data::SkipReason::kInvalidValue, "invalid_value"},
      {data::SkipReason::kZeroSupervised, "zero_supervised"}}};
};
}  // namespace fptrain::common
