// A tiny tokenizer for unit tests of the pipeline logic: one id per byte plus
// special tokens that are split out first, as Hugging Face tokenizers do.
// (Parity with real tokenizers is tested with load_tokenizer on fixtures.)
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace fptrain::data::testing {

class ByteTokenizer : public tokenizer::Tokenizer {
 public:
  static constexpr int32_t kByteOffset = 16;
  // Special tokens get ids 0..n-1; bytes kByteOffset + byte.
  explicit ByteTokenizer(std::vector<std::string> specials = {"<s>", "</s>", "<|begin_of_text|>",
                                                              "<|start_header_id|>", "<|end_header_id|>",
                                                              "<|eot_id|>", "<|start_of_role|>",
                                                              "<|end_of_role|>", "<|end_of_text|>", "<pad>"},
                         std::string bos = "<s>", std::string eos = "</s>", bool add_bos = true)
      : specials_(std::move(specials)), bos_(std::move(bos)), eos_(std::move(eos)), add_bos_(add_bos) {}

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override {
    std::vector<int32_t> ids;
    if (add_special_tokens && add_bos_ && bos_id()) ids.push_back(*bos_id());
    size_t i = 0;
    while (i < text.size()) {
      int32_t match = -1;
      size_t match_len = 0;
      for (size_t s = 0; s < specials_.size(); ++s)
        if (specials_[s].size() > match_len && text.substr(i, specials_[s].size()) == specials_[s]) {
          match = static_cast<int32_t>(s);
          match_len = specials_[s].size();
        }
      if (match >= 0) {
        ids.push_back(match);
        i += match_len;
      } else {
        ids.push_back(kByteOffset + static_cast<unsigned char>(text[i]));
        ++i;
      }
    }
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (int32_t id : ids) out += id < kByteOffset ? specials_.at(id) : std::string(1, char(id - kByteOffset));
    return out;
  }
  int64_t vocab_size() const override { return kByteOffset + 256; }
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    for (size_t s = 0; s < specials_.size(); ++s)
      if (specials_[s] == token) return static_cast<int32_t>(s);
    return std::nullopt;
  }
  std::optional<int32_t> bos_id() const override { return bos_.empty() ? std::nullopt : token_to_id(bos_); }
  std::optional<int32_t> eos_id() const override { return token_to_id(eos_); }
  std::optional<int32_t> pad_id() const override { return pad_; }
  std::vector<std::pair<std::string, std::string>> special_tokens_map() const override {
    std::vector<std::pair<std::string, std::string>> out;
    if (!bos_.empty()) out.emplace_back("bos_token", bos_);
    if (!eos_.empty()) out.emplace_back("eos_token", eos_);
    return out;
  }
  std::vector<std::string> special_tokens() const override { return specials_; }
  std::optional<int32_t> pad_ = std::nullopt;

 private:
  std::vector<std::string> specials_;
  std::string bos_, eos_;
  bool add_bos_;
};

}  // namespace fptrain::data::testing
