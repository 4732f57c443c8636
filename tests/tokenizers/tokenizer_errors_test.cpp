// Bad tokenizer directories and inputs fail with errors that name the file
// and the problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "data/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using fptrain::data::load_tokenizer;

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

}  // namespace
