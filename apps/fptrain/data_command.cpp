#include "apps/fptrain/commands.h"
#include "apps/fptrain/config_options.h"
#include "data/data_report.h"
#include "data/example_inspector.h"
#include "data/inspect_report.h"
#include "tokenizer/tokenizer.h"
#include "trainer/model_setup.h"

#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <stdexcept>

namespace fptrain::app {
namespace {

struct DataArgs {
  ConfigArgs config;
  bool json = false;
  bool eval = false;
  int64_t show = 0;  // --show N: inspect N examples instead of the report
  int64_t skip = 0;
  int64_t max_tokens_shown = 256;
  std::string color = "auto";
};

int run_report(const data::DataOptions& options, std::shared_ptr<const tokenizer::Tokenizer> tokenizer, bool json) {
  const data::DataReport report = data::make_data_report(options, std::move(tokenizer));
  if (json) std::cout << data::data_report_json(report).dump(2) << std::endl;
  else data::print_data_report(std::cout, report);
  return report.bad_lines_would_stop || report.zero_supervised_over_limit ? 1 : 0;
}

int run_show(const data::DataOptions& options, std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
             const DataArgs& a) {
  if (options.files.empty()) throw std::invalid_argument(a.eval ? "data.eval is not set" : "data.train is not set");
  const data::ExampleInspector inspector(options, tokenizer);
  const auto first = static_cast<uint64_t>(a.skip);
  const uint64_t count = first < inspector.size() ? std::min<uint64_t>(a.show, inspector.size() - first) : 0;
  const std::string split = a.eval ? "eval" : "train";
  if (a.json) {
    const auto examples = inspector.inspect(first, count);
    std::cout << data::inspection_json(examples, inspector.size(), split)
                     .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
              << std::endl;
    return 0;
  }
  data::InspectPrintOptions print;
  print.color = data::use_color(common::parse_enum<data::ColorMode>(a.color, "--color"), STDOUT_FILENO);
  print.max_tokens_shown = a.max_tokens_shown;
  data::print_inspection_heading(std::cout, first, count, inspector.size(), split, print.color);
  for (uint64_t i = first; i < first + count; ++i)  // one at a time: the first shows at once
    data::print_inspected_example(std::cout, inspector.inspect(i), tokenizer.get(), print);
  std::cout.flush();
  return 0;
}

}  // namespace

void add_data_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<DataArgs>();
  CLI::App* cmd = app.add_subcommand(
      "data", "Dataset report: example counts (used, truncated, dropped, skipped by reason), length histogram,\n"
              "supervised fraction, and per batching mode the padding fraction and tokens per step.\n"
              "With --show N: the first N examples as training encodes them (text with the supervised\n"
              "spans marked, token ids, labels), in file order.");
  add_config_args(*cmd, args->config);
  cmd->add_flag("--json", args->json, "Print one JSON object instead of text");
  cmd->add_flag("--eval", args->eval, "Use data.eval instead of data.train");
  CLI::Option* show = cmd->add_option(
      "--show", args->show, "Show the first N examples in file order (before shuffling) as training encodes them");
  show->check(CLI::PositiveNumber);
  cmd->add_option("--skip", args->skip, "With --show: start after the first K examples")
      ->check(CLI::NonNegativeNumber)
      ->needs(show);
  cmd->add_option("--max-tokens-shown", args->max_tokens_shown,
                  "With --show: rows of the id/label table per example (default 256; 0: no table)")
      ->check(CLI::NonNegativeNumber)
      ->needs(show);
  cmd->add_option("--color", args->color,
                  "With --show: colour the supervised spans (auto: when stdout is a terminal), else mark them [[ ]]")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->needs(show);
  cmd->callback([&action, args] {
    action = [args] {
      const trainer::TrainConfig config = load_config_args(args->config);
      data::DataOptions options = trainer::make_data_options(config, args->eval);
      options.epochs = 1;
      std::shared_ptr<const tokenizer::Tokenizer> tokenizer = tokenizer::load_tokenizer(config.model.path);
      if (args->show > 0) return run_show(options, tokenizer, *args);
      return run_report(options, tokenizer, args->json);
    };
  });
}

}  // namespace fptrain::app
