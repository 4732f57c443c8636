// What transformers does on top of the backend tokenizer with
// tokenizer_config.json: register the named special tokens (bos/eos/unk/pad,
// extra special tokens) and added_tokens_decoder entries as added tokens,
// resolve BOS/EOS/pad ids, and rebuild the BOS/EOS template when the config
// says add_bos_token / add_eos_token.
#pragma once

#include <string>

#include "tokenizer/tokenizer_config.h"
#include "tokenizer/tokenizer_pipeline.h"

namespace fptrain::tokenizer {

// Adds `token` (with a free id unless its content already has one) to the
// added vocabulary and returns its id.
int32_t add_token(TokenizerParts& parts, AddedToken token);

// Registers the config's tokens and sets parts.bos_id / eos_id / pad_id.
// `file` names the config in errors.
void apply_config_tokens(const TokenizerConfig& config, TokenizerParts& parts, const std::string& file);

// transformers' update_post_processor: replaces the post-processor by
// [bos] $A [eos] when add_bos_token / add_eos_token is set in the config, or
// when the tokenizer has none (then both default to false).
void apply_bos_eos_template(const TokenizerConfig& config, TokenizerParts& parts, const std::string& file);

}  // namespace fptrain::tokenizer
