// Gemma's arithmetic as a decorator over any op set: its RMSNorm multiplies the
// normalised fp32 values by (1 + weight) in fp32 and rounds once
// (Gemma2RMSNorm), where Llama's rounds first and multiplies by the weight in
// the model dtype; its gated MLP is gelu_pytorch_tanh(gate) * up. The fused
// CUDA kernels compute Llama's forms, so these run in ATen on every device
// (the model's log says so); everything else is the inner set's.
#pragma once

#include "models/decoder_ops.h"

namespace fptrain::models {

class GemmaOps : public DecoderOps {
 public:
  explicit GemmaOps(std::shared_ptr<const DecoderOps> inner);

  at::Tensor norm(const at::Tensor& x, const at::Tensor& weight, double eps) const override;
  AddRmsNormOutput add_norm(const at::Tensor& residual, const at::Tensor& update, const at::Tensor& weight,
                            double eps, double scale) const override;
  at::Tensor linear(const at::Tensor& x, const Projection& p) const override { return inner_->linear(x, p); }
  at::Tensor replayed_linear(const at::Tensor& x, const Projection& p) const override {
    return inner_->replayed_linear(x, p);
  }
  RotaryOutput rotary(const at::Tensor& q, const at::Tensor& k, const RotaryTables& tables) const override {
    return inner_->rotary(q, k, tables);
  }
  at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const attention::VarlenSpec& spec) const override {
    return inner_->attention(q, k, v, spec);
  }
  at::Tensor gated_activation(const at::Tensor& gate, const at::Tensor& up) const override;

  std::vector<at::Tensor> linear_group(const at::Tensor& x, const std::vector<const Projection*>& ps) const override {
    return inner_->linear_group(x, ps);
  }
  at::Tensor base_weight(const Projection& p) const override { return inner_->base_weight(p); }
  attention::Backend backend() const override { return inner_->backend(); }
  GradSink* sink(const Projection& p) const override { return inner_->sink(p); }

 private:
  std::shared_ptr<const DecoderOps> inner_;
};

// Gemma2RMSNorm: dtype(x32 * rsqrt(mean(x32^2) + eps) * (1 + float(weight))).
at::Tensor gemma_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

}  // namespace fptrain::models
