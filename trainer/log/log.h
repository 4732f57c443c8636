// Console logging for the trainer and the CLI, through spdlog.
//
// spdlog and LibTorch both bring an {fmt}, in different versions; this shim is
// compiled in its own small library without LibTorch's include path, so the
// rest of the trainer logs through plain strings and never includes spdlog.
#pragma once

#include <string>

namespace fptrain::trainer::log {

void info(const std::string& message);
void warn(const std::string& message);
void error(const std::string& message);
void debug(const std::string& message);
void set_verbose(bool verbose);  // debug messages on/off
// A data-parallel rank: messages say "rank R"; ranks other than 0 print
// warnings and errors only (rank 0 tells the story of the run).
void set_rank(int rank);
// Also appends every message to `path` (e.g. <output_dir>/train.log) from now on.
void also_to_file(const std::string& path);

}  // namespace fptrain::trainer::log
