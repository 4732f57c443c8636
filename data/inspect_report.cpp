#include "data/inspect_report.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ostream>

#include "data/packed_batch.h"
#include "data/utf8_check.h"

namespace fptrain::data {
namespace {

constexpr const char* kGreen = "\x1b[1;32m";
constexpr const char* kDim = "\x1b[2m";
constexpr const char* kReset = "\x1b[0m";

void append_hex(std::string& out, unsigned char c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", c);
  out += buf;
}

// Valid UTF-8 `text` with control characters escaped.
void append_controls_escaped(std::string& out, std::string_view text, bool escape_newlines) {
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c != 0x7f) {
      out += ch;
    } else if ((c == '\n' || c == '\t') && !escape_newlines) {
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      append_hex(out, c);
    }
  }
}

std::string label_text(int32_t label) { return label == kIgnoreLabel ? "-" : std::to_string(label); }

std::string percent(int64_t part, int64_t whole) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", whole > 0 ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0);
  return buf;
}

// What happened to the example, in one line.
std::string outcome_line(const InspectedExample& ex) {
  const std::string tokens = std::to_string(ex.tokens()) + " tokens, " + std::to_string(ex.supervised) +
                             " supervised (" + percent(ex.supervised, ex.tokens()) + ")";
  switch (ex.status) {
    case ExampleStatus::kUsed: return "used: " + tokens;
    case ExampleStatus::kTruncated:
      return "truncated: " + tokens + "; " + std::to_string(ex.original_length - ex.tokens()) + " of " +
             std::to_string(ex.original_length) + " tokens cut";
    case ExampleStatus::kDropped:
      return "dropped (not trained): " + ex.problem + "; all " + std::to_string(ex.tokens()) + " tokens shown";
    case ExampleStatus::kSkipped: {
      std::string s = std::string("skipped (") + common::enum_name(ex.reason) + ", not trained): " + ex.problem;
      if (ex.reason == SkipReason::kZeroSupervised) s += "; its " + std::to_string(ex.tokens()) + " tokens shown";
      if (ex.stops_training) s += "\nbad_lines is `error`: training stops at this line (bad_lines: skip skips it)";
      return s;
    }
  }
  return "?";
}

}  // namespace

bool use_color(ColorMode mode, int fd) {
  if (mode != ColorMode::kAuto) return mode == ColorMode::kAlways;
  if (!::isatty(fd)) return false;
  const char* no_color = std::getenv("NO_COLOR");
  if (no_color && *no_color) return false;
  const char* term = std::getenv("TERM");
  return !(term && std::strcmp(term, "dumb") == 0);
}

std::string printable(std::string_view text, bool escape_newlines) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const size_t bad = find_invalid_utf8(text);
    if (bad == std::string_view::npos) {
      append_controls_escaped(out, text, escape_newlines);
      break;
    }
    append_controls_escaped(out, text.substr(0, bad), escape_newlines);
    append_hex(out, static_cast<unsigned char>(text[bad]));
    text.remove_prefix(bad + 1);
  }
  return out;
}

std::string marked_text(const std::vector<TokenSpan>& spans, bool color) {
  std::string out;
  if (color) {
    for (const TokenSpan& s : spans) {
      if (s.supervised) out += kGreen;
      out += printable(s.text, false);
      if (s.supervised) out += kReset;
    }
    return out;
  }
  // The text and the markers as one stream of (character, is marker), then a
  // backslash before each text bracket that touches the same bracket.
  std::vector<std::pair<char, bool>> stream;
  for (const TokenSpan& s : spans) {
    if (s.supervised)
      for (char c : kSupervisedOpen) stream.emplace_back(c, true);
    for (char c : printable(s.text, false)) stream.emplace_back(c, false);
    if (s.supervised)
      for (char c : kSupervisedClose) stream.emplace_back(c, true);
  }
  out.reserve(stream.size() + 16);
  for (size_t i = 0; i < stream.size(); ++i) {
    const auto [c, marker] = stream[i];
    if (!marker && (c == '[' || c == ']')) {
      const bool touches = (i > 0 && stream[i - 1].first == c) || (i + 1 < stream.size() && stream[i + 1].first == c);
      if (touches) out += '\\';
    }
    out += c;
  }
  return out;
}

void print_inspected_example(std::ostream& out, const InspectedExample& ex, const tokenizer::Tokenizer* tokenizer,
                             const InspectPrintOptions& o) {
  const char* bold = o.color ? "\x1b[1m" : "";
  const char* dim = o.color ? kDim : "";
  const char* reset = o.color ? kReset : "";
  out << bold << "=== example " << ex.index + 1 << ": " << ex.file << ":" << ex.line << reset << "\n";
  out << "format " << common::enum_name(ex.format) << ", chat template " << ex.chat_template
      << "\n";
  out << outcome_line(ex) << "\n";
  if (ex.input_ids.empty()) {
    out << "\n";
    return;
  }
  out << dim << "--- text" << reset << "\n" << marked_text(ex.spans, o.color) << "\n";
  if (o.max_tokens_shown <= 0) {
    out << "\n";
    return;
  }
  out << dim << "--- tokens" << reset << "\n";
  char line[96];
  std::snprintf(line, sizeof line, "%6s %8s %8s  %s\n", "pos", "id", "label", "piece");
  out << dim << line << reset;
  // Longer examples: the first and the last rows (where the prompt starts and
  // the final answer, its end-of-turn token or the truncation are).
  const size_t n = ex.input_ids.size();
  const auto limit = static_cast<size_t>(o.max_tokens_shown);
  const size_t head = n <= limit ? n : (limit + 1) / 2;
  const size_t tail_start = n <= limit ? n : n - limit / 2;
  for (size_t t = 0; t < n; ++t) {
    if (t == head && head < tail_start) {
      out << dim << "   ... " << tail_start - head << " tokens not shown (" << head << " to " << tail_start - 1
          << "; --max-tokens-shown)" << reset << "\n";
      t = tail_start;
      if (t >= n) break;
    }
    const bool supervised = ex.labels[t] != kIgnoreLabel;
    std::snprintf(line, sizeof line, "%6zu %8d %8s  ", t, ex.input_ids[t], label_text(ex.labels[t]).c_str());
    out << line;
    const std::string piece = tokenizer ? printable(token_piece(*tokenizer, ex.input_ids, t), true) : std::string();
    if (supervised && o.color) out << kGreen;
    out << '"' << piece << '"';
    if (supervised && o.color) out << kReset;
    out << "\n";
  }
  out << "\n";
}

void print_inspection_heading(std::ostream& out, uint64_t first, uint64_t count, uint64_t total,
                              const std::string& split, bool color) {
  out << "data." << split << ": ";
  if (count == 0) {
    out << "no example to show (" << total << " in all)\n";
    return;
  }
  if (count == 1)
    out << "example " << first + 1;
  else
    out << "examples " << first + 1 << "-" << first + count;
  out << " of " << total << " in file order (before weights and shuffling), encoded as training encodes them.\n";
  if (color)
    out << "Supervised tokens (trained on) are " << kGreen << "green" << kReset << ".\n\n";
  else
    out << "Supervised tokens (trained on) are between " << kSupervisedOpen << " and " << kSupervisedClose
        << "; a [ or ] of the text next to the same bracket is written \\[ or \\].\n\n";
}

void print_inspection(std::ostream& out, const std::vector<InspectedExample>& examples, uint64_t total,
                      const std::string& split, const tokenizer::Tokenizer* tokenizer, const InspectPrintOptions& o) {
  print_inspection_heading(out, examples.empty() ? 0 : examples.front().index, examples.size(), total, split, o.color);
  for (const InspectedExample& ex : examples) print_inspected_example(out, ex, tokenizer, o);
}

nlohmann::json inspected_example_json(const InspectedExample& ex) {
  nlohmann::json spans = nlohmann::json::array();
  std::string text;
  for (const TokenSpan& s : ex.spans) {
    spans.push_back({{"text", s.text}, {"supervised", s.supervised}, {"first_token", s.first_token},
                     {"tokens", s.num_tokens}});
    text += s.text;
  }
  const bool skipped = ex.status == ExampleStatus::kSkipped;
  return {{"index", ex.index},
          {"file", ex.file},
          {"line", ex.line},
          {"format", common::enum_name(ex.format)},
          {"chat_template", ex.chat_template},
          {"status", status_name(ex.status)},
          {"reason", skipped ? nlohmann::json(common::enum_name(ex.reason)) : nlohmann::json(nullptr)},
          {"problem", ex.problem},
          {"stops_training", ex.stops_training},
          {"trained", ex.trained()},
          {"tokens", ex.tokens()},
          {"supervised", ex.supervised},
          {"original_length", ex.original_length},
          {"truncated", ex.status == ExampleStatus::kTruncated},
          {"input_ids", ex.input_ids},
          {"labels", ex.labels},
          {"text", text},
          {"spans", spans}};
}

nlohmann::json inspection_json(const std::vector<InspectedExample>& examples, uint64_t total, const std::string& split) {
  nlohmann::json list = nlohmann::json::array();
  for (const InspectedExample& ex : examples) list.push_back(inspected_example_json(ex));
  return {{"split", split}, {"total", total}, {"examples", list}};
}

}  // namespace fptrain::data
