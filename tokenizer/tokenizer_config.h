// The parts of tokenizer_config.json (and the older special_tokens_map.json)
// that change token ids: special tokens, add_bos/add_eos, the transformers
// tokenizer class and its legacy / add_prefix_space switches.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/added_vocabulary.h"

namespace fptrain::tokenizer {

struct TokenizerConfig {
  std::optional<std::string> tokenizer_class;
  // Named special tokens (content strings) and their AddedToken flags.
  std::optional<AddedToken> bos_token, eos_token, unk_token, pad_token;
  std::vector<AddedToken> extra_special_tokens;  // additional_special_tokens / extra_special_tokens
  std::optional<bool> add_bos_token, add_eos_token, legacy, add_prefix_space;
  // added_tokens_decoder entries (id from the key).
  std::vector<AddedToken> added_tokens;
  bool has_added_tokens_decoder = false;
};

// Reads <dir>/tokenizer_config.json (optional) and, as transformers does when
// that file has no added_tokens_decoder, <dir>/special_tokens_map.json.
TokenizerConfig read_tokenizer_config(const std::filesystem::path& dir);

}  // namespace fptrain::tokenizer
