#include "apps/fptrain/commands.h"
#include "trainer/log/log.h"
#include "apps/fptrain/init/tiny_model.h"

#include <memory>

namespace fptrain::app {

void add_init_command(CLI::App& app, Action& action) {
  auto out = std::make_shared<std::string>();
  auto opts = std::make_shared<TinyModelOptions>();
  auto corpus = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand(
      "init",
      "Write a small randomly initialised Llama in Hugging Face format (config.json, model.safetensors)\n"
      "with a SentencePiece/tokenizer.json tokenizer trained on a corpus: for demos and tests.");
  cmd->add_option("out_dir", *out, "Folder to create (must not exist or be empty)")->required();
  cmd->add_option("--preset", opts->preset, "Model size: test | tiny | small | study (~150M) | llama-1b (Llama-3.2-1B shape, bf16)")->capture_default_str();
  cmd->add_option("--vocab-size", opts->vocab_size, "Tokenizer vocabulary (default: the preset's)");
  cmd->add_option("--seed", opts->seed, "Seed of the weights")->capture_default_str();
  cmd->add_option("--corpus", *corpus,
                  "Tokenizer training text: JSONL (all string values) or text files (default: built-in)");
  cmd->callback([&action, out, opts, corpus] {
    action = [out, opts, corpus] {
      for (const auto& c : *corpus) opts->corpus.emplace_back(c);
      const TinyModelSummary s = write_tiny_model(*out, *opts);
      trainer::log::info("wrote " + *out + ": LlamaForCausalLM, " + std::to_string(s.num_parameters) +
                         " parameters (" + s.description + ")");
      return 0;
    };
  });
}

}  // namespace fptrain::app
