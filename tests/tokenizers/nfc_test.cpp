// Unicode NFC (tokenizer/nfc.h) against tokenizers' NFC normalizer on random
// strings of the characters it acts on (make_fixtures.py: nfc_cases.json).
#include "tokenizer/nfc.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace fptrain::tokenizer {
namespace {

TEST(Nfc, EqualsTokenizersNormalizerOnRandomStrings) {
  std::ifstream in(std::filesystem::path(FPTRAIN_FIXTURE_DIR) / "nfc_cases.json");
  ASSERT_TRUE(in) << "nfc_cases.json is missing (tests/tokenizers/make_fixtures.py)";
  const nlohmann::json doc = nlohmann::json::parse(in);
  int changed = 0, failures = 0;
  for (const auto& c : doc["cases"]) {
    const std::string input = c[0], want = c[1];
    const std::string got = unicode::nfc(input);
    changed += got != input;
    if (got != want && ++failures <= 10)
      ADD_FAILURE() << "nfc(" << nlohmann::json(input).dump() << ") = " << nlohmann::json(got).dump() << ", want "
                    << nlohmann::json(want).dump();
  }
  EXPECT_EQ(failures, 0);
  EXPECT_GT(doc["cases"].size(), 3000u);
  EXPECT_GT(changed, 1000);  // the cases exercise decomposition, reordering and composition
  std::printf("%zu strings, %d changed by NFC (tables: Unicode %s)\n", doc["cases"].size(), changed,
              unicode::nfc_unicode_version());
}

TEST(Nfc, AsciiAndComposedTextIsUnchanged) {
  EXPECT_EQ(unicode::nfc("Hello, world"), "Hello, world");
  EXPECT_EQ(unicode::nfc("caf\xC3\xA9"), "caf\xC3\xA9");
  EXPECT_EQ(unicode::nfc("cafe\xCC\x81"), "caf\xC3\xA9");  // e + COMBINING ACUTE -> é
  EXPECT_EQ(unicode::nfc(""), "");
}

}  // namespace
}  // namespace fptrain::tokenizer
