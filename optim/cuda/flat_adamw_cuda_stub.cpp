// optim/cuda/ in a build without FPTRAIN_CUDA (CMake links this file instead
// of the kernels): kernels_built() is false, so optim/flat_adamw.cpp takes its
// ATen path for CUDA tensors and the other functions are never reached.
#include "optim/cuda/flat_adamw_cuda.h"

#include <stdexcept>

namespace fptrain::optim::cuda {
namespace {

[[noreturn]] void not_built() { throw std::logic_error("optim/cuda: the flat-buffer kernels are not in this build"); }

}  // namespace

bool kernels_built() { return false; }

void grad_norm(const std::vector<flat::GradPiece>&, at::ScalarType, int64_t, const at::Tensor&, double,
               const at::Tensor&, const at::Tensor&) {
  not_built();
}

void adamw_step(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                const at::Tensor&, const at::Tensor&, const flat::AdamWScalars&) {
  not_built();
}

void adamw8bit_step(const at::Tensor&, const at::Tensor&, const flat::Moments8bit&, const at::Tensor&,
                    const at::Tensor&, const at::Tensor&, const blockwise8::Scalars&) {
  not_built();
}

void accumulate(const at::Tensor&, const at::Tensor&) { not_built(); }

}  // namespace fptrain::optim::cuda
