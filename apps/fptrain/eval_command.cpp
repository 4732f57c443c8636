#include "apps/fptrain/commands.h"
#include "apps/fptrain/config_options.h"
#include "models/peft_format.h"
#include "trainer/evaluate.h"
#include "trainer/log/log.h"

#include <cstdio>
#include <iostream>
#include <memory>

namespace fptrain::app {

void add_eval_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<ConfigArgs>();
  auto json = std::make_shared<bool>(false);
  auto checkpoint = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "eval", "Loss and perplexity of the model on data.eval (data.train when no eval set is configured).");
  add_config_args(*cmd, *args);
  cmd->add_flag("--json", *json, "Print one JSON object instead of text");
  cmd->add_option("--checkpoint", *checkpoint,
                  "Evaluate this model folder (e.g. a checkpoint) instead of model.path; a LoRA checkpoint (a PEFT "
                  "adapter folder) is evaluated on model.path as adapter.from");
  cmd->callback([&action, args, json, checkpoint] {
    action = [args, json, checkpoint] {
      ConfigArgs a = *args;
      if (models::is_peft_adapter_folder(*checkpoint)) {
        a.overrides.push_back("adapter.type=lora");
        a.overrides.push_back("adapter.from=" + *checkpoint);
      } else if (!checkpoint->empty()) {
        a.overrides.push_back("model.path=" + *checkpoint);
      }
      const trainer::TrainConfig config = load_config_args(a);
      const trainer::EvalResult r = trainer::evaluate_config(config);
      if (*json) {
        nlohmann::json j = r.to_json();
        j["model"] = config.model.path;
        std::cout << j.dump() << std::endl;
      } else {
        char buf[256];
        std::snprintf(buf, sizeof buf, "%s: loss %.6f | perplexity %.4f | %lld examples, %lld supervised tokens",
                      config.model.path.c_str(), r.loss, r.perplexity, (long long)r.examples,
                      (long long)r.supervised_tokens);
        std::cout << buf << std::endl;
      }
      return 0;
    };
  });
}

}  // namespace fptrain::app
