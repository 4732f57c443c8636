// The training configuration: a typed struct read from YAML, with every value
// validated and unknown keys reported with the nearest valid key.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace fptrain::trainer {

struct DataFileConfig {
  std::string path;
  double weight = 1.0;         // examples per epoch = round(weight x lines)
  std::string format = "auto"; // auto | messages | prompt_completion | alpaca | text | tokens
};

struct ModelSection {
  std::string path;                 // Hugging Face model directory
  std::string dtype = "auto";       // auto (bf16 on CUDA, fp32 on CPU) | float32 | bfloat16 | float16
  std::string attention = "auto";   // auto | fptrain | torch-fa2 | reference
  // 0: off; 1: every decoder layer; k: every k-th layer (layers 0, k, 2k, ...).
  int64_t activation_checkpointing = 0;
};

// Maps onto data::DataOptions (data/data_options.h); names and defaults follow it.
struct DataSection {
  std::vector<DataFileConfig> train;
  std::vector<DataFileConfig> eval;
  int64_t max_length = 4096;
  std::string overlong = "truncate";         // truncate | drop
  std::string bad_lines = "error";           // error | skip
  double max_zero_supervised_fraction = 0.01;
  std::string chat_template = "auto";        // auto | none | llama3 | llama2 | mistral | granite3
  std::string loss_mask = "assistant";       // assistant | last_assistant | all
  std::optional<int64_t> pad_id;             // pad mode; unset: chosen by the data pipeline (never EOS)
  bool shuffle = true;
  int64_t shuffle_window = 4096;             // pack mode
  int64_t workers = 2;
  int64_t prefetch_steps = 4;
};

struct BatchingSection {
  std::string mode = "flatten";        // flatten | pad | pack
  int64_t examples_per_micro_batch = 8; // flatten and pad
  int64_t max_tokens = 0;               // pack: token budget per micro-batch
  int64_t grad_accumulation = 1;        // micro-batches per optimizer step
};

struct OptimizerSection {
  double lr = 2e-5;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  // fp32 master weights and moments next to low-precision model weights; false = pure model dtype.
  bool master_weights = true;
  double grad_clip = 1.0;  // global L2 norm; 0 disables clipping
};

struct ScheduleSection {
  int64_t warmup_steps = 0;
  std::string decay = "cosine";  // cosine | linear | constant
  double min_lr = 0.0;           // the floor the decay reaches at the last step
};

struct TrainingSection {
  int64_t max_steps = 0;  // optimizer steps; 0 = derive from epochs
  int64_t epochs = 0;
  uint64_t seed = 0;
  // Stop after this step with a checkpoint, as a SIGTERM would (0: never); the
  // same configuration without it resumes. For time-limited jobs.
  int64_t stop_at_step = 0;
};

struct LoggingSection {
  int64_t log_interval = 10;
  int64_t eval_interval = 0;    // 0 = evaluate only at the end (when data.eval is set)
  int64_t eval_max_batches = 0; // 0 = the whole eval set
};

struct CheckpointSection {
  int64_t interval = 0;  // steps between checkpoints; 0 = only the final one
  int64_t keep_last = 2;
  bool save_final = true;
};

struct TrainConfig {
  std::string source;  // where it was read from, for messages
  ModelSection model;
  DataSection data;
  BatchingSection batching;
  OptimizerSection optimizer;
  ScheduleSection schedule;
  TrainingSection training;
  LoggingSection logging;
  CheckpointSection checkpoint;
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

// Reads and validates a YAML file. Paths inside it (model.path, data files,
// output_dir) are resolved relative to the current directory, as given.
// Throws std::invalid_argument naming the file, line, key and problem.
TrainConfig load_config(const std::filesystem::path& yaml_file);
TrainConfig parse_config(const std::string& yaml_text, const std::string& source);

// Applies "key.path=value" (the value is parsed as YAML) with the same checks.
void apply_override(TrainConfig& config, const std::string& assignment);

// Cross-field checks (run after all overrides): required keys present,
// consistent batching, warmup shorter than training, ...
void validate(const TrainConfig& config);

// The resolved configuration as YAML (written next to checkpoints).
std::string to_yaml(const TrainConfig& config);

// Levenshtein distance, used to suggest the nearest valid key.
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace fptrain::trainer
