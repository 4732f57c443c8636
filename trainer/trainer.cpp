#include "trainer/trainer.h"

#include "data/data_pipeline.h"
#include "data/data_report.h"
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

#include <c10/core/GradMode.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace fptrain::trainer {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string fmt_count(int64_t n) {
  char buf[32];
  if (n >= 1'000'000'000) std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  else if (n >= 1'000'000) std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else if (n >= 1'000) std::snprintf(buf, sizeof buf, "%.1fk", n / 1e3);
  else std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
  return buf;
}

// Steps in `epochs` passes: counted by running the stream once (it tokenizes
// everything, so this costs one pass of the data pipeline, not of the model).
int64_t count_steps(const data::DataOptions& options, std::shared_ptr<const data::Tokenizer> tokenizer) {
  data::DataPipeline counter(options, std::move(tokenizer));
  int64_t n = 0;
  while (counter.next_step()) ++n;
  return n;
}

class Run {
 public:
  explicit Run(const TrainConfig& config) : config_(config), output_dir_(config.output_dir) {}
  TrainOutcome execute();

 private:
  void set_up();
  StepRecord train_step(const data::TrainStep& step);
  fs::path save(const data::DataCursor& cursor);
  void run_eval();

  TrainConfig config_;
  fs::path output_dir_;
  std::unique_ptr<class OutputDirLock> lock_;
  DeviceInfo device_;
  at::ScalarType dtype_ = at::kFloat;
  attention::Backend backend_ = attention::Backend::Reference;
  std::optional<fs::path> resume_from_;
  LoadedModel model_;
  std::shared_ptr<const data::Tokenizer> tokenizer_;
  std::unique_ptr<data::DataPipeline> data_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<MetricsLogger> metrics_;
  int64_t step_ = 0;  // optimizer steps completed
  int64_t total_steps_ = 0;
  int64_t last_saved_step_ = -1;
  std::optional<fs::path> last_checkpoint_;
  data::DataCursor cursor_;
  nlohmann::json counters_ = {{"tokens", 0}, {"supervised_tokens", 0}, {"train_seconds", 0.0}};
};

// One run per output_dir at a time: an advisory lock held while the run lives.
class OutputDirLock {
 public:
  explicit OutputDirLock(const fs::path& dir) {
    const fs::path path = dir / ".fptrain.lock";
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0) throw std::runtime_error(path.string() + ": cannot open the run lock");
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

void Run::set_up() {
  fs::create_directories(output_dir_);
  lock_ = std::make_unique<OutputDirLock>(output_dir_);
  log::also_to_file((output_dir_ / "train.log").string());
  device_ = resolve_device(config_.device, config_.cpu_threads);
  dtype_ = resolve_dtype(config_.model.dtype, device_.device);
  resume_from_ = resolve_resume(config_);
  const fs::path weights_dir = resume_from_ ? *resume_from_ : fs::path(config_.model.path);
  if (!fs::is_regular_file(weights_dir / "config.json"))
    throw std::invalid_argument(weights_dir.string() + ": no config.json (model.path must be a Hugging Face model folder)");
  backend_ = resolve_backend(config_.model.attention, device_.device,
                             models::load_model_config(weights_dir / "config.json").head_dim, dtype_);

  std::optional<TrainingState> state;
  if (resume_from_) state = load_training_state(*resume_from_);

  // The model: the checkpoint's weights when resuming (the optimizer state then
  // restores the fp32 masters exactly), else the configured model.
  model_ = load_model(weights_dir, dtype_, device_.device, backend_, /*trainable=*/true);
  set_activation_checkpointing(*model_.model, config_.model.activation_checkpointing);
  tokenizer_ = load_checked_tokenizer(config_.model.path, model_.config);

  const data::DataOptions options = make_data_options(config_, /*eval=*/false);
  total_steps_ = config_.training.max_steps;
  if (total_steps_ == 0) {
    log::info("counting the steps of " + std::to_string(config_.training.epochs) + " epoch(s)...");
    total_steps_ = count_steps(options, tokenizer_);
    if (total_steps_ == 0) throw std::runtime_error("data.train yields no training step");
  }
  std::optional<data::DataCursor> cursor;
  if (state) {
    cursor = data::DataCursor::from_json(state->data_cursor);
    cursor_ = *cursor;
  }
  data_ = std::make_unique<data::DataPipeline>(options, tokenizer_, cursor);

  std::vector<std::string> names = models::parameter_names_in_model_order(model_.config);
  std::vector<at::Tensor> params;
  for (const auto& n : names) params.push_back(model_.model->parameters().at(n));
  optimizer_ = std::make_unique<AdamW>(names, params, config_.optimizer);
  if (state) {
    optimizer_->load_state(state->optimizer, state->step);
    restore_rng_states(state->rng);
    step_ = state->step;
    last_saved_step_ = step_;
    last_checkpoint_ = resume_from_;
    counters_.update(state->counters);
    if (state->total_steps != total_steps_)
      log::warn("the checkpoint was written by a run of " + std::to_string(state->total_steps) +
                " steps; this run has " + std::to_string(total_steps_) + " (the schedule changes)");
  } else {
    at::manual_seed(config_.training.seed);
  }

  std::ofstream(output_dir_ / "config.yaml") << to_yaml(config_);
  metrics_ = std::make_unique<MetricsLogger>(output_dir_, total_steps_, model_.config.num_parameters(), device_, step_);

  const auto& mc = model_.config;
  log::info("model " + config_.model.path + ": " + mc.architecture + ", " + fmt_count(mc.num_parameters()) +
            " parameters, " + std::to_string(mc.num_hidden_layers) + " layers, hidden " +
            std::to_string(mc.hidden_size) + ", vocab " + std::to_string(mc.vocab_size));
  log::info("device " + device_.name + " | dtype " + models::dtype_name(dtype_) + " | attention " +
            std::string(attention::backend_name(backend_)) + " | AdamW " +
            (optimizer_->has_master_weights() ? "with fp32 master weights" : "in " + models::dtype_name(dtype_)) +
            (config_.model.activation_checkpointing > 0
                 ? " | activation checkpointing every " + std::to_string(config_.model.activation_checkpointing) +
                       " layer(s)"
                 : ""));
  log::info("batching " + config_.batching.mode + " | " +
            (config_.batching.mode == "pack" ? std::to_string(config_.batching.max_tokens) + " tokens"
                                             : std::to_string(config_.batching.examples_per_micro_batch) + " examples") +
            " per micro-batch x " + std::to_string(config_.batching.grad_accumulation) +
            " micro-batches per step | " + std::to_string(total_steps_) + " steps | output " + output_dir_.string());
  if (device_.peak_bf16_flops) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "MFU = 6 x %s parameters x tokens/s over the %s's dense bf16 peak of %.0f TFLOP/s",
                  fmt_count(mc.num_parameters()).c_str(), device_.name.c_str(), *device_.peak_bf16_flops / 1e12);
    log::info(buf);
  } else if (device_.device.is_cuda()) {
    log::info("MFU not reported: the bf16 peak of " + device_.name + " is unknown");
  }
  if (resume_from_) log::info("resumed from " + resume_from_->string() + " at step " + std::to_string(step_));
}

StepRecord Run::train_step(const data::TrainStep& ts) {
  // The loss denominator of the whole step, known before any compute.
  const double denominator = static_cast<double>(ts.global_supervised);
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device_.device));
  StepRecord rec;
  for (const auto& mb : ts.micro_batches) {
    if (mb.num_tokens == 0) continue;  // an empty slot at the end of an epoch
    const DeviceBatch b = to_device(mb, device_.device);
    const models::LossOutput out = model_.model->loss(b.input, b.labels);
    (out.loss_sum / denominator).backward();
    optimizer_->accumulate_gradients();  // fp32 sums across micro-batches (master weights)
    loss_sum += out.loss_sum.detach();
    rec.examples += b.num_examples;
    rec.tokens += b.num_tokens;
    rec.padding += b.num_padding;
    rec.supervised += b.num_supervised;
  }
  const double lr = learning_rate(config_.schedule, config_.optimizer.lr, step_, total_steps_);
  rec.grad_norm = optimizer_->clip_grad_norm(config_.optimizer.grad_clip);
  optimizer_->step(lr);
  ++step_;
  rec.step = step_;
  rec.epoch = ts.epoch;
  rec.lr = lr;
  rec.loss = loss_sum / denominator;
  cursor_ = ts.cursor;
  return rec;
}

fs::path Run::save(const data::DataCursor& cursor) {
  metrics_->flush();  // a diverged loss stops here, before it overwrites a good checkpoint
  const auto start = Clock::now();
  TrainingState state;
  state.step = step_;
  state.total_steps = total_steps_;
  state.data_cursor = cursor.to_json();
  state.counters = counters_;
  state.config_yaml = to_yaml(config_);
  state.optimizer = optimizer_->state();
  state.rng = capture_rng_states();
  const fs::path dir = save_checkpoint(output_dir_, model_.config, model_.model->parameters(), dtype_,
                                       config_.model.path, state);
  prune_checkpoints(output_dir_, config_.checkpoint.keep_last);
  last_saved_step_ = step_;
  last_checkpoint_ = dir;
  metrics_->note("checkpoint", {{"step", step_}, {"path", dir.string()}, {"seconds", seconds_since(start)}});
  log::info("saved checkpoint " + dir.string() + " (" + format_duration(seconds_since(start)) + ")");
  return dir;
}

void Run::run_eval() {
  if (config_.data.eval.empty()) return;
  data::DataPipeline eval_data(make_data_options(config_, /*eval=*/true), tokenizer_);
  const EvalResult r = evaluate(*model_.model, eval_data, device_.device, config_.logging.eval_max_batches);
  metrics_->record_eval(step_, r.loss, r.supervised_tokens, r.seconds);
}

TrainOutcome Run::execute() {
  set_up();
  install_stop_handlers();
  TrainOutcome outcome;
  const auto run_start = Clock::now();
  bool data_exhausted = false;
  while (step_ < total_steps_) {
    const auto step_start = Clock::now();
    std::optional<data::TrainStep> ts = data_->next_step();
    const double wait = seconds_since(step_start);
    if (!ts) {
      data_exhausted = true;
      break;
    }
    if (ts->global_supervised == 0) {
      log::warn("a step of the data stream has no supervised token; skipped");
      continue;
    }
    StepRecord rec;
    try {
      rec = train_step(*ts);
    } catch (const c10::OutOfMemoryError& e) {
      int64_t tokens = 0;
      for (const auto& mb : ts->micro_batches) tokens = std::max<int64_t>(tokens, mb.num_tokens);
      throw std::runtime_error(
          "out of memory in step " + std::to_string(step_ + 1) + " (largest micro-batch " + std::to_string(tokens) +
          " tokens). Lower batching.examples_per_micro_batch or batching.max_tokens (raise "
          "batching.grad_accumulation to keep the step size), or set model.activation_checkpointing: every_layer. "
          "The last checkpoint is " + (last_checkpoint_ ? last_checkpoint_->string() : std::string("none")) +
          ".\n" + e.what_without_backtrace());
    }
    rec.data_wait_seconds = wait;
    rec.step_seconds = seconds_since(step_start);
    counters_["tokens"] = counters_["tokens"].get<int64_t>() + (rec.tokens - rec.padding);
    counters_["supervised_tokens"] = counters_["supervised_tokens"].get<int64_t>() + rec.supervised;
    counters_["train_seconds"] = counters_["train_seconds"].get<double>() + rec.step_seconds;
    const bool stop_here = config_.training.stop_at_step > 0 && step_ == config_.training.stop_at_step &&
                           step_ < total_steps_;
    const bool stopping = stop_requested() || stop_here;
    metrics_->record(rec, config_.logging.log_interval, /*force=*/stopping);

    if (config_.logging.eval_interval > 0 && step_ % config_.logging.eval_interval == 0 && step_ < total_steps_)
      run_eval();
    if (config_.checkpoint.interval > 0 && step_ % config_.checkpoint.interval == 0) save(cursor_);
    if (stopping) {
      outcome.interrupted = true;
      outcome.signal = stop_requested() ? stop_signal_number() : 0;
      break;
    }
  }
  if (data_exhausted && step_ < total_steps_)
    log::info("the data ended after " + std::to_string(step_) + " steps (training.epochs reached)");

  if (outcome.interrupted) {
    if (last_saved_step_ != step_) save(cursor_);
    const std::string why = outcome.signal == SIGTERM ? "SIGTERM"
                            : outcome.signal == SIGINT ? "SIGINT"
                                                       : "training.stop_at_step";
    log::info("stopped by " + why + " after step " +
              std::to_string(step_) + "; checkpoint " + last_checkpoint_->string() +
              "; run the same command again to resume");
  } else {
    if (!config_.data.eval.empty()) run_eval();
    if (config_.checkpoint.save_final && last_saved_step_ != step_) save(cursor_);
  }

  outcome.steps_completed = step_;
  outcome.total_steps = total_steps_;
  outcome.last_checkpoint = last_checkpoint_;
  outcome.summary = metrics_->summary();
  outcome.summary["steps_completed"] = step_;
  outcome.summary["total_steps"] = total_steps_;
  outcome.summary["interrupted"] = outcome.interrupted;
  outcome.summary["wall_seconds"] = seconds_since(run_start);
  outcome.summary["dtype"] = models::dtype_name(dtype_);
  outcome.summary["attention"] = std::string(attention::backend_name(backend_));
  if (last_checkpoint_) outcome.summary["checkpoint"] = last_checkpoint_->string();
  outcome.summary["data"] = cursor_.stats.to_json();  // every example read: used, truncated, dropped, skipped
  std::ofstream(output_dir_ / "summary.json") << outcome.summary.dump(2) << "\n";

  const auto& t = metrics_->totals();
  std::string line = "done: " + std::to_string(step_) + "/" + std::to_string(total_steps_) + " steps";
  if (t.first_loss && t.last_loss) {
    char buf[96];
    std::snprintf(buf, sizeof buf, " | loss %.4f -> %.4f", *t.first_loss, *t.last_loss);
    line += buf;
  }
  if (t.last_eval_loss) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " | eval loss %.4f", *t.last_eval_loss);
    line += buf;
  }
  if (t.seconds > 0)
    line += " | " + fmt_count(t.tokens) + " tokens (" + fmt_count(t.supervised) + " supervised) at " +
            fmt_count(static_cast<int64_t>(t.tokens / t.seconds)) + " tok/s";
  if (outcome.summary.contains("mfu")) {
    char buf[32];
    std::snprintf(buf, sizeof buf, " | MFU %.1f%%", 100 * outcome.summary["mfu"].get<double>());
    line += buf;
  }
  if (device_.device.is_cuda()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " | peak memory %.1f GiB",
                  outcome.summary.value("peak_allocated_bytes", int64_t{0}) / 1073741824.0);
    line += buf;
  }
  line += " | " + format_duration(seconds_since(run_start)) + " | summary " + (output_dir_ / "summary.json").string();
  log::info(line);
  // The data accounting (nothing is dropped silently).
  std::ostringstream data_stats;
  data::print_data_stats(data_stats, cursor_.stats);
  std::istringstream lines(data_stats.str());
  for (std::string l; std::getline(lines, l);)
    if (!l.empty()) log::info("data: " + l);
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
