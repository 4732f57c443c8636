// Added tokens (tokenizer.json "added_tokens", tokenizer_config.json
// "added_tokens_decoder"): matched in the raw or normalized text before
// pre-tokenization, so special tokens are never split. Matching follows
// tokenizers' AddedVocabulary: leftmost-longest, with lstrip / rstrip /
// single_word, non-normalized tokens on the raw text and normalized ones on the
// normalized text.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fptrain::tokenizer {

class Normalizer;

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = true;
};

// A span of text: an added token (token_id >= 0) or plain text (token_id < 0).
struct TextSegment {
  size_t begin, end;
  int32_t token_id;
};

class AddedVocabulary {
 public:
  AddedVocabulary();
  ~AddedVocabulary();
  AddedVocabulary(AddedVocabulary&&) noexcept;
  AddedVocabulary& operator=(AddedVocabulary&&) noexcept;

  // Adds or replaces the token with this content. `normalizer` (may be null)
  // gives the form that normalized tokens are matched in.
  void add(const AddedToken& token, const Normalizer* normalizer);

  // Cuts `text` at the tokens of one set: normalized=false tokens when
  // `normalized_set` is false, the others when true. Appends segments covering
  // `text`; empty text gives no segment.
  void split(std::string_view text, bool normalized_set, std::vector<TextSegment>& out) const;

  bool has_normalized_tokens() const { return has_set_[1]; }
  bool empty() const { return tokens_.empty(); }
  std::optional<int32_t> token_to_id(std::string_view content) const;
  const AddedToken* find(int32_t id) const;
  // The content of every token marked special.
  std::vector<std::string> special_contents() const;
  // What decode shows for the token: its normalized form when it is matched
  // normalized (tokenizers' simple_id_to_token), else its content.
  const std::string* decoded_form(int32_t id) const;
  int32_t max_id() const;

 private:
  // A byte trie over the patterns of one matching set.
  struct Trie {
    struct Node {
      std::vector<std::pair<unsigned char, int32_t>> next;  // sorted by byte
      int32_t token = -1;                                   // index into tokens_
    };
    std::vector<Node> nodes;
    void insert(std::string_view pattern, int32_t token);
    // Longest pattern starting at text[pos]: token index and length, or -1.
    int32_t longest_at(std::string_view text, size_t pos, size_t& length) const;
  };
  void rebuild();

  std::vector<AddedToken> tokens_;
  std::vector<std::string> match_forms_;  // what each token is matched as
  std::unordered_map<std::string, size_t> by_content_;
  std::unordered_map<int32_t, size_t> by_id_;
  Trie sets_[2];
  bool has_set_[2] = {false, false};
  bool can_start_[2][256] = {};  // bytes that begin some pattern of the set
};

}  // namespace fptrain::tokenizer
