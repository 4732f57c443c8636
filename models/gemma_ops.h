// Gemma's arithmetic as a decorator over any op set: its RMSNorm multiplies the
// normalised fp32 values by (1 + weight) in fp32 and rounds once
// (Gemma2RMSNorm), where Llama's rounds first and multiplies by the weight in
// the model dtype; its gated MLP is gelu_pytorch_tanh(gate) * up. Over a set
// whose element-wise ops are the fused kernels (FusedCudaOps) these run as the
// kernels' Gemma variants (models/fused_ops.h: fused_gemma_rms_norm,
// fused_add_gemma_rms_norm, fused_geglu); over any other set, in ATen.
// Everything else is the inner set's.
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
  // The halves through this set's own gating (one kernel over the fused set).
  at::Tensor gated_activation_packed(const at::Tensor& gate_up) const override;
};

// Gemma2RMSNorm: dtype(x32 * rsqrt(mean(x32^2) + eps) * (1 + float(weight))).
at::Tensor gemma_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

}  // namespace fptrain::models
