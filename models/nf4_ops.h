// A base whose projection weights are stored in NF4 (models/nf4.h): QLoRA's
// frozen base. A decorator of any op set: each quantised projection computes
// x @ dequantize(W)^T (+ bias) as one autograd Function that keeps only the
// 4-bit weight: the bf16 weight exists for the forward's GEMM and again for the
// backward's input gradient, never between them (a base never trains: no weight
// gradient). Everything else is the inner set's.
#pragma once

#include "models/decoder_ops.h"
#include "models/nf4.h"
#include "models/nf4_checkpoint.h"
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
// exists whole. Other tensors are kept as they are. A 4-bit checkpoint's projections
// arrive quantised and are kept as they are stored.
class Nf4Loader {
 public:
  at::Tensor keep(const std::string& name, const at::Tensor& tensor);
  // A projection already quantised in the checkpoint (LoadOptions::keep_quantized).
  at::Tensor keep_quantized(const std::string& name, Nf4Tensor q);
  std::map<std::string, Nf4Tensor> take() { return std::move(quantized_); }

 private:
  std::map<std::string, Nf4Tensor> quantized_;
};

class Nf4Ops : public ForwardingOps {
 public:
  Nf4Ops(std::shared_ptr<const DecoderOps> inner, std::shared_ptr<const Nf4Weights> weights);

  at::Tensor linear(const at::Tensor& x, const Projection& p) const override;
  at::Tensor replayed_linear(const at::Tensor& x, const Projection& p) const override;
  // One projection at a time through this set's linear (the quantised ones here).
  std::vector<at::Tensor> linear_group(const at::Tensor& x, const std::vector<const Projection*>& ps) const override {
    return DecoderOps::linear_group(x, ps);
  }
  at::Tensor base_weight(const Projection& p) const override;

 private:
  std::shared_ptr<const Nf4Weights> weights_;
};

// x [T, in] @ dequantize(q)^T (+ bias): the backward forms only the input's gradient.
// `replayed`: an activation checkpoint's replay of a projection that feeds only the
// residual: zeros of the output's shape, the same backward.
at::Tensor nf4_linear(const at::Tensor& x, const Nf4Tensor& q, const at::Tensor& bias, bool replayed = false);

}  // namespace fptrain::models
