// The decoder's element-wise operations through the fused CUDA kernels of
// models/fused_ops.h (RMSNorm, the residual add with the RMSNorm after it,
// RoPE on q and k at once, SwiGLU); projections and attention as in AtenOps.
// Equal to AtenOps to the dtype's rounding (models/fused_ops.h says where).
// GemmaOps over this set runs Gemma's forms through the same kernels.
#pragma once

#include "models/aten_ops.h"

namespace fptrain::models {

class FusedCudaOps : public AtenOps {
 public:
  using AtenOps::AtenOps;

  at::Tensor norm(const at::Tensor& x, const at::Tensor& weight, double eps) const override;
  AddRmsNormOutput add_norm(const at::Tensor& residual, const at::Tensor& update, const at::Tensor& weight,
                            double eps, double scale) const override;
  RotaryOutput rotary(const at::Tensor& q, const at::Tensor& k, const RotaryTables& tables) const override;
  at::Tensor gated_activation(const at::Tensor& gate, const at::Tensor& up) const override;
  at::Tensor gated_activation_packed(const at::Tensor& gate_up) const override;
  bool fused_kernels() const override { return true; }
};

}  // namespace fptrain::models
