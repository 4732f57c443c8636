// Bad tokenizer directories and inputs fail with errors that name the file
// and the problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using fptrain::tokenizer::load_tokenizer;

fs::path make_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("fptrain_tok_err_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

std::string error_of(const fs::path& dir) {
  try {
    load_tokenizer(dir);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(TokenizerErrors, MissingDirectoryAndFiles) {
  EXPECT_NE(error_of("/nonexistent/fptrain/tokenizer").find("does not exist"), std::string::npos);
  const auto dir = make_dir("empty");
  EXPECT_NE(error_of(dir).find("neither tokenizer.json nor tokenizer.model"), std::string::npos);
  fs::remove_all(dir);
}

TEST(TokenizerErrors, CorruptSentencePieceModel) {
  const auto dir = make_dir("badspm");
  write(dir / "tokenizer.model", "this is not a protobuf");
  const std::string e = error_of(dir);
  EXPECT_NE(e.find("tokenizer.model"), std::string::npos) << e;
  fs::remove_all(dir);
}

TEST(TokenizerErrors, InvalidTokenizerConfig) {
  const auto dir = make_dir("badconfig");
  write(dir / "tokenizer_config.json", "{\"add_bos_token\": \"yes\"}");
  write(dir / "tokenizer.model", "");
  const std::string e = error_of(dir);
  EXPECT_NE(e.find("tokenizer_config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("add_bos_token"), std::string::npos) << e;
  fs::remove_all(dir);
}

TEST(TokenizerErrors, UnsupportedSentencePieceTokenizerClass) {
  const auto dir = make_dir("t5");
  write(dir / "tokenizer_config.json", "{\"tokenizer_class\": \"T5Tokenizer\"}");
  write(dir / "tokenizer.model", "");
  const std::string e = error_of(dir);
  EXPECT_NE(e.find("T5Tokenizer"), std::string::npos) << e;
  fs::remove_all(dir);
}

// A minimal byte-level BPE tokenizer.json with one component replaced.
std::string tokenizer_json(const std::string& field, const std::string& value) {
  std::string normalizer = "null", pre_tokenizer = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false}";
  std::string model = "{\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\"]}";
  std::string post = "null", decoder = "{\"type\": \"ByteLevel\"}";
  if (field == "normalizer") normalizer = value;
  if (field == "pre_tokenizer") pre_tokenizer = value;
  if (field == "model") model = value;
  if (field == "post_processor") post = value;
  if (field == "decoder") decoder = value;
  return "{\"version\": \"1.0\", \"added_tokens\": [], \"normalizer\": " + normalizer +
         ", \"pre_tokenizer\": " + pre_tokenizer + ", \"post_processor\": " + post + ", \"decoder\": " + decoder +
         ", \"model\": " + model + "}";
}

std::string json_error(const std::string& field, const std::string& value) {
  const auto dir = make_dir("json_" + field);
  write(dir / "tokenizer.json", tokenizer_json(field, value));
  const std::string e = error_of(dir);
  fs::remove_all(dir);
  return e;
}

TEST(TokenizerErrors, MinimalTokenizerJsonLoads) {
  const auto dir = make_dir("minimal");
  write(dir / "tokenizer.json", tokenizer_json("", ""));
  const auto tok = load_tokenizer(dir);
  EXPECT_EQ(tok->encode("ab", false), (std::vector<int32_t>{2}));
  EXPECT_EQ(tok->encode("ba", false), (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(tok->decode({2, 0}), "aba");
  EXPECT_EQ(tok->vocab_size(), 3);
  EXPECT_EQ(tok->bos_id(), std::nullopt);
  fs::remove_all(dir);
}

TEST(TokenizerErrors, UnsupportedComponentsNameFileAndType) {
  struct Case {
    const char* field;
    const char* value;
    const char* expected;
  };
  const Case cases[] = {
      {"normalizer", "{\"type\": \"NFKC\"}", "unsupported normalizer type 'NFKC'"},
      {"normalizer", "{\"type\": \"BertNormalizer\"}", "unsupported normalizer type 'BertNormalizer'"},
      {"pre_tokenizer", "{\"type\": \"BertPreTokenizer\"}", "unsupported pre_tokenizer type 'BertPreTokenizer'"},
      {"post_processor", "{\"type\": \"RobertaProcessing\"}",
       "unsupported post_processor type 'RobertaProcessing'"},
      {"decoder", "{\"type\": \"WordPiece\"}", "unsupported decoder type 'WordPiece'"},
      {"model", "{\"type\": \"Unigram\", \"vocab\": []}", "unsupported model type 'Unigram'"},
      {"model", "{\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}",
       "missing from the vocabulary"},
      {"model", "{\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a\"]}", "is not two tokens"},
      {"model", "{\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], \"dropout\": 0.1}", "dropout"},
      {"pre_tokenizer", "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}",
       "invalid regex"},
      {"pre_tokenizer", "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Sideways\"}",
       "unknown behavior"},
  };
  for (const auto& c : cases) {
    const std::string e = json_error(c.field, c.value);
    EXPECT_NE(e.find("tokenizer.json"), std::string::npos) << c.value << " -> " << e;
    EXPECT_NE(e.find(c.expected), std::string::npos) << c.value << " -> " << e;
  }
}

TEST(TokenizerErrors, InvalidJsonNamesTheFile) {
  const auto dir = make_dir("badjson");
  write(dir / "tokenizer.json", "{\"model\": ");
  const std::string e = error_of(dir);
  EXPECT_NE(e.find("tokenizer.json"), std::string::npos) << e;
  EXPECT_NE(e.find("invalid JSON"), std::string::npos) << e;
  fs::remove_all(dir);
}

TEST(TokenizerErrors, InvalidUtf8InputIsRejected) {
  const auto dir = make_dir("utf8");
  write(dir / "tokenizer.json", tokenizer_json("", ""));
  const auto tok = load_tokenizer(dir);
  EXPECT_THROW(tok->encode(std::string("a\xC3("), false), std::invalid_argument);
  EXPECT_THROW(tok->encode(std::string("\xED\xA0\x80"), false), std::invalid_argument);  // a surrogate
  fs::remove_all(dir);
}

}  // namespace
