// The data pipeline the trainer uses: JSONL files in, optimizer steps of
// packed micro-batches out (this rank's share), produced ahead on a background
// thread with tokenization on worker threads. The stream is a deterministic
// function of the options and the seed: thread timing never changes it, and a
// saved cursor restores it exactly.
//
//   DataPipeline data(options, tokenizer, saved_cursor);
//   while (auto step = data.next_step()) {
//     // step->global_supervised: the loss denominator of the whole step
//     for (const PackedBatch& mb : step->micro_batches) { ... }
//     save(step->cursor.to_json());
//   }
#pragma once

#include <condition_variable>
#include <deque>
#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "data/batch_stream.h"
#include "data/data_cursor.h"
#include "data/data_options.h"
#include "data/example_source.h"
#include "tokenizer/tokenizer.h"
#include "data/worker_pool.h"

namespace fptrain::data {

class DataPipeline {
 public:
  // Indexes the files and checks the options; throws naming the file or key.
  DataPipeline(DataOptions options, std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
               std::optional<DataCursor> resume = std::nullopt);
  ~DataPipeline();
  DataPipeline(const DataPipeline&) = delete;
  DataPipeline& operator=(const DataPipeline&) = delete;

  // The next optimizer step; nullopt after the last epoch. Rethrows errors
  // (bad lines under bad_lines: error, ...) in stream order.
  std::optional<TrainStep> next_step();
  // The same, but while waiting `interrupted` is polled (every 100 ms): once it
  // returns true the wait ends with nullopt and the producer is cancelled (the
  // pipeline yields nothing more, and final_stats() is not available). A long
  // run of skipped lines then no longer delays a stop request to the epoch's end.
  std::optional<TrainStep> next_step(const std::function<bool()>& interrupted);

  const DataOptions& options() const { return options_; }
  // Micro-batches each rank runs per optimizer step (the last step of an
  // epoch may have fewer).
  int64_t micro_batches_per_step() const { return options_.micro_batches_per_step; }
  std::string chat_template_label() const { return source_->chat_template_label(); }
  int32_t pad_id() const { return pad_id_; }
  const ExampleSource& source() const { return *source_; }
  // The accounting of everything read; complete once next_step() returned nullopt
  // (then the producer has finished; before that it is not safe to call).
  const DataStats& final_stats() const { return stream_->stats(); }

 private:
  void produce();

  DataOptions options_;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<ExampleSource> source_;
  std::unique_ptr<WorkerPool> pool_;
  int32_t pad_id_ = 0;
  std::unique_ptr<BatchStream> stream_;

  std::thread producer_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<TrainStep> queue_;
  std::exception_ptr error_;
  bool producer_done_ = false;
  bool stop_ = false;
  std::atomic<bool> cancel_{false};  // the stream gives up at its next block
};

}  // namespace fptrain::data
