// Loads a SentencePiece tokenizer.model (Llama 2, Mistral) the way transformers
// 5 loads it with LlamaTokenizer: libsentencepiece BPE behind a Metaspace
// pre-tokenizer, control and user-defined pieces as added tokens, BOS/EOS from
// tokenizer_config.json.
#pragma once

#include <filesystem>
#include <memory>

#include "data/tokenizer.h"
#include "data/tokenizer_config.h"

namespace fptrain::data {

std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::filesystem::path& model_file,
                                                        const TokenizerConfig& config);

}  // namespace fptrain::data
