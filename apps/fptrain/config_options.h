// The CONFIG.yaml argument and --set overrides shared by train, eval and data.
#pragma once

#include "trainer/config.h"

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace fptrain::app {

struct ConfigArgs {
  std::string file;
  std::vector<std::string> overrides;
};

inline void add_config_args(CLI::App& cmd, ConfigArgs& args) {
  cmd.add_option("config", args.file, "YAML configuration (see docs/configuration.md)")->required();
  // One value per --set, so `--set a=1 CONFIG.yaml` leaves the positional alone.
  cmd.add_option("--set", args.overrides, "Override a key, e.g. --set optimizer.lr=1e-4 (repeatable; values are YAML)")
      ->allow_extra_args(false);
}

// The file with the overrides merged in (a --set can fix a value the file gets
// wrong), then validated as a whole.
inline trainer::TrainConfig load_config_args(const ConfigArgs& args) {
  return trainer::load_config(args.file, args.overrides);
}

}  // namespace fptrain::app
