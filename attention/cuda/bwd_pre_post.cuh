// Small element-wise passes around the backward mainloop.
#pragma once

#include "attention/cuda/fragments.cuh"
#include "attention/cuda/masking.cuh"
#include "attention/cuda/params.h"
#include "attention/cuda/tile_sizes.h"

namespace fptrain::attention::cuda {

// Atomic-dQ mode: the dK/dV kernel writes the dQ of a sequence that fits one key block
// directly (one CTA sees all its keys); only the other rows go through the fp32 buffer,
// so only they are zeroed here and converted after.
template <int D>
__device__ __forceinline__ bool dq_through_buffer(const VarlenShape& sh, int tok) {
  return !token_in_short_sequence(sh.cu_seqlens, sh.batch, sh.total_tokens, tok, dq_direct_max_len(D));
}

// dq_via_buffer[t] for every token: one search per token, once, so that the passes below read a
// byte instead of searching (a search per thread made the conversion latency-bound).
template <int D>
__global__ void __launch_bounds__(256) bwd_dq_route_kernel(BwdParams p) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < p.shape.total_tokens) p.dq_via_buffer[t] = dq_through_buffer<D>(p.shape, t);
}

// dsum[h, t] = sum_d dO[t, h, d] * O[t, h, d]: D/8 threads per row, 16-byte loads. In atomic-dQ
// mode it also zeroes the row's fp32 dQ buffer where the dK/dV kernel adds into it.
template <typename T, int D>
__global__ void __launch_bounds__(256) bwd_dsum_kernel(BwdParams p) {
  constexpr int kLanes = D / 8;
  const int64_t rows = int64_t(p.shape.total_tokens) * p.shape.heads_q;
  const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kLanes;
  const int sub = threadIdx.x % kLanes;
  const int64_t tok = min(row, rows - 1) / p.shape.heads_q;
  const bool zero_dq = p.dq_accum != nullptr && p.dq_via_buffer[tok];  // loaded alongside dO and O
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
  if (row >= rows) return;
  if (sub == 0) {
    const int h = int(row % p.shape.heads_q);
    p.dsum[int64_t(h) * p.shape.total_tokens + tok] = acc;
  }
  if (zero_dq) {
    float4* dst = reinterpret_cast<float4*>(p.dq_accum + row * D + sub * 8);
    dst[0] = make_float4(0.f, 0.f, 0.f, 0.f);
    dst[1] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// dq = scale * dq_accum, fp32 -> T, kConvertPerThread float4s per thread (their route bytes first, then
// their data: two round trips for the lot); rows the dK/dV kernel wrote directly are left alone.
constexpr int kConvertPerThread = 4;
template <typename T, int D>
__global__ void __launch_bounds__(256) bwd_dq_convert_kernel(BwdParams p, int64_t n4) {
  constexpr int64_t kRow4 = D / 4;  // float4s per (token, head) row
  const int64_t base = int64_t(blockIdx.x) * blockDim.x * kConvertPerThread + threadIdx.x;
  bool go[kConvertPerThread];
#pragma unroll
  for (int j = 0; j < kConvertPerThread; ++j) {
    const int64_t i = base + int64_t(j) * blockDim.x;
    go[j] = i < n4 && p.dq_via_buffer[i / kRow4 / p.shape.heads_q];
  }
  float4 x[kConvertPerThread];
#pragma unroll
  for (int j = 0; j < kConvertPerThread; ++j)
    if (go[j]) x[j] = reinterpret_cast<const float4*>(p.dq_accum)[base + int64_t(j) * blockDim.x];
  const float s = p.shape.scale;
#pragma unroll
  for (int j = 0; j < kConvertPerThread; ++j) {
    if (!go[j]) continue;
    uint2 out;
    out.x = Pair16<T>::pack(x[j].x * s, x[j].y * s);
    out.y = Pair16<T>::pack(x[j].z * s, x[j].w * s);
    reinterpret_cast<uint2*>(p.dq)[base + int64_t(j) * blockDim.x] = out;
  }
}

}  // namespace fptrain::attention::cuda
