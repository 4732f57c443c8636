// Which examples each micro-batch takes, decided from lengths alone. The one
// planner behind the three readers of a plan: BatchStream builds the batches
// it names, count_steps counts them, the data report summarises them; so the
// three cannot disagree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "data/data_options.h"

namespace fptrain::data {

// A trained (used or truncated) example as the planner sees it.
struct PlanItem {
  int64_t length = 0;
  int64_t supervised = 0;
};

// Fixed mode: tokens [begin, end) of item `item`, inside a row.
struct PlannedPiece {
  size_t item = 0;
  int64_t begin = 0;
  int64_t end = 0;
};

struct PlannedMicroBatch {
  std::vector<size_t> items;                     // the group's items it holds, in stream order
  std::vector<std::vector<PlannedPiece>> rows;  // fixed mode only: the rows cut from `items`
  int64_t tokens = 0;                            // padding included
  int64_t padding = 0;
  // Exact, except in fixed mode: there each piece gets its example's supervised
  // tokens in proportion to its length (BatchStream counts the labels exactly).
  int64_t supervised = 0;
  int64_t started = 0;  // examples whose first token is here
  int rank = -1;        // decided here (flatten balanced across ranks), else by the step (assign_ranks)
};

// What the stream reads before it plans: a window of `size` consecutive
// positions of the epoch order (pack, fixed: what best-fit-decreasing or the
// row cutter sees at once), or `size` trained examples (flatten and pad: one
// micro-batch; flatten balanced across ranks: one whole step, dealt by cost).
struct PlanGroup {
  bool window = false;
  int64_t size = 0;
};
PlanGroup plan_group(const DataOptions& options);

// The micro-batches of one group in the order they are trained. `items` are
// the group's trained examples in stream order; `group_start` is the group's
// first position in the epoch order (it seeds pack's shuffle).
std::vector<PlannedMicroBatch> plan_group_batches(const std::vector<PlanItem>& items, const DataOptions& options,
                                                  int64_t epoch, int64_t group_start);

}  // namespace fptrain::data
