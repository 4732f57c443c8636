// Training checkpoints under <output_dir>/checkpoints/step-NNNNNNNN/:
//   config.json, model*.safetensors  the model in Hugging Face format (transformers loads it)
//   tokenizer files                   copied from the model folder
//   training_state.safetensors        AdamW weights (fp32 masters), moments; RNG states
//   trainer_state.json                step, schedule position, data cursor, counters
//   config.yaml                       the run's resolved configuration
// A checkpoint is assembled in a hidden ".step-N.tmp.<pid>" folder and renamed
// into place, and moved aside before it is deleted, so a folder named step-* is
// always complete.
#pragma once

#include "models/model_config.h"
#include "models/tensor_map.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace fptrain::trainer {

// What a run has consumed so far, carried across resumes.
struct RunCounters {
  int64_t tokens = 0;  // non-padding
  int64_t supervised_tokens = 0;
  double train_seconds = 0.0;

  nlohmann::json to_json() const;
  static RunCounters from_json(const nlohmann::json& j);  // missing fields stay 0
};

struct TrainingState {
  int64_t step = 0;  // optimizer steps completed
  int64_t total_steps = 0;
  std::string data_cursor;  // data::DataCursor::to_json()
  RunCounters counters;
  std::string config_yaml;
  std::vector<std::pair<std::string, at::Tensor>> optimizer;  // AdamW::state()
  std::vector<std::pair<std::string, at::Tensor>> rng;        // "cpu", "cuda:0", ...: generator states
  std::filesystem::path tensors_file;  // where `optimizer` and `rng` were read from (load_training_state)
};

std::filesystem::path checkpoints_dir(const std::filesystem::path& output_dir);
std::string checkpoint_name(int64_t step);  // "step-00000100"

// Complete checkpoints in output_dir, oldest first.
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& output_dir);
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& output_dir);

// Writes a checkpoint for state.step and returns its folder.
std::filesystem::path save_checkpoint(const std::filesystem::path& output_dir, const models::ModelConfig& config,
                                      const models::TensorMap& params, at::ScalarType model_dtype,
                                      const std::filesystem::path& tokenizer_dir, const TrainingState& state);

// Reads training_state.safetensors and trainer_state.json of a checkpoint folder.
TrainingState load_training_state(const std::filesystem::path& checkpoint_dir);

// Deletes the oldest checkpoints so that `keep_last` remain; also removes the
// hidden leftovers of interrupted saves and deletions.
void prune_checkpoints(const std::filesystem::path& output_dir, int64_t keep_last);

// Generator states of the CPU and of every CUDA device, and their restoration.
std::vector<std::pair<std::string, at::Tensor>> capture_rng_states();
void restore_rng_states(const std::vector<std::pair<std::string, at::Tensor>>& states);

}  // namespace fptrain::trainer
