// Printing what ExampleInspector found: `fptrain data CONFIG.yaml --show N`
// as text (the decoded text with its supervised spans marked, then a table of
// ids, labels and token pieces) or as one JSON document.
//
// Supervised spans are coloured (ANSI green) on a terminal, else written
// between the markers [[ and ]]. So that a marker is never ambiguous, a `[`
// or `]` of the text itself that touches another of the same kind (in the
// text or a marker) is written `\[` or `\]`. In both modes control characters
// other than newline and tab are written as escapes (\r, \x1b, ...), as are
// bytes that are not UTF-8 (\xNN).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/enum_names.h"
#include "data/example_inspector.h"
#include "tokenizer/tokenizer.h"

namespace fptrain::data {

enum class ColorMode { kAuto, kAlways, kNever };

// kAuto: colour when `fd` is a terminal, NO_COLOR is unset and TERM is not "dumb".
bool use_color(ColorMode mode, int fd);

inline constexpr std::string_view kSupervisedOpen = "[[";
inline constexpr std::string_view kSupervisedClose = "]]";

struct InspectPrintOptions {
  bool color = false;
  // Rows of the id / label / piece table per example (a longer example shows
  // its first and last rows); 0: no table.
  int64_t max_tokens_shown = 256;
};

// The spans as one text: markers (or colours) around the supervised spans,
// escapes as described above.
std::string marked_text(const std::vector<TokenSpan>& spans, bool color);

// Text or a token piece made printable: control characters other than \n and
// \t (or all of them, with escape_newlines) and non-UTF-8 bytes as escapes.
std::string printable(std::string_view text, bool escape_newlines);

// The heading: which examples (`count` from index `first` on, of `total`),
// what the marks mean.
void print_inspection_heading(std::ostream& out, uint64_t first, uint64_t count, uint64_t total,
                              const std::string& split, bool color);
// The heading and each example. `tokenizer` decodes the pieces of the table
// (may be null: no pieces).
void print_inspection(std::ostream& out, const std::vector<InspectedExample>& examples, uint64_t total,
                      const std::string& split, const tokenizer::Tokenizer* tokenizer,
                      const InspectPrintOptions& options);
void print_inspected_example(std::ostream& out, const InspectedExample& example,
                             const tokenizer::Tokenizer* tokenizer, const InspectPrintOptions& options);

// {"split", "total", "examples": [{"index", "file", "line", "format", "chat_template", "status",
// "reason", "problem", "stops_training", "tokens", "supervised", "original_length", "truncated",
// "input_ids", "labels", "text", "spans": [{"text", "supervised", "first_token", "tokens"}]}]}.
// Strings may hold bytes that are not UTF-8: dump with error_handler_t::replace.
nlohmann::json inspected_example_json(const InspectedExample& example);
nlohmann::json inspection_json(const std::vector<InspectedExample>& examples, uint64_t total,
                               const std::string& split);

}  // namespace fptrain::data

namespace fptrain::common {
template <>
struct EnumNames<data::ColorMode> {
  static constexpr std::array<EnumEntry<data::ColorMode>, 3> table = {
      {{data::ColorMode::kAuto, "auto"}, {data::ColorMode::kAlways, "always"}, {data::ColorMode::kNever, "never"}}};
};
}  // namespace fptrain::common
