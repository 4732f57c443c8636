// Small element-wise passes around the backward mainloop.
#pragma once

#include "attention/cuda/fragments.cuh"
#include "attention/cuda/params.h"

namespace fptrain::attention::cuda {

// dsum[h, t] = sum_d dO[t, h, d] * O[t, h, d]: D/8 threads per row, 16-byte loads.
template <typename T, int D>
__global__ void __launch_bounds__(256) bwd_dsum_kernel(BwdParams p) {
  constexpr int kLanes = D / 8;
  const int64_t rows = int64_t(p.shape.total_tokens) * p.shape.heads_q;
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kLanes;
  const int sub = threadIdx.x % kLanes;
  float acc = 0.f;
  if (row < rows) {
    const uint4 a = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.dout) + row * D + sub * 8);
    const uint4 b = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.o) + row * D + sub * 8);
    const uint32_t av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 x = Pair16<T>::unpack(av[i]), y = Pair16<T>::unpack(bv[i]);
      acc += x.x * y.x + x.y * y.y;
    }
  }
#pragma unroll
  for (int off = kLanes / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (row < rows && sub == 0) {
    const int64_t tok = row / p.shape.heads_q;
    const int h = int(row % p.shape.heads_q);
    p.dsum[int64_t(h) * p.shape.total_tokens + tok] = acc;
  }
}

// dq = scale * dq_accum, fp32 -> T, 4 elements per thread.
template <typename T>
__global__ void __launch_bounds__(256) bwd_dq_convert_kernel(BwdParams p, int64_t n4) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  const float4 x = reinterpret_cast<const float4*>(p.dq_accum)[i];
  const float s = p.shape.scale;
  uint2 out;
  out.x = Pair16<T>::pack(x.x * s, x.y * s);
  out.y = Pair16<T>::pack(x.z * s, x.w * s);
  reinterpret_cast<uint2*>(p.dq)[i] = out;
}

}  // namespace fptrain::attention::cuda
