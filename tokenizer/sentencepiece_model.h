// A SentencePiece tokenizer.model read by libsentencepiece: its pieces and
// their types (what the loader needs to build transformers' BPE), and a model
// stage that encodes with libsentencepiece's own BPE (SentencePieceEngine::
// kLibSentencePiece, an independent cross-check).
//
// transformers (5.x) does not run SentencePiece's normalizer for Llama /
// Mistral tokenizers: it uses a Metaspace pre-tokenizer (spaces become "▁", a
// "▁" is prepended per its prepend scheme) and no normalizer. To give the same
// ids we load the model with its normalizer replaced by identity and no dummy
// prefix, and feed it text that the Metaspace pre-tokenizer has prepared.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/token_model.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace fptrain::tokenizer {

class SentencePieceModel final : public TokenModel {
 public:
  // Piece types of sentencepiece_model.proto.
  enum class PieceType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

  explicit SentencePieceModel(const std::filesystem::path& model_file);
  ~SentencePieceModel() override;

  void tokenize(std::string_view piece, std::vector<int32_t>& ids) const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  const std::string* id_to_token(int32_t id) const override;
  int64_t size() const override { return static_cast<int64_t>(pieces_.size()); }

  PieceType type(int32_t id) const { return types_.at(id); }
  bool is_unigram() const { return is_unigram_; }

 private:
  std::string file_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  std::vector<std::string> pieces_;
  std::vector<PieceType> types_;
  std::unordered_map<std::string, int32_t> ids_;
  int32_t unk_id_ = -1;
  bool has_byte_pieces_ = false;
  bool is_unigram_ = false;
  // True when no piece holds "▁" after its first character (unless it is all
  // "▁"): then no piece spans a boundary before a "▁" that follows another
  // character, so text can be encoded word by word (and words cached) with
  // exactly the ids of encoding it whole.
  bool splits_at_spaces_ = false;
  uint64_t cache_owner_;

  void encode_chunk(std::string_view chunk, std::vector<int32_t>& ids) const;
};

}  // namespace fptrain::tokenizer
