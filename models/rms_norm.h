// RMSNorm as Hugging Face's LlamaRMSNorm computes it.
#pragma once

#include <ATen/ATen.h>

namespace fptrain::models {

// x * rsqrt(mean(x^2) + eps) in fp32, cast back to x's dtype, then * weight.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

}  // namespace fptrain::models
