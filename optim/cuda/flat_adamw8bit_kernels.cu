// The AdamW step with 8-bit blockwise moments (see flat_adamw_kernels.h). A thread
// block of kBlock threads takes one block of elements at a time, one element per
// thread, as bitsandbytes' kernel does (BLOCKSIZE_2STATE 256, NUM_2STATE 1): the
// moments, the block's two absmax (a max over the thread block), the weight, the
// codes. The per-element arithmetic is optim/blockwise8_math.h, shared with the CPU.
#include "optim/cuda/flat_adamw_kernels.h"

#include "common/cuda/check.h"
#include "common/cuda/element.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

namespace fptrain::optim::cuda {
namespace {

using blockwise8::kBlock;
using common::cuda::check_cuda;
using common::cuda::dispatch_dtype;
using common::cuda::from_float;
using common::cuda::to_float;

constexpr int kThreads = static_cast<int>(kBlock);
constexpr int kWarps = kThreads / 32;
// Thread blocks in flight: enough to fill an H100/H200 (132 SMs x 8 resident blocks of 256
// threads); each loops over blocks of elements, so the code books load once per thread block.
constexpr int64_t kMaxGrid = 132 * 8;

enum Masters : int { kNone = 0, kFp32 = 1, kSplit = 2 };

// The maximum over the thread block of each thread's x (NaN-ignoring fmaxf: any order gives
// the CPU's fold); `scratch` holds kWarps floats and is free again on return.
__device__ __forceinline__ float block_max(float x, float* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = x;
  __syncthreads();
  float total = scratch[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) total = fmaxf(total, scratch[w]);
  __syncthreads();
  return total;
}

// The weight of element i, updated: masters as in flat_adamw_kernels.cu; without masters a
// model below fp32 rounds between the Adam update and the decay (bitsandbytes stores T).
template <typename P, int kM>
__device__ __forceinline__ void update_weight(const Step8Args& a, int64_t i, float m, float v) {
  P* weights = static_cast<P*>(a.weights);
  float w;
  if constexpr (kM == kFp32) w = a.master[i];
  else if constexpr (kM == kSplit) w = flat::join_master(__bfloat16_as_ushort(weights[i]), a.remainder[i]);
  else w = to_float(weights[i]);
  w = blockwise8::adam_update(w, m, v, a.scalars);
  if constexpr (kM == kNone && !std::is_same_v<P, float>) w = to_float(from_float<P>(w));
  w = blockwise8::apply_decay(w, a.scalars);
  if constexpr (kM == kFp32) a.master[i] = w;
  if constexpr (kM == kSplit) a.remainder[i] = flat::master_remainder(w);
  if constexpr (kM != kNone && std::is_same_v<P, __nv_bfloat16>)
    weights[i] = __ushort_as_bfloat16(flat::master_weight_bits(w));
  else
    weights[i] = from_float<P>(w);
}

template <typename P, int kM, bool kAccum>
__global__ void __launch_bounds__(kThreads) adamw8bit_kernel(const __grid_constant__ Step8Args a) {
  __shared__ float book_m[blockwise8::kCodes], book_v[blockwise8::kCodes];
  __shared__ float scratch[kWarps];
  book_m[threadIdx.x] = a.books.exp_avg[threadIdx.x];
  book_v[threadIdx.x] = a.books.exp_avg_sq[threadIdx.x];
  __syncthreads();
  const float coef = a.coef ? *a.coef : 1.0f;
  const int64_t blocks = a.n / kBlock;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t i = b * kBlock + threadIdx.x;
    float graw = to_float(static_cast<const P*>(a.grads)[i]);
    if (kAccum) graw = flat::f_add(a.accum[i], graw);
    const float m_old = blockwise8::dequantize(book_m, a.exp_avg[i], a.exp_avg_absmax[b]);
    const float v_old = blockwise8::dequantize(book_v, a.exp_avg_sq[i], a.exp_avg_sq_absmax[b]);
    float m, v;
    const bool live = blockwise8::update_moments(graw, coef, m_old, v_old, m, v, a.scalars);
    // Every thread has read the old absmax before the first barrier inside block_max.
    const float m_max = block_max(blockwise8::max_abs(-FLT_MAX, m), scratch);
    const float v_max = block_max(blockwise8::max_abs(-FLT_MAX, v), scratch);
    if (threadIdx.x == 0) {
      a.exp_avg_absmax[b] = m_max;
      a.exp_avg_sq_absmax[b] = v_max;
    }
    if (live) update_weight<P, kM>(a, i, m, v);
    a.exp_avg[i] = blockwise8::quantize_signed(book_m, m, m_max);
    a.exp_avg_sq[i] = blockwise8::quantize_unsigned(book_v, v, v_max);
  }
}

template <typename P, int kM>
void launch(const Step8Args& a, cudaStream_t stream) {
  const int64_t blocks = a.n / kBlock;
  const int64_t grid = blocks < kMaxGrid ? blocks : kMaxGrid;
  if (a.accum) adamw8bit_kernel<P, kM, true><<<grid, kThreads, 0, stream>>>(a);
  else adamw8bit_kernel<P, kM, false><<<grid, kThreads, 0, stream>>>(a);
  check_cuda(cudaGetLastError(), "flat AdamW 8-bit step launch");
}

template <typename P>
void dispatch(const Step8Args& a, cudaStream_t stream) {
  if constexpr (std::is_same_v<P, float>) {
    if (a.master || a.remainder) throw std::invalid_argument("optim/cuda: master weights for fp32 weights");
    launch<P, kNone>(a, stream);
  } else if constexpr (std::is_same_v<P, __nv_bfloat16>) {
    if (a.remainder) launch<P, kSplit>(a, stream);
    else if (a.master) launch<P, kFp32>(a, stream);
    else launch<P, kNone>(a, stream);
  } else {
    if (a.remainder) throw std::invalid_argument("optim/cuda: split masters need bf16 weights");
    if (a.master) launch<P, kFp32>(a, stream);
    else launch<P, kNone>(a, stream);
  }
}

}  // namespace

void flat_adamw8bit_step(const Step8Args& a, cudaStream_t stream) {
  if (a.n == 0) return;
  if (a.n % kBlock != 0) throw std::invalid_argument("optim/cuda: the 8-bit step needs a multiple of 256 elements");
  dispatch_dtype(a.dtype, [&](auto t) { dispatch<decltype(t)>(a, stream); });
}

}  // namespace fptrain::optim::cuda
