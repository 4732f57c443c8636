// The training configuration: a typed struct read from YAML, with every value
// validated and unknown keys reported with the nearest valid key.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "common/enum_names.h"
#include "data/data_options.h"
#include "models/lora_settings.h"
#include "optim/optimizer_section.h"

namespace fptrain::trainer {

// The data pipeline's own defaults (data/data_options.h): the one place they are set.
inline const data::DataOptions& data_defaults() {
  static const data::DataOptions defaults;
  return defaults;
}

// "auto": bfloat16 on CUDA, float32 on CPU.
enum class ModelDtype { kAuto, kFloat32, kBFloat16, kFloat16 };
// "auto": our Hopper kernels where they run, else torch-fa2, else reference (trainer/model_setup.h).
enum class AttentionChoice { kAuto, kHopper, kTorchFA2, kReference };
enum class LrDecay { kCosine, kLinear, kConstant };
enum class ShardOptimizer { kAuto, kOn, kOff };
enum class Transfers { kAuto, kCopyEngine, kNccl };
// model.recompute: what a checkpointed layer keeps for its recomputation. replay: its
// input, the residual after the attention and (hopper) the attention's output, so the
// recomputation skips the attention forward and the o/down products; plain: only its
// input, everything recomputed; auto: replayed where the device memory allows, else plain.
enum class Recompute { kAuto, kReplay, kPlain };
// adapter.type: full fine-tuning, LoRA on a frozen bf16 base, or LoRA on a 4-bit NF4 base.
enum class AdapterType { kNone, kLora, kQlora };

// model.activation_checkpointing: what the backward recomputes.
struct Checkpointing {
  enum class Mode {
    kNone,
    kEveryK,     // layers 0, k, 2k, ... (k = 1: every layer)
    kSelective,  // keep the attention's activations, recompute every layer's MLP
    kAuto,       // per micro-batch, from its size and the free device memory
  };
  Mode mode = Mode::kAuto;
  int64_t every_k = 0;  // kEveryK only

  static Checkpointing none() { return {Mode::kNone, 0}; }
  static Checkpointing every(int64_t k) { return k > 0 ? Checkpointing{Mode::kEveryK, k} : none(); }
  static Checkpointing selective() { return {Mode::kSelective, 0}; }
  static Checkpointing automatic() { return {Mode::kAuto, 0}; }
  bool operator==(const Checkpointing& o) const { return mode == o.mode && every_k == o.every_k; }
  bool operator!=(const Checkpointing& o) const { return !(*this == o); }
  // The YAML spelling: auto, selective, none, every_layer, every_<k>.
  std::string name() const {
    switch (mode) {
      case Mode::kAuto: return "auto";
      case Mode::kSelective: return "selective";
      case Mode::kNone: return "none";
      case Mode::kEveryK: return every_k == 1 ? "every_layer" : "every_" + std::to_string(every_k);
    }
    return "?";
  }
};

struct ModelSection {
  std::string path;  // Hugging Face model directory
  ModelDtype dtype = ModelDtype::kAuto;
  AttentionChoice attention = AttentionChoice::kAuto;
  // 0: off; 1: every decoder layer; k: every k-th layer (layers 0, k, 2k, ...).
  Checkpointing activation_checkpointing = Checkpointing::automatic();
  Recompute recompute = Recompute::kAuto;
  // RMSNorm (with the residual add), RoPE and SwiGLU through fused CUDA kernels where they run.
  bool fused_ops = true;
};

// The `data:` keys; they map one to one onto data::DataOptions.
struct DataSection {
  std::vector<data::DataFile> train;
  std::vector<data::DataFile> eval;
  int64_t max_length = data_defaults().max_length;
  data::OverlongPolicy overlong = data_defaults().overlong;
  data::BadLinePolicy bad_lines = data_defaults().bad_lines;
  double max_zero_supervised_fraction = data_defaults().max_zero_supervised_fraction;
  data::ChatTemplateKind chat_template = data_defaults().chat_template;
  data::ChatLossMask loss_mask = data_defaults().loss_mask;
  std::optional<int32_t> pad_id = data_defaults().pad_id;  // pad mode; unset: chosen by the pipeline (never EOS)
  bool shuffle = data_defaults().shuffle;
  int64_t shuffle_window = data_defaults().shuffle_window;
  int64_t workers = data_defaults().workers;
  int64_t prefetch_steps = data_defaults().prefetch_steps;
};

struct BatchingSection {
  data::BatchMode mode = data_defaults().batching;
  int64_t examples_per_micro_batch = data_defaults().examples_per_micro_batch;  // flatten and pad
  int64_t max_tokens = data_defaults().max_tokens;  // pack: token budget per micro-batch (required there)
  int64_t grad_accumulation = 1;                     // micro-batches per optimizer step
  bool balance_ranks = data_defaults().balance_ranks;  // flatten, several ranks: deal examples by compute
  int64_t row_tokens = 0;                                      // fixed: tokens per row (0: data.max_length)
  int64_t rows_per_micro_batch = data_defaults().rows_per_micro_batch;  // fixed
  bool cross_example_attention = data_defaults().cross_example_attention;  // fixed: one sequence per row
};

using optim::OptimizerSection;  // the optimizer: section of the YAML

struct ScheduleSection {
  int64_t warmup_steps = 0;
  LrDecay decay = LrDecay::kCosine;
  double min_lr = 0.0;  // the floor the decay reaches at the last step
};

struct TrainingSection {
  int64_t max_steps = 0;  // optimizer steps; 0 = derive from epochs
  int64_t epochs = 0;
  uint64_t seed = data_defaults().seed;
  // Stop after this step with a checkpoint, as a SIGTERM would (0: never); the
  // same configuration without it resumes. For time-limited jobs.
  int64_t stop_at_step = 0;
  // Bitwise-repeatable steps on the same device: the attention backward without atomics
  // (our kernels' deterministic dQ pass) and ATen's deterministic algorithms where it has them.
  bool deterministic = false;
};

struct LoggingSection {
  int64_t log_interval = 10;
  int64_t eval_interval = 0;    // 0 = evaluate only at the end (when data.eval is set)
  int64_t eval_max_batches = 0; // 0 = the whole eval set
  // Step profile (trainer/step_profiler.h): this many steps under Kineto after
  // profile_warmup steps of this process, into profile.json and profile.md (0: off).
  int64_t profile_steps = 0;
  int64_t profile_warmup = 5;
  // Memory trace (trainer/memory_trace.h): what is alive at the peak of this optimizer
  // step, by phase, into memory_trace.json and memory_trace.md (0: off).
  int64_t memory_trace_step = 0;
};

struct CheckpointSection {
  int64_t interval = 0;  // steps between checkpoints; 0 = only the final one
  int64_t keep_last = 2;
  bool save_final = true;
};

// Data parallelism (the ranks come from the launcher's environment: RANK,
// WORLD_SIZE, ...; batching sizes are per rank).
inline constexpr int64_t kAutoBucketMb = 0;
// distributed.bucket_mb: auto = 512 MiB with several ranks (fewer, larger collectives: on two H200s, 7B,
// 64 -> 512 MiB took the step from 272.6 to 258.6 ms) and 64 MiB in one process, where buckets are only
// the unit in which lazy gradients are allocated: a bucket is allocated whole when the backward first
// reaches it, so a large one holds memory ahead of its gradients at the start of the backward, where
// the activations still peak. For the same reason one process's buckets also close between backward
// ops once half full (models::backward_op_groups): a 7B's [v, o] bucket held v's 32 MiB unused through
// the attention core's backward, the step's peak (all of the +24 MB against transformers, H200).
inline constexpr int64_t kRanksBucketMb = 512, kOneProcessBucketMb = 64;
// No limit by default: 7B with fp32 masters, 2 x H200, 2026-11-27, 100 steps in one call: a limit
// of 2 took reserved memory from 81.8 to 71.8 GiB (peak allocated 57.6 both) but the rate from
// 9,710 to 9,154 tokens/s per GPU (-5.7%: the host, held back, no longer keeps the GPU fed).
inline constexpr int64_t kReleasedBucketsInFlight = 0;

struct DistributedSection {
  int64_t timeout = 600;  // seconds: a dead or hung rank makes every other exit within this
  // Seconds without a heartbeat (a thread of each rank beats every second, whatever the rank
  // computes) after which a peer counts as dead (killed, frozen, its node gone); at most `timeout`.
  int64_t heartbeat_timeout = 60;
  // ZeRO-1/2 (auto: on when world > 1): masters and moments split across ranks, gradients reduce-scattered.
  ShardOptimizer shard_optimizer = ShardOptimizer::kAuto;
  // Gradient buckets (MiB, model dtype) reduced while the backward runs; kAutoBucketMb: bucket_mb_for().
  int64_t bucket_mb = kAutoBucketMb;
  // How reduce-scatters and all-gathers of the flat buffers move between GPUs.
  Transfers transfers = Transfers::kAuto;
  // bucket_mb, auto resolved for a run of `world` ranks.
  int64_t bucket_mb_for(int64_t world) const {
    if (bucket_mb != kAutoBucketMb) return bucket_mb;
    return world > 1 ? kRanksBucketMb : kOneProcessBucketMb;
  }
  // With a sharded optimizer and lazy gradients: each bucket, once reduce-scattered in the
  // last micro-batch, is freed but for this rank's slice (optim/grad_reducer.h).
  bool release_unowned_gradients = true;
  // Released buckets the copy engines' pushes may still be reading before the host
  // waits for the oldest (0: no limit); optim/grad_reducer.h says why.
  int64_t released_buckets_in_flight = kReleasedBucketsInFlight;
};

// Parameter-efficient fine-tuning: the base stays frozen, low-rank adapters train
// (models/lora_adapter.h), and checkpoints hold PEFT adapter folders.
struct AdapterSection {
  AdapterType type = AdapterType::kNone;
  models::LoraSettings lora;  // r, alpha, dropout, rslora, target_modules
  std::string from;           // a PEFT adapter folder to start from (its settings then apply)
  bool save_merged = false;   // also write base + scale B A as an ordinary model at the end
};

struct TrainConfig {
  std::string source;  // where it was read from, for messages
  ModelSection model;
  AdapterSection adapter;
  DataSection data;
  BatchingSection batching;
  OptimizerSection optimizer;
  ScheduleSection schedule;
  TrainingSection training;
  LoggingSection logging;
  CheckpointSection checkpoint;
  DistributedSection distributed;
  std::string output_dir = "runs/fptrain";
  std::string resume = "auto";  // auto | none | <checkpoint dir>
  std::string device = "auto";  // auto | cpu | cuda | cuda:N
  int64_t cpu_threads = 0;      // LibTorch intra-op threads; 0 = LibTorch's default (one per core)
};

// One documented key of the schema (used for suggestions, --help and the docs test).
struct ConfigKey {
  std::string path;  // "optimizer.lr"
  std::string doc;
};
const std::vector<ConfigKey>& config_keys();

// Reads a YAML file: every key known, every value of the right type and
// range. Paths inside it (model.path, data files, output_dir) are taken
// relative to the current directory, as given. Throws std::invalid_argument
// naming the file, line, key and problem (a duplicate key names both lines).
TrainConfig load_config(const std::filesystem::path& yaml_file);
TrainConfig parse_config(const std::string& yaml_text, const std::string& source);

// Applies "key.path=value" (the value is parsed as YAML) with the same checks.
void apply_override(TrainConfig& config, const std::string& assignment);

// load_config + every override + validate: the configuration a command runs.
TrainConfig load_config(const std::filesystem::path& yaml_file, const std::vector<std::string>& overrides);

// Cross-field checks (run after all overrides): required keys present,
// consistent batching, warmup shorter than training, ...
void validate(const TrainConfig& config);

// The resolved configuration as YAML (written next to checkpoints).
std::string to_yaml(const TrainConfig& config);

// Levenshtein distance, used to suggest the nearest valid key.
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace fptrain::trainer

namespace fptrain::common {
template <>
struct EnumNames<trainer::ModelDtype> {
  static constexpr std::array<EnumEntry<trainer::ModelDtype>, 4> table = {{{trainer::ModelDtype::kAuto, "auto"},
                                                                          {trainer::ModelDtype::kFloat32, "float32"},
                                                                          {trainer::ModelDtype::kBFloat16, "bfloat16"},
                                                                          {trainer::ModelDtype::kFloat16, "float16"}}};
};
template <>
struct EnumNames<trainer::AttentionChoice> {
  static constexpr std::array<EnumEntry<trainer::AttentionChoice>, 5> table = {
      {{trainer::AttentionChoice::kAuto, "auto"},
       {trainer::AttentionChoice::kHopper, "hopper"},
       {trainer::AttentionChoice::kTorchFA2, "torch-fa2"},
       {trainer::AttentionChoice::kReference, "reference"},
       {trainer::AttentionChoice::kHopper, "fptrain", /*alias=*/true}}};
};
template <>
struct EnumNames<trainer::Recompute> {
  static constexpr std::array<EnumEntry<trainer::Recompute>, 3> table = {
      {{trainer::Recompute::kAuto, "auto"}, {trainer::Recompute::kReplay, "replay"}, {trainer::Recompute::kPlain, "plain"}}};
};
template <>
struct EnumNames<trainer::ShardOptimizer> {
  static constexpr std::array<EnumEntry<trainer::ShardOptimizer>, 3> table = {
      {{trainer::ShardOptimizer::kAuto, "auto"}, {trainer::ShardOptimizer::kOn, "true"}, {trainer::ShardOptimizer::kOff, "false"}}};
};
template <>
struct EnumNames<trainer::Transfers> {
  static constexpr std::array<EnumEntry<trainer::Transfers>, 3> table = {
      {{trainer::Transfers::kAuto, "auto"}, {trainer::Transfers::kCopyEngine, "copy_engine"}, {trainer::Transfers::kNccl, "nccl"}}};
};
template <>
struct EnumNames<trainer::AdapterType> {
  static constexpr std::array<EnumEntry<trainer::AdapterType>, 3> table = {
      {{trainer::AdapterType::kNone, "none"}, {trainer::AdapterType::kLora, "lora"}, {trainer::AdapterType::kQlora, "qlora"}}};
};
template <>
struct EnumNames<trainer::LrDecay> {
  static constexpr std::array<EnumEntry<trainer::LrDecay>, 3> table = {
      {{trainer::LrDecay::kCosine, "cosine"}, {trainer::LrDecay::kLinear, "linear"}, {trainer::LrDecay::kConstant, "constant"}}};
};
}  // namespace fptrain::common
