#include "models/gemma_ops.h"

namespace fptrain::models {

at::Tensor gemma_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor normed = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return (normed * (weight.to(at::kFloat) + 1.0)).to(x.scalar_type());
}

at::Tensor GemmaOps::norm(const at::Tensor& x, const at::Tensor& weight, double eps) const {
  return gemma_rms_norm(x, weight, eps);
}

AddRmsNormOutput GemmaOps::add_norm(const at::Tensor& residual, const at::Tensor& update, const at::Tensor& weight,
                                    double eps, double scale) const {
  return add_then_norm(*this, residual, update, weight, eps, scale);
}

at::Tensor GemmaOps::gated_activation(const at::Tensor& gate, const at::Tensor& up) const {
  return at::gelu(gate, "tanh") * up;
}

}  // namespace fptrain::models
