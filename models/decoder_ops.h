// The operations a decoder layer is written in, as an interchangeable set
// (llama.cpp's build_norm / build_attn / build_ffn, torchtitan's pure model):
// CausalLM::decoder_layer is the maths over `const DecoderOps&`, and each
// mechanism is a set or a decorator applied from outside:
//
//   AtenOps         ATen operations, the Hugging Face parity reference (any device)
//   FusedCudaOps    the fused CUDA kernels of models/fused_ops.h (sm_90)
//   RecomputeOps    a decorator for an activation checkpoint's recomputation
//                   (models/recompute_ops.h)
//   GemmaOps        a decorator with Gemma's RMSNorm ((1 + w) in fp32) and
//                   GELU-tanh gating over any set, through the fused kernels'
//                   variants over FusedCudaOps (models/gemma_ops.h)
//   LoraOps         a decorator adding low-rank adapters to the projections
//                   (models/lora_ops.h)
//
// Either base set sends the projections' weight gradients to the trainer's
// flat buffer when given GradSinks (models/grad_sinks.h).
#pragma once

#include "attention/varlen_attention.h"
#include "models/fused_ops.h"
#include "models/grad_sink_linear.h"
#include "models/rope.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fptrain::models {

class GradSinks;

// What a decoder layer's projection computes (kQkv and kGateUp: Phi-3's fused weights).
enum class ProjectionRole : uint8_t { kQ, kK, kV, kQkv, kO, kGate, kUp, kGateUp, kDown };

// The module name transformers gives a projection of this role ("q_proj").
const char* projection_module_name(ProjectionRole role);

// One linear projection: its weight, optional bias (null when absent), its
// role, and its slot (its index among the model's projections) for
// per-projection state.
struct Projection {
  const at::Tensor* weight = nullptr;
  const at::Tensor* bias = nullptr;
  int64_t slot = 0;
  ProjectionRole role = ProjectionRole::kQ;
  // Its output feeds only a residual add (o and down, unless a norm comes
  // between, as in Gemma): a recomputation may skip its product.
  bool residual_only = false;
  // Its module's full name ("model.layers.3.self_attn.q_proj"): adapters and messages.
  std::string module;
};

class DecoderOps : public std::enable_shared_from_this<DecoderOps> {
 public:
  virtual ~DecoderOps() = default;

  // The input embedding's rows of ids (padding_idx: the row that gets no gradient, -1: none).
  virtual at::Tensor embed(const at::Tensor& weight, const at::Tensor& ids, int64_t padding_idx) const {
    return at::embedding(weight, ids, padding_idx);
  }
  // RMSNorm of x with weight.
  virtual at::Tensor norm(const at::Tensor& x, const at::Tensor& weight, double eps) const = 0;
  // sum = residual + update * scale (residual + update when the scale is 1), normed = norm(sum).
  virtual AddRmsNormOutput add_norm(const at::Tensor& residual, const at::Tensor& update, const at::Tensor& weight,
                                    double eps, double scale) const = 0;
  // x [T, in] @ weight^T (+ bias).
  virtual at::Tensor linear(const at::Tensor& x, const Projection& p) const = 0;
  // The same projection in an activation checkpoint's recomputation where its
  // output feeds only the block's output (p.residual_only): the backward needs
  // the input, never the product (replayed_sink_linear). Decorators that add
  // to a projection forward it to their inner set and add their own part.
  virtual at::Tensor replayed_linear(const at::Tensor& x, const Projection& p) const;
  // Projections that read the same x (q, k, v; gate, up), each as linear() computes it.
  // A set may run them together (LoraOps: one GEMM for their adapters' A matrices, one
  // input gradient for all); the default runs them one by one.
  virtual std::vector<at::Tensor> linear_group(const at::Tensor& x, const std::vector<const Projection*>& ps) const;
  // The dense weight a projection's product uses (the parameter; NF4 sets: dequantised).
  virtual at::Tensor base_weight(const Projection& p) const { return *p.weight; }
  // RoPE on q [T, Hq, D] and k [T, Hk, D].
  virtual RotaryOutput rotary(const at::Tensor& q, const at::Tensor& k, const RotaryTables& tables) const = 0;
  // Varlen attention over the packed examples: [T, Hq, D].
  virtual at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const attention::VarlenSpec& spec) const = 0;
  // The gated MLP activation: silu(gate) * up.
  virtual at::Tensor gated_activation(const at::Tensor& gate, const at::Tensor& up) const = 0;
  // The same from one [T, 2I] projection whose halves are gate and up (Phi-3):
  // gated_activation on the halves, unless a set has its own kernel.
  virtual at::Tensor gated_activation_packed(const at::Tensor& gate_up) const;

  // What the base sets share, for decorators.
  virtual attention::Backend backend() const = 0;
  virtual GradSink* sink(const Projection& p) const = 0;  // null: plain autograd for the weight
  // The element-wise ops run through the fused CUDA kernels (FusedCudaOps): a
  // decorator with its own forms of them (GemmaOps) takes the kernels' variants.
  virtual bool fused_kernels() const { return false; }
};

// A decorator's starting point: every operation is the inner set's. A decorator
// overrides what it changes (GemmaOps its norm and gating, LoraOps and Nf4Ops the
// projections, RecomputeOps what a recomputation replays).
class ForwardingOps : public DecoderOps {
 public:
  explicit ForwardingOps(std::shared_ptr<const DecoderOps> inner) : inner_(std::move(inner)) {}

  at::Tensor embed(const at::Tensor& weight, const at::Tensor& ids, int64_t padding_idx) const override {
    return inner_->embed(weight, ids, padding_idx);
  }
  at::Tensor norm(const at::Tensor& x, const at::Tensor& weight, double eps) const override {
    return inner_->norm(x, weight, eps);
  }
  AddRmsNormOutput add_norm(const at::Tensor& residual, const at::Tensor& update, const at::Tensor& weight,
                            double eps, double scale) const override {
    return inner_->add_norm(residual, update, weight, eps, scale);
  }
  at::Tensor linear(const at::Tensor& x, const Projection& p) const override { return inner_->linear(x, p); }
  at::Tensor replayed_linear(const at::Tensor& x, const Projection& p) const override {
    return inner_->replayed_linear(x, p);
  }
  std::vector<at::Tensor> linear_group(const at::Tensor& x, const std::vector<const Projection*>& ps) const override {
    return inner_->linear_group(x, ps);
  }
  at::Tensor base_weight(const Projection& p) const override { return inner_->base_weight(p); }
  RotaryOutput rotary(const at::Tensor& q, const at::Tensor& k, const RotaryTables& tables) const override {
    return inner_->rotary(q, k, tables);
  }
  at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const attention::VarlenSpec& spec) const override {
    return inner_->attention(q, k, v, spec);
  }
  at::Tensor gated_activation(const at::Tensor& gate, const at::Tensor& up) const override {
    return inner_->gated_activation(gate, up);
  }
  at::Tensor gated_activation_packed(const at::Tensor& gate_up) const override {
    return inner_->gated_activation_packed(gate_up);
  }
  attention::Backend backend() const override { return inner_->backend(); }
  GradSink* sink(const Projection& p) const override { return inner_->sink(p); }
  bool fused_kernels() const override { return inner_->fused_kernels(); }

 protected:
  std::shared_ptr<const DecoderOps> inner_;
};

// residual + update * scale, written as the model writes it (no multiply when the scale is 1).
at::Tensor residual_add(const at::Tensor& residual, const at::Tensor& update, double scale);

// add_norm composed of the residual add and `ops`' own norm (the ATen sets' add_norm).
AddRmsNormOutput add_then_norm(const DecoderOps& ops, const at::Tensor& residual, const at::Tensor& update,
                               const at::Tensor& weight, double eps, double scale);

// The set a model runs with: fused where the kernels run on `device` and
// `fused` asks for them, else ATen; `sinks` may be null.
std::shared_ptr<const DecoderOps> make_decoder_ops(const at::Device& device, bool fused, attention::Backend backend,
                                                   std::shared_ptr<GradSinks> sinks = nullptr);

}  // namespace fptrain::models
