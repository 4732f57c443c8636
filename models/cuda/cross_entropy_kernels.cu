// Cross-entropy of a chunk's logits with the gradient written in place
// (models/cuda/fused_kernels.h). One block per row, two passes over it: an
// online max + sum of exponentials, then loss and gradient. Only the logits'
// own buffer is touched, so a chunk holds 2 bytes per logit in 16 bits (the
// ATen composition: fp32 copy, fp32 log-probabilities, then the gradient).
//
// Exactness: ATen's log_softmax in fp32 computes max m, s = sum exp(x - m) and
// logp = (x - m) - log(s); the gradient is then exp(logp) rounded once to the
// dtype, exp(logp_t) - 1 at the target. We form logp with the same operations
// in the same order; only s is summed in another order (per-thread partial sums
// rescaled to the row's max), so logp agrees to a few fp32 ulps and the
// gradient to at most one unit in the last place of the dtype — except at the
// target when p is near 1: there p - 1 cancels, and both paths carry their
// sum's fp32 rounding (~1e-6) as an absolute error.
#include "models/cuda/kernel_utils.cuh"

#include <algorithm>
#include <cmath>

namespace fptrain::models::cuda {
namespace {

constexpr int kThreads = 512;

// A running max and the sum of exp(x - max) over what was seen.
struct MaxSum {
  float max = -INFINITY;
  float sum = 0.0f;
};

// Merges b into a, rescaling the sum kept against the smaller max.
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.max, b.max);
  if (m == -INFINITY) return a;  // both empty: no exp(-inf - -inf)
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

// The block's merged (max, sum), returned to every thread; fixed trees, so
// every thread and every run gets the same bits. `scratch` holds 64 floats.
__device__ __forceinline__ MaxSum block_merge(MaxSum x, float* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    x = merge(x, {__shfl_xor_sync(0xffffffffu, x.max, o), __shfl_xor_sync(0xffffffffu, x.sum, o)});
  const int warps = blockDim.x / 32;
  if (warps == 1) return x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) scratch[warp] = x.max, scratch[32 + warp] = x.sum;
  __syncthreads();
  MaxSum total = lane < warps ? MaxSum{scratch[lane], scratch[32 + lane]} : MaxSum{};
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    total = merge(total, {__shfl_xor_sync(0xffffffffu, total.max, o), __shfl_xor_sync(0xffffffffu, total.sum, o)});
  return total;
}

// Adds VEC values to a thread's running (max, sum): one rescale per new max.
template <int VEC>
__device__ __forceinline__ void accumulate(MaxSum& acc, const float (&x)[VEC]) {
  float m = acc.max;
#pragma unroll
  for (int k = 0; k < VEC; ++k) m = fmaxf(m, x[k]);
  if (m == -INFINITY) return;
  float s = acc.sum * expf(acc.max - m);
#pragma unroll
  for (int k = 0; k < VEC; ++k) s += expf(x[k] - m);
  acc = {m, s};
}

template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads) cross_entropy_kernel(const CrossEntropyArgs a) {
  __shared__ float scratch[64];
  const int64_t row = blockIdx.x;
  T* logits = static_cast<T*>(a.logits) + row * a.row_stride;
  const int64_t target = a.targets[row];
  const bool target_ok = target >= 0 && target < a.cols;
  // Read before anything is written: the second pass overwrites the row.
  const float x_target = target_ok ? to_float(logits[target]) : NAN;
  MaxSum acc;
  for (int64_t c = static_cast<int64_t>(threadIdx.x) * VEC; c < a.cols; c += static_cast<int64_t>(blockDim.x) * VEC) {
    float x[VEC];
    load_vec<T, VEC>(logits + c, x);
    accumulate<VEC>(acc, x);
  }
  const MaxSum row_stats = block_merge(acc, scratch);
  __syncthreads();  // every thread has read x_target before the target's column is overwritten
  const float max = row_stats.max, log_sum = logf(row_stats.sum);
  const float logp_target = (x_target - max) - log_sum;  // ATen's log_softmax epilogue
  if (threadIdx.x == 0) a.loss[row] = -logp_target;
  if (!a.write_grad) return;
  for (int64_t c = static_cast<int64_t>(threadIdx.x) * VEC; c < a.cols; c += static_cast<int64_t>(blockDim.x) * VEC) {
    float x[VEC];
    load_vec<T, VEC>(logits + c, x);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      // softmax - onehot, one rounding (store_vec): autograd's fp32 values cast to the dtype
      x[k] = c + k == target ? expf(logp_target) - 1.0f : expf((x[k] - max) - log_sum);
    }
    store_vec<T, VEC>(logits + c, x);
  }
}

}  // namespace

void cross_entropy_inplace(const CrossEntropyArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  if (a.cols <= 0) throw std::invalid_argument("models/cuda cross_entropy: rows must not be empty");
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kVec16<T>;
    const bool vector = a.cols % V == 0 && a.row_stride % V == 0 && aligned16(a.logits);
    const int64_t vectors = ceil_div(a.cols, vector ? V : 1);
    const int threads = static_cast<int>(std::min<int64_t>(kThreads, ceil_div(vectors, 32) * 32));
    const dim3 grid(static_cast<unsigned>(a.rows));
    if (vector) cross_entropy_kernel<T, V><<<grid, threads, 0, stream>>>(a);
    else cross_entropy_kernel<T, 1><<<grid, threads, 0, stream>>>(a);
  });
  check_cuda(cudaGetLastError(), "cross_entropy launch");
}

}  // namespace fptrain::models::cuda
