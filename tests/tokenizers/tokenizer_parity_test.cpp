// Our tokenizers against Hugging Face on tokenizers trained by make_fixtures.py:
// identical ids with and without special tokens, identical decode, special
// token ids and vocabulary size, for every line of the test corpus.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/sentencepiece_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace {

namespace fs = std::filesystem;
using fptrain::tokenizer::load_tokenizer;
using fptrain::tokenizer::Tokenizer;

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("missing fixture " + path.string());
  return nlohmann::json::parse(in);
}

// The directories make_fixtures.py writes (listed here, not read from its
// output, because tests are enumerated before the fixtures are made).
const char* const kFixtures[] = {
    "spm_llama2",         "spm_legacy_eos",       "spm_unigram",          "bpe_llama3",
    "bpe_llama3_other_merge_form", "bpe_llama3_ignore_merges", "bpe_granite", "bpe_qwen2", "bpe_qwen2_class_rebuilds",
    "bpe_byte_fallback",  "bpe_byte_fallback_metaspace", "bpe_byte_fallback_llama_class",
    "bpe_byte_fallback_llama_legacy", "bpe_byte_fallback_llama_no_prefix", "bpe_gemma", "bpe_gemma_class_rebuilds",
    "zoo_metaspace_split", "zoo_split_behaviors", "zoo_whitespace", "zoo_whitespace_split",
};

class TokenizerParity : public ::testing::TestWithParam<const char*> {
 protected:
  fs::path dir() const { return fs::path(FPTRAIN_FIXTURE_DIR) / GetParam(); }
};

std::string show(const std::string& s) { return nlohmann::json(s).dump(); }

TEST_P(TokenizerParity, IdsAndDecodeMatchHuggingFace) {
  const auto golden = read_json(dir() / "golden.json");
  const auto tok = load_tokenizer(dir());
  const auto& lines = golden.at("lines");
  ASSERT_GT(lines.size(), 100u);
  size_t mismatches = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string line = lines[i].get<std::string>();
    const auto with = golden["with_special"][i].get<std::vector<int32_t>>();
    const auto without = golden["without_special"][i].get<std::vector<int32_t>>();
    const auto ours_with = tok->encode(line, true);
    const auto ours_without = tok->encode(line, false);
    EXPECT_EQ(ours_with, with) << "add_special_tokens=true, line " << i << ": " << show(line);
    EXPECT_EQ(ours_without, without) << "add_special_tokens=false, line " << i << ": " << show(line);
    EXPECT_EQ(tok->decode(with), golden["decoded"][i].get<std::string>()) << "decode, line " << i << ": " << show(line);
    mismatches += (ours_with != with) + (ours_without != without);
    if (mismatches > 20) FAIL() << "too many mismatches, stopping";
  }
}

TEST_P(TokenizerParity, SpecialTokensAndVocabularyMatchHuggingFace) {
  const auto golden = read_json(dir() / "golden.json");
  const auto tok = load_tokenizer(dir());
  EXPECT_EQ(tok->vocab_size(), golden.at("vocab_size").get<int64_t>());
  auto optional_id = [&](const char* key) -> std::optional<int32_t> {
    if (golden.at(key).is_null()) return std::nullopt;
    return golden[key].get<int32_t>();
  };
  EXPECT_EQ(tok->bos_id(), optional_id("bos_id"));
  EXPECT_EQ(tok->eos_id(), optional_id("eos_id"));
  EXPECT_EQ(tok->pad_id(), optional_id("pad_id"));
  for (const auto& [token, id] : golden.at("probe_tokens").items()) {
    EXPECT_EQ(tok->token_to_id(token), std::optional<int32_t>(id.get<int32_t>())) << show(token);
  }
  EXPECT_EQ(tok->token_to_id("\x01no such token\x02"), std::nullopt);
}

// Workers tokenize concurrently: results must equal the single-threaded ones.
TEST_P(TokenizerParity, ConcurrentEncodeIsDeterministic) {
  const auto golden = read_json(dir() / "golden.json");
  const auto tok = load_tokenizer(dir());
  const auto& lines = golden.at("lines");
  std::vector<std::vector<int32_t>> expected;
  for (const auto& line : lines) expected.push_back(golden["with_special"][expected.size()].get<std::vector<int32_t>>());
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (size_t i = t; i < lines.size(); i += 1 + (t % 2)) {
          if (tok->encode(lines[i].get<std::string>(), true) != expected[i]) ++failures[t];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

// libsentencepiece's own BPE, an independent implementation, agrees with the
// transformers-style merges (and so with Hugging Face) on every line.
TEST(SentencePieceEngines, LibSentencePieceMatchesHuggingFace) {
  for (const char* name : {"spm_llama2", "spm_legacy_eos"}) {
    const fs::path dir = fs::path(FPTRAIN_FIXTURE_DIR) / name;
    const auto golden = read_json(dir / "golden.json");
    const auto tok = fptrain::tokenizer::load_sentencepiece_tokenizer(
        dir / "tokenizer.model", fptrain::tokenizer::read_tokenizer_config(dir),
        fptrain::tokenizer::SentencePieceEngine::kLibSentencePiece);
    const auto& lines = golden.at("lines");
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string line = lines[i].get<std::string>();
      ASSERT_EQ(tok->encode(line, true), golden["with_special"][i].get<std::vector<int32_t>>())
          << name << " line " << i << ": " << show(line);
      ASSERT_EQ(tok->encode(line, false), golden["without_special"][i].get<std::vector<int32_t>>())
          << name << " line " << i << ": " << show(line);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TokenizerParity, ::testing::ValuesIn(kFixtures),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
