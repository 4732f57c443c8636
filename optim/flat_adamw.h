// The optimizer's operations over flat buffers (optim/flat_layout.h): 1-D,
// contiguous, one length n, on one device. On CUDA each is one kernel of
// optim/cuda/ (an ATen fallback when the build has no CUDA kernels); on the
// CPU a reference implementation in C++ with the same per-element arithmetic
// (optim/flat_adamw_math.h), so the two agree bit for bit on the update.
#pragma once

#include "optim/flat_adamw_math.h"

#include <ATen/ATen.h>

#include <vector>

namespace fptrain::optim::flat {

// The configured hyperparameters and the step being taken (1 for the first).
struct AdamWHyper {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  int64_t step = 1;
};

// The L2 norm of accum + grads (accum: fp32, may be undefined), accumulated in
// fp32 in a fixed order (deterministic), into norm[0]; coef[0] =
// min(1, max_norm / (norm + 1e-6)) as torch.nn.utils.clip_grad_norm_ computes it
// (1 when max_norm <= 0). norm and coef: fp32 scalars on the buffers' device. No
// host synchronization.
void grad_norm(const at::Tensor& grads, const at::Tensor& accum, double max_norm, const at::Tensor& norm,
               const at::Tensor& coef);

// One piece of a gradient buffer cut into pieces (optim/flat_gradients.h's buckets):
// elements [offset, offset + numel) of the whole, held by `grads` (1-D, contiguous, numel
// elements) or, undefined, zeros.
struct GradPiece {
  at::Tensor grads;
  int64_t offset = 0;
  int64_t numel = 0;
};

// grad_norm() of the buffer that `pieces` (in order, covering [0, n) without gaps, one
// dtype and device) cut: the same sums in the same order as over one buffer, so the
// same bits. accum (fp32 [n], may be undefined) as in grad_norm().
void grad_norm(const std::vector<GradPiece>& pieces, const at::Tensor& accum, double max_norm,
               const at::Tensor& norm, const at::Tensor& coef);

// One AdamW step in one pass: g = (accum + grads) * coef (accum, coef optional);
// with `master` (fp32) the update runs on it and weights (model dtype) receive its
// rounding (bf16: master_weight_bits, ties away from zero), moments fp32; with
// `master` int16 (split masters, bf16 weights only) it holds the masters' lower
// halves and the update runs on join_master(weight, remainder), bit for bit the
// fp32 master's; without it weights are updated in place and the moments have
// their dtype.
void adamw_step(const at::Tensor& weights, const at::Tensor& master, const at::Tensor& exp_avg,
                const at::Tensor& exp_avg_sq, const at::Tensor& grads, const at::Tensor& accum,
                const at::Tensor& coef, const AdamWHyper& hyper);

// 8-bit blockwise moments (optim/blockwise8_math.h): uint8 codes [n] and one fp32 absmax
// per blockwise8::kBlock elements [n / kBlock] for each moment.
struct Moments8bit {
  at::Tensor exp_avg, exp_avg_sq;                // uint8 codes
  at::Tensor exp_avg_absmax, exp_avg_sq_absmax;  // fp32
};

// One AdamW step with 8-bit moments, bitsandbytes' AdamW8bit arithmetic
// (optim/blockwise8_math.h; not the fp32 step's): n a multiple of blockwise8::kBlock,
// block k being elements [k·kBlock, (k+1)·kBlock). Weights, master, grads, accum and coef
// as in adamw_step; without a master the weights are updated in place and, below fp32,
// rounded before the weight decay as bitsandbytes stores them. CPU (optim/flat_adamw8bit.cpp)
// and CUDA (optim/cuda/) agree bit for bit; there is no ATen fallback.
void adamw8bit_step(const at::Tensor& weights, const at::Tensor& master, const Moments8bit& moments,
                    const at::Tensor& grads, const at::Tensor& accum, const at::Tensor& coef,
                    const AdamWHyper& hyper);

// accum (fp32) += grads; grads = 0, in one pass.
void accumulate(const at::Tensor& accum, const at::Tensor& grads);

// Split masters as fp32 (a new tensor) from bf16 weights and int16 remainders, and back
// (weights and remainder written in place; 1-D; an undefined remainder: the weights only);
// any device, in chunks of a few million elements.
at::Tensor join_masters(const at::Tensor& weights, const at::Tensor& remainder);
void split_masters(const at::Tensor& master, const at::Tensor& weights, const at::Tensor& remainder);
// The model's copy of fp32 masters: bf16 rounded as the step rounds it (ties away from zero),
// fp16 by the cast.
void copy_masters_to_model(const at::Tensor& master, const at::Tensor& weights);

// Whether the CUDA kernels are in this build (else CUDA tensors take the ATen fallback).
bool cuda_kernels_built();

}  // namespace fptrain::optim::flat
