// Turning a configuration into the objects a run needs: dtype and attention
// backend for the device, the model loaded from its folder, the tokenizer, and
// data::DataOptions for the training or evaluation files.
#pragma once

#include <atomic>
#include <memory>

#include "attention/varlen_attention.h"
#include "data/data_options.h"
#include "tokenizer/tokenizer.h"
#include "models/causal_lm.h"
#include "trainer/config.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <memory>

namespace fptrain::trainer {

// auto: bfloat16 on CUDA, float32 on CPU.
at::ScalarType resolve_dtype(ModelDtype choice, const at::Device& device);
// auto: on CUDA, hopper where our kernels run (this GPU, this head_dim and dtype), else
// torch-fa2 (bf16/fp16), else reference; reference on the CPU and for soft-capped
// attention scores (Gemma 2). An explicit backend that cannot run the model here is
// an error naming why.
attention::Backend resolve_backend(AttentionChoice choice, const at::Device& device, const models::ModelConfig& model,
                                   at::ScalarType dtype);

// What the model's runners recompute, switchable between micro-batches
// (model.activation_checkpointing: auto).
struct CheckpointSwitch {
  std::atomic<int64_t> every_k{0};      // checkpoint layers 0, k, 2k, ... (0: none)
  std::atomic<bool> selective{false};  // checkpoint every layer's MLP block
  void set(const Checkpointing& setting);  // a fixed setting (auto: none)
};
// Installs the runners (auto starts as none) and returns their switch.
std::shared_ptr<CheckpointSwitch> set_activation_checkpointing(models::CausalLM& model, const Checkpointing& setting);

struct LoadedModel {
  models::ModelConfig config;
  std::unique_ptr<models::CausalLM> model;
  at::ScalarType dtype = at::kFloat;
  attention::Backend backend = attention::Backend::kReference;
  std::shared_ptr<CheckpointSwitch> checkpointing;  // model.activation_checkpointing's runners
};

// The model of a run: config.json and weights from `weights_dir` (model.path,
// or the checkpoint a run resumes from), in the configured dtype and attention
// backend for `device`, with activation checkpointing as configured.
// Parameters require grad when `trainable`.
LoadedModel open_model(const TrainConfig& config, const at::Device& device, const std::filesystem::path& weights_dir,
                       bool trainable);

// The tokenizer of the model folder, checked against the model's vocabulary.
std::shared_ptr<const tokenizer::Tokenizer> load_checked_tokenizer(const std::filesystem::path& dir,
                                                              const models::ModelConfig& config);

// Options for the training stream (`train`) or a single ordered pass over data.eval.
// `rank` of `world_size`: this rank's share of every step (data parallelism).
data::DataOptions make_data_options(const TrainConfig& config, bool eval, int rank = 0, int world_size = 1);

// The example length at which attention costs as much per token as the rest of
// the model (balancing ranks by compute: data::DataOptions::balance_attention_length).
int64_t attention_cost_length(const models::ModelConfig& config);

// Activation checkpointing on every k-th decoder layer (k = 0: off).


}  // namespace fptrain::trainer
