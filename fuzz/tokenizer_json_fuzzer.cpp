// Fuzz target tokenizer_json: a tokenizer folder. The input is tokenizer.json,
// optionally followed by "#file:tokenizer_config.json" and
// "#file:special_tokens_map.json" sections. Loading must give a tokenizer or
// std::runtime_error naming the file; a loaded tokenizer must encode and
// decode a few texts (a regex may give up with std::runtime_error).
#include "fuzz/fuzz_util.h"
#include "tokenizer/tokenizer.h"

#include <spdlog/spdlog.h>

using namespace fptrain;

namespace {

const char* const kTexts[] = {
    "Hello world! It's 2024, isn't it?",
    "  leading spaces, tabs\tand\nnew lines\r\n",
    "unicode: héllo wörld ÆØÅ 日本語のテキスト 🤖🧠 \u00a0nbsp",
    "<s>[INST] special <unk> tokens </s><|eot_id|> [/INST]",
    "12345 678.9 0x1F <0x41>",
    "",
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = [] {
    spdlog::set_level(spdlog::level::off);
    return true;
  }();
  (void)quiet;
  const auto files = fuzz::split_files(fuzz::as_text(data, size), "tokenizer.json");
  const std::filesystem::path& dir = fuzz::scratch_dir();
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
    auto it = files.find(name);
    fuzz::put_file(dir / name, it == files.end() ? nullptr : &it->second);
  }
  std::unique_ptr<tokenizer::Tokenizer> tok;
  try {
    tok = tokenizer::load_tokenizer(dir);
  } catch (const std::runtime_error&) {
    return 0;
  }
  (void)tok->vocab_size();
  for (const char* text : kTexts) {
    try {
      const std::vector<int32_t> ids = tok->encode(text, /*add_special_tokens=*/true);
      (void)tok->decode(ids);
    } catch (const std::runtime_error&) {
    }
  }
  return 0;
}
