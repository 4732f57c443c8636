// Device helpers of the fused kernels of models/cuda/: vector loads and stores
// of up to 16 bytes, warp and block sums, unfused products (conversions, the
// dtype dispatch and error checks are common/cuda's).
#pragma once

#include "common/cuda/check.h"
#include "common/cuda/element.cuh"
#include "models/cuda/fused_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace fptrain::models::cuda {

using common::cuda::aligned16;
using common::cuda::check_cuda;
using common::cuda::dispatch_dtype;
using common::cuda::element_bytes;
using common::cuda::from_float;
using common::cuda::round_to;
using common::cuda::to_float;

// Products and sums that must not be contracted into an FMA: where the ATen
// composition runs them as two kernels, fp32 results would otherwise differ.
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }

// ---- N consecutive elements, one load or store (16 bytes at most) -------------
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

template <typename T, int N>
__device__ __forceinline__ void load_vec(const T* p, float (&out)[N]) {
  const Pack<T, N> pk = *reinterpret_cast<const Pack<T, N>*>(p);
#pragma unroll
  for (int k = 0; k < N; ++k) out[k] = to_float(pk.v[k]);
}

template <typename T, int N>
__device__ __forceinline__ void store_vec(T* p, const float (&in)[N]) {
  Pack<T, N> pk;
#pragma unroll
  for (int k = 0; k < N; ++k) pk.v[k] = from_float<T>(in[k]);
  *reinterpret_cast<Pack<T, N>*>(p) = pk;
}

// Elements per 16-byte vector.
template <typename T>
constexpr int kVec16 = 16 / static_cast<int>(sizeof(T));

// ---- sums over a warp and a block (fixed trees: deterministic) ----------------
__device__ __forceinline__ float warp_allsum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// The sum of x over the block, returned to every thread. blockDim.x is a
// multiple of 32 (at most 1024); `scratch` holds 32 floats. Every warp adds the
// per-warp sums in the same order, so all threads get the same bits.
__device__ __forceinline__ float block_allsum(float x, float* scratch) {
  x = warp_allsum(x);
  const int warps = blockDim.x / 32;
  if (warps == 1) return x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  float total = lane < warps ? scratch[lane] : 0.0f;
  total = warp_allsum(total);
  __syncthreads();  // scratch may be reused by the next call
  return total;
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace fptrain::models::cuda
