// `fptrain init`: a small randomly initialised Llama in Hugging Face format
// (config.json, model.safetensors) with a tokenizer trained on a text corpus,
// so demos and tests need nothing downloaded.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace fptrain::app {

struct TinyModelOptions {
  std::string preset = "tiny";  // test | tiny | small | study | llama-1b
  int64_t vocab_size = 0;       // 0: the preset's
  uint64_t seed = 0;
  // Text for the tokenizer: JSONL (every string value is used) or plain text
  // files. Empty: a built-in generated English-like corpus.
  std::vector<std::filesystem::path> corpus;
};

struct TinyModelSummary {
  int64_t num_parameters = 0;
  int64_t vocab_size = 0;
  std::string description;  // "4 layers, hidden 128, ..."
};

const std::vector<std::string>& tiny_model_presets();

// Writes the model and tokenizer into `out_dir` (created; must be empty or absent).
TinyModelSummary write_tiny_model(const std::filesystem::path& out_dir, const TinyModelOptions& options);

// The built-in corpus: `n` deterministic English-like sentences.
std::vector<std::string> builtin_corpus(size_t n, uint64_t seed);

}  // namespace fptrain::app
