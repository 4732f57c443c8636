// The model stage of a tokenizer: turns one pre-tokenized piece into ids.
// Implementations: BpeModel (tokenizer.json "model") and SentencePieceModel
// (tokenizer.model through libsentencepiece).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fptrain::tokenizer {

class TokenModel {
 public:
  virtual ~TokenModel() = default;
  // Appends the ids of `piece`. Must be safe to call from several threads.
  virtual void tokenize(std::string_view piece, std::vector<int32_t>& ids) const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  // The token's string, or nullptr when `id` is not in the model's vocabulary.
  virtual const std::string* id_to_token(int32_t id) const = 0;
  // Number of ids the model uses (max id + 1).
  virtual int64_t size() const = 0;
};

}  // namespace fptrain::tokenizer
