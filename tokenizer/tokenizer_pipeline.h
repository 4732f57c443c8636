// A Hugging Face style tokenizer assembled from parts: added tokens, then per
// piece of text normalizer -> pre-tokenizer -> model, then the post-processor
// (BOS/EOS) when add_special_tokens; decoding runs the decoder chain. Both the
// tokenizer.json and the tokenizer.model loaders build one of these.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/token_model.h"
#include "tokenizer/tokenizer.h"

namespace fptrain::tokenizer {

struct TokenizerParts {
  std::unique_ptr<Normalizer> normalizer;        // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer;   // may be null
  std::unique_ptr<TokenModel> model;             // required
  std::unique_ptr<PostProcessor> post_processor; // may be null
  std::unique_ptr<Decoder> decoder;              // may be null: tokens joined by spaces
  AddedVocabulary added;
  std::optional<int32_t> bos_id, eos_id, pad_id;
  std::vector<std::pair<std::string, std::string>> special_tokens_map;  // "bos_token" -> "<s>", ...
};

struct TokenizerConfig;

// transformers' LlamaTokenizer pipeline around a byte-fallback model: a Metaspace
// pre-tokenizer whose prepend scheme follows add_prefix_space (default true) and
// legacy (default false), no normalizer, and the matching decoder chain.
void use_llama_metaspace_pipeline(TokenizerParts& parts, const TokenizerConfig& config, const std::string& file);

// The decoder of byte-fallback tokenizers that mark spaces with U+2581
// (LlamaTokenizer, GemmaTokenizer): back to spaces, bytes, fused; with
// `strip_prefix_space` the space a prefix-space pre-tokenizer added goes too.
// `who` names it in errors.
std::unique_ptr<Decoder> make_metaspace_decoder(bool strip_prefix_space, const std::string& file, const char* who);

class PipelineTokenizer final : public Tokenizer {
 public:
  explicit PipelineTokenizer(TokenizerParts parts);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::optional<int32_t> bos_id() const override { return parts_.bos_id; }
  std::optional<int32_t> eos_id() const override { return parts_.eos_id; }
  std::optional<int32_t> pad_id() const override { return parts_.pad_id; }
  std::vector<std::pair<std::string, std::string>> special_tokens_map() const override {
    return parts_.special_tokens_map;
  }
  std::vector<std::string> special_tokens() const override { return parts_.added.special_contents(); }

 private:
  // Normalizes, pre-tokenizes and tokenizes one span of plain text.
  void encode_text(std::string_view text, bool at_start, std::vector<int32_t>& ids) const;

  TokenizerParts parts_;
};

}  // namespace fptrain::tokenizer
