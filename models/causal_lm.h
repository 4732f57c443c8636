// The decoder-only language model that serves Llama, Mistral, Granite, Qwen2, Qwen3 and Phi-3.
// Input is packed: token ids [T] with no batch dimension, boundaries in cu_seqlens.
#pragma once

#include "attention/varlen_attention.h"
#include "models/decoder_ops.h"
#include "models/linear_cross_entropy.h"
#include "models/model_config.h"
#include "models/rope.h"
#include "models/tensor_map.h"

#include <ATen/ATen.h>

#include <functional>
#include <map>
#include <string>

namespace fptrain::models {

struct PackedInput {
  at::Tensor input_ids;     // int64 [T] on the model's device
  at::Tensor position_ids;  // int64 [T], restarting at 0 per example
  at::Tensor cu_seqlens;    // int32 [B+1] on the model's device
  int64_t max_seqlen = 0;
  // Optional host copy of cu_seqlens (the batcher has it). When given, the
  // boundaries are validated without a device sync, and the reference attention
  // backend reads them from here.
  at::Tensor cu_seqlens_cpu;
};

struct LossOutput {
  at::Tensor loss_sum;        // fp32 scalar: sum of token cross-entropies
  at::Tensor num_supervised;  // int64 scalar, on device (no host sync)
};

// How CausalLM::loss computes the head and the cross-entropy.
struct LossOptions {
  // true: linear_cross_entropy (chunks of supervised tokens, the [T, vocab]
  // logits never exist); false: the materialised reference path
  // (reference_linear_cross_entropy), kept for comparison.
  bool fused = true;
  int64_t chunk_tokens = 0;  // fused: supervised tokens per chunk; 0 = default_chunk_tokens(vocab)
  // fused only: where the head weight's gradient goes (the trainer's GradSinks::head();
  // linear_cross_entropy's weight_sink). Null: returned to autograd.
  WeightGradSink* head_grad_sink = nullptr;
};

class CausalLM {
 public:
  // `parameters` must hold exactly the tensors of expected_parameter_shapes(config)
  // (models/parameter_layout.h), all of one floating dtype on one device; they are used
  // as given (set requires_grad on them to train).
  CausalLM(ModelConfig config, TensorMap parameters, attention::Backend backend);
  // Not copyable: the per-layer weight pointers point into this object's parameters.
  CausalLM(const CausalLM&) = delete;
  CausalLM& operator=(const CausalLM&) = delete;

  const ModelConfig& config() const { return config_; }
  TensorMap& parameters() { return params_; }
  const TensorMap& parameters() const { return params_; }
  attention::Backend backend() const { return backend_; }

  at::Tensor hidden_states(const PackedInput& input) const;  // [T, hidden], after the final norm
  at::Tensor logits(const PackedInput& input) const;         // [T, vocab]
  // labels [T] int64 in Hugging Face's unshifted convention (-100 = ignored);
  // position t predicts labels[t+1]. labels_cpu: optional host copy of labels
  // (the batcher has one); the fused loss reads from it which tokens are
  // supervised, and without it copies CUDA labels to the host once (before the
  // forward pass is queued, so it waits only for work queued earlier).
  LossOutput loss(const PackedInput& input, const at::Tensor& labels, const at::Tensor& labels_cpu = {}) const;

  void set_loss_options(LossOptions options) { loss_options_ = options; }
  const LossOptions& loss_options() const { return loss_options_; }

  // The op set the decoder runs with (models/decoder_ops.h). By default the
  // fused CUDA set where its kernels run (CUDA, sm_90), else ATen; the trainer
  // replaces it with one that holds its gradient sinks.
  void set_ops(std::shared_ptr<const DecoderOps> ops);
  const std::shared_ptr<const DecoderOps>& ops() const { return ops_; }
  // Sets `ops` as it is, for a decorator over ops() (which holds the family's arithmetic
  // already) and for putting ops() back after it.
  void set_decorated_ops(std::shared_ptr<const DecoderOps> ops);
  // Every projection of the decoder (layer by layer, in parameter order; slot = index).
  std::vector<Projection> projections() const;
  const at::Tensor& head_weight() const;  // lm_head, or the tied embedding
  const at::Tensor& embedding_weight() const;  // model.embed_tokens.weight

  // Optional wrapper around each decoder layer, used by the trainer for
  // activation checkpointing: when set, hidden_states() computes layer i as
  // runner(i, x, ops, run) instead of run(x, ops). `run` may be called again
  // after hidden_states() returned (recomputation during backward), with
  // other ops (models/recompute_ops.h); it holds everything it needs by value.
  using BlockFn = std::function<at::Tensor(const at::Tensor& hidden, const DecoderOps& ops)>;
  using BlockRunner =
      std::function<at::Tensor(int64_t layer, const at::Tensor& hidden, const DecoderOps& ops, const BlockFn& run)>;
  void set_layer_runner(BlockRunner runner) { layer_runner_ = std::move(runner); }
  // The same for the MLP block of a layer (hidden = its normed input, the result
  // is added to the residual stream): selective activation checkpointing.
  void set_mlp_runner(BlockRunner runner) { mlp_runner_ = std::move(runner); }
  // The runners set (empty: none), for a wrapper that decorates them and puts them back.
  const BlockRunner& layer_runner() const { return layer_runner_; }
  const BlockRunner& mlp_runner() const { return mlp_runner_; }
  // Called in the forward before the parameters of a stage are first read:
  // stage -1 the embedding, 0..L-1 decoder layer l (not again when activation
  // checkpointing recomputes it), L the final norm and the head. Data
  // parallelism waits there for the all-gather of those weights.
  using BeforeStage = std::function<void(int64_t stage)>;
  void set_before_stage(BeforeStage hook) { before_stage_ = std::move(hook); }

 private:
  const at::Tensor& weight(const std::string& name) const;
  attention::VarlenSpec attention_spec(const PackedInput& input) const;
  // A decoder layer's parameters, looked up once at construction (the forward
  // builds no names and searches no map per layer). Biases are null when absent.
  struct LayerWeights {
    const at::Tensor *input_norm, *post_norm;
    Projection q, k, v, o, gate, up, down;
    Projection qkv, gate_up;  // Phi-3's fused weights (then q, k, v, gate and up are unused)
    bool fused() const { return qkv.weight != nullptr; }
    const at::Tensor *q_norm = nullptr, *k_norm = nullptr;  // Qwen3
    const at::Tensor *pre_mlp_norm = nullptr, *post_mlp_norm = nullptr;  // Gemma
  };
  at::Tensor decoder_layer(int64_t layer, const at::Tensor& x, const RotaryTables& rope,
                           const attention::VarlenSpec& spec, const DecoderOps& ops) const;
  at::Tensor sandwich_decoder_layer(int64_t layer, const at::Tensor& x, const RotaryTables& rope,
                                    const attention::VarlenSpec& spec, const DecoderOps& ops) const;
  std::shared_ptr<const DecoderOps> family_ops(std::shared_ptr<const DecoderOps> ops) const;
  at::Tensor self_attention(const LayerWeights& w, const at::Tensor& x, const RotaryTables& rope,
                            const attention::VarlenSpec& spec, const DecoderOps& ops) const;
  at::Tensor mlp_block(int64_t layer, const at::Tensor& x, const DecoderOps& ops) const;
  at::Tensor mlp(const LayerWeights& w, const at::Tensor& x, const DecoderOps& ops) const;
  at::Device parameters_device() const;

  ModelConfig config_;
  TensorMap params_;
  attention::Backend backend_;
  at::Tensor inv_freq_;  // RoPE inverse frequencies, fp32 on the parameters' device
  at::Tensor inv_freq_local_;  // Gemma 3's sliding layers' own (undefined: as inv_freq_)
  std::shared_ptr<const DecoderOps> ops_;
  BlockRunner layer_runner_;
  BlockRunner mlp_runner_;
  std::vector<LayerWeights> layers_;
  std::vector<Projection> projections_;  // every projection, by slot
  at::Tensor inv_freq_long_;             // longrope: for batches past the original context
  BeforeStage before_stage_;
  LossOptions loss_options_;
};

}  // namespace fptrain::models
