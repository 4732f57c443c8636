// What `fptrain data CONFIG.yaml` shows before any training: one pass over an
// epoch (tokenized exactly as training will), the accounting of every example,
// the length distribution, and for each batching mode what a step would hold.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/data_options.h"
#include "data/data_stats.h"
#include "tokenizer/tokenizer.h"

namespace fptrain::data {

struct BatchingReport {
  BatchMode mode = BatchMode::kFlatten;
  bool available = true;  // pack needs max_tokens >= max_length
  int64_t micro_batches = 0;
  int64_t steps = 0;  // optimizer steps per epoch (world_size x micro_batches_per_step each)
  int64_t tokens = 0;         // computed tokens, padding included
  int64_t padding = 0;
  double padding_fraction = 0;  // padding / tokens
  double fill_rate = 0;         // pack: tokens / (micro_batches x max_tokens)
  double tokens_per_step = 0;   // mean over full steps
  int64_t tokens_per_step_min = 0, tokens_per_step_max = 0;
  double supervised_per_step = 0;
  double rank_imbalance_mean = 0, rank_imbalance_max = 0;  // max rank tokens / mean - 1
};

struct DataReport {
  struct File {
    std::string path;
    std::string format;
    int64_t lines = 0;
    double weight = 1;
  };
  std::vector<File> files;
  std::string chat_template;
  DataStats stats;  // one epoch
  bool bad_lines_would_stop = false;  // bad lines exist and bad_lines is `error`
  bool zero_supervised_over_limit = false;
  // Lengths of the trained examples (after truncation).
  int64_t length_min = 0, length_max = 0;
  double length_mean = 0;
  int64_t length_p50 = 0, length_p90 = 0, length_p99 = 0;
  std::vector<int64_t> histogram_edges;   // bucket i: [edges[i], edges[i+1])
  std::vector<int64_t> histogram_counts;
  double supervised_fraction = 0;  // supervised / tokens
  std::vector<BatchingReport> batching;  // flatten, pad, pack
  double seconds = 0;                    // the tokenization pass
};

// Bad lines are counted (never thrown) so one run lists every problem.
DataReport make_data_report(const DataOptions& options, std::shared_ptr<const tokenizer::Tokenizer> tokenizer);
void print_data_report(std::ostream& out, const DataReport& report);
// The accounting alone (e.g. at the end of training, from the last cursor's stats):
// counts, skip reasons with their first file:line, dropped examples.
void print_data_stats(std::ostream& out, const DataStats& stats);
nlohmann::json data_report_json(const DataReport& report);

}  // namespace fptrain::data
