// Loads a Hugging Face tokenizer.json: its model (BPE), normalizer,
// pre_tokenizer, post_processor, decoder and added_tokens, then applies what
// transformers adds from tokenizer_config.json for the tokenizer's class.
#pragma once

#include <filesystem>
#include <memory>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace fptrain::tokenizer {

std::unique_ptr<Tokenizer> load_hf_tokenizer_json(const std::filesystem::path& file, const TokenizerConfig& config);

}  // namespace fptrain::tokenizer
