// Loads a SentencePiece tokenizer.model (Llama 2, Mistral) the way transformers
// 5 loads it with LlamaTokenizer: a BPE behind a Metaspace pre-tokenizer,
// control and user-defined pieces as added tokens, BOS/EOS from
// tokenizer_config.json. libsentencepiece reads and checks the model.
#pragma once

#include <filesystem>
#include <memory>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace fptrain::tokenizer {

// Which BPE runs the model stage. kMerges (the default) is what transformers
// runs: our BpeModel with merges generated from the pieces in id order, as
// transformers' SentencePieceExtractor does. kLibSentencePiece encodes with
// libsentencepiece's own BPE (by piece score); it gives the same ids and the
// tests use it as an independent cross-check, but it is slower.
enum class SentencePieceEngine { kMerges, kLibSentencePiece };

std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::filesystem::path& model_file,
                                                        const TokenizerConfig& config,
                                                        SentencePieceEngine engine = SentencePieceEngine::kMerges);

}  // namespace fptrain::tokenizer
