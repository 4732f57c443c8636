// Where the data stream stands, saved with a checkpoint: restoring it in a new
// pipeline with the same options yields exactly the batches that would have
// followed. Every random decision is derived from (seed, epoch, position), so
// the shuffle and RNG state are implied by these numbers and not stored.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "data/data_stats.h"

namespace fptrain::data {

struct DataCursor {
  int64_t epoch = 0;
  // Index in the epoch's order of the first example not yet consumed; in pack
  // mode, of the first example of the current window.
  int64_t position = 0;
  // Pack mode: micro-batches of the window at `position` already delivered.
  int64_t window_batches_done = 0;
  int64_t step = 0;  // optimizer steps delivered
  // Options and files the stream depends on; a restore with others is refused.
  std::string fingerprint;
  DataStats stats;  // accounting up to this point

  std::string to_json() const;
  static DataCursor from_json(std::string_view text);  // throws naming the bad key
};

}  // namespace fptrain::data
