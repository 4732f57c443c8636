#include "tokenizer/tokenizer.h"

#include <stdexcept>

#include "tokenizer/hf_tokenizer_json.h"
#include "tokenizer/sentencepiece_tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace fptrain::tokenizer {

std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir)) {
    throw std::runtime_error(dir.string() + ": tokenizer directory does not exist");
  }
  const TokenizerConfig config = read_tokenizer_config(dir);
  if (std::filesystem::exists(dir / "tokenizer.json")) return load_hf_tokenizer_json(dir / "tokenizer.json", config);
  if (std::filesystem::exists(dir / "tokenizer.model")) {
    return load_sentencepiece_tokenizer(dir / "tokenizer.model", config);
  }
  throw std::runtime_error(dir.string() + ": neither tokenizer.json nor tokenizer.model found");
}

}  // namespace fptrain::tokenizer
