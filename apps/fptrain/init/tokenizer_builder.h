// Builds a small Llama-2-style tokenizer from text: a SentencePiece BPE model
// with byte fallback (tokenizer.model) plus the equivalent Hugging Face
// tokenizer.json, tokenizer_config.json and special_tokens_map.json, so both
// transformers and fptrain load the folder. Used by `fptrain init`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace fptrain::app {

struct TokenizerBuildOptions {
  int64_t vocab_size = 2048;
  int64_t model_max_length = 2048;
  std::string chat_template;  // Jinja template stored in tokenizer_config.json ("" = none)
};

// Special tokens of the built tokenizer.
inline constexpr int32_t kUnkId = 0, kBosId = 1, kEosId = 2, kPadId = 3;

// Trains on `sentences` (one training sentence per entry) and writes the files into `dir`.
void build_tokenizer(const std::vector<std::string>& sentences, const std::filesystem::path& dir,
                     const TokenizerBuildOptions& options);

// The Hugging Face tokenizer.json equivalent to a SentencePiece BPE model
// (vocab from the pieces; merges ordered by the merged piece's score).
std::string tokenizer_json_from_sentencepiece(const std::string& serialized_model_proto);

}  // namespace fptrain::app
