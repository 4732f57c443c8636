// Gemma's arithmetic as a decorator over any op set: its RMSNorm multiplies the
// normalised fp32 values by (1 + weight) in fp32 and rounds once
// (Gemma2RMSNorm), where Llama's rounds first and multiplies by the weight in
// the model dtype; its gated MLP is gelu_pytorch_tanh(gate) * up. The fused
// CUDA kernels compute Llama's forms, so these run in ATen on every device
// (the model's log says so); everything else is the inner set's.
#pragma once

#include "models/decoder_ops.h"

namespace fptrain::models {

class GemmaOps : public ForwardingOps {
 public:
  explicit GemmaOps(std::shared_ptr<const DecoderOps> inner) : ForwardingOps(std::move(inner)) {}

  at::Tensor norm(const at::Tensor& x, const at::Tensor& weight, double eps) const override;
  AddRmsNormOutput add_norm(const at::Tensor& residual, const at::Tensor& update, const at::Tensor& weight,
                            double eps, double scale) const override;
  at::Tensor gated_activation(const at::Tensor& gate, const at::Tensor& up) const override;
  // The halves through this set's own gating.
  at::Tensor gated_activation_packed(const at::Tensor& gate_up) const override {
    return DecoderOps::gated_activation_packed(gate_up);
  }
};

// Gemma2RMSNorm: dtype(x32 * rsqrt(mean(x32^2) + eps) * (1 + float(weight))).
at::Tensor gemma_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

}  // namespace fptrain::models
