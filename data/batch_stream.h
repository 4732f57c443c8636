// The deterministic core of the pipeline: epoch order -> processed examples
// (in parallel, in order) -> micro-batches -> optimizer steps for one rank.
// Single-threaded from the caller's view; DataPipeline runs it ahead on a
// producer thread.
#pragma once

#include <atomic>
#include <deque>
#include <exception>
#include <stdexcept>
#include <memory>
#include <optional>
#include <vector>

#include "data/data_cursor.h"
#include "data/batch_builder.h"
#include "data/data_options.h"
#include "data/example_source.h"
#include "data/micro_batch_plan.h"
#include "data/packed_batch.h"
#include "data/worker_pool.h"

namespace fptrain::data {

// One optimizer step as seen by one rank.
struct TrainStep {
  int64_t step = 0;   // 0-based, across epochs
  int64_t epoch = 0;
  bool last_of_epoch = false;
  // This rank's micro-batches. Every rank gets the same number; at the end of
  // an epoch a rank may get empty ones (num_tokens == 0, cu_seqlens {0}).
  std::vector<PackedBatch> micro_batches;
  // Totals over all ranks and micro-batches of the step, known before the
  // step runs and identical on every rank: the loss divides by
  // global_supervised without waiting for an all-reduce.
  int64_t global_micro_batches = 0;
  int64_t global_examples = 0;
  int64_t global_tokens = 0;  // padding included
  int64_t global_padding = 0;
  int64_t global_supervised = 0;
  std::vector<int64_t> rank_tokens;  // tokens per rank
  double rank_imbalance = 0.0;       // max(rank_tokens) / mean - 1
  // Compute per rank (example_cost of its sequences, padding included): a
  // step takes as long as its busiest rank, so sum(mean) / sum(busiest) over
  // steps bounds the per-GPU rate against one GPU on the same examples.
  double busiest_rank_work = 0.0;
  double mean_rank_work = 0.0;
  DataCursor cursor;                 // resume here to continue after this step
};

// Thrown by BatchStream::next_step() once its cancel flag is set.
class StreamCancelled : public std::runtime_error {
 public:
  StreamCancelled() : std::runtime_error("data stream cancelled") {}
};

class BatchStream {
 public:
  BatchStream(const DataOptions& options, const ExampleSource& source, WorkerPool& pool, int32_t pad_id);

  // While `flag` (may be null) is set, next_step() throws StreamCancelled
  // within one block of examples, so that an owner can stop a stream that is
  // reading through a long run of skipped lines.
  void set_cancel_flag(const std::atomic<bool>* flag) { cancel_ = flag; }

  // Continue after a saved cursor (before the first next_step()).
  void restore(const DataCursor& cursor);
  // nullopt once `epochs` epochs are done.
  std::optional<TrainStep> next_step();

  DataCursor cursor() const;
  const DataStats& stats() const { return stats_; }
  const std::string& fingerprint() const { return fingerprint_; }

  // Exposed for the data report.
  struct MicroBatchPlan {
    std::vector<std::shared_ptr<const ProcessedExample>> examples;
    std::vector<Row> rows;  // fixed mode: pieces of `examples`
    int64_t tokens = 0;     // padding included
    int64_t padding = 0;
    int64_t supervised = 0;
    int64_t started = 0;  // examples whose first token is here
    int rank = -1;        // the planner's, where it decides it
  };

 private:
  void start_epoch(int64_t epoch, int64_t position);
  bool feed_done() const { return position_ >= static_cast<int64_t>(order_.size()); }
  std::shared_ptr<const ProcessedExample> next_example(bool account);
  void account(const ProcessedExample& ex);
  void check_zero_supervised(bool end_of_epoch) const;
  std::optional<MicroBatchPlan> next_micro_batch();
  bool windowed() const { return plan_group(options_).window; }
  bool load_group(bool account);
  MicroBatchPlan materialize(const PlannedMicroBatch& planned,
                             const std::vector<std::shared_ptr<const ProcessedExample>>& group) const;
  PackedBatch build(const MicroBatchPlan& plan) const;
  double work_of(const MicroBatchPlan& plan) const;
  std::vector<int> ranks_for(std::vector<MicroBatchPlan>& plans) const;
  TrainStep make_step(std::vector<MicroBatchPlan> plans) const;
  void end_epoch();

  const DataOptions& options_;
  const ExampleSource& source_;
  WorkerPool& pool_;
  int32_t pad_id_;
  std::string fingerprint_;

  int64_t epoch_ = 0;
  bool finished_ = false;
  std::vector<ExampleRef> order_;
  int64_t position_ = 0;  // next example of order_ to hand out
  // Processed look-ahead: results for order_[lookahead_start_ ...].
  std::deque<std::shared_ptr<const ProcessedExample>> lookahead_;
  std::deque<std::exception_ptr> lookahead_errors_;
  // The current group's remaining planned micro-batches (see plan_group).
  std::deque<MicroBatchPlan> window_;
  int64_t window_start_ = 0;
  int64_t window_done_ = 0;

  int64_t step_ = 0;
  DataStats stats_;
  bool epoch_produced_ = false;  // the current epoch has yielded a micro-batch
  const std::atomic<bool>* cancel_ = nullptr;
};

}  // namespace fptrain::data
