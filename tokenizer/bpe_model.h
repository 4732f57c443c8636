// Byte-pair-encoding model of a tokenizer.json ("model": {"type": "BPE"}),
// with byte fallback (<0xNN> tokens), unknown-token fusing and ignore_merges,
// giving exactly tokenizers' merge order: lowest merge rank first, leftmost on
// ties. Words already seen are served from a per-thread cache.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/string_id_map.h"
#include "tokenizer/token_model.h"

namespace fptrain::tokenizer {

struct BpeOptions {
  std::optional<std::string> unk_token;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

class BpeModel final : public TokenModel {
 public:
  // `vocab[id]` is the token of id (ids without a token are empty strings).
  // `merges` are (left, right) token pairs in priority order. Throws with
  // `file` on a merge whose tokens are not in the vocabulary.
  BpeModel(std::vector<std::string> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
           BpeOptions options, const std::string& file);

  void tokenize(std::string_view piece, std::vector<int32_t>& ids) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  const std::string* id_to_token(int32_t id) const override;
  int64_t size() const override { return static_cast<int64_t>(vocab_.size()); }

 private:
  struct MergeValue {
    int32_t rank;
    int32_t new_id;
  };
  // Open addressing over (left id, right id).
  const MergeValue* find_merge(int32_t left, int32_t right) const;
  void merge_word(std::string_view word, std::vector<int32_t>& ids) const;
  void tokenize_word(std::string_view word, std::vector<int32_t>& ids) const;

  std::vector<std::string> vocab_;
  StringIdMap ids_;
  std::vector<uint64_t> merge_keys_;
  std::vector<MergeValue> merge_values_;
  size_t merge_mask_ = 0;
  std::vector<int32_t> ascii_ids_;      // id of each one-byte character, or -1
  int32_t byte_ids_[256];               // id of each <0xNN> token, or -1
  int32_t unk_id_ = -1;
  BpeOptions options_;
  uint64_t instance_;                   // keys this model's entries in the thread-local caches
  // Metaspace vocabularies (SentencePiece style) see whole lines as one piece.
  // When "▁" is a token and no token holds "▁" after its first character
  // (unless it is all "▁"), no merge can cross the point before a "▁" that
  // follows another character, so such pieces are merged word by word (and
  // words cached) with exactly the same result.
  bool split_at_metaspace_ = false;
};

}  // namespace fptrain::tokenizer
