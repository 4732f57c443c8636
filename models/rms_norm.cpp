#include "models/rms_norm.h"

namespace fptrain::models {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor variance = x32.pow(2).mean(-1, /*keepdim=*/true);
  return weight * (x32 * at::rsqrt(variance + eps)).to(x.scalar_type());
}

}  // namespace fptrain::models
