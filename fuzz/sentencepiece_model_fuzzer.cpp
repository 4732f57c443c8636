// Fuzz target sentencepiece_model: a tokenizer.model (SentencePiece ModelProto,
// protobuf wire format), loaded as load_tokenizer does it: our wire-format pass
// (piece types, the normalizer swapped out), then libsentencepiece, then the
// BPE transformers builds from the pieces. Loading must give a tokenizer or
// std::runtime_error naming the file, in memory bounded by the file.
#include "fuzz/fuzz_util.h"
#include "tokenizer/tokenizer.h"

#include <spdlog/spdlog.h>

using namespace fptrain;

namespace {

const char* const kTexts[] = {
    "Hello world! It's 2024, isn't it?",
    "unicode: héllo wörld 日本語 🤖 \u00a0nbsp",
    "<s>[INST] special <unk> </s> [/INST]",
    "",
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    spdlog::set_level(spdlog::level::off);
    return true;
  }();
  (void)quiet;
  const std::filesystem::path& dir = fuzz::scratch_dir();
  const std::string model(fuzz::as_text(data, size));
  fuzz::put_file(dir / "tokenizer.model", &model);
  std::unique_ptr<tokenizer::Tokenizer> tok;
  try {
    tok = tokenizer::load_tokenizer(dir);
  } catch (const std::runtime_error&) {
    return 0;
  }
  for (const char* text : kTexts) {
    try {
      (void)tok->decode(tok->encode(text, /*add_special_tokens=*/true));
    } catch (const std::runtime_error&) {
    }
  }
  return 0;
}
