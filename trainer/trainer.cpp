#include "trainer/trainer.h"

#include "data/data_pipeline.h"
#include "models/checkpoint.h"
#include "trainer/adamw.h"
#include "trainer/checkpoint_store.h"
#include "trainer/device_batch.h"
#include "trainer/device_info.h"
#include "trainer/evaluate.h"
#include "trainer/log/log.h"
#include "trainer/lr_schedule.h"
#include "trainer/metrics.h"
#include "trainer/model_setup.h"
#include "trainer/stop_signal.h"

#include "common/files.h"
#include "data/epoch_plan.h"

#include <c10/core/GradMode.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <stdexcept>

namespace fptrain::trainer {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// One run per output_dir at a time: an advisory lock held while the run lives.
class OutputDirLock {
 public:
  explicit OutputDirLock(const fs::path& dir) {
    const fs::path path = dir / ".fptrain.lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
      throw std::runtime_error(path.string() + ": cannot create the run lock (" + common::errno_text() +
                               "); output_dir must be a writable folder");
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0)
      throw std::runtime_error(dir.string() + " is in use by another fptrain run (" + path.string() +
                               " is locked); use another output_dir");
  }
  ~OutputDirLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  OutputDirLock(const OutputDirLock&) = delete;
  OutputDirLock& operator=(const OutputDirLock&) = delete;

 private:
  int fd_ = -1;
};

// Why the loop ended early (kNone: it ran to total_steps).
enum class Stop { kNone, kSignal, kStopAtStep, kDataEnded };

class Run {
 public:
  explicit Run(const TrainConfig& config) : config_(config), output_dir_(config.output_dir) {}
  TrainOutcome execute();

 private:
  void set_up();
  StepRecord train_step(const data::TrainStep& step);
  StepRecord train_step_or_explain_oom(const data::TrainStep& step);
  Stop stop_reason() const;
  void evaluate_and_save_on_schedule();
  TrainOutcome finish(Stop stop, double wall_seconds);
  void save();
  void run_eval();

  TrainConfig config_;
  fs::path output_dir_;
  std::unique_ptr<OutputDirLock> lock_;
  DeviceInfo device_;
  std::optional<fs::path> resume_from_;
  LoadedModel model_;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<data::DataPipeline> data_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<MetricsLogger> metrics_;
  int64_t step_ = 0;  // optimizer steps completed
  int64_t total_steps_ = 0;
  int64_t last_saved_step_ = -1;
  std::optional<fs::path> last_checkpoint_;
  data::DataCursor cursor_;
  RunCounters counters_;
};

// The loop: one optimizer step per iteration, everything else around it.
TrainOutcome Run::execute() {
  set_up();
  install_stop_handlers();
  const auto run_start = Clock::now();
  Stop stop = Stop::kNone;
  while (step_ < total_steps_ && stop == Stop::kNone) {
    const auto step_start = Clock::now();
    // A stop request also ends the wait for data (a long stretch of skipped
    // lines can hold the next step back for minutes).
    const std::optional<data::TrainStep> batch = data_->next_step(stop_requested);
    if (!batch) {
      stop = stop_requested() ? Stop::kSignal : Stop::kDataEnded;
      break;
    }
    const double data_wait = seconds_since(step_start);
    if (batch->global_supervised == 0) {
      log::warn("a step of the data stream has no supervised token; skipped");
      continue;
    }
    StepRecord rec = train_step_or_explain_oom(*batch);
    rec.data_wait_seconds = data_wait;
    rec.step_seconds = seconds_since(step_start);
    counters_.tokens += rec.tokens - rec.padding;
    counters_.supervised_tokens += rec.supervised;
    counters_.train_seconds += rec.step_seconds;
    stop = stop_reason();
    metrics_->record(rec, config_.logging.log_interval, /*force=*/stop != Stop::kNone);
    evaluate_and_save_on_schedule();
  }
  return finish(stop, seconds_since(run_start));
}

// Forward + backward of every micro-batch (loss sum / the step's supervised
// count, known before any compute), clipping, AdamW at the scheduled rate.
StepRecord Run::train_step(const data::TrainStep& ts) {
  const double denominator = static_cast<double>(ts.global_supervised);
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device_.device));
  StepRecord rec;
  // Backward adds every micro-batch's gradients into the optimizer's flat buffer
  // in place; with fp32 accumulation they move into fp32 sums between micro-batches.
  const bool fp32_sums = config_.optimizer.fp32_grad_accumulation && optimizer_->has_master_weights();
  int64_t remaining = 0;
  for (const auto& mb : ts.micro_batches) remaining += mb.num_tokens > 0;
  for (const auto& mb : ts.micro_batches) {
    if (mb.num_tokens == 0) continue;  // an empty slot at the end of an epoch
    const DeviceBatch b = to_device(mb, device_.device);
    const models::LossOutput out = model_.model->loss(b.input, b.labels);
    (out.loss_sum / denominator).backward();
    if (fp32_sums && --remaining > 0) optimizer_->accumulate_gradients();
    loss_sum += out.loss_sum.detach();
    rec.examples += b.num_examples;
    rec.tokens += b.num_tokens;
    rec.padding += b.num_padding;
    rec.supervised += b.num_supervised;
  }
  const double lr = learning_rate(config_.schedule, config_.optimizer.lr, step_, total_steps_);
  // The norm and the clip coefficient stay on the device; step() applies the coefficient in its kernel.
  rec.grad_norm = optimizer_->grad_norm(config_.optimizer.grad_clip);
  optimizer_->step(lr);
  ++step_;
  rec.step = step_;
  rec.epoch = ts.epoch;
  rec.lr = lr;
  rec.loss = loss_sum / denominator;
  cursor_ = ts.cursor;
  return rec;
}

StepRecord Run::train_step_or_explain_oom(const data::TrainStep& ts) {
  try {
    return train_step(ts);
  } catch (const c10::OutOfMemoryError& e) {
    int64_t tokens = 0;
    for (const auto& mb : ts.micro_batches) tokens = std::max<int64_t>(tokens, mb.num_tokens);
    throw std::runtime_error(
        "out of memory in step " + std::to_string(step_ + 1) + " (largest micro-batch " + std::to_string(tokens) +
        " tokens). Lower batching.examples_per_micro_batch or batching.max_tokens (raise "
        "batching.grad_accumulation to keep the step size), or set model.activation_checkpointing: every_layer. "
        "The last checkpoint is " + (last_checkpoint_ ? last_checkpoint_->string() : std::string("none")) +
        ".\n" + e.what_without_backtrace());
  }
}

Stop Run::stop_reason() const {
  if (stop_requested()) return Stop::kSignal;
  const int64_t at = config_.training.stop_at_step;
  if (at > 0 && step_ == at && step_ < total_steps_) return Stop::kStopAtStep;
  return Stop::kNone;
}

void Run::evaluate_and_save_on_schedule() {
  if (config_.logging.eval_interval > 0 && step_ % config_.logging.eval_interval == 0 && step_ < total_steps_)
    run_eval();
  if (config_.checkpoint.interval > 0 && step_ % config_.checkpoint.interval == 0) save();
}

void Run::set_up() {
  std::error_code ec;
  fs::create_directories(output_dir_, ec);
  if (ec || !fs::is_directory(output_dir_))
    throw std::runtime_error(output_dir_.string() + ": cannot create the output folder (" +
                             (ec ? ec.message() : std::string("not a folder")) +
                             "); output_dir must be a writable folder");
  lock_ = std::make_unique<OutputDirLock>(output_dir_);
  log::also_to_file((output_dir_ / "train.log").string());
  device_ = resolve_device(config_.device, config_.cpu_threads);
  resume_from_ = resolve_resume(config_);
  std::optional<TrainingState> state;
  if (resume_from_) state = load_training_state(*resume_from_);

  // The model: the checkpoint's weights when resuming (the optimizer state then
  // restores the fp32 masters exactly), else the configured model.
  model_ = open_model(config_, device_.device, resume_from_ ? *resume_from_ : fs::path(config_.model.path),
                      /*trainable=*/true);
  tokenizer_ = load_checked_tokenizer(config_.model.path, model_.config);

  const data::DataOptions options = make_data_options(config_, /*eval=*/false);
  total_steps_ = config_.training.max_steps;
  if (total_steps_ == 0) {
    log::info("counting the steps of " + std::to_string(config_.training.epochs) + " epoch(s)...");
    total_steps_ = data::count_steps(options, tokenizer_);
    if (total_steps_ == 0) throw std::runtime_error("data.train yields no training step");
  }
  if (state) cursor_ = data::DataCursor::from_json(state->data_cursor);
  data_ = std::make_unique<data::DataPipeline>(options, tokenizer_,
                                               state ? std::optional<data::DataCursor>(cursor_) : std::nullopt);

  std::vector<std::string> names = models::parameter_names_in_model_order(model_.config);
  std::vector<at::Tensor> params;
  for (const auto& n : names) params.push_back(model_.model->parameters().at(n));
  optimizer_ = std::make_unique<AdamW>(names, params, config_.optimizer);
  if (state) {
    optimizer_->load_state(state->optimizer, state->step, state->tensors_file.string());
    restore_rng_states(state->rng);
    step_ = state->step;
    last_saved_step_ = step_;
    last_checkpoint_ = resume_from_;
    counters_ = state->counters;
    if (state->total_steps != total_steps_)
      log::warn("the checkpoint was written by a run of " + std::to_string(state->total_steps) +
                " steps; this run has " + std::to_string(total_steps_) + " (the schedule changes)");
  } else {
    at::manual_seed(config_.training.seed);
  }

  common::write_file_atomically(output_dir_ / "config.yaml", to_yaml(config_));
  metrics_ = std::make_unique<MetricsLogger>(output_dir_, total_steps_, model_.config.num_parameters(), device_, step_);
  log_run_banner(config_, model_.config, device_, model_.dtype, model_.backend, optimizer_->has_master_weights(),
                 total_steps_);
  if (resume_from_) log::info("resumed from " + resume_from_->string() + " at step " + std::to_string(step_));
}

void Run::save() {
  metrics_->flush();  // a diverged loss stops here, before it overwrites a good checkpoint
  const auto start = Clock::now();
  TrainingState state;
  state.step = step_;
  state.total_steps = total_steps_;
  state.data_cursor = cursor_.to_json();
  state.counters = counters_;
  state.config_yaml = to_yaml(config_);
  state.optimizer = optimizer_->state();
  state.rng = capture_rng_states();
  const fs::path dir = save_checkpoint(output_dir_, model_.config, model_.model->parameters(), model_.dtype,
                                       config_.model.path, state);
  prune_checkpoints(output_dir_, config_.checkpoint.keep_last);
  last_saved_step_ = step_;
  last_checkpoint_ = dir;
  metrics_->note("checkpoint", {{"step", step_}, {"path", dir.string()}, {"seconds", seconds_since(start)}});
  log::info("saved checkpoint " + dir.string() + " (" + format_duration(seconds_since(start)) + ")");
}

void Run::run_eval() {
  if (config_.data.eval.empty()) return;
  data::DataPipeline eval_data(make_data_options(config_, /*eval=*/true), tokenizer_);
  const EvalResult r = evaluate(*model_.model, eval_data, device_.device, config_.logging.eval_max_batches);
  metrics_->record_eval(step_, r.loss, r.supervised_tokens, r.seconds);
}

// The end of a run: the final evaluation and checkpoint (or the one a stop
// asks for), summary.json and the closing log lines.
TrainOutcome Run::finish(Stop stop, double wall_seconds) {
  TrainOutcome outcome;
  if (stop == Stop::kDataEnded) {
    if (step_ == 0)
      throw std::runtime_error("data.train yields no training step (" + data::describe_stats(data_->final_stats()) +
                               "); nothing was trained and no checkpoint was written");
    log::info("the data ended after " + std::to_string(step_) + " steps (training.epochs reached)");
  }
  if (stop == Stop::kSignal || stop == Stop::kStopAtStep) {
    outcome.interrupted = true;
    outcome.signal = stop == Stop::kSignal ? stop_signal_number() : 0;
    const std::string why = outcome.signal == SIGTERM ? "SIGTERM" : outcome.signal == SIGINT ? "SIGINT"
                                                                                                : "training.stop_at_step";
    if (step_ == 0 && !last_checkpoint_) {  // stopped while waiting for the first step's data
      log::info("stopped by " + why + " before the first step; nothing was trained and no checkpoint was written");
    } else {
      if (last_saved_step_ != step_) save();
      log::info("stopped by " + why + " after step " + std::to_string(step_) + "; checkpoint " +
                last_checkpoint_->string() + "; run the same command again to resume");
    }
  } else {
    if (!config_.data.eval.empty()) run_eval();
    if (config_.checkpoint.save_final && last_saved_step_ != step_) save();
  }
  outcome.steps_completed = step_;
  outcome.total_steps = total_steps_;
  outcome.last_checkpoint = last_checkpoint_;
  outcome.summary = metrics_->summary();
  outcome.summary["steps_completed"] = step_;
  outcome.summary["total_steps"] = total_steps_;
  outcome.summary["interrupted"] = outcome.interrupted;
  outcome.summary["wall_seconds"] = wall_seconds;
  outcome.summary["dtype"] = models::dtype_name(model_.dtype);
  outcome.summary["attention"] = std::string(attention::backend_name(model_.backend));
  if (last_checkpoint_) outcome.summary["checkpoint"] = last_checkpoint_->string();
  outcome.summary["data"] = cursor_.stats.to_json();  // every example read: used, truncated, dropped, skipped
  common::write_file_atomically(output_dir_ / "summary.json", outcome.summary.dump(2) + "\n");
  log_run_summary(*metrics_, outcome.summary, cursor_.stats, output_dir_ / "summary.json", wall_seconds);
  return outcome;
}

}  // namespace

std::optional<fs::path> resolve_resume(const TrainConfig& config) {
  if (config.resume == "none") {
    // Starting over next to older checkpoints would mix two runs (and pruning would drop the new ones).
    if (auto latest = latest_checkpoint(config.output_dir))
      throw std::invalid_argument(config.source + ": resume: none, but " + config.output_dir +
                                  " holds checkpoints (latest " + latest->filename().string() +
                                  "); use resume: auto to continue them, or another output_dir");
    return std::nullopt;
  }
  if (config.resume == "auto") return latest_checkpoint(config.output_dir);
  const fs::path p = config.resume;
  if (!fs::is_directory(p))
    throw std::invalid_argument(config.source + ": resume: '" + config.resume +
                                "' is not auto, none or an existing checkpoint folder");
  return p;
}

TrainOutcome train(const TrainConfig& config) {
  validate(config);
  Run run(config);
  return run.execute();
}

}  // namespace fptrain::trainer
