#include "data/data_pipeline.h"

#include "data/pad_id.h"

#include <chrono>

namespace fptrain::data {

DataPipeline::DataPipeline(DataOptions options, std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
                           std::optional<DataCursor> resume)
    : options_(std::move(options)), tokenizer_(std::move(tokenizer)) {
  validate_options(options_);
  source_ = std::make_unique<ExampleSource>(options_, tokenizer_.get());
  pool_ = std::make_unique<WorkerPool>(options_.workers);
  pad_id_ = choose_pad_id(tokenizer_.get(), options_.pad_id);
  stream_ = std::make_unique<BatchStream>(options_, *source_, *pool_, pad_id_);
  stream_->set_cancel_flag(&cancel_);
  if (resume) stream_->restore(*resume);
}

DataPipeline::~DataPipeline() {
  cancel_ = true;  // a producer inside a long stretch of skipped lines stops at its next block
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (producer_.joinable()) producer_.join();
}

void DataPipeline::produce() {
  try {
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return stop_ || static_cast<int>(queue_.size()) < options_.prefetch_steps; });
        if (stop_) return;
      }
      auto step = stream_->next_step();
      std::lock_guard<std::mutex> lock(mutex_);
      if (!step) {
        producer_done_ = true;
        changed_.notify_all();
        return;
      }
      queue_.push_back(std::move(*step));
      changed_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
    producer_done_ = true;
    changed_.notify_all();
  }
}

std::optional<TrainStep> DataPipeline::next_step() {
  return next_step([] { return false; });
}

std::optional<TrainStep> DataPipeline::next_step(const std::function<bool()>& interrupted) {
  if (!producer_.joinable()) producer_ = std::thread([this] { produce(); });
  std::unique_lock<std::mutex> lock(mutex_);
  const auto ready = [&] { return !queue_.empty() || producer_done_; };
  while (!changed_.wait_for(lock, std::chrono::milliseconds(100), ready)) {
    if (interrupted()) {
      cancel_ = true;
      return std::nullopt;
    }
  }
  if (!queue_.empty()) {
    TrainStep step = std::move(queue_.front());
    queue_.pop_front();
    changed_.notify_all();
    return step;
  }
  if (error_) std::rethrow_exception(error_);
  return std::nullopt;
}

}  // namespace fptrain::data
