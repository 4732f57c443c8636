// Entry points from optim/flat_adamw.cpp to the CUDA kernels, on tensors
// that flat_adamw.cpp has already checked (1-D, contiguous, same length, one
// CUDA device). Present only in builds with FPTRAIN_CUDA.
#pragma once

#include "optim/blockwise8_math.h"
#include "optim/flat_adamw.h"
#include "optim/flat_adamw_math.h"

#include <ATen/ATen.h>

namespace fptrain::optim::cuda {

// False in a build without FPTRAIN_CUDA (flat_adamw_cuda_stub.cpp), whose
// other functions are never called then.
bool kernels_built();

// The norm of the buffer of n elements that `pieces` cut (flat::grad_norm's checks done), dtype `dtype`.
void grad_norm(const std::vector<flat::GradPiece>& pieces, at::ScalarType dtype, int64_t n, const at::Tensor& accum,
               double max_norm, const at::Tensor& norm, const at::Tensor& coef);
void adamw_step(const at::Tensor& weights, const at::Tensor& master, const at::Tensor& exp_avg,
                const at::Tensor& exp_avg_sq, const at::Tensor& grads, const at::Tensor& accum,
                const at::Tensor& coef, const flat::AdamWScalars& scalars);
void adamw8bit_step(const at::Tensor& weights, const at::Tensor& master, const flat::Moments8bit& moments,
                    const at::Tensor& grads, const at::Tensor& accum, const at::Tensor& coef,
                    const blockwise8::Scalars& scalars);
void accumulate(const at::Tensor& accum, const at::Tensor& grads);

}  // namespace fptrain::optim::cuda
