#include "apps/fptrain/commands.h"
#include "apps/fptrain/config_options.h"
#include "data/data_report.h"
#include "tokenizer/tokenizer.h"
#include "trainer/model_setup.h"

#include <iostream>
#include <memory>

namespace fptrain::app {

void add_data_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<ConfigArgs>();
  auto json = std::make_shared<bool>(false);
  auto eval = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand(
      "data", "Dataset report: example counts (used, truncated, dropped, skipped by reason), length histogram,\n"
              "supervised fraction, and per batching mode the padding fraction and tokens per step.");
  add_config_args(*cmd, *args);
  cmd->add_flag("--json", *json, "Print one JSON object instead of text");
  cmd->add_flag("--eval", *eval, "Report on data.eval instead of data.train");
  cmd->callback([&action, args, json, eval] {
    action = [args, json, eval] {
      const trainer::TrainConfig config = load_config_args(*args);
      data::DataOptions options = trainer::make_data_options(config, *eval);
      options.epochs = 1;
      std::shared_ptr<const tokenizer::Tokenizer> tokenizer = tokenizer::load_tokenizer(config.model.path);
      const data::DataReport report = data::make_data_report(options, tokenizer);
      if (*json) std::cout << data::data_report_json(report).dump(2) << std::endl;
      else data::print_data_report(std::cout, report);
      return report.bad_lines_would_stop || report.zero_supervised_over_limit ? 1 : 0;
    };
  });
}

}  // namespace fptrain::app
