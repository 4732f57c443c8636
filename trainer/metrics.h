// Training metrics: per-step counters accumulate on the host (the loss and the
// gradient norm stay on the device until a log step), and every log interval
// becomes one console progress line and one JSONL record.
#pragma once

#include "attention/varlen_attention.h"
#include "data/data_stats.h"
#include "models/model_config.h"
#include "distributed/comm_clock.h"
#include "trainer/config.h"
#include "trainer/device_info.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace fptrain::trainer {

struct StepRecord {
  int64_t step = 0;  // 1-based: optimizer steps completed after this one
  int64_t epoch = 0;
  at::Tensor loss;       // fp32 scalar on the device: summed token loss / supervised tokens
  at::Tensor grad_norm;  // fp32 scalar on the device, before clipping
  double lr = 0.0;
  int64_t examples = 0;
  int64_t tokens = 0;  // padding included
  int64_t padding = 0;
  int64_t supervised = 0;
  double busiest_rank_work = 0.0;  // data::TrainStep's: the ranks' compute from the examples' lengths
  double mean_rank_work = 0.0;
  double step_seconds = 0.0;  // wall time of the whole step, data wait included
  double data_wait_seconds = 0.0;
  // Time the step waited for gradient and weight collectives that nothing
  // overlapped (distributed/comm_clock.h); null for one process.
  std::shared_ptr<const distributed::CommTiming> comm;
};

// How a data-parallel rank takes part in metrics: every rank records every step
// (the examples, tokens and loss of a record are global), rank 0 alone writes.
struct MetricsScope {
  int world_size = 1;
  bool writer = true;  // rank 0: console, metrics.jsonl
  // Element by element, the largest values over the ranks (the peak memory
  // figures, in one exchange); called at the same log steps on every rank.
  // Unset: this rank's values.
  std::function<std::vector<int64_t>(const std::vector<int64_t>&)> max_over_ranks;
};

struct RunTotals {
  int64_t steps = 0;
  int64_t examples = 0;
  int64_t tokens = 0;  // non-padding
  int64_t supervised = 0;
  int64_t padding = 0;
  double seconds = 0.0;
  double data_wait_seconds = 0.0;
  double busiest_rank_work = 0.0, mean_rank_work = 0.0;
  std::optional<double> first_loss, last_loss, min_loss;
  std::optional<double> last_eval_loss;
};

class MetricsLogger {
 public:
  // Appends to <output_dir>/metrics.jsonl. On resume, records after `resume_step` (from a run that died
  // before its next checkpoint) are removed first so the file stays one record per step.
  MetricsLogger(const std::filesystem::path& output_dir, int64_t total_steps, int64_t num_parameters,
                const DeviceInfo& device, int64_t resume_step, MetricsScope scope = {});

  // Adds one step; at every `log_interval`-th step (and when `force`) syncs, prints and writes.
  void record(const StepRecord& r, int64_t log_interval, bool force = false);
  void record_eval(int64_t step, double loss, int64_t supervised_tokens, double seconds);
  void note(const std::string& event, const nlohmann::json& fields);  // {"event": ...} records
  // Writes the pending steps now (one device read); throws if the loss diverged.
  void flush() { flush_interval(); }

  const RunTotals& totals() const { return totals_; }
  nlohmann::json summary() const;
  std::filesystem::path path() const { return path_; }

 private:
  // What one log interval adds up to (flush_interval's figures).
  struct Interval {
    double n = 0, loss = 0, grad_norm = 0, seconds = 0, wait = 0, comm = 0;
    double tps = 0, sps = 0, pad_frac = 0, tps_gpu = 0, eta = 0;
    double busiest_work = 0, mean_work = 0;
    int64_t tokens = 0, padding = 0, supervised = 0, examples = 0;
    std::optional<double> mfu;
    MemoryStats mem;
  };
  void flush_interval();
  Interval sum_interval();  // reads the losses (one sync) and adds to the totals
  nlohmann::json interval_record(const Interval& v) const;
  std::string progress_line(const Interval& v) const;

  void write(const nlohmann::json& j);
  MemoryStats peak_memory() const;

  std::filesystem::path path_;
  std::ofstream out_;
  MetricsScope scope_;
  int64_t total_steps_;
  int64_t num_parameters_;
  DeviceInfo device_;
  int64_t start_step_;
  std::vector<StepRecord> pending_;
  RunTotals totals_;
  std::chrono::steady_clock::time_point started_;
};

// The ranks' balance: the mean rank's compute over the busiest one's, summed
// over steps (1: no rank waits for another; what the examples' lengths allow
// data parallelism at most, against one GPU on the same examples).
double rank_balance(double mean_work, double busiest_work);

// "1h02m", "3m05s", "12s".
std::string format_duration(double seconds);
// "1.24B", "3.50M", "12.3k", "512".
std::string format_count(double value);

// The start-up lines of a run: model, device, dtype, attention, optimizer,
// batching, steps, and how MFU is computed.
void log_run_banner(const TrainConfig& config, const models::ModelConfig& model, const DeviceInfo& device,
                    at::ScalarType dtype, attention::Backend backend, bool master_weights, int64_t total_steps);
// The closing lines: losses, throughput, MFU, peak memory, and the data accounting.
void log_run_summary(const MetricsLogger& metrics, const nlohmann::json& summary, const data::DataStats& stats,
                     const std::filesystem::path& summary_path, double wall_seconds);

}  // namespace fptrain::trainer
