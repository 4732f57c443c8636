// The padding id of `pad` mode. It must never be EOS: a collator that masks
// labels by comparing ids with the pad id would otherwise never train EOS.
#pragma once

#include <cstdint>
#include <optional>

#include "tokenizer/tokenizer.h"

namespace fptrain::data {

// In order: the configured id (an error if it equals EOS); the tokenizer's pad
// id unless it is EOS; the first of <pad>, <|finetune_right_pad_id|>, <|pad|>,
// <unk> the tokenizer has; else the smallest id that is not EOS or BOS.
// Pad tokens are labelled kIgnoreLabel and sit after every real token of their
// row, so under causal attention their value never changes the loss.
int32_t choose_pad_id(const tokenizer::Tokenizer* tokenizer, std::optional<int32_t> configured);

}  // namespace fptrain::data
