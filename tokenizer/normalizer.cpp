#include "tokenizer/normalizer.h"

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <vector>

#include "common/json_input.h"
#include "tokenizer/nfc.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer_json_util.h"
#include "tokenizer/unicode.h"

namespace fptrain::tokenizer {
namespace {

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void normalize(std::string& text) const override {
    for (const auto& step : steps_) step->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

// Unicode NFC (Qwen2's and Qwen3's tokenizers).
class NfcNormalizer : public Normalizer {
 public:
  void normalize(std::string& text) const override { text = unicode::nfc(text); }
};

// Adds a prefix to non-empty text (the Llama 2 tokenizer.json adds "▁" this way).
class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<Regex> pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& text) const override {
    thread_local std::vector<std::pair<size_t, size_t>> matches;
    matches.clear();
    pattern_->find_all(text, matches);
    if (matches.empty()) return;
    std::string out;
    out.reserve(text.size() + matches.size() * content_.size());
    size_t prev = 0;
    for (const auto& [begin, end] : matches) {
      out.append(text, prev, begin - prev);
      out += content_;
      prev = end;
    }
    out.append(text, prev, std::string::npos);
    text.swap(out);
  }

 private:
  std::unique_ptr<Regex> pattern_;
  std::string content_;
};

// Strips Unicode whitespace on the left and/or right.
class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        size_t next = begin;
        if (!unicode::is_whitespace(unicode::next_code_point(text, next))) break;
        begin = next;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        size_t next = start;
        if (!unicode::is_whitespace(unicode::next_code_point(text, next))) break;
        end = start;
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const JsonNode& spec) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.type();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const JsonNode& step : spec.required("normalizers").elements()) {
      if (auto n = make_normalizer(step)) steps.push_back(std::move(n));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  if (type == "NFC") return std::make_unique<NfcNormalizer>();
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(spec.required("prepend").string());
  if (type == "Replace") {
    return std::make_unique<ReplaceNormalizer>(spec.pattern(), spec.required("content").string());
  }
  if (type == "Strip") {
    return std::make_unique<StripNormalizer>(spec.boolean_or("strip_left", true), spec.boolean_or("strip_right", true));
  }
  throw std::runtime_error(spec.file() + ": unsupported normalizer type '" + common::cut_text(type) + "'");
}

}  // namespace fptrain::tokenizer
