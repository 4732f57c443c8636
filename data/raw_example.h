// One JSONL line after parsing, before tokenization, and the ways a line can
// be bad.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/data_options.h"

namespace fptrain::data {

struct Message {
  std::string role;  // system, user or assistant
  std::string content;
  // Whether this turn is trained on (chat loss mask; assistant turns only).
  bool supervised = false;
};

struct RawExample {
  ExampleFormat format = ExampleFormat::kAuto;
  std::vector<Message> messages;   // messages; alpaca and conversational prompt/completion with a template
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
