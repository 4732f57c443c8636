#include "tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include <stdexcept>

#include "tokenizer/byte_level.h"
#include "tokenizer/regex.h"
#include "common/json_input.h"
#include "tokenizer/tokenizer_json_util.h"
#include "tokenizer/unicode.h"

namespace fptrain::tokenizer {
namespace {

const char* const kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Invalid UTF-8 sequences become U+FFFD (Rust's String::from_utf8_lossy).
std::string utf8_lossy(const std::string& bytes) {
  if (unicode::is_valid_utf8(bytes)) return bytes;
  std::string out;
  size_t i = 0;
  while (i < bytes.size()) {
    const auto b0 = static_cast<unsigned char>(bytes[i]);
    size_t len = unicode::sequence_length(b0);
    if (b0 >= 0x80 && len == 1) len = 0;
    // Longest valid prefix of a sequence: replaced as one U+FFFD, as Rust does.
    size_t good = 0;
    if (len > 0 && i + len <= bytes.size() && unicode::is_valid_utf8(std::string_view(bytes).substr(i, len))) {
      out.append(bytes, i, len);
      i += len;
      continue;
    }
    if (len > 1) {
      good = 1;
      while (good < len && i + good < bytes.size() &&
             (static_cast<unsigned char>(bytes[i + good]) & 0xC0) == 0x80) {
        // A continuation byte is only part of the sequence while it could still be valid.
        const auto b1 = static_cast<unsigned char>(bytes[i + 1]);
        if (good == 1 && ((b0 == 0xE0 && b1 < 0xA0) || (b0 == 0xED && b1 > 0x9F) || (b0 == 0xF0 && b1 < 0x90) ||
                          (b0 == 0xF4 && b1 > 0x8F) || b0 > 0xF4)) {
          break;
        }
        ++good;
      }
    }
    out += kReplacementChar;
    i += std::max<size_t>(good, 1);
  }
  return out;
}

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& s : steps_) s->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      if (!byte_level::decode_token(t, bytes)) bytes += t;  // not byte-level: its raw bytes
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool prepends) : replacement_(std::move(replacement)), prepends_(prepends) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t pos = 0; pos < t.size();) {
        if (t.compare(pos, replacement_.size(), replacement_) == 0) {
          if (!(i == 0 && prepends_)) out.push_back(' ');
          pos += replacement_.size();
        } else {
          out.push_back(t[pos++]);
        }
      }
      tokens[i].swap(out);
    }
  }

 private:
  std::string replacement_;
  bool prepends_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::unique_ptr<Regex> pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::pair<size_t, size_t>> matches;
    for (auto& t : tokens) {
      matches.clear();
      pattern_->find_all(t, matches);
      if (matches.empty()) continue;
      std::string out;
      size_t prev = 0;
      for (const auto& [b, e] : matches) {
        out.append(t, prev, b - prev);
        out += content_;
        prev = e;
      }
      out.append(t, prev, std::string::npos);
      t.swap(out);
    }
  }

 private:
  std::unique_ptr<Regex> pattern_;
  std::string content_;
};

// Runs of <0xNN> tokens become the UTF-8 text they spell, or one U+FFFD per
// byte when they are not valid UTF-8.
class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t byte_count = 0;
    auto flush = [&] {
      if (byte_count == 0) return;
      if (unicode::is_valid_utf8(bytes)) {
        out.push_back(bytes);
      } else {
        for (size_t k = 0; k < byte_count; ++k) out.emplace_back(kReplacementChar);
      }
      bytes.clear();
      byte_count = 0;
    };
    for (auto& t : tokens) {
      int value = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') value = parse_hex(t[3], t[4]);
      if (value >= 0) {
        bytes.push_back(static_cast<char>(value));
        ++byte_count;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens.swap(out);
  }

 private:
  static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  static int parse_hex(char hi, char lo) {
    const int h = hex_digit(hi), l = hex_digit(lo);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing copies of one character per token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(uint32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::vector<size_t> starts;  // byte offset of each character
      for (size_t i = 0; i < t.size();) {
        starts.push_back(i);
        unicode::next_code_point(t, i);
      }
      auto char_at = [&](size_t k) {
        size_t i = starts[k];
        return unicode::next_code_point(t, i);
      };
      size_t first = 0;
      for (size_t k = 0; k < starts.size() && k < start_ && char_at(k) == content_; ++k) first = k + 1;
      size_t last = starts.size();
      for (size_t k = 0; k < stop_ && k < starts.size(); ++k) {
        const size_t index = starts.size() - k - 1;
        if (char_at(index) != content_) break;
        last = index;
      }
      if (last < first) last = first;
      const size_t b = first < starts.size() ? starts[first] : t.size();
      const size_t e = last < starts.size() ? starts[last] : t.size();
      t = t.substr(b, e - b);
    }
  }

 private:
  uint32_t content_;
  size_t start_, stop_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const JsonNode& spec) {
  if (spec.is_null()) return nullptr;
  const std::string type = spec.type();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const JsonNode& step : spec.required("decoders").elements()) {
      if (auto d = make_decoder(step)) steps.push_back(std::move(d));
    }
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    bool prepends = true;
    if (spec.has("prepend_scheme")) prepends = spec["prepend_scheme"].string() != "never";
    else prepends = spec.boolean_or("add_prefix_space", true);
    return std::make_unique<MetaspaceDecoder>(spec.string_or("replacement", "\xE2\x96\x81"), prepends);
  }
  if (type == "Replace") {
    return std::make_unique<ReplaceDecoder>(spec.pattern(), spec.required("content").string());
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    const std::string content = spec.required("content").string();
    size_t i = 0;
    const uint32_t cp = content.empty() ? 0 : unicode::next_code_point(content, i);
    const JsonNode start = spec["start"], stop = spec["stop"];
    return std::make_unique<StripDecoder>(cp, start.is_null() ? 0 : start.unsigned_integer(),
                                          stop.is_null() ? 0 : stop.unsigned_integer());
  }
  throw std::runtime_error(spec.file() + ": unsupported decoder type '" + common::cut_text(type) + "'");
}

}  // namespace fptrain::tokenizer
