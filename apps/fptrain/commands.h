// The fptrain subcommands. Each add_*_command registers its options on the
// CLI11 app and sets `action` to the function that runs it after parsing.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

namespace fptrain::app {

using Action = std::function<int()>;  // returns the exit code

void add_train_command(CLI::App& app, Action& action);
void add_eval_command(CLI::App& app, Action& action);
void add_data_command(CLI::App& app, Action& action);
void add_init_command(CLI::App& app, Action& action);

}  // namespace fptrain::app
