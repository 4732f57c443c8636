// A base whose projection weights are stored in NF4 (models/nf4.h): QLoRA's
// frozen base. A decorator of any op set: each quantised projection computes
// x @ dequantize(W)^T (+ bias) as one autograd Function that keeps only the
// 4-bit weight: the bf16 weight exists for the forward's GEMM and again for the
// backward's input gradient, never between them (a base never trains: no weight
// gradient). Everything else is the inner set's.
#pragma once

#include "models/decoder_ops.h"
#include "models/nf4.h"
#include "models/tensor_map.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fptrain::models {

// The quantised weights of a model's projections, by slot.
class Nf4Weights {
 public:
  // From the quantised weights by parameter name ("<module>.weight": what
  // Nf4Loader collects), for a model's projections; throws naming a projection
  // without one.
  static std::shared_ptr<Nf4Weights> from(std::map<std::string, Nf4Tensor> by_name,
                                          const std::vector<Projection>& projections);

  const Nf4Tensor* at(int64_t slot) const;
  int64_t nbytes() const;  // every quantised weight together
  // The parameters with each quantised weight dequantised (for merging and saving).
  TensorMap dequantized(const TensorMap& params, const std::vector<Projection>& projections) const;

 private:
  std::vector<std::optional<Nf4Tensor>> by_slot_;
};

// Quantises the projection weights while a checkpoint loads (LoadOptions::keep):
// each one is quantised as it reaches the device and the model's map keeps only
// its shape (a one-element storage, stride 0), so the full-precision model never
// exists whole. Other tensors are kept as they are.
class Nf4Loader {
 public:
  at::Tensor keep(const std::string& name, const at::Tensor& tensor);
  std::map<std::string, Nf4Tensor> take() { return std::move(quantized_); }

 private:
  std::map<std::string, Nf4Tensor> quantized_;
};

// A decoder projection's weight ("model.layers.N.<...>_proj.weight").
bool is_projection_weight(const std::string& name);

class Nf4Ops : public DecoderOps {
 public:
  Nf4Ops(std::shared_ptr<const DecoderOps> inner, std::shared_ptr<const Nf4Weights> weights);

  at::Tensor norm(const at::Tensor& x, const at::Tensor& weight, double eps) const override {
    return inner_->norm(x, weight, eps);
  }
  AddRmsNormOutput add_norm(const at::Tensor& residual, const at::Tensor& update, const at::Tensor& weight,
                            double eps, double scale) const override {
    return inner_->add_norm(residual, update, weight, eps, scale);
  }
  at::Tensor linear(const at::Tensor& x, const Projection& p) const override;
  at::Tensor replayed_linear(const at::Tensor& x, const Projection& p) const override;
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

  // The group one projection at a time through this set's linear (the quantised ones here).
  at::Tensor base_weight(const Projection& p) const override;
  attention::Backend backend() const override { return inner_->backend(); }
  GradSink* sink(const Projection& p) const override { return inner_->sink(p); }

 private:
  std::shared_ptr<const DecoderOps> inner_;
  std::shared_ptr<const Nf4Weights> weights_;
};

// x [T, in] @ dequantize(q)^T (+ bias): the backward forms only the input's gradient.
// `replayed`: an activation checkpoint's replay of a projection that feeds only the
// residual: zeros of the output's shape, the same backward.
at::Tensor nf4_linear(const at::Tensor& x, const Nf4Tensor& q, const at::Tensor& bias, bool replayed = false);

}  // namespace fptrain::models
