#include "apps/fptrain/commands.h"
#include "apps/fptrain/config_options.h"
#include "trainer/log/log.h"
#include "trainer/trainer.h"

#include <iostream>
#include <memory>

namespace fptrain::app {

void add_train_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<ConfigArgs>();
  auto print_config = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Fine-tune a model as CONFIG.yaml describes. Resumes from the latest checkpoint in output_dir\n"
      "(resume: auto). Ctrl-C or SIGTERM finishes the current step, saves a checkpoint and exits 0.");
  add_config_args(*cmd, *args);
  cmd->add_flag("--print-config", *print_config, "Print the resolved configuration and exit");
  cmd->callback([&action, args, print_config] {
    action = [args, print_config] {
      const trainer::TrainConfig config = load_config_args(*args);
      if (*print_config) {
        std::cout << trainer::to_yaml(config);
        return 0;
      }
      // A run stopped by SIGINT/SIGTERM saved a checkpoint and counts as a success.
      trainer::train(config);
      return 0;
    };
  });
}

}  // namespace fptrain::app
