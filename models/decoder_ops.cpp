#include "models/decoder_ops.h"

#include "models/aten_ops.h"
#include "models/fused_cuda_ops.h"

namespace fptrain::models {

at::Tensor residual_add(const at::Tensor& residual, const at::Tensor& update, double scale) {
  return scale != 1.0 ? residual + update * scale : residual + update;
}

const char* projection_module_name(ProjectionRole role) {
  switch (role) {
    case ProjectionRole::kQ: return "q_proj";
    case ProjectionRole::kK: return "k_proj";
    case ProjectionRole::kV: return "v_proj";
    case ProjectionRole::kQkv: return "qkv_proj";
    case ProjectionRole::kO: return "o_proj";
    case ProjectionRole::kGate: return "gate_proj";
    case ProjectionRole::kUp: return "up_proj";
    case ProjectionRole::kGateUp: return "gate_up_proj";
    case ProjectionRole::kDown: return "down_proj";
  }
  return "?";
}

at::Tensor DecoderOps::replayed_linear(const at::Tensor& x, const Projection& p) const {
  return replayed_sink_linear(x, *p.weight, p.bias ? *p.bias : at::Tensor(), sink(p));
}

std::vector<at::Tensor> DecoderOps::linear_group(const at::Tensor& x, const std::vector<const Projection*>& ps) const {
  std::vector<at::Tensor> out;
  for (const Projection* p : ps) out.push_back(linear(x, *p));
  return out;
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
