// Whole epochs planned from example lengths alone, through the planner
// BatchStream trains with (micro_batch_plan.h): what the data report shows,
// and how the trainer learns the number of optimizer steps without building
// any batch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "data/data_options.h"
#include "data/epoch_order.h"
#include "data/example_source.h"
#include "data/micro_batch_plan.h"
#include "data/worker_pool.h"
#include "tokenizer/tokenizer.h"

namespace fptrain::data {

// One position of an epoch order.
struct ExampleSummary {
  bool trained = false;  // used or truncated
  int64_t length = 0;
  int64_t supervised = 0;
};

// Every example of `refs` processed once on the pool, handed to `each` in
// order with its index (an exception of a worker is rethrown in order).
void process_each(const ExampleSource& source, WorkerPool& pool, const std::vector<ExampleRef>& refs,
                  const std::function<void(size_t, const ProcessedExample&)>& each);

// The micro-batches of one epoch in training order; `items` in the epoch's
// stream order (untrained ones included: windows count positions).
std::vector<PlannedMicroBatch> plan_epoch(const std::vector<ExampleSummary>& items, const DataOptions& options,
                                          int64_t epoch);

// Optimizer steps over all `epochs`, exactly as many as DataPipeline yields.
// Tokenizes every line once (on `workers` threads), then plans each epoch's
// order; throws on bad lines (bad_lines: error) and on too many examples
// without supervised tokens, like the pipeline.
int64_t count_steps(const DataOptions& options, std::shared_ptr<const tokenizer::Tokenizer> tokenizer);

}  // namespace fptrain::data
