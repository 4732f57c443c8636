// Training checkpoints under <output_dir>/checkpoints/step-NNNNNNNN/:
//   config.json, model*.safetensors  the model in Hugging Face format (transformers loads it), or
//   adapter_config.json, adapter_model.safetensors   the adapters (PEFT loads them onto the base)
//   tokenizer files                   copied from the model folder
//   training_state.safetensors        AdamW weights (fp32 masters), moments; RNG states
//   trainer_state.json                step, schedule position, data cursor, counters
//   config.yaml                       the run's resolved configuration
// A checkpoint is assembled in a hidden ".step-N.tmp.<pid>" folder and renamed
// into place, and moved aside before it is deleted, so a folder named step-* is
// always complete.
#pragma once

#include "models/model_config.h"
#include "trainer/config.h"
#include "models/tensor_map.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
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
  // 1: `optimizer` holds whole parameters (training_state.safetensors); N: the
  // optimizer was sharded over N ranks, each wrote training_state.rank<R>.safetensors.
  int64_t optimizer_shards = 1;
  int64_t world_size = 1;  // ranks of the run that wrote it
  int64_t total_steps = 0;
  std::string data_cursor;  // data::DataCursor::to_json()
  RunCounters counters;
  std::string config_yaml;
  // Read-only views of the mapped state files (copy out of them; never write).
  std::vector<std::pair<std::string, at::Tensor>> optimizer;  // AdamW::state()
  std::vector<std::pair<std::string, at::Tensor>> rng;        // "cpu", "cuda:0", ...: generator states
  std::filesystem::path tensors_file;  // where `optimizer` and `rng` were read from (load_training_state)
};

std::filesystem::path checkpoints_dir(const std::filesystem::path& output_dir);
std::string checkpoint_name(int64_t step);  // "step-00000100"

// Complete checkpoints in output_dir, oldest first.
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& output_dir);
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& output_dir);

// The checkpoint `resume` points at: auto = the latest in output_dir (none if
// there is none), none = nothing, else the given folder (which must exist).
std::optional<std::filesystem::path> resolve_resume(const TrainConfig& config);

// Writes what a checkpoint holds of the model into a folder that exists.
using ModelWriter = std::function<void(const std::filesystem::path& dir)>;
// The whole model in Hugging Face format (save_pretrained).
ModelWriter hf_model_writer(const models::ModelConfig& config, const models::TensorMap& params,
                            at::ScalarType model_dtype);

// Copies the tokenizer files a model folder holds (tokenizer.json, tokenizer.model, ...) into `to`.
void copy_tokenizer_files(const std::filesystem::path& from, const std::filesystem::path& to);

// Writes a checkpoint for state.step and returns its folder.
std::filesystem::path save_checkpoint(const std::filesystem::path& output_dir, const ModelWriter& write_model,
                                      const std::filesystem::path& tokenizer_dir, const TrainingState& state);

// Reads trainer_state.json and the optimizer and RNG state this rank needs: its
// own shard file when the checkpoint was written by `world_size` sharded ranks,
// else every file (the optimizer reshards from whatever pieces it is given; RNG
// states are then those of rank 0, or of the one process).
TrainingState load_training_state(const std::filesystem::path& checkpoint_dir, int rank = 0, int world_size = 1);

// A data-parallel save, in phases, so that the folder appears (renamed by rank 0)
// only once every rank's part is complete:
//   rank 0:     staging = prepare_checkpoint(output_dir, step), shared with the others
//   every rank: write_shard_state(staging, rank, optimizer, rng)   (sharded optimizer)
//   rank 0:     commit_checkpoint(staging, ...) once all succeeded, else remove_tree(staging)
std::filesystem::path prepare_checkpoint(const std::filesystem::path& output_dir, int64_t step);
void write_shard_state(const std::filesystem::path& staging, int rank, const TrainingState& state);
// Writes the model, tokenizer, config and trainer_state.json (and, if
// state.optimizer is not empty, training_state.safetensors) into staging and
// renames it into place; returns the checkpoint folder.
std::filesystem::path commit_checkpoint(const std::filesystem::path& staging, const std::filesystem::path& output_dir,
                                        const ModelWriter& write_model, const std::filesystem::path& tokenizer_dir,
                                        const TrainingState& state);

// Deletes the oldest checkpoints so that `keep_last` remain; also removes the
// hidden leftovers of interrupted saves and deletions.
void prune_checkpoints(const std::filesystem::path& output_dir, int64_t keep_last);

// Generator states of the CPU and of every CUDA device, and their restoration.
std::vector<std::pair<std::string, at::Tensor>> capture_rng_states();
void restore_rng_states(const std::vector<std::pair<std::string, at::Tensor>>& states);

}  // namespace fptrain::trainer
