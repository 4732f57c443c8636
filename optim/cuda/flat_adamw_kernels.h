// CUDA kernels over the optimizer's flat buffers (optim/flat_layout.h): the
// global gradient norm with the clip coefficient, the AdamW step, and the fp32
// gradient accumulation. Raw pointers and a stream; optim/flat_adamw.cpp
// checks the tensors and calls these. Free of LibTorch.
#pragma once

#include "common/cuda/dtype.h"
#include "optim/blockwise8_math.h"
#include "optim/flat_adamw_math.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace fptrain::optim::cuda {

using common::cuda::Dtype;

// One AdamW step over n elements. With `master` (fp32), the update runs on the
// master and its rounding is written to `weights` (model dtype; bf16 by
// flat::master_weight_bits); moments are fp32. With `remainder` instead (bf16
// weights only) the master is flat::join_master(weight, remainder) and both halves
// are written back.
// Without it the update runs on `weights` in place and the moments have the
// model dtype. `accum` (fp32, optional) is added to `grads` first; `coef`
// (a device fp32 scalar, optional) scales the gradient (the clip coefficient).
struct StepArgs {
  Dtype dtype = Dtype::kBFloat16;
  void* weights = nullptr;
  float* master = nullptr;
  uint16_t* remainder = nullptr;
  void* exp_avg = nullptr;
  void* exp_avg_sq = nullptr;
  const void* grads = nullptr;
  const float* accum = nullptr;
  const float* coef = nullptr;
  int64_t n = 0;
  flat::AdamWScalars scalars;
};
void flat_adamw_step(const StepArgs& args, cudaStream_t stream);

// One AdamW step with 8-bit blockwise moments (optim/blockwise8_math.h) over n elements,
// n a multiple of blockwise8::kBlock: weights, master / remainder, grads, accum and coef as
// in StepArgs; each moment as uint8 codes [n] into its book and an fp32 absmax per block
// [n / kBlock]. One thread block of kBlock threads per block of elements at a time.
struct Step8Args {
  Dtype dtype = Dtype::kBFloat16;
  void* weights = nullptr;
  float* master = nullptr;
  uint16_t* remainder = nullptr;
  uint8_t* exp_avg = nullptr;
  uint8_t* exp_avg_sq = nullptr;
  float* exp_avg_absmax = nullptr;
  float* exp_avg_sq_absmax = nullptr;
  const void* grads = nullptr;
  const float* accum = nullptr;
  const float* coef = nullptr;
  int64_t n = 0;
  blockwise8::Scalars scalars;
  blockwise8::CodeBooks books;  // 2 KiB, passed by value: every block copies it to shared memory
};
void flat_adamw8bit_step(const Step8Args& args, cudaStream_t stream);

// The L2 norm of (accum + grads) over n elements, summed in fp32 per thread and
// per block and in double across blocks, in a fixed order (deterministic), in
// one launch: the last block to finish writes norm[0] = the norm and
// coef[0] = clip_coefficient(norm, max_norm). `partials` holds kNormMaxBlocks
// floats and `counter` one zeroed unsigned, which the kernel leaves zeroed.
//
// The gradients may be cut into pieces (optim/flat_gradients.h's buckets): piece k
// holds elements [begin, end) of the n, in order and without gaps, or zeros
// (grads null). Thread t sums the same elements in the same order as over one
// buffer (t, t + stride, ... of the whole), so the norm is the same bits however
// the buffer is cut. Up to kNormMaxPieces pieces go in one launch; more take
// several, each thread's running sum carried in `carry` (kNormMaxBlocks x 256 floats).
constexpr int kNormMaxBlocks = 1024;
constexpr int kNormCarryFloats = kNormMaxBlocks * 256;
constexpr int kNormMaxPieces = 32;
struct NormPiece {
  const void* grads = nullptr;  // null: zeros
  int64_t begin = 0, end = 0;
};
struct NormArgs {
  Dtype dtype = Dtype::kBFloat16;
  const NormPiece* pieces = nullptr;  // host array
  int pieces_count = 0;
  const float* accum = nullptr;
  int64_t n = 0;
  float max_norm = 0.0f;
  float* norm = nullptr;
  float* coef = nullptr;
  float* partials = nullptr;
  unsigned* counter = nullptr;
  float* carry = nullptr;  // needed only with more than kNormMaxPieces pieces
};
void flat_grad_norm(const NormArgs& args, cudaStream_t stream);

// accum += grads; grads = 0 (one pass; n elements).
void flat_accumulate(float* accum, void* grads, Dtype dtype, int64_t n, cudaStream_t stream);

}  // namespace fptrain::optim::cuda
