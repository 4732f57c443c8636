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
#include "models/grad_sinks.h"
#include "models/lora_adapter.h"
#include "models/nf4_ops.h"
#include "trainer/config.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <memory>
#include <optional>

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
// (model.activation_checkpointing: auto, and every_<k>'s replayed-or-plain choice).
struct CheckpointSwitch {
  std::atomic<int64_t> every_k{0};      // checkpoint layers 0, k, 2k, ... (0: none)
  std::atomic<bool> selective{false};  // checkpoint every layer's MLP block
  // auto's plan for the micro-batch: layers [0, recomputed) whole, the MLPs of the next `mlps`.
  std::atomic<int64_t> recomputed{0};
  std::atomic<int64_t> mlps{0};
  // The first `plain` whole layers (in layer order) recompute plain, the others replayed;
  // all_plain: every whole layer (model.recompute: plain).
  std::atomic<int64_t> plain{0};
  std::atomic<bool> all_plain{false};
  void set(const Checkpointing& setting);  // a fixed setting (auto: none), every whole layer replayed
  void set_plan(int64_t recomputed_layers, int64_t mlp_layers, int64_t plain_layers = 0);
  bool whole_layer(int64_t layer) const;  // the layer is recomputed in the backward
  bool plain_layer(int64_t layer) const;  // ... plain, keeping only its input
  bool mlp_only(int64_t layer) const;     // only its MLP block is
};
// A trained tensor under its name (a parameter of the model, or an adapter's), in model order.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Installs the runners (auto starts as none) and returns their switch. A
// recomputed block hands autograd the `trained` tensors of its layer (by
// models::layer_of_name), so their gradients flow through the recomputation;
// `preserve_rng` when the blocks draw random numbers (adapter dropout).
std::shared_ptr<CheckpointSwitch> set_activation_checkpointing(models::CausalLM& model, const Checkpointing& setting,
                                                               const NamedTensors& trained, bool preserve_rng = false);

struct LoadedModel {
  models::ModelConfig config;
  std::unique_ptr<models::CausalLM> model;
  at::ScalarType dtype = at::kFloat;
  attention::Backend backend = attention::Backend::kReference;
  std::shared_ptr<CheckpointSwitch> checkpointing;  // model.activation_checkpointing's runners
  // adapter.type lora: the adapters that train (the model's own parameters are frozen); else null.
  std::shared_ptr<models::LoraAdapter> adapter;
  // adapter.type qlora: the base projections in NF4 (their full-precision tensors released); else null.
  std::shared_ptr<models::Nf4Weights> nf4;

  // What the optimizer trains, in model order: the adapters' tensors, or every parameter.
  NamedTensors trained() const;
};

// The model of a run: config.json and weights from `weights_dir` (model.path,
// or the checkpoint a full fine-tune resumes from), in the configured dtype and
// attention backend for `device`, with activation checkpointing as configured.
// With adapter.type lora (qlora: its projections quantised to NF4 after loading)
// the base is frozen and the adapters come from
// `adapter_dir` (the checkpoint a run resumes from), else adapter.from, else
// PEFT's initialisation (seeded with training.seed). What trains requires grad
// when `trainable` (and adapter dropout is active only then).
LoadedModel open_model(const TrainConfig& config, const at::Device& device, const std::filesystem::path& weights_dir,
                       bool trainable, const std::optional<std::filesystem::path>& adapter_dir = std::nullopt);

// The model's op set for `device` (fused where it runs), sending the projections'
// weight gradients to `sinks` when given, the NF4 base over it and the adapters on top.
void set_model_ops(LoadedModel& m, const TrainConfig& config, const at::Device& device,
                   std::shared_ptr<models::GradSinks> sinks = nullptr, bool dropout_active = true);

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
