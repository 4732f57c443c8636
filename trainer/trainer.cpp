#include "trainer/trainer.h"

#include "common/byte_units.h"
#include "data/data_pipeline.h"
#include "models/checkpoint.h"
#include "models/grad_sinks.h"
#include "models/lora_adapter.h"
#include "models/parameter_layout.h"
#include "models/peft_format.h"
#include "distributed/group.h"
#include "trainer/allocator_settings.h"
#include "trainer/checkpoint_planner.h"
#include "optim/adamw.h"
#include "trainer/checkpoint_store.h"
#include "trainer/data_parallel.h"
#include "trainer/device_batch.h"
#include "trainer/device_info.h"
#include "trainer/evaluate.h"
#include "common/enum_names.h"
#include "optim/grad_reducer.h"
#include "trainer/log/log.h"
#include "trainer/lr_schedule.h"
#include "trainer/memory_advice.h"
#include "trainer/memory_phase.h"
#include "trainer/memory_trace.h"
#include "trainer/metrics.h"
#include "trainer/model_setup.h"
#include "trainer/step_profiler.h"
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
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <unordered_map>

namespace fptrain::trainer {

using distributed::CommClock;
using optim::AdamW;
using optim::DataParallelSpec;
using optim::FlatLayout;
using optim::FlatSegment;
using optim::GradReducer;

namespace fs = std::filesystem;
namespace {

// Appended to the error of a checkpoint that cannot be read when resuming: which one it was and,
// where an older checkpoint exists, how to continue from that one instead.
std::string damaged_checkpoint_hint(const fs::path& from, const TrainConfig& config) {
  std::string hint = " (while resuming from " + from.string();
  std::optional<fs::path> previous;
  for (const auto& c : list_checkpoints(config.output_dir)) {
    std::error_code ec;
    if (fs::equivalent(c, from, ec)) break;
    previous = c;
  }
  if (previous)
    hint += "; if that checkpoint is damaged, set resume: " + previous->string() +
            " to continue from the one before it, or move it out of " + from.parent_path().string();
  return hint + ")";
}

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

// training.deterministic for one run: ATen's process-wide flag (which our attention kernels
// read), put back as it was when the run ends, so one run does not change the next.
class DeterministicScope {
 public:
  void enable() {
    // cuBLAS is repeatable only with a fixed workspace configuration; ATen checks this variable on
    // every GEMM under the flag and would warn each time. Handles made from now on (the backward's
    // thread makes its own) take it; a user's own value stays.
    setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    previous_ = at::globalContext().deterministicAlgorithms();
    previous_warn_only_ = at::globalContext().deterministicAlgorithmsWarnOnly();
    at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/true);
    enabled_ = true;
  }
  ~DeterministicScope() {
    if (enabled_) at::globalContext().setDeterministicAlgorithms(previous_, previous_warn_only_);
  }

 private:
  bool enabled_ = false, previous_ = false, previous_warn_only_ = false;
};

// Why the loop ended early (kNone: it ran to total_steps).
enum class Stop { kNone, kSignal, kStopAtStep, kDataEnded };

class Run {
 public:
  explicit Run(const TrainConfig& config) : config_(config), output_dir_(config.output_dir) {}
  TrainOutcome execute();
  // This rank failed: the others learn it at once (data parallelism).
  void report_failure(const std::string& message) noexcept {
    if (group_) group_->report_failure(message);
  }

 private:
  void set_up();
  void open_output_dir(int rank);
  std::optional<TrainingState> open_model_and_state();
  [[noreturn]] void explain_setup_oom(const std::string& phase, const c10::OutOfMemoryError& e) const;
  void open_data(const std::optional<TrainingState>& state);
  void restore(const TrainingState& state);
  void start_records();
  void log_set_up();
  void log_adapter() const;
  void plan_checkpointing();
  void apply_checkpoint_plan(int64_t tokens, int64_t scores);
  int64_t gradients_at_activation_peak() const;
  void make_optimizer();
  std::vector<std::pair<std::string, at::Tensor>> device_buffers() const;
  void wait_for_weights_stage_by_stage();
  nlohmann::json memory_per_rank() const;
  std::string offloaded_memory_text(const nlohmann::json& m) const;
  std::string gradient_release_text(const nlohmann::json& m) const;
  bool leader() const { return !group_ || group_->rank() == 0; }
  int rank() const { return group_ ? group_->rank() : 0; }
  int world() const { return group_ ? group_->world_size() : 1; }
  StepRecord train_step(const data::TrainStep& step);
  StepRecord train_step_or_explain_oom(const data::TrainStep& step);
  Stop stop_reason();
  void evaluate_and_save_on_schedule();
  TrainOutcome finish(Stop stop, double wall_seconds);
  void save();
  ModelWriter model_writer() const;
  void save_merged();
  void run_eval();

  TrainConfig config_;
  fs::path output_dir_;
  std::unique_ptr<OutputDirLock> lock_;
  DeviceInfo device_;
  std::optional<fs::path> resume_from_;
  LoadedModel model_;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<data::DataPipeline> data_;
  std::unique_ptr<distributed::Group> group_;  // data parallelism; null for one process
  int local_ranks_ = 1;                          // processes of this run on this machine
  std::unique_ptr<AdamW> optimizer_;
  std::shared_ptr<models::GradSinks> grad_sinks_;  // the projections' gradients, written into the flat buffer
  std::unique_ptr<GradReducer> reducer_;  // with group_
  std::unique_ptr<CommClock> comm_clock_;  // with group_
  // model.activation_checkpointing: auto, or every_<k> with model.recompute: auto; on CUDA.
  std::unique_ptr<AutoCheckpointing> checkpoint_planner_;
  DeterministicScope deterministic_;  // training.deterministic
  std::unique_ptr<MetricsLogger> metrics_;
  std::unique_ptr<StepProfiler> profiler_;  // logging.profile_steps; rank 0 only
  std::unique_ptr<MemoryTrace> memory_trace_;  // logging.memory_trace_step; rank 0 only
  int64_t first_step_ = 0;  // the step this process started from
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
    profiler_->begin_step(step_);
    // A stop request also ends the wait for data (a long stretch of skipped
    // lines can hold the next step back for minutes) — for one process only:
    // data-parallel ranks must all take the same steps, and agree on stopping.
    const std::optional<data::TrainStep> batch = group_ ? data_->next_step() : data_->next_step(stop_requested);
    if (!batch) {
      stop = stop_requested() ? Stop::kSignal : Stop::kDataEnded;
      break;
    }
    const double data_wait = seconds_since(step_start);
    if (batch->global_supervised == 0) {
      log::warn("a step of the data stream has no supervised token; skipped");
      continue;
    }
    memory_trace_->begin_step(step_, *model_.model);
    StepRecord rec = train_step_or_explain_oom(*batch);
    memory_trace_->end_step();
    rec.data_wait_seconds = data_wait;
    rec.step_seconds = seconds_since(step_start);
    counters_.tokens += rec.tokens - rec.padding;
    counters_.supervised_tokens += rec.supervised;
    counters_.train_seconds += rec.step_seconds;
    stop = stop_reason();
    metrics_->record(rec, config_.logging.log_interval, /*force=*/stop != Stop::kNone);
    evaluate_and_save_on_schedule();
    profiler_->end_step(step_);
  }
  TrainOutcome outcome = finish(stop, seconds_since(run_start));
  if (group_) group_->finish();
  return outcome;
}

// Forward + backward of every micro-batch (loss sum / the step's supervised
// count, known before any compute), clipping, AdamW at the scheduled rate.
StepRecord Run::train_step(const data::TrainStep& ts) {
  const double denominator = static_cast<double>(ts.global_supervised);
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device_.device));
  StepRecord rec;
  // Backward adds every micro-batch's gradients into the optimizer's flat buffer
  // in place; with fp32 accumulation they move into fp32 sums between micro-batches.
  // With data parallelism the last micro-batch's backward reduces the gradients
  // across ranks as its buckets fill (GradReducer), after the fp32 sums (every
  // rank has as many slots, so every rank reduces them or none does).
  const bool fp32_sums = config_.optimizer.fp32_grad_accumulation && optimizer_->has_master_weights() &&
                         ts.micro_batches.size() > 1;
  int64_t remaining = 0;
  for (const auto& mb : ts.micro_batches) remaining += mb.num_tokens > 0;
  auto before_last = [&] {
    if (!reducer_) return;
    if (fp32_sums) optimizer_->reduce_accumulated();
    reducer_->arm();
  };
  if (remaining == 0) {  // nothing to compute: this rank still reduces with the others
    // ... after the all-gathers that the others' forward starts bucket by bucket (offloaded).
    optimizer_->wait_for_all_weights();
    before_last();
  }
  if (grad_sinks_) grad_sinks_->begin_step(1.0 / denominator);  // the loss's grad_output below
  for (const auto& mb : ts.micro_batches) {
    if (mb.num_tokens == 0) continue;  // an empty slot at the end of an epoch
    memory_phase::StageScope stage("forward");  // the memory trace's labels (memory_trace.h)
    const DeviceBatch b = to_device(mb, device_.device);
    if (checkpoint_planner_) apply_checkpoint_plan(b.num_tokens, attention_scores(mb.cu_seqlens));
    if (remaining == 1) before_last();
    const models::LossOutput out = model_.model->loss(b.input, b.labels, b.labels_host);
    memory_trace_->label_loss(out.loss_sum);
    (out.loss_sum / denominator).backward();
    if (--remaining > 0 && fp32_sums) optimizer_->accumulate_gradients();
    loss_sum += out.loss_sum.detach();
  }
  // The whole step's figures (every rank's micro-batches).
  rec.examples = ts.global_examples;
  rec.tokens = ts.global_tokens;
  rec.padding = ts.global_padding;
  rec.supervised = ts.global_supervised;
  rec.busiest_rank_work = ts.busiest_rank_work;
  rec.mean_rank_work = ts.mean_rank_work;
  if (grad_sinks_) grad_sinks_->finish_step();  // zero what no backward of this step wrote (before it is reduced)
  memory_phase::StageScope stage("gradient reduction");
  if (reducer_) {
    comm_clock_->before_wait();
    reducer_->finish();
    comm_clock_->after_wait();
    group_->comm().all_reduce_sum(loss_sum).wait();  // for the log; nothing waits for it
  }
  const double lr = learning_rate(config_.schedule, config_.optimizer.lr, step_, total_steps_);
  if (memory_trace_->recording()) memory_trace_->name_buffers(device_buffers());
  memory_phase::set_stage("optimizer");
  // The norm and the clip coefficient stay on the device; step() applies the coefficient in its kernel.
  rec.grad_norm = optimizer_->grad_norm(config_.optimizer.grad_clip);
  optimizer_->step(lr, comm_clock_.get());
  if (comm_clock_) rec.comm = comm_clock_->take();
  ++step_;
  if (group_) group_->set_step(step_);
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
    const std::string trace = memory_trace_->out_of_memory();
    int64_t tokens = 0;
    for (const auto& mb : ts.micro_batches) tokens = std::max<int64_t>(tokens, mb.num_tokens);
    // Suggest only what is not already set: with every layer recomputed, what is left is the
    // micro-batch, the optimizer state (sharded over more ranks) or the fp32 masters.
    std::string also;
    if (config_.model.activation_checkpointing != Checkpointing::every(1)) also += ", or set model.activation_checkpointing: every_layer";
    if (config_.model.recompute == Recompute::kReplay)
      also += ", or set model.recompute: auto (plain recomputation on the layers where replayed does not fit)";
    if (config_.optimizer.master_weights)
      also += ", or shard the fp32 master weights and moments over more GPUs or set optimizer.master_weights: " +
              std::string(config_.optimizer.split_masters ? "" : "split (the same training, 2 bytes less) or ") +
              "false";
    if (config_.optimizer.moments != optim::Moments::k8bit)
      also += ", or set optimizer.state_dtype: int8 (about 2 bytes per parameter for both moments)";
    if (config_.optimizer.offload == optim::Offload::kNone && !model_.adapter)
      also += ", or set optimizer.offload: cpu (masters and moments in host memory)";
    throw std::runtime_error(
        "out of memory in step " + std::to_string(step_ + 1) + " (largest micro-batch " + std::to_string(tokens) +
        " tokens). Lower batching.examples_per_micro_batch or batching.max_tokens (raise "
        "batching.grad_accumulation to keep the step size)" + also + ". The last checkpoint is " +
        (last_checkpoint_ ? last_checkpoint_->string() : std::string("none")) + "." + trace + "\n" +
        e.what_without_backtrace());
  }
}

void Run::explain_setup_oom(const std::string& phase, const c10::OutOfMemoryError& e) const {
  const models::ModelConfig model =
      model_.model ? model_.config : models::load_model_config(fs::path(config_.model.path) / "config.json");
  const int64_t bytes = static_cast<int64_t>(c10::elementSize(resolve_dtype(config_.model.dtype, device_.device)));
  throw std::runtime_error(setup_oom_message(phase, config_, model, bytes, world(), memory_total(device_.device),
                                             e.what_without_backtrace()));
}

Stop Run::stop_reason() {
  bool stop = stop_requested();
  // A signal may reach some ranks only: the group votes (Group::stop_vote).
  if (group_) stop = group_->stop_vote(step_, stop, first_step_ + 1);
  if (stop) return Stop::kSignal;
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
  // Launched by torchrun, srun or by hand with RANK / WORLD_SIZE / ...: one rank of a group.
  const std::optional<distributed::LaunchEnv> env = distributed::read_launch_env();
  if (env) log::set_rank(env->rank);
  if (env) local_ranks_ = env->local_world_size;
  open_output_dir(env ? env->rank : 0);
  device_ = resolve_device(env ? rank_device(config_.device, *env) : config_.device, config_.cpu_threads);
  const std::string allocator = choose_allocator_settings(device_.device, !env || env->world_size == 1);
  if (!allocator.empty()) log::info(allocator);
  if (env) {
    group_ = join_group(config_, device_, *env);
    check_same_configuration(*group_, config_);
  }
  resume_from_ = agree_on_resume(group_.get(), config_);
  std::optional<TrainingState> state;
  try {
    state = open_model_and_state();
  } catch (const c10::OutOfMemoryError& e) {
    explain_setup_oom("loading the model", e);
  }
  tokenizer_ = load_checked_tokenizer(config_.model.path, model_.config);
  open_data(state);
  try {
    make_optimizer();
  } catch (const c10::OutOfMemoryError& e) {
    explain_setup_oom("allocating the gradients and the optimizer state", e);
  }
  if (config_.training.deterministic) {
    // Our attention kernels read this to pick the atomic-free dQ pass; ATen ops without a
    // deterministic implementation warn instead of failing the run.
    deterministic_.enable();
    log::info("training.deterministic: attention backward without atomics, ATen's deterministic algorithms");
  }
  if (state) {
    restore(*state);
  } else {
    at::manual_seed(config_.training.seed);
  }
  first_step_ = step_;
  if (group_) group_->set_step(step_);
  start_records();
  log_set_up();
  plan_checkpointing();
  if (resume_from_) log::info("resumed from " + resume_from_->string() + " at step " + std::to_string(step_));
}

void Run::open_output_dir(int rank) {
  std::error_code ec;
  fs::create_directories(output_dir_, ec);
  if (ec || !fs::is_directory(output_dir_))
    throw std::runtime_error(output_dir_.string() + ": cannot create the output folder (" +
                             (ec ? ec.message() : std::string("not a folder")) +
                             "); output_dir must be a writable folder");
  if (rank == 0) {  // the group's files are rank 0's
    lock_ = std::make_unique<OutputDirLock>(output_dir_);
    log::also_to_file((output_dir_ / "train.log").string());
  }
}

// The model: the checkpoint's weights when resuming (the optimizer state then
// restores the fp32 masters exactly), else the configured model.
std::optional<TrainingState> Run::open_model_and_state() {
  std::optional<TrainingState> state;
  try {
    if (resume_from_) state = load_training_state(*resume_from_, rank(), world());
    // Adapters train on the configured base: a checkpoint holds only the adapters.
    const bool adapted = config_.adapter.type != AdapterType::kNone;
    const fs::path weights = resume_from_ && !adapted ? *resume_from_ : fs::path(config_.model.path);
    model_ = open_model(config_, device_.device, weights, /*trainable=*/true,
                        adapted ? resume_from_ : std::nullopt);
  } catch (const c10::Error&) {
    throw;  // LibTorch's own (out of memory, CUDA): not the checkpoint's doing; train() reports them
  } catch (const std::invalid_argument& e) {
    if (!resume_from_) throw;
    throw std::invalid_argument(e.what() + damaged_checkpoint_hint(*resume_from_, config_));
  } catch (const std::exception& e) {
    if (!resume_from_) throw;
    throw std::runtime_error(e.what() + damaged_checkpoint_hint(*resume_from_, config_));
  }
  return state;
}

void Run::open_data(const std::optional<TrainingState>& state) {
  data::DataOptions options = make_data_options(config_, /*eval=*/false, rank(), world());
  // What the ranks' shares of a step cost: how flatten deals them, and the balance the metrics report.
  if (world() > 1)
    options.balance_attention_length = attention_cost_length(model_.config);
  total_steps_ = config_.training.max_steps;
  if (total_steps_ == 0) {
    log::info("counting the steps of " + std::to_string(config_.training.epochs) + " epoch(s)...");
    total_steps_ = data::count_steps(options, tokenizer_);
    if (total_steps_ == 0) throw std::runtime_error("data.train yields no training step");
  }
  if (state) cursor_ = data::DataCursor::from_json(state->data_cursor);
  data_ = std::make_unique<data::DataPipeline>(options, tokenizer_,
                                               state ? std::optional<data::DataCursor>(cursor_) : std::nullopt);
}

// A resumed run: the optimizer, RNG states, step and counters of the checkpoint.
void Run::restore(const TrainingState& state) {
  optimizer_->load_state(state.optimizer, state.step, state.tensors_file.string());
  const bool saved_8bit = std::any_of(state.optimizer.begin(), state.optimizer.end(),
                                      [](const auto& t) { return t.first.rfind("exp_avg_codes.", 0) == 0; });
  if (saved_8bit != optimizer_->moments_8bit())
    log::info(saved_8bit ? "the checkpoint's 8-bit moments were dequantised (optimizer.state_dtype: auto)"
                         : "the checkpoint's moments were quantised to 8 bits (optimizer.state_dtype: int8)");
  if (state.world_size != world())
    log::info("the checkpoint was written by " + std::to_string(state.world_size) + " rank(s); continuing on " +
              std::to_string(world()) + " (the data continues where it stopped; the global batch is now " +
              std::to_string(world()) + " x the per-rank micro-batches x grad_accumulation)");
  if (state.optimizer_shards != (optimizer_->sharded() ? world() : 1))
    log::info("the checkpoint's optimizer state was " +
              (state.optimizer_shards > 1 ? "sharded over " + std::to_string(state.optimizer_shards) + " ranks"
                                          : std::string("whole")) +
              (optimizer_->sharded() ? "; resharded for " + std::to_string(world()) + " ranks"
               : world() > 1         ? "; every rank of " + std::to_string(world()) + " holds all of it"
                                     : std::string("; loaded whole")));
  restore_rng_states(state.rng);
  step_ = state.step;
  last_saved_step_ = step_;
  last_checkpoint_ = resume_from_;
  counters_ = state.counters;
  if (state.total_steps != total_steps_)
    log::warn("the checkpoint was written by a run of " + std::to_string(state.total_steps) + " steps; this run has " +
              std::to_string(total_steps_) + " (the schedule changes)");
}

// config.yaml, metrics and the step profiler.
void Run::start_records() {
  if (leader()) common::write_file_atomically(output_dir_ / "config.yaml", to_yaml(config_));
  MetricsScope scope;
  scope.world_size = world();
  scope.writer = leader();
  if (group_)
    scope.max_over_ranks = [this](const std::vector<int64_t>& mine) { return group_->max_over_ranks(mine); };
  metrics_ = std::make_unique<MetricsLogger>(output_dir_, total_steps_, model_.config.num_parameters(), device_, step_,
                                             std::move(scope));
  profiler_ = std::make_unique<StepProfiler>(leader() ? config_.logging.profile_steps : 0,
                                             config_.logging.profile_warmup, output_dir_, device_);
  memory_trace_ = std::make_unique<MemoryTrace>(leader() ? config_.logging.memory_trace_step : 0, output_dir_,
                                                device_.device);
}

void Run::log_set_up() {
  log_run_banner(config_, model_.config, device_, model_.dtype, model_.backend, optimizer_->has_master_weights(),
                 total_steps_);
  if (model_.adapter) log_adapter();
  if (group_) {
    const FlatLayout& l = optimizer_->flat().layout();
    const nlohmann::json m = memory_per_rank();
    log::info("data parallel: " + std::to_string(world()) + " ranks (" + group_->comm().kind() + "), optimizer " +
              (optimizer_->sharded() ? "sharded (each rank: 1/" + std::to_string(world()) + " of masters and moments)"
                                     : std::string("replicated")) +
              ", " + std::to_string(l.buckets().size()) + " gradient bucket(s) of up to " +
              std::to_string(config_.distributed.bucket_mb_for(world())) + " MiB; per rank " + common::gib_text(m["weights_bytes"]) +
              " weights, " + common::gib_text(m["gradients_bytes"]) + " gradients, " + common::gib_text(m["optimizer_state_bytes"]) +
              " optimizer state");
  }
  // What set-up allocated, by buffer kind, and what is left for activations (the plan's budget).
  const nlohmann::json m = memory_per_rank();
  const bool lazy = optimizer_->flat().gradients().storage() == optim::GradStorage::kLazy;
  std::string plan = "memory of this rank after set-up: " + common::gib_text(m["weights_bytes"]) + " weights, " +
                     common::gib_text(m["gradients_bytes"]) +
                     (!lazy                          ? " gradients, "
                      : reducer_ && reducer_->releases() ? " gradients (not yet: whole buckets in the backward (the head's from "
                                                           "the loss), this rank's "
                                                           "slices from its reductions to the step), "
                                                         : " gradients (not yet: held from the first backward, the "
                                                           "head's bucket from the first loss, to the step), ") +
                     common::gib_text(m["optimizer_state_bytes"]) + " optimizer state (" +
                     common::gib_text(m["master_weights_bytes"]) + " master weights" +
                     (optimizer_->split_masters() ? " as 16-bit remainders, " : ", ") +
                     common::gib_text(m["moments_bytes"]) +
                     (optimizer_->moments_8bit() ? " 8-bit moments with their absmax)" : " moments)");
  if (optimizer_->offloaded()) plan = offloaded_memory_text(m);
  if (device_.device.is_cuda()) {
    const MemoryStats mem = memory_stats(device_.device);
    plan += " (" + common::gib_text(mem.peak_allocated_bytes) + " peak allocated); " +
            common::gib_text(memory_available(device_.device)) + " of the device's " +
            common::gib_text(memory_total(device_.device)) + " left for activations and workspace";
  }
  log::info(plan);
  log::info(gradient_release_text(m));
  const optim::FlatGradients& g = optimizer_->flat().gradients();
  log::info(lazy ? "gradient storage: lazy (" + std::to_string(optimizer_->flat().layout().buckets().size()) +
                       " bucket(s) of up to " + std::to_string(config_.distributed.bucket_mb_for(world())) +
                       " MiB, each allocated when the backward first reaches it and freed after the step" +
                       (reducer_ && reducer_->releases() ? ", but for this rank's slice once reduced" : "") + ")"
                 : "gradient storage: resident (one buffer of " + common::gib_text(g.bytes()) +
                       " for the run: optimizer.gradient_storage is resident)");
}

// The set-up memory line of an offloaded optimizer: the device's part (with the device
// update, its staging slots), then the host's, and where the update runs.
std::string Run::offloaded_memory_text(const nlohmann::json& m) const {
  const int64_t host = m["host_optimizer_bytes"], masters = m["master_weights_bytes"], moments = m["moments_bytes"];
  const optim::StreamedStep* streamed = optimizer_->streamed();
  const std::string buckets = std::to_string(optimizer_->flat().layout().buckets().size()) + " bucket(s)";
  const std::string where =
      streamed ? "updates it on the device (optimizer.offload_update: device): " + buckets + " streamed in " +
                     std::to_string(streamed->pieces().size()) + " piece(s) through " +
                     common::gib_text(optimizer_->staging_bytes()) + " of device staging (two slots)"
               : "updates it in " + buckets + " on " + std::to_string(optimizer_->offload()->threads()) +
                     " host thread(s) (optimizer.offload_update: host)";
  return "memory of this rank after set-up: " + common::gib_text(m["weights_bytes"]) + " weights, " +
         common::gib_text(m["gradients_bytes"]) + " gradients, " + common::gib_text(m["optimizer_state_bytes"]) +
         " optimizer state on the device; optimizer.offload: cpu keeps " + common::gib_text(host) + " in " +
         (device_.device.is_cuda() ? "pinned " : "") + "host memory (" + common::gib_text(masters) +
         " master weights" + (optimizer_->split_masters() ? " as 16-bit remainders, " : ", ") +
         common::gib_text(moments) + (optimizer_->moments_8bit() ? " 8-bit moments" : " moments") +
         (streamed ? "" : ", " + common::gib_text(host - masters - moments) + " weight copy and staging") + ") and " +
         where;
}

// What a rank holds of the gradients from its reductions to the step, and why (the
// setting and the storage), for the log and benchmarks/distributed/memory_model.py.
std::string Run::gradient_release_text(const nlohmann::json& m) const {
  return "gradients after the reductions: each rank holds " + common::gib_text(m["gradients_bytes"]) + " of the " +
         common::gib_text(m["gradients_whole_bytes"]) + " gradients (distributed.release_unowned_gradients: " +
         (config_.distributed.release_unowned_gradients ? "true" : "false") + ", gradient storage " +
         common::enum_name(optimizer_->flat().gradients().storage()) + ")";
}

// What trains with adapters, as PEFT's print_trainable_parameters counts it.
void Run::log_adapter() const {
  const models::LoraSettings& s = model_.adapter->settings();
  int64_t trained = 0;
  for (const auto& [name, t] : model_.adapter->tensors()) trained += t.numel();
  const int64_t base = model_.config.num_parameters();
  std::string names;
  for (const auto& n : model_.adapter->target_module_names()) names += (names.empty() ? "" : ", ") + n;
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "adapter: %s r %lld, alpha %g (scale %g%s), dropout %g, %zu projections (%s); %.2fM trainable "
                "parameters, %.3f%% of %.2fB",
                model_.nf4 ? "QLoRA (NF4 base)" : "LoRA", static_cast<long long>(s.r), s.alpha, s.scale(),
                s.rslora ? ", rslora" : "", s.dropout, model_.adapter->modules().size(), names.c_str(),
                static_cast<double>(trained) / 1e6, 100.0 * static_cast<double>(trained) / static_cast<double>(base + trained),
                static_cast<double>(base) / 1e9);
  log::info(buf);
}

// Gradient bytes not yet allocated after set-up but held when the activations peak (the
// end of a forward): with lazy storage the first bucket reached while every activation is
// still held (the head's, which the fused loss writes at the end of the forward; it keeps
// no other [vocab, hidden] tensor), or, with several micro-batches, all of them (the later
// forwards run with the gradients). Resident gradients are allocated already.
int64_t Run::gradients_at_activation_peak() const {
  const optim::FlatGradients& g = optimizer_->flat().gradients();
  if (g.storage() == optim::GradStorage::kResident) return 0;
  if (config_.batching.grad_accumulation > 1) return g.bytes();
  return g.largest_bucket_bytes();
}

// What the memory trace names among the blocks alive after the backward: the weights, the
// gradients as held now (buckets, shards, the fp32 sums) and the optimizer state.
std::vector<std::pair<std::string, at::Tensor>> Run::device_buffers() const {
  const optim::FlatParameters& flat = optimizer_->flat();
  std::vector<std::pair<std::string, at::Tensor>> out = {
      {"weights", flat.weights()},           {"master weights", optimizer_->master()},
      {"moments", optimizer_->exp_avg()},    {"moments", optimizer_->exp_avg_sq()},
      {"moments", optimizer_->exp_avg_absmax()}, {"moments", optimizer_->exp_avg_sq_absmax()},
      {"gradients (fp32 sums)", optimizer_->accumulator()}};
  const optim::FlatGradients& g = flat.gradients();
  if (g.storage() == optim::GradStorage::kResident) out.emplace_back("gradients", g.buffer());
  for (size_t b = 0; b < flat.layout().buckets().size(); ++b) {
    out.emplace_back("gradients", g.bucket(b));
    out.emplace_back("gradients", g.shard(b));
  }
  if (model_.adapter)
    for (const auto& [name, t] : model_.model->parameters()) out.emplace_back("weights (frozen base)", t);
  return out;
}

// model.activation_checkpointing: auto, and every_<k> under model.recompute: auto (replayed
// where it fits, plain on as many layers as needed, so an explicit every_layer never keeps
// more than plain recomputation would), from the device memory left after set-up.
void Run::plan_checkpointing() {
  const Checkpointing& setting = config_.model.activation_checkpointing;
  const bool every_k = setting.mode == Checkpointing::Mode::kEveryK;
  if (setting.mode != Checkpointing::Mode::kAuto && !(every_k && config_.model.recompute == Recompute::kAuto))
    return;
  if (!device_.device.is_cuda()) {
    if (!every_k) log::info("activation checkpointing auto: none on the CPU (no device memory to save)");
    return;
  }
  const int64_t budget = memory_available(device_.device) - gradients_at_activation_peak();
  checkpoint_planner_ = std::make_unique<AutoCheckpointing>(
      activation_shape(model_.config, model_.dtype, model_.backend), budget, config_.model.recompute);
  log::info(every_k ? checkpoint_planner_->describe_every_k(setting.every_k) : checkpoint_planner_->describe());
}

// The cheapest recomputation this micro-batch fits with.
void Run::apply_checkpoint_plan(int64_t tokens, int64_t scores) {
  const Checkpointing& setting = config_.model.activation_checkpointing;
  CheckpointSwitch& control = *model_.checkpointing;
  if (setting.mode == Checkpointing::Mode::kEveryK) {
    control.plain = checkpoint_planner_->every_k_plan(setting.every_k, tokens, scores).plain;
    return;
  }
  const LayerPlan plan = checkpoint_planner_->plan(tokens, scores);
  control.set_plan(plan.recomputed, plan.selective, plan.plain);
}

void Run::make_optimizer() {
  std::vector<std::string> names;
  std::vector<at::Tensor> params;
  for (auto& [name, t] : model_.trained()) {
    names.push_back(name);
    params.push_back(t);
  }
  const DataParallelSpec dp = data_parallel_spec(group_.get(), config_, params.front().scalar_type(), names);
  optim::OptimizerSection options = config_.optimizer;
  options.host_threads = offload_host_threads(config_.cpu_threads, local_ranks_);
  optimizer_ = std::make_unique<AdamW>(names, params, options, FlatLayout::kDefaultAlignment, dp);
  if (!model_.adapter) {
    // The projection weights' gradients are written by their backward GEMMs into
    // their slots of the flat gradients (allocated on demand), and the head's by the
    // fused loss's forward, the input embedding's by its backward into the tokens' rows
    // (zeroing the rest), so those slots are neither zeroed nor initialised for them.
    optim::FlatParameters& flat = optimizer_->flat();
    auto slot_of = [&flat](const at::Tensor& w) {
      const size_t i = flat.index_of(w);
      return models::GradSlot([&flat, i](bool need) {
        return need ? flat.gradients().acquire_view(i) : flat.gradients().view(i);
      });
    };
    grad_sinks_ = std::make_shared<models::GradSinks>(model_.model->projections(), slot_of,
                                                      &model_.model->head_weight(),
                                                      &model_.model->embedding_weight());
    set_model_ops(model_, config_, device_.device, grad_sinks_);
    models::LossOptions loss = model_.model->loss_options();
    loss.head_grad_sink = grad_sinks_->head();
    model_.model->set_loss_options(loss);
    optimizer_->keep_on_zero(grad_sinks_->params());
  }
  if (group_) {
    reducer_ = attach_to_group(*group_, *optimizer_, config_.optimizer.gradient_storage,
                               config_.distributed.release_unowned_gradients,
                               config_.distributed.released_buckets_in_flight);
    comm_clock_ = std::make_unique<CommClock>(device_.device);
  }
  // Sharded all-gathers and an offloaded update both hand back the weights bucket by bucket.
  if (optimizer_->sharded() || optimizer_->offloaded()) wait_for_weights_stage_by_stage();
}

// The forward waits for each bucket's all-gather or offloaded update (AdamW::step)
// just before the first stage that reads it: the embedding, then layer by layer, then the head.
void Run::wait_for_weights_stage_by_stage() {
  const int64_t layers = model_.config.num_hidden_layers;
  std::vector<int64_t> stage_end(static_cast<size_t>(layers + 2), 0);  // stage s at [s + 1]
  for (const FlatSegment& seg : optimizer_->flat().layout().segments()) {
    const int64_t layer = models::layer_of_name(seg.name);
    // Layer parameters belong to their layer; the others to the embedding
    // stage when they come first in model order, else to the head.
    const int64_t stage = layer >= 0 ? layer : (seg.offset == 0 ? -1 : layers);
    auto& end = stage_end[static_cast<size_t>(stage + 1)];
    end = std::max(end, seg.offset + seg.numel);
  }
  for (size_t s = 1; s < stage_end.size(); ++s) stage_end[s] = std::max(stage_end[s], stage_end[s - 1]);
  AdamW* optimizer = optimizer_.get();
  model_.model->set_before_stage([optimizer, stage_end](int64_t stage) {
    optimizer->wait_for_weights(stage == static_cast<int64_t>(stage_end.size()) - 2 ? std::numeric_limits<int64_t>::max()
                                                                                     : stage_end[static_cast<size_t>(stage + 1)]);
  });
}

void Run::save() {
  metrics_->flush();  // a diverged loss stops here, before it overwrites a good checkpoint
  optimizer_->wait_for_all_weights();
  const auto start = Clock::now();
  TrainingState state;
  state.step = step_;
  state.world_size = world();
  state.total_steps = total_steps_;
  state.data_cursor = cursor_.to_json();
  state.counters = counters_;
  state.config_yaml = to_yaml(config_);
  state.optimizer = optimizer_->state();
  state.rng = capture_rng_states();
  const ModelWriter write_model = model_writer();
  const auto commit = [&](const fs::path& staging, const TrainingState& whole) {
    return commit_checkpoint(staging, output_dir_, write_model, config_.model.path, whole);
  };
  const fs::path dir = group_ ? save_together(*group_, output_dir_, state, optimizer_->sharded(), commit)
                              : save_checkpoint(output_dir_, write_model, config_.model.path, state);
  if (leader()) prune_checkpoints(output_dir_, config_.checkpoint.keep_last);
  last_saved_step_ = step_;
  last_checkpoint_ = dir;
  metrics_->note("checkpoint", {{"step", step_}, {"path", dir.string()}, {"seconds", seconds_since(start)}});
  log::info("saved checkpoint " + dir.string() + " (" + format_duration(seconds_since(start)) + ")");
}

// What a checkpoint holds of the model: the whole model, or the adapters (PEFT's folder,
// loaded onto model.path).
ModelWriter Run::model_writer() const {
  if (!model_.adapter) return hf_model_writer(model_.config, model_.model->parameters(), model_.dtype);
  return [this](const fs::path& dir) { models::write_peft_adapter(dir, *model_.adapter, config_.model.path); };
}

// adapter.save_merged: base + scale B A as an ordinary model folder (with the tokenizer).
void Run::save_merged() {
  if (!leader()) return;
  const auto start = Clock::now();
  const fs::path dir = output_dir_ / "merged";
  const models::TensorMap base = model_.nf4 ? model_.nf4->dequantized(model_.model->parameters(), model_.model->projections())
                                            : model_.model->parameters();
  const models::TensorMap merged = models::merge_lora(base, *model_.adapter);
  models::save_pretrained(dir, model_.config, merged, model_.dtype);
  copy_tokenizer_files(config_.model.path, dir);
  log::info("saved the merged model " + dir.string() + " (" + format_duration(seconds_since(start)) + ")");
}

void Run::run_eval() {
  if (config_.data.eval.empty()) return;
  optimizer_->wait_for_all_weights();
  data::DataPipeline eval_data(make_data_options(config_, /*eval=*/true, rank(), world()), tokenizer_);
  // eval_max_batches caps the whole evaluation: each rank takes its share.
  const int64_t cap = config_.logging.eval_max_batches;
  // Evaluation sees the adapters without their dropout (PEFT in eval mode).
  if (model_.adapter) set_model_ops(model_, config_, device_.device, nullptr, /*dropout_active=*/false);
  const EvalResult r = evaluate(*model_.model, eval_data, device_.device, cap > 0 ? (cap + world() - 1) / world() : 0,
                                group_.get());
  if (model_.adapter) set_model_ops(model_, config_, device_.device, nullptr, /*dropout_active=*/true);
  metrics_->record_eval(step_, r.loss, r.supervised_tokens, r.seconds);
}

// Where this rank's device memory went: the weights and the flat buffers, the peak of
// everything else the allocator held (activations, workspaces, the step's
// temporaries) and what lives outside it (CUDA context, NCCL's buffers, the copy
// engines' flags and receive window).
nlohmann::json Run::memory_per_rank() const {
  // With adapters the flat buffers hold only them: the frozen base (NF4 with qlora) is weights too.
  int64_t weights = optimizer_->flat().weights().nbytes();
  if (model_.adapter) {
    for (const auto& [name, t] : model_.model->parameters()) weights += t.storage().nbytes();
    if (model_.nf4) weights += model_.nf4->nbytes();
  }
  // The gradients as held from the end of the backward to the step (with lazy storage not during
  // the forward; this rank's shards only where the reducer releases the rest).
  const int64_t whole = optimizer_->flat().gradients().bytes();
  const int64_t grads = reducer_ && reducer_->releases() ? whole / world() : whole;
  const int64_t masters = optimizer_->master_bytes(), moments = optimizer_->moment_bytes();
  // Offloaded, masters and moments are host memory: the device holds only the fp32 sums and,
  // with the device update, its staging slots.
  int64_t state = optimizer_->offloaded() ? optimizer_->staging_bytes() : masters + moments;
  if (optimizer_->accumulator().defined()) state += optimizer_->accumulator().nbytes();
  nlohmann::json j = {{"weights_bytes", weights},       {"gradients_bytes", grads}, {"optimizer_state_bytes", state},
                      {"master_weights_bytes", masters}, {"moments_bytes", moments}, {"gradients_whole_bytes", whole}};
  if (optimizer_->offloaded()) j["host_optimizer_bytes"] = optimizer_->host_bytes();
  if (optimizer_->streamed()) j["offload_staging_bytes"] = optimizer_->staging_bytes();
  if (device_.device.is_cuda()) {
    const MemoryStats m = memory_stats(device_.device);
    j["activations_and_workspace_peak_bytes"] = std::max<int64_t>(0, m.peak_allocated_bytes - weights - grads - state);
    j["outside_allocator_bytes"] = memory_outside_allocator(device_.device);
  }
  return j;
}

// The end of a run: the final evaluation and checkpoint (or the one a stop
// asks for), summary.json and the closing log lines.
TrainOutcome Run::finish(Stop stop, double wall_seconds) {
  profiler_->finish();
  optimizer_->wait_for_all_weights();
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
    const std::string why = outcome.signal == SIGTERM ? "SIGTERM"
                            : outcome.signal == SIGINT ? "SIGINT"
                            : stop == Stop::kSignal    ? "a signal to another rank"
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
    if (config_.adapter.save_merged) save_merged();
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
  outcome.summary["memory_per_rank"] = memory_per_rank();
  if (device_.device.is_cuda()) {
    const nlohmann::json& m = outcome.summary["memory_per_rank"];
    log::info("memory of this rank: " + common::gib_text(m["weights_bytes"]) + " weights, " + common::gib_text(m["gradients_bytes"]) +
              " gradients, " + common::gib_text(m["optimizer_state_bytes"]) + " optimizer state, " +
              common::gib_text(m["activations_and_workspace_peak_bytes"]) + " activations and workspace at the peak, " +
              common::gib_text(m["outside_allocator_bytes"]) + " outside the allocator (CUDA context, NCCL, copy-engine buffers)");
    log::info(gradient_release_text(m));
  }
  if (last_checkpoint_) outcome.summary["checkpoint"] = last_checkpoint_->string();
  outcome.summary["data"] = cursor_.stats.to_json();  // every example read: used, truncated, dropped, skipped
  if (leader()) {
    common::write_file_atomically(output_dir_ / "summary.json", outcome.summary.dump(2) + "\n");
    log_run_summary(*metrics_, outcome.summary, cursor_.stats, output_dir_ / "summary.json", wall_seconds);
  }
  return outcome;
}

}  // namespace

TrainOutcome train(const TrainConfig& config) {
  validate(config);
  Run run(config);
  try {
    return run.execute();
  } catch (const c10::Error& e) {  // LibTorch's errors carry a backtrace: one line is enough
    run.report_failure(e.what_without_backtrace());
    throw std::runtime_error(e.what_without_backtrace());
  } catch (const std::exception& e) {
    run.report_failure(e.what());
    throw;
  }
}

}  // namespace fptrain::trainer
