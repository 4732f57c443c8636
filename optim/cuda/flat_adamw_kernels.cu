// The flat-buffer optimizer kernels (see flat_adamw_kernels.h). Each is one pass
// over memory: a thread handles 8 consecutive elements with 16-byte loads and
// stores (a scalar variant serves buffers that are not 16-byte aligned), and the
// per-element arithmetic is optim/flat_adamw_math.h, shared with the CPU path.
#include "optim/cuda/flat_adamw_kernels.h"

#include "common/cuda/check.h"
#include "common/cuda/element.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace fptrain::optim::cuda {
namespace {

using common::cuda::aligned16;
using common::cuda::check_cuda;
using common::cuda::dispatch_dtype;
using common::cuda::from_float;
using common::cuda::to_float;

constexpr int kThreads = 256;
constexpr int kVec = 8;  // elements per thread in the vector variants

// ---- 8 elements at a time (16-byte aligned) ---------------------------------
__device__ __forceinline__ void load8(const float* p, float out[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  out[0] = a.x; out[1] = a.y; out[2] = a.z; out[3] = a.w;
  out[4] = b.x; out[5] = b.y; out[6] = b.z; out[7] = b.w;
}
template <typename H>  // __nv_bfloat16 or __half: 8 of them are one 16-byte load
__device__ __forceinline__ void load8(const H* p, float out[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const H* h = reinterpret_cast<const H*>(&raw);
#pragma unroll
  for (int k = 0; k < 8; ++k) out[k] = to_float(h[k]);
}
__device__ __forceinline__ void store8(float* p, const float in[8]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(in[0], in[1], in[2], in[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(in[4], in[5], in[6], in[7]);
}
template <typename H>
__device__ __forceinline__ void store8(H* p, const float in[8]) {
  uint4 raw;
  H* h = reinterpret_cast<H*>(&raw);
#pragma unroll
  for (int k = 0; k < 8; ++k) h[k] = from_float<H>(in[k]);
  *reinterpret_cast<uint4*>(p) = raw;
}
__device__ __forceinline__ void store8_zero(void* p, int element_bytes) {
  // 8 elements of 2 bytes = one uint4; of 4 bytes = two.
  reinterpret_cast<uint4*>(p)[0] = make_uint4(0, 0, 0, 0);
  if (element_bytes == 4) reinterpret_cast<uint4*>(p)[1] = make_uint4(0, 0, 0, 0);
}

// ---- the AdamW step ---------------------------------------------------------
// Where the update's fp32 weight lives (optim/flat_adamw.cpp's Masters).
enum Masters : int { kNone = 0, kFp32 = 1, kSplit = 2 };

// The model's copy of a master: bf16 by flat::master_weight_bits (ties away from zero), fp16 by the cast.
template <typename P>
__device__ __forceinline__ P model_copy(float w) {
  if constexpr (std::is_same_v<P, __nv_bfloat16>) return __ushort_as_bfloat16(flat::master_weight_bits(w));
  else return from_float<P>(w);
}
template <typename P>
__device__ __forceinline__ uint16_t weight_bits(P x) {
  if constexpr (std::is_same_v<P, __nv_bfloat16>) return __bfloat16_as_ushort(x);
  else return 0;  // split masters take bf16 weights only (dispatch_step)
}

template <typename P, int kM, bool kAccum>
__device__ __forceinline__ void step_one(const StepArgs& a, int64_t i, float coef) {
  using M = std::conditional_t<kM != kNone, float, P>;
  P* weights = static_cast<P*>(a.weights);
  M* exp_avg = static_cast<M*>(a.exp_avg);
  M* exp_avg_sq = static_cast<M*>(a.exp_avg_sq);
  const float graw = to_float(static_cast<const P*>(a.grads)[i]);
  const float g = kAccum ? flat::effective_grad(a.accum[i], graw, coef) : flat::effective_grad(graw, coef);
  float w = kM == kFp32    ? a.master[i]
            : kM == kSplit ? flat::join_master(weight_bits(weights[i]), a.remainder[i])
                           : to_float(weights[i]);
  float m = to_float(exp_avg[i]), v = to_float(exp_avg_sq[i]);
  flat::adamw_element(g, w, m, v, a.scalars);
  exp_avg[i] = from_float<M>(m);
  exp_avg_sq[i] = from_float<M>(v);
  if (kM == kFp32) a.master[i] = w;
  if (kM == kSplit) a.remainder[i] = flat::master_remainder(w);
  weights[i] = kM == kNone ? from_float<P>(w) : model_copy<P>(w);
}

// 8 16-bit values as one 16-byte load or store.
__device__ __forceinline__ void load8_bits(const void* p, uint16_t out[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const uint16_t* h = reinterpret_cast<const uint16_t*>(&raw);
#pragma unroll
  for (int k = 0; k < 8; ++k) out[k] = h[k];
}
__device__ __forceinline__ void store8_bits(void* p, const uint16_t in[8]) {
  uint4 raw;
  uint16_t* h = reinterpret_cast<uint16_t*>(&raw);
#pragma unroll
  for (int k = 0; k < 8; ++k) h[k] = in[k];
  *reinterpret_cast<uint4*>(p) = raw;
}

template <typename P, int kM, bool kAccum>
__device__ __forceinline__ void step_eight(const StepArgs& a, int64_t i, float coef) {
  using M = std::conditional_t<kM != kNone, float, P>;
  P* weights = static_cast<P*>(a.weights);
  M* exp_avg = static_cast<M*>(a.exp_avg);
  M* exp_avg_sq = static_cast<M*>(a.exp_avg_sq);
  float g[8], w[8], m[8], v[8];
  load8(static_cast<const P*>(a.grads) + i, g);
  if (kAccum) {
    float acc[8];
    load8(a.accum + i, acc);
#pragma unroll
    for (int k = 0; k < 8; ++k) g[k] = flat::effective_grad(acc[k], g[k], coef);
  } else {
#pragma unroll
    for (int k = 0; k < 8; ++k) g[k] = flat::effective_grad(g[k], coef);
  }
  uint16_t wb[8], rb[8];
  if constexpr (kM == kFp32) {
    load8(a.master + i, w);
  } else if constexpr (kM == kSplit) {
    load8_bits(weights + i, wb);
    load8_bits(a.remainder + i, rb);
#pragma unroll
    for (int k = 0; k < 8; ++k) w[k] = flat::join_master(wb[k], rb[k]);
  } else {
    load8(weights + i, w);
  }
  load8(exp_avg + i, m);
  load8(exp_avg_sq + i, v);
#pragma unroll
  for (int k = 0; k < 8; ++k) flat::adamw_element(g[k], w[k], m[k], v[k], a.scalars);
  store8(exp_avg + i, m);
  store8(exp_avg_sq + i, v);
  if constexpr (kM == kNone) {
    store8(weights + i, w);
  } else if constexpr (std::is_same_v<P, __nv_bfloat16>) {
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      wb[k] = flat::master_weight_bits(w[k]);
      rb[k] = flat::master_remainder(w[k]);
    }
    store8_bits(weights + i, wb);
    if constexpr (kM == kSplit) store8_bits(a.remainder + i, rb);
    else store8(a.master + i, w);
  } else {  // fp16 with fp32 masters: the cast
    store8(a.master + i, w);
    store8(weights + i, w);
  }
}

// Thread t handles elements [8t, 8t+8) (vector) or element t (scalar); in the
// vector variant one more thread takes the n % 8 elements at the end.
template <typename P, int kM, bool kAccum, bool kVector>
__global__ void __launch_bounds__(kThreads) adamw_step_kernel(StepArgs a) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const float coef = a.coef ? *a.coef : 1.0f;
  if (!kVector) {
    if (t < a.n) step_one<P, kM, kAccum>(a, t, coef);
    return;
  }
  const int64_t groups = a.n / kVec;
  if (t < groups) {
    step_eight<P, kM, kAccum>(a, t * kVec, coef);
  } else if (t == groups) {
    for (int64_t i = groups * kVec; i < a.n; ++i) step_one<P, kM, kAccum>(a, i, coef);
  }
}

template <typename P, int kM, bool kAccum>
void launch_step(const StepArgs& a, cudaStream_t stream) {
  const bool vector = aligned16(a.weights) && aligned16(a.master) && aligned16(a.remainder) &&
                      aligned16(a.exp_avg) && aligned16(a.exp_avg_sq) && aligned16(a.grads) && aligned16(a.accum);
  const int64_t threads = vector ? a.n / kVec + 1 : a.n;
  const int64_t blocks = (threads + kThreads - 1) / kThreads;
  if (vector) adamw_step_kernel<P, kM, kAccum, true><<<blocks, kThreads, 0, stream>>>(a);
  else adamw_step_kernel<P, kM, kAccum, false><<<blocks, kThreads, 0, stream>>>(a);
  check_cuda(cudaGetLastError(), "flat AdamW step launch");
}

template <typename P, int kM>
void launch_step(const StepArgs& a, cudaStream_t stream) {
  if (a.accum) launch_step<P, kM, true>(a, stream);
  else launch_step<P, kM, false>(a, stream);
}

template <typename P>
void dispatch_step(const StepArgs& a, cudaStream_t stream) {
  if constexpr (std::is_same_v<P, float>) {
    if (a.master || a.remainder) throw std::invalid_argument("optim/cuda: master weights for fp32 weights");
    launch_step<P, kNone>(a, stream);
  } else if constexpr (std::is_same_v<P, __nv_bfloat16>) {
    if (a.remainder) launch_step<P, kSplit>(a, stream);
    else if (a.master) launch_step<P, kFp32>(a, stream);
    else launch_step<P, kNone>(a, stream);
  } else {
    if (a.remainder) throw std::invalid_argument("optim/cuda: split masters need bf16 weights");
    if (a.master) launch_step<P, kFp32>(a, stream);
    else launch_step<P, kNone>(a, stream);
  }
}

// ---- the gradient norm ------------------------------------------------------
template <typename T>
__device__ __forceinline__ T warp_sum(T x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_down_sync(0xffffffffu, x, o);
  return x;
}

// The sum over the block, valid in thread 0 (a fixed tree: deterministic).
template <typename T>
__device__ __forceinline__ T block_sum(T x) {
  __shared__ T warps[kThreads / 32];
  x = warp_sum(x);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warps[warp] = x;
  __syncthreads();
  T total = 0;
  if (warp == 0) {
    total = lane < kThreads / 32 ? warps[lane] : T(0);
    total = warp_sum(total);
  }
  __syncthreads();  // warps[] may be reused by a later call
  return total;
}

// One launch's share of the norm: the call's arguments (their host `pieces`
// array is not read on the device), up to kNormMaxPieces pieces copied by
// value, whether the threads start from zero or from their carried sums, and
// whether this launch finishes the norm.
struct NormLaunch {
  NormArgs args;
  NormPiece pieces[kNormMaxPieces];
  int count = 0;
  bool first = true, last = true;
};

// Adds the squares of this thread's units (of kVector ? 8 : 1 elements) of one
// piece: the units u ≡ t (mod stride) of the whole buffer that the piece holds.
template <typename P, bool kAccum, bool kVector>
__device__ __forceinline__ float piece_squares(const NormPiece& p, const float* accum, int64_t units, int64_t t,
                                               int64_t stride, float sum) {
  constexpr int64_t unit = kVector ? kVec : 1;
  if (p.grads == nullptr && !kAccum) return sum;  // zeros: fmaf(0, 0, sum) is sum
  const P* g = static_cast<const P*>(p.grads);
  const int64_t ub = p.begin / unit, ue = p.end / unit < units ? p.end / unit : units;
  for (int64_t u = ub + ((t - ub) % stride + stride) % stride; u < ue; u += stride) {
    const int64_t i = u * unit;
    float x[kVector ? kVec : 1];
    if constexpr (kVector) {
      if (g) load8(g + (i - p.begin), x);
      else for (int k = 0; k < kVec; ++k) x[k] = 0.0f;
      if (kAccum) {
        float acc[8];
        load8(accum + i, acc);
#pragma unroll
        for (int k = 0; k < 8; ++k) x[k] += acc[k];
      }
    } else {
      x[0] = (g ? to_float(g[i - p.begin]) : 0.0f) + (kAccum ? accum[i] : 0.0f);
    }
#pragma unroll
    for (int k = 0; k < unit; ++k) sum = fmaf(x[k], x[k], sum);
  }
  return sum;
}

template <typename P, bool kAccum, bool kVector>
__global__ void __launch_bounds__(kThreads) grad_norm_kernel(NormLaunch l) {
  const NormArgs& a = l.args;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t units = kVector ? a.n / kVec : a.n;
  float sum = l.first ? 0.0f : a.carry[t];
  for (int k = 0; k < l.count; ++k)
    sum = piece_squares<P, kAccum, kVector>(l.pieces[k], a.accum, units, t, stride, sum);
  if (!l.last) {
    a.carry[t] = sum;
    return;
  }
  if (kVector && l.count > 0) {  // the n % 8 elements at the end, in the last piece, one per thread as before
    const NormPiece& p = l.pieces[l.count - 1];
    const P* g = static_cast<const P*>(p.grads);
    for (int64_t i = units * kVec + t; i < a.n; i += stride) {
      const float x = (g ? to_float(g[i - p.begin]) : 0.0f) + (kAccum ? a.accum[i] : 0.0f);
      sum = fmaf(x, x, sum);
    }
  }
  const float block_total = block_sum(sum);

  __shared__ bool last;
  if (threadIdx.x == 0) {
    a.partials[blockIdx.x] = block_total;
    __threadfence();  // the partial is visible before the counter says so
    last = atomicAdd(a.counter, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  // The last block adds the partials in index order, in double.
  __threadfence();
  double d = 0.0;
  for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x)
    d += static_cast<double>(__ldcg(a.partials + b));
  const double total = block_sum(d);
  if (threadIdx.x == 0) {
    const float norm = static_cast<float>(sqrt(total));
    a.norm[0] = norm;
    a.coef[0] = flat::clip_coefficient(norm, a.max_norm);
    *a.counter = 0u;
  }
}

// The 8-element variant needs every piece and the fp32 sums 16-byte aligned and
// every cut on a multiple of 8 (the last piece may end anywhere).
bool norm_vector(const NormArgs& a) {
  if (!aligned16(a.accum)) return false;
  for (int k = 0; k < a.pieces_count; ++k) {
    const NormPiece& p = a.pieces[k];
    if (!aligned16(p.grads) || p.begin % kVec != 0 || (p.end % kVec != 0 && p.end != a.n)) return false;
  }
  return true;
}

template <typename P, bool kAccum, bool kVector>
void launch_norm(const NormArgs& a, cudaStream_t stream) {
  const int64_t units = kVector ? a.n / kVec : a.n;
  int64_t blocks = (units + kThreads - 1) / kThreads;
  blocks = blocks < 1 ? 1 : blocks > kNormMaxBlocks ? kNormMaxBlocks : blocks;
  NormLaunch l;
  l.args = a;
  if (a.pieces_count > kNormMaxPieces && a.carry == nullptr)
    throw std::invalid_argument("optim/cuda: more gradient pieces than one launch takes, and no carry buffer");
  int done = 0;
  do {
    l.count = a.pieces_count - done < kNormMaxPieces ? a.pieces_count - done : kNormMaxPieces;
    for (int k = 0; k < l.count; ++k) l.pieces[k] = a.pieces[done + k];
    l.first = done == 0;
    done += l.count;
    l.last = done == a.pieces_count;
    grad_norm_kernel<P, kAccum, kVector><<<blocks, kThreads, 0, stream>>>(l);
    check_cuda(cudaGetLastError(), "flat gradient norm launch");
  } while (!l.last);
}

template <typename P>
void launch_norm(const NormArgs& a, cudaStream_t stream) {
  const bool vector = norm_vector(a);
  if (a.accum) {
    if (vector) launch_norm<P, true, true>(a, stream);
    else launch_norm<P, true, false>(a, stream);
  } else {
    if (vector) launch_norm<P, false, true>(a, stream);
    else launch_norm<P, false, false>(a, stream);
  }
}

// ---- fp32 accumulation -------------------------------------------------------
template <typename P, bool kVector>
__global__ void __launch_bounds__(kThreads) accumulate_kernel(float* accum, P* grads, int64_t n) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (kVector) {
    const int64_t groups = n / kVec;
    if (t < groups) {
      float acc[8], g[8];
      load8(accum + t * kVec, acc);
      load8(grads + t * kVec, g);
#pragma unroll
      for (int k = 0; k < 8; ++k) acc[k] = flat::f_add(acc[k], g[k]);
      store8(accum + t * kVec, acc);
      store8_zero(grads + t * kVec, sizeof(P));
    } else if (t == groups) {
      for (int64_t i = groups * kVec; i < n; ++i) {
        accum[i] = flat::f_add(accum[i], to_float(grads[i]));
        grads[i] = from_float<P>(0.0f);
      }
    }
  } else if (t < n) {
    accum[t] = flat::f_add(accum[t], to_float(grads[t]));
    grads[t] = from_float<P>(0.0f);
  }
}

template <typename P>
void launch_accumulate(float* accum, void* grads, int64_t n, cudaStream_t stream) {
  const bool vector = aligned16(accum) && aligned16(grads);
  const int64_t threads = vector ? n / kVec + 1 : n;
  const int64_t blocks = (threads + kThreads - 1) / kThreads;
  if (vector) accumulate_kernel<P, true><<<blocks, kThreads, 0, stream>>>(accum, static_cast<P*>(grads), n);
  else accumulate_kernel<P, false><<<blocks, kThreads, 0, stream>>>(accum, static_cast<P*>(grads), n);
  check_cuda(cudaGetLastError(), "flat gradient accumulation launch");
}

}  // namespace

void flat_adamw_step(const StepArgs& a, cudaStream_t stream) {
  if (a.n == 0) return;
  dispatch_dtype(a.dtype, [&](auto t) { dispatch_step<decltype(t)>(a, stream); });
}

void flat_grad_norm(const NormArgs& a, cudaStream_t stream) {
  dispatch_dtype(a.dtype, [&](auto t) { launch_norm<decltype(t)>(a, stream); });
}

void flat_accumulate(float* accum, void* grads, Dtype dtype, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_dtype(dtype, [&](auto t) { launch_accumulate<decltype(t)>(accum, grads, n, stream); });
}

}  // namespace fptrain::optim::cuda
