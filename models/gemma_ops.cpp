#include "models/gemma_ops.h"

namespace fptrain::models {

at::Tensor gemma_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor normed = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return (normed * (weight.to(at::kFloat) + 1.0)).to(x.scalar_type());
}

// Over the fused set, the kernels' variants; kCuda as FusedCudaOps asks: it runs
// only where they apply, so a misfit is an error rather than a silent fallback.
at::Tensor GemmaOps::norm(const at::Tensor& x, const at::Tensor& weight, double eps) const {
  if (fused_kernels()) return fused_gemma_rms_norm(x, weight, eps, FusedPath::kCuda);
  return gemma_rms_norm(x, weight, eps);
}

AddRmsNormOutput GemmaOps::add_norm(const at::Tensor& residual, const at::Tensor& update, const at::Tensor& weight,
                                    double eps, double scale) const {
  if (fused_kernels()) return fused_add_gemma_rms_norm(residual, update, weight, eps, scale, FusedPath::kCuda);
  return add_then_norm(*this, residual, update, weight, eps, scale);
}

at::Tensor GemmaOps::gated_activation(const at::Tensor& gate, const at::Tensor& up) const {
  if (fused_kernels()) return fused_geglu(gate, up, FusedPath::kCuda);
  return at::gelu(gate, "tanh") * up;
}

at::Tensor GemmaOps::gated_activation_packed(const at::Tensor& gate_up) const {
  if (fused_kernels()) return fused_geglu_packed(gate_up, FusedPath::kCuda);
  return DecoderOps::gated_activation_packed(gate_up);
}

}  // namespace fptrain::models
