// fptrain: the command-line program.
//
//   fptrain train CONFIG.yaml [--set key.path=value ...]
//   fptrain eval  CONFIG.yaml [--json]
//   fptrain data  CONFIG.yaml
//   fptrain init  OUT_DIR [--preset tiny]
#include "apps/fptrain/commands.h"
#include "trainer/log/log.h"

#include <exception>
#include <stdexcept>

int main(int argc, char** argv) {
  CLI::App app{
      "fptrain fine-tunes Llama, Mistral, Granite, Qwen2/2.5, Qwen3, Phi-3, Gemma 2 and Gemma 3 models on\n"
      "instruction data with padding-free packing: full fine-tuning, LoRA or QLoRA, on one GPU or many.\n"
      "Configuration keys: docs/configuration.md; examples: configs/.",
      "fptrain"};
  app.set_version_flag("--version", std::string("fptrain ") + FPTRAIN_VERSION);
  app.require_subcommand(1, 1);
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "Debug output");

  fptrain::app::Action action;
  fptrain::app::add_train_command(app, action);
  fptrain::app::add_eval_command(app, action);
  fptrain::app::add_data_command(app, action);
  fptrain::app::add_init_command(app, action);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  fptrain::trainer::log::set_verbose(verbose);
  try {
    return action ? action() : 0;
  } catch (const std::invalid_argument& e) {
    fptrain::trainer::log::error(e.what());
    return 2;
  } catch (const std::exception& e) {
    fptrain::trainer::log::error(e.what());
    return 1;
  }
}
