#include "models/decoder_ops.h"

#include "models/aten_ops.h"
#include "models/fused_cuda_ops.h"

namespace fptrain::models {

at::Tensor residual_add(const at::Tensor& residual, const at::Tensor& update, double scale) {
  return scale != 1.0 ? residual + update * scale : residual + update;
}

// Phi3MLP: up * silu(gate) on the halves (multiplication commutes exactly).
at::Tensor DecoderOps::gated_activation_packed(const at::Tensor& gate_up) const {
  const int64_t half = gate_up.size(-1) / 2;
  return gated_activation(gate_up.narrow(-1, 0, half), gate_up.narrow(-1, half, half));
}

AddRmsNormOutput add_then_norm(const DecoderOps& ops, const at::Tensor& residual, const at::Tensor& update,
                               const at::Tensor& weight, double eps, double scale) {
  at::Tensor sum = residual_add(residual, update, scale);
  at::Tensor normed = ops.norm(sum, weight, eps);
  return {std::move(sum), std::move(normed)};
}

std::shared_ptr<const DecoderOps> make_decoder_ops(const at::Device& device, bool fused, attention::Backend backend,
                                                   std::shared_ptr<GradSinks> sinks) {
  if (fused && fused_cuda_kernels_available(device)) return std::make_shared<FusedCudaOps>(backend, std::move(sinks));
  return std::make_shared<AtenOps>(backend, std::move(sinks));
}

}  // namespace fptrain::models
