#include "data/data_options.h"

#include <stdexcept>
#include <utility>

namespace fptrain::data {
namespace {

void require(bool ok, const std::string& key, const std::string& problem) {
  if (!ok) throw std::invalid_argument("data option '" + key + "': " + problem);
}

}  // namespace

void validate_options(const DataOptions& o) {
  require(!o.files.empty(), "files", "no data file given");
  for (size_t i = 0; i < o.files.size(); ++i) {
    const std::string key = "files[" + std::to_string(i) + "]";
    require(!o.files[i].path.empty(), key + ".path", "empty path");
    require(o.files[i].weight >= 0.0, key + ".weight", "must be >= 0");
  }
  require(o.max_length >= 2, "max_length", "must be >= 2");
  require(o.max_zero_supervised_fraction >= 0.0 && o.max_zero_supervised_fraction <= 1.0,
          "max_zero_supervised_fraction", "must be in [0, 1]");
  require(o.examples_per_micro_batch >= 1, "examples_per_micro_batch", "must be >= 1");
  if (o.batching == BatchMode::kPack) {
    require(o.max_tokens > 0, "max_tokens", "is required in pack mode");
    require(o.max_tokens >= o.max_length, "max_tokens",
            "must be >= max_length (" + std::to_string(o.max_length) + ") so every example fits");
    require(o.shuffle_window >= 1, "shuffle_window", "must be >= 1");
  }
  if (o.batching == BatchMode::kFixed) {
    require(o.row_tokens >= 2, "row_tokens", "is required in fixed mode (>= 2)");
    require(o.rows_per_micro_batch >= 1, "rows_per_micro_batch", "must be >= 1");
    require(o.shuffle_window >= 1, "shuffle_window", "must be >= 1");
  }
  require(o.epochs >= 1, "epochs", "must be >= 1");
  require(o.world_size >= 1, "world_size", "must be >= 1");
  require(o.rank >= 0 && o.rank < o.world_size, "rank",
          "must be in [0, world_size=" + std::to_string(o.world_size) + ")");
  require(o.micro_batches_per_step >= 1, "micro_batches_per_step", "must be >= 1");
  require(o.workers >= 0, "workers", "must be >= 0");
  require(o.prefetch_steps >= 1, "prefetch_steps", "must be >= 1");
}

}  // namespace fptrain::data
