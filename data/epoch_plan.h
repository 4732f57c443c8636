// Micro-batches and steps of whole epochs planned from example lengths alone,
// with the same rules as BatchStream: what the data report shows and how the
// trainer learns the number of optimizer steps without building any batch.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/data_options.h"
#include "tokenizer/tokenizer.h"

namespace fptrain::data {

struct ExampleSummary {
  bool trained = false;  // used or truncated
  int64_t length = 0;
  int64_t supervised = 0;
};

struct MicroBatchSummary {
  int64_t tokens = 0;  // padding included
  int64_t padding = 0;
  int64_t supervised = 0;
  int rank = -1;  // set where the planner decides it (flatten balanced across ranks)
};

// `items` in the epoch's stream order.
std::vector<MicroBatchSummary> plan_epoch(const std::vector<ExampleSummary>& items, BatchMode mode,
                                          const DataOptions& options, int64_t epoch);

// Optimizer steps over all `epochs`, exactly as many as DataPipeline yields.
// Tokenizes every line once (on `workers` threads), then plans each epoch's
// order; throws on bad lines (bad_lines: error) and on too many examples
// without supervised tokens, like the pipeline.
int64_t count_steps(const DataOptions& options, std::shared_ptr<const tokenizer::Tokenizer> tokenizer);

}  // namespace fptrain::data
