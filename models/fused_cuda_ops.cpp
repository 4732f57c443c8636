#include "models/fused_cuda_ops.h"

namespace fptrain::models {

at::Tensor FusedCudaOps::norm(const at::Tensor& x, const at::Tensor& weight, double eps) const {
  return fused_rms_norm(x, weight, eps, FusedPath::kCuda);
}

AddRmsNormOutput FusedCudaOps::add_norm(const at::Tensor& residual, const at::Tensor& update,
                                        const at::Tensor& weight, double eps, double scale) const {
  // sum is saved for the backward: not modified later.
  return fused_add_rms_norm(residual, update, weight, eps, scale, FusedPath::kCuda);
}

RotaryOutput FusedCudaOps::rotary(const at::Tensor& q, const at::Tensor& k, const RotaryTables& tables) const {
  // The kernel rotates whole heads; partial rotary (Phi-4-mini) takes the ATen path.
  if (tables.cos.size(-1) != q.size(-1)) return {apply_rotary(q, tables), apply_rotary(k, tables)};
  return fused_rotary(q, k, tables, FusedPath::kCuda);
}

at::Tensor FusedCudaOps::gated_activation(const at::Tensor& gate, const at::Tensor& up) const {
  return fused_swiglu(gate, up, FusedPath::kCuda);
}

at::Tensor FusedCudaOps::gated_activation_packed(const at::Tensor& gate_up) const {
  return fused_swiglu_packed(gate_up, FusedPath::kCuda);
}

}  // namespace fptrain::models
