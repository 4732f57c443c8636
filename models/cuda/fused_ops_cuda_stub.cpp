// models/cuda/ in a build without FPTRAIN_CUDA (CMake links this file instead
// of the kernels): kernels_built() is false, so fused_ops.cpp never takes the
// CUDA path and the other functions are never reached.
#include "models/cuda/fused_ops_cuda.h"

#include <stdexcept>

namespace fptrain::models::cuda {
namespace {

[[noreturn]] void not_built() { throw std::logic_error("models/cuda: the fused kernels are not in this build"); }

}  // namespace

bool kernels_built() { return false; }
bool device_supported(const at::Device&) { return false; }
int64_t rms_norm_max_cols() { return 0; }

RmsNormForwardResult rms_norm_forward(const at::Tensor&, const at::Tensor&, const at::Tensor&, double, double, bool) {
  not_built();
}

RmsNormBackwardResult rms_norm_backward(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                        const at::Tensor&, bool, double, bool, bool) {
  not_built();
}

std::pair<at::Tensor, at::Tensor> rotary(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                         bool) {
  not_built();
}

at::Tensor swiglu_forward(const at::Tensor&, const at::Tensor&, bool) { not_built(); }

void swiglu_backward(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                     bool) {
  not_built();
}

void cross_entropy_inplace(const at::Tensor&, const at::Tensor&, const at::Tensor&, bool) { not_built(); }

std::pair<at::Tensor, at::Tensor> nf4_quantize(const at::Tensor&, const at::Tensor&) { not_built(); }

at::Tensor nf4_dequantize(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                          const at::Tensor&, int64_t, at::ScalarType) {
  not_built();
}

}  // namespace fptrain::models::cuda
