#include "data/hf_tokenizer_json.h"

#include <stdexcept>

namespace fptrain::data {

std::unique_ptr<Tokenizer> load_hf_tokenizer_json(const std::filesystem::path& file, const TokenizerConfig&) {
  throw std::runtime_error(file.string() + ": tokenizer.json support is being added");
}

}  // namespace fptrain::data
