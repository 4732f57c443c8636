#include "tokenizer/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include <stdexcept>

#include "common/json_input.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer_json_util.h"
#include "tokenizer/unicode.h"

namespace fptrain::tokenizer {
namespace {

// tokenizers' SplitDelimiterBehavior.
enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior parse_behavior(const JsonNode& spec, Behavior fallback) {
  const JsonNode behavior = spec["behavior"];
  if (behavior.is_null()) return fallback;
  const std::string b = behavior.string();
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  behavior.fail("unknown behavior " + common::quoted_excerpt(b));
}

// A span of a piece and whether the split pattern matched it; the spans cover
// the piece without gaps.
struct Span {
  size_t begin, end;
  bool is_match;
};

// Spans from every regex match plus the gaps between them.
void regex_spans(const Regex& regex, const std::string& text, std::vector<Span>& spans) {
  thread_local std::vector<std::pair<size_t, size_t>> matches;
  matches.clear();
  regex.find_all(text, matches);
  size_t prev = 0;
  for (const auto& [begin, end] : matches) {
    if (prev != begin) spans.push_back({prev, begin, false});
    spans.push_back({begin, end, true});
    prev = end;
  }
  if (prev != text.size()) spans.push_back({prev, text.size(), false});
}

// Spans where each character satisfying `pred` is its own match.
template <typename Pred>
void char_spans(const std::string& text, Pred pred, std::vector<Span>& spans) {
  size_t last = 0, i = 0;
  while (i < text.size()) {
    const size_t begin = i;
    const uint32_t cp = unicode::next_code_point(text, i);
    if (pred(cp)) {
      if (last < begin) spans.push_back({last, begin, false});
      spans.push_back({begin, i, true});
      last = i;
    }
  }
  if (last < text.size()) spans.push_back({last, text.size(), false});
}

// Applies a split behavior to the spans of `piece` and appends the pieces (as
// NormalizedString::split does), dropping empty ones.
void emit(const PreToken& piece, std::vector<Span>& spans, Behavior behavior, bool invert,
          std::vector<PreToken>& out) {
  if (invert) {
    for (auto& s : spans) s.is_match = !s.is_match;
  }
  // Each result: [begin, end) and whether it is removed.
  thread_local std::vector<Span> parts;
  parts.clear();
  switch (behavior) {
    case Behavior::kIsolated:
      for (const auto& s : spans) parts.push_back({s.begin, s.end, false});
      break;
    case Behavior::kRemoved:
      for (const auto& s : spans) parts.push_back({s.begin, s.end, s.is_match});
      break;
    case Behavior::kContiguous: {
      bool previous_match = false;
      for (const auto& s : spans) {
        if (s.is_match == previous_match && !parts.empty()) {
          parts.back().end = s.end;
        } else {
          parts.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    }
    case Behavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const auto& s : spans) {
        if (s.is_match && !previous_match && !parts.empty()) {
          parts.back().end = s.end;
        } else {
          parts.push_back({s.begin, s.end, false});
        }
        previous_match = s.is_match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !parts.empty()) {
          parts.back().begin = it->begin;
        } else {
          parts.push_back({it->begin, it->end, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(parts.begin(), parts.end());
      break;
    }
  }
  for (const auto& p : parts) {
    if (p.is_match || p.end == p.begin) continue;  // is_match here means "removed"
    out.push_back({piece.text.substr(p.begin, p.end - p.begin), piece.at_start && p.begin == 0});
  }
}

// Runs `split_one(piece, spans)` over every piece and replaces the list.
template <typename F>
void split_all(std::vector<PreToken>& pieces, Behavior behavior, bool invert, F split_one) {
  thread_local std::vector<Span> spans;
  std::vector<PreToken> out;
  out.reserve(pieces.size() * 2);
  for (const auto& piece : pieces) {
    if (piece.text.empty()) continue;
    spans.clear();
    split_one(piece.text, spans);
    emit(piece, spans, behavior, invert, out);
  }
  pieces.swap(out);
}

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    for (const auto& step : steps_) step->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> pattern, Behavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    split_all(pieces, behavior_, invert_,
              [&](const std::string& text, std::vector<Span>& spans) { regex_spans(*pattern_, text, spans); });
  }

 private:
  std::unique_ptr<Regex> pattern_;
  Behavior behavior_;
  bool invert_;
};

// GPT-2's byte-level pre-tokenizer: optional leading space, optional GPT-2
// regex split, then every byte becomes its printable stand-in character.
class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space),
        regex_(use_regex ? std::make_unique<Regex>(
                               "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+")
                         : nullptr) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    if (add_prefix_space_) {
      for (auto& p : pieces) {
        if (!p.text.empty() && p.text[0] != ' ') p.text.insert(0, 1, ' ');
      }
    }
    if (regex_) {
      split_all(pieces, Behavior::kIsolated, false,
                [&](const std::string& text, std::vector<Span>& spans) { regex_spans(*regex_, text, spans); });
    }
    std::string mapped;
    for (auto& p : pieces) {
      mapped.clear();
      byte_level::encode_bytes(p.text, mapped);
      p.text.swap(mapped);
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    for (auto& p : pieces) {
      std::string replaced;
      replaced.reserve(p.text.size() + 8);
      if (!p.text.empty() && p.text[0] != ' ' && p.text.compare(0, replacement_.size(), replacement_) != 0 &&
          (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && p.at_start))) {
        replaced += replacement_;
      }
      for (char c : p.text) {
        if (c == ' ') {
          replaced += replacement_;
        } else {
          replaced.push_back(c);
        }
      }
      p.text.swap(replaced);
    }
    if (split_) {
      const uint32_t rep = [&] {
        size_t i = 0;
        return unicode::next_code_point(replacement_, i);
      }();
      split_all(pieces, Behavior::kMergedWithNext, false, [&](const std::string& text, std::vector<Span>& spans) {
        char_spans(text, [rep](uint32_t cp) { return cp == rep; }, spans);
      });
    }
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class DigitsPreTokenizer : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual), numeric_("\\p{N}") {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    split_all(pieces, individual_ ? Behavior::kIsolated : Behavior::kContiguous, false,
              [&](const std::string& text, std::vector<Span>& spans) { regex_spans(numeric_, text, spans); });
  }

 private:
  bool individual_;
  Regex numeric_;  // Rust's char::is_numeric is the N* categories, one character per match
};

class WhitespacePreTokenizer : public PreTokenizer {
 public:
  WhitespacePreTokenizer() : words_("\\w+|[^\\w\\s]+") {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    split_all(pieces, Behavior::kRemoved, /*invert=*/true,
              [&](const std::string& text, std::vector<Span>& spans) { regex_spans(words_, text, spans); });
  }

 private:
  Regex words_;
};

class WhitespaceSplitPreTokenizer : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    split_all(pieces, Behavior::kRemoved, false, [&](const std::string& text, std::vector<Span>& spans) {
      char_spans(text, unicode::is_whitespace, spans);
    });
  }
};

class PunctuationPreTokenizer : public PreTokenizer {
 public:
  explicit PunctuationPreTokenizer(Behavior behavior) : behavior_(behavior) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    split_all(pieces, behavior_, false, [&](const std::string& text, std::vector<Span>& spans) {
      char_spans(text, unicode::is_punctuation, spans);
    });
  }

 private:
  Behavior behavior_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonNode& spec) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.type();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const JsonNode& step : spec.required("pretokenizers").elements()) {
      if (auto p = make_pre_tokenizer(step)) steps.push_back(std::move(p));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  if (type == "Split") {
    return std::make_unique<SplitPreTokenizer>(spec.pattern(), parse_behavior(spec, Behavior::kIsolated),
                                               spec.boolean_or("invert", false));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(spec.boolean_or("add_prefix_space", true),
                                                   spec.boolean_or("use_regex", true));
  }
  if (type == "Metaspace") {
    const std::string replacement = spec.string_or("replacement", "\xE2\x96\x81");
    if (replacement.empty() || unicode::sequence_length(static_cast<unsigned char>(replacement[0])) !=
                                   replacement.size()) {
      spec["replacement"].fail("the Metaspace replacement must be one character");
    }
    PrependScheme scheme = PrependScheme::kAlways;
    if (spec.has("prepend_scheme")) {
      const std::string s = spec["prepend_scheme"].string();
      if (s == "always") scheme = PrependScheme::kAlways;
      else if (s == "first") scheme = PrependScheme::kFirst;
      else if (s == "never") scheme = PrependScheme::kNever;
      else spec["prepend_scheme"].fail("unknown Metaspace prepend_scheme " + common::quoted_excerpt(s));
    } else if (!spec.boolean_or("add_prefix_space", true)) {
      scheme = PrependScheme::kNever;  // the older serialization
    }
    return std::make_unique<MetaspacePreTokenizer>(replacement, scheme, spec.boolean_or("split", true));
  }
  if (type == "Digits") return std::make_unique<DigitsPreTokenizer>(spec.boolean_or("individual_digits", false));
  if (type == "Whitespace") return std::make_unique<WhitespacePreTokenizer>();
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplitPreTokenizer>();
  if (type == "Punctuation") {
    return std::make_unique<PunctuationPreTokenizer>(parse_behavior(spec, Behavior::kIsolated));
  }
  throw std::runtime_error(spec.file() + ": unsupported pre_tokenizer type '" + common::cut_text(type) + "'");
}

}  // namespace fptrain::tokenizer
