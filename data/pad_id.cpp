#include "data/pad_id.h"

#include <stdexcept>
#include <string>

namespace fptrain::data {

int32_t choose_pad_id(const tokenizer::Tokenizer* tok, std::optional<int32_t> configured) {
  const std::optional<int32_t> eos = tok ? tok->eos_id() : std::nullopt;
  const std::optional<int32_t> bos = tok ? tok->bos_id() : std::nullopt;
  if (configured) {
    if (eos && *configured == *eos)
      throw std::invalid_argument("data option 'pad_id': " + std::to_string(*configured) +
                                  " is the EOS id; choose another (or leave it unset)");
    if (*configured < 0 || (tok && *configured >= tok->vocab_size()))
      throw std::invalid_argument("data option 'pad_id': " + std::to_string(*configured) +
                                  " is outside the vocabulary");
    return *configured;
  }
  if (!tok) return 0;
  if (auto pad = tok->pad_id(); pad && pad != eos) return *pad;
  for (const char* name : {"<pad>", "<|finetune_right_pad_id|>", "<|pad|>", "<unk>"})
    if (auto id = tok->token_to_id(name); id && id != eos) return *id;
  for (int32_t id = 0;; ++id)
    if (id != eos && id != bos) return id;
}

}  // namespace fptrain::data
