#include "models/decoder_ops.h"

#include "models/aten_ops.h"
#include "models/fused_cuda_ops.h"

namespace fptrain::models {

at::Tensor residual_add(const at::Tensor& residual, const at::Tensor& update, double scale) {
  return scale != 1.0 ? residual + update * scale : residual + update;
}

std::shared_ptr<const DecoderOps> make_decoder_ops(const at::Device& device, bool fused, attention::Backend backend,
                                                   std::shared_ptr<GradSinks> sinks) {
  if (fused && fused_cuda_kernels_available(device)) return std::make_shared<FusedCudaOps>(backend, std::move(sinks));
  return std::make_shared<AtenOps>(backend, std::move(sinks));
}

}  // namespace fptrain::models
