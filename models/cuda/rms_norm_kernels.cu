// RMSNorm with the residual add, forward and backward (models/cuda/fused_kernels.h).
//
// One block per row in the forward; in the backward each block walks rows
// blockIdx.x, blockIdx.x + gridDim.x, ... Thread t handles the vectors t,
// t + blockDim.x, ... of a row: VEC elements each, 16-byte loads and stores when
// rows are 16-byte aligned, single elements otherwise. Two variants:
//   cached: a row of at most 1024 vectors (8192 bf16/fp16 or 4096 fp32 elements
//           when aligned), one vector per thread, kept in registers between the
//           sum of squares (or the dot product) and the output: every element is
//           read from memory once.
//   looped: longer rows; the second pass reads the row again, which the block
//           has just read (L1/L2), so DRAM traffic is the same.
//
// The backward also sums grad_y * normalised over the rows of its block into a
// per-block fp32 partial of the weight gradient (registers when cached, shared
// memory when looped; each column belongs to one thread); a second kernel adds
// the partials in block order. Both orders are fixed, so the weight gradient is
// bitwise repeatable on a device.
//
// kOnePlus selects Gemma's weight form (1 + w in fp32, see weight_factor and
// below); every kernel is instantiated for both.
#include "models/cuda/kernel_utils.cuh"

#include <algorithm>

namespace fptrain::models::cuda {
namespace {

constexpr int kMaxThreads = 1024;

struct Config {
  int vec = 1;          // elements per vector: 16 bytes' worth, or 1
  bool cached = true;   // one vector per thread, the row in registers
  int threads = 32;     // a multiple of 32
};

Config choose(Dtype dtype, int64_t cols, bool aligned) {
  Config c;
  c.vec = aligned ? 16 / element_bytes(dtype) : 1;
  const int64_t vectors = ceil_div(cols, c.vec);
  c.cached = vectors <= kMaxThreads;
  c.threads = c.cached ? static_cast<int>(ceil_div(vectors, 32) * 32) : kMaxThreads;
  return c;
}

// The residual add as `residual + update * scale` rounds: the product, then the sum.
template <typename T>
__device__ __forceinline__ float residual_sum(float residual, float update, float scale) {
  return round_to<T>(add_rn(residual, round_to<T>(mul_rn(update, scale))));
}

// mean as ATen's CUDA mean forms it (sum * (1/n)), then rsqrt(var + eps) in fp32.
__device__ __forceinline__ float rstd_of(float sumsq, int64_t cols, float eps) {
  return rsqrtf(add_rn(mul_rn(sumsq, __frcp_rn(static_cast<float>(cols))), eps));
}

// ---- the weight's form: Llama's w, or Gemma's (1 + w) --------------------------
// Llama: weight * dtype(s * rstd), the normalised value rounds before the product.
// Gemma: dtype(s * rstd * (1 + float(w))), fp32 until the output's one rounding.

// What the normalised value is multiplied by.
template <bool kOnePlus>
__device__ __forceinline__ float weight_factor(float w) {
  return kOnePlus ? add_rn(w, 1.0f) : w;
}

// The normalised value as the product reads it.
template <typename T, bool kOnePlus>
__device__ __forceinline__ float normalised(float s, float rstd) {
  const float n = mul_rn(s, rstd);
  return kOnePlus ? n : round_to<T>(n);
}

// The normalised value's gradient: autograd rounds it to the dtype in Llama's
// form (a product of dtype tensors), not in Gemma's (an fp32 product).
template <typename T, bool kOnePlus>
__device__ __forceinline__ float normalised_grad(float grad_y, float factor) {
  const float g = mul_rn(grad_y, factor);
  return kOnePlus ? g : round_to<T>(g);
}

// ---- forward ---------------------------------------------------------------
template <typename T, int VEC, bool kCached, bool kOnePlus>
__global__ void __launch_bounds__(kMaxThreads) rms_norm_fwd_kernel(const RmsNormFwdArgs a) {
  __shared__ float scratch[32];
  const int64_t cols = a.cols;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * cols;
  const int64_t first = static_cast<int64_t>(threadIdx.x) * VEC, stride = static_cast<int64_t>(blockDim.x) * VEC;
  const T* x = static_cast<const T*>(a.x) + base;
  const T* update = a.update != nullptr ? static_cast<const T*>(a.update) + base : nullptr;
  T* sum_out = update != nullptr ? static_cast<T*>(a.sum_out) + base : nullptr;
  const T* w = static_cast<const T*>(a.weight);
  T* y = static_cast<T*>(a.y) + base;

  float s[VEC];  // the cached row (one vector per thread)
  float sumsq = 0.0f;
  for (int64_t c = first; c < cols; c += stride) {
    load_vec<T, VEC>(x + c, s);
    if (update != nullptr) {
      float u[VEC];
      load_vec<T, VEC>(update + c, u);
#pragma unroll
      for (int k = 0; k < VEC; ++k) s[k] = residual_sum<T>(s[k], u[k], a.update_scale);
      store_vec<T, VEC>(sum_out + c, s);
    }
#pragma unroll
    for (int k = 0; k < VEC; ++k) sumsq = fmaf(s[k], s[k], sumsq);
    if (kCached) break;
  }
  const float rstd = rstd_of(block_allsum(sumsq, scratch), cols, a.eps);
  if (threadIdx.x == 0 && a.rstd != nullptr) a.rstd[blockIdx.x] = rstd;

  for (int64_t c = first; c < cols; c += stride) {
    if (!kCached) load_vec<T, VEC>(update != nullptr ? sum_out + c : x + c, s);  // this thread's own writes
    float wv[VEC], out[VEC];
    load_vec<T, VEC>(w + c, wv);
#pragma unroll
    for (int k = 0; k < VEC; ++k) out[k] = mul_rn(weight_factor<kOnePlus>(wv[k]), normalised<T, kOnePlus>(s[k], rstd));
    store_vec<T, VEC>(y + c, out);
    if (kCached) break;
  }
}

// ---- backward --------------------------------------------------------------

// One vector of a row: accumulates the weight gradient's partial, turns g
// (loaded as grad_y) into the normalised value's gradient, and returns this
// vector's share of sum(g * s). `f` holds the weight factors (weight_factor).
template <typename T, int VEC, bool kOnePlus>
__device__ __forceinline__ float bwd_first_pass(const float (&s)[VEC], float (&g)[VEC], const float (&f)[VEC],
                                                float rstd, float* dw) {
  float dot = 0.0f;
#pragma unroll
  for (int k = 0; k < VEC; ++k) {
    if (dw != nullptr) dw[k] = fmaf(g[k], normalised<T, kOnePlus>(s[k], rstd), dw[k]);
    g[k] = normalised_grad<T, kOnePlus>(g[k], f[k]);
    dot = fmaf(g[k], s[k], dot);
  }
  return dot;
}

// d/ds of s * rsqrt(mean(s^2) + eps) applied to g: g * rstd - s * rstd^3 * mean(g * s),
// cast to the dtype; then + grad_sum (autograd casts, then adds the residual's
// gradient); stored as grad_x, and times the scale as grad_update.
template <typename T, int VEC>
__device__ __forceinline__ void bwd_second_pass(const RmsNormBwdArgs& a, int64_t offset, const float (&s)[VEC],
                                                const float (&g)[VEC], float rstd, float coef) {
  float dx[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) dx[k] = round_to<T>(g[k] * rstd - s[k] * coef);
  if (a.grad_sum != nullptr) {
    float gs[VEC];
    load_vec<T, VEC>(static_cast<const T*>(a.grad_sum) + offset, gs);
#pragma unroll
    for (int k = 0; k < VEC; ++k) dx[k] = round_to<T>(add_rn(dx[k], gs[k]));
  }
  store_vec<T, VEC>(static_cast<T*>(a.grad_x) + offset, dx);
  if (a.grad_update != nullptr) {
#pragma unroll
    for (int k = 0; k < VEC; ++k) dx[k] = mul_rn(dx[k], a.update_scale);
    store_vec<T, VEC>(static_cast<T*>(a.grad_update) + offset, dx);
  }
}

// Cached: one vector per thread; the weight factors and the weight-gradient
// partial stay in registers across the block's rows.
template <typename T, int VEC, bool kOnePlus>
__global__ void __launch_bounds__(kMaxThreads) rms_norm_bwd_cached_kernel(const RmsNormBwdArgs a) {
  __shared__ float scratch[32];
  const int64_t cols = a.cols;
  const int64_t c = static_cast<int64_t>(threadIdx.x) * VEC;
  const bool active = c < cols;
  float w[VEC], dw[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) w[k] = dw[k] = 0.0f;
  if (active) {
    load_vec<T, VEC>(static_cast<const T*>(a.weight) + c, w);
#pragma unroll
    for (int k = 0; k < VEC; ++k) w[k] = weight_factor<kOnePlus>(w[k]);
  }
  float* dw_acc = a.grad_weight != nullptr ? dw : nullptr;

  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const int64_t offset = row * cols + c;
    const float rstd = a.rstd[row];
    float s[VEC], g[VEC];
    float dot = 0.0f;
    if (active) {
      load_vec<T, VEC>(static_cast<const T*>(a.s) + offset, s);
      load_vec<T, VEC>(static_cast<const T*>(a.grad_y) + offset, g);
      dot = bwd_first_pass<T, VEC, kOnePlus>(s, g, w, rstd, dw_acc);
    }
    dot = block_allsum(dot, scratch);
    const float coef = dot * rstd * rstd * rstd * __frcp_rn(static_cast<float>(cols));
    if (active) bwd_second_pass<T, VEC>(a, offset, s, g, rstd, coef);
  }
  if (dw_acc != nullptr && active) store_vec<float, VEC>(a.dw_partial + static_cast<int64_t>(blockIdx.x) * cols + c, dw);
}

// Looped: any row length. The weight-gradient partial lives in dynamic shared
// memory (cols floats when there is a weight gradient), each column owned by
// one thread, so it needs no synchronisation.
template <typename T, int VEC, bool kOnePlus>
__global__ void __launch_bounds__(kMaxThreads) rms_norm_bwd_looped_kernel(const RmsNormBwdArgs a) {
  __shared__ float scratch[32];
  extern __shared__ float dw_shared[];
  const int64_t cols = a.cols;
  const int64_t first = static_cast<int64_t>(threadIdx.x) * VEC, stride = static_cast<int64_t>(blockDim.x) * VEC;
  const bool has_dw = a.grad_weight != nullptr;
  const T* weight = static_cast<const T*>(a.weight);
  if (has_dw) {
    for (int64_t c = first; c < cols; c += stride) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) dw_shared[c + k] = 0.0f;
    }
  }
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const int64_t base = row * cols;
    const float rstd = a.rstd[row];
    float dot = 0.0f;
    for (int64_t c = first; c < cols; c += stride) {
      float s[VEC], g[VEC], w[VEC];
      load_vec<T, VEC>(static_cast<const T*>(a.s) + base + c, s);
      load_vec<T, VEC>(static_cast<const T*>(a.grad_y) + base + c, g);
      load_vec<T, VEC>(weight + c, w);
#pragma unroll
      for (int k = 0; k < VEC; ++k) w[k] = weight_factor<kOnePlus>(w[k]);
      dot += bwd_first_pass<T, VEC, kOnePlus>(s, g, w, rstd, has_dw ? dw_shared + c : nullptr);
    }
    dot = block_allsum(dot, scratch);
    const float coef = dot * rstd * rstd * rstd * __frcp_rn(static_cast<float>(cols));
    for (int64_t c = first; c < cols; c += stride) {
      float s[VEC], g[VEC], w[VEC];
      load_vec<T, VEC>(static_cast<const T*>(a.s) + base + c, s);
      load_vec<T, VEC>(static_cast<const T*>(a.grad_y) + base + c, g);
      load_vec<T, VEC>(weight + c, w);
#pragma unroll
      for (int k = 0; k < VEC; ++k) g[k] = normalised_grad<T, kOnePlus>(g[k], weight_factor<kOnePlus>(w[k]));
      bwd_second_pass<T, VEC>(a, base + c, s, g, rstd, coef);
    }
  }
  if (has_dw) {
    float* partial = a.dw_partial + static_cast<int64_t>(blockIdx.x) * cols;
    for (int64_t c = first; c < cols; c += stride) {
#pragma unroll
      for (int k = 0; k < VEC; ++k) partial[c + k] = dw_shared[c + k];
    }
  }
}

// grad_weight[c] = sum over b of partial[b][c], b in index order: threads
// (x, y) of a 32 x 8 block sum the partials y, y + 8, ... of column x, then
// thread (x, 0) adds the 8 sums in order.
constexpr int kReduceCols = 32, kReduceRows = 8;

template <typename T>
__global__ void __launch_bounds__(kReduceCols * kReduceRows)
    rms_norm_dw_reduce_kernel(const float* partial, int64_t blocks, int64_t cols, T* grad_weight) {
  __shared__ float sums[kReduceRows][kReduceCols + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kReduceCols + threadIdx.x;
  float sum = 0.0f;
  if (c < cols) {
    for (int64_t b = threadIdx.y; b < blocks; b += kReduceRows) sum += partial[b * cols + c];
  }
  sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float total = sums[0][threadIdx.x];
#pragma unroll
    for (int r = 1; r < kReduceRows; ++r) total += sums[r][threadIdx.x];
    grad_weight[c] = from_float<T>(total);
  }
}

// Calls f.template operator()<T, VEC, kCached>() for the configuration.
template <typename T, typename F>
void dispatch_config(const Config& c, F&& f) {
  constexpr int V = kVec16<T>;
  if (c.vec == V) {
    if (c.cached) f.template operator()<T, V, true>();
    else f.template operator()<T, V, false>();
  } else if (c.vec == 1) {
    if (c.cached) f.template operator()<T, 1, true>();
    else f.template operator()<T, 1, false>();
  } else {
    throw std::logic_error("models/cuda rms_norm: no kernel for this configuration");
  }
}

bool forward_aligned(const RmsNormFwdArgs& a) {
  const int vec = 16 / element_bytes(a.dtype);
  return a.cols % vec == 0 && aligned16(a.x) && aligned16(a.update) && aligned16(a.weight) &&
         aligned16(a.sum_out) && aligned16(a.y);
}

bool backward_aligned(const RmsNormBwdArgs& a) {
  const int vec = 16 / element_bytes(a.dtype);
  return a.cols % vec == 0 && aligned16(a.s) && aligned16(a.weight) && aligned16(a.grad_y) &&
         aligned16(a.grad_sum) && aligned16(a.grad_x) && aligned16(a.grad_update) && aligned16(a.dw_partial);
}

int current_device() {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

// Dynamic shared memory of the looped backward: the weight-gradient partial.
size_t looped_smem_bytes(const RmsNormBwdArgs& a) {
  return a.grad_weight != nullptr ? static_cast<size_t>(a.cols) * sizeof(float) : 0;
}

struct FwdLaunch {
  const RmsNormFwdArgs& a;
  const Config& c;
  cudaStream_t stream;
  template <typename T, int VEC, bool kCached>
  void operator()() const {
    auto kernel =
        a.one_plus_weight ? rms_norm_fwd_kernel<T, VEC, kCached, true> : rms_norm_fwd_kernel<T, VEC, kCached, false>;
    kernel<<<static_cast<unsigned>(a.rows), c.threads, 0, stream>>>(a);
  }
};

// The backward kernel for a configuration and the weight's form.
template <typename T, int VEC, bool kCached>
auto bwd_kernel(bool one_plus_weight) {
  if (one_plus_weight)
    return kCached ? rms_norm_bwd_cached_kernel<T, VEC, true> : rms_norm_bwd_looped_kernel<T, VEC, true>;
  return kCached ? rms_norm_bwd_cached_kernel<T, VEC, false> : rms_norm_bwd_looped_kernel<T, VEC, false>;
}

struct BwdLaunch {
  const RmsNormBwdArgs& a;
  const Config& c;
  cudaStream_t stream;
  int64_t grid;         // blocks to launch (rows of dw_partial)
  int64_t* blocks_out;  // set: only report the grid size
  template <typename T, int VEC, bool kCached>
  void operator()() const {
    auto kernel = bwd_kernel<T, VEC, kCached>(a.one_plus_weight);
    const size_t smem = kCached ? 0 : looped_smem_bytes(a);
    if (smem > 0) {
      int optin = 0;
      check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, current_device()),
                 "shared memory limit");
      if (smem + 32 * sizeof(float) > static_cast<size_t>(optin)) {
        throw std::invalid_argument("models/cuda rms_norm backward: rows of " + std::to_string(a.cols) +
                                    " elements need more shared memory than the device has");
      }
      check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
                 "rms_norm backward shared memory");
    }
    if (blocks_out != nullptr) {
      int sms = 0, per_sm = 0;
      check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, current_device()), "SM count");
      check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, c.threads, smem), "occupancy");
      *blocks_out = std::max<int64_t>(1, std::min<int64_t>(a.rows, static_cast<int64_t>(sms) * std::max(per_sm, 1)));
      return;
    }
    kernel<<<static_cast<unsigned>(grid), c.threads, smem, stream>>>(a);
    check_cuda(cudaGetLastError(), "rms_norm backward launch");
    if (a.grad_weight != nullptr) {
      const dim3 block(kReduceCols, kReduceRows);
      const auto cols_grid = static_cast<unsigned>(ceil_div(a.cols, kReduceCols));
      rms_norm_dw_reduce_kernel<T><<<cols_grid, block, 0, stream>>>(a.dw_partial, grid, a.cols, static_cast<T*>(a.grad_weight));
      check_cuda(cudaGetLastError(), "rms_norm weight-gradient reduction launch");
    }
  }
};

}  // namespace

int64_t rms_norm_kernel_max_cols() {
  // The looped backward keeps cols fp32 partials in shared memory: 192 KiB of
  // Hopper's 227 KiB per block.
  return 49152;
}

void rms_norm_forward(const RmsNormFwdArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  const Config c = choose(a.dtype, a.cols, forward_aligned(a));
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    dispatch_config<T>(c, FwdLaunch{a, c, stream});
  });
  check_cuda(cudaGetLastError(), "rms_norm forward launch");
}

int64_t rms_norm_backward_blocks(const RmsNormBwdArgs& a) {
  if (a.rows == 0) return 1;
  const Config c = choose(a.dtype, a.cols, backward_aligned(a));
  int64_t blocks = 1;
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    dispatch_config<T>(c, BwdLaunch{a, c, nullptr, 0, &blocks});
  });
  return blocks;
}

void rms_norm_backward(const RmsNormBwdArgs& a, cudaStream_t stream) {
  if (a.grad_weight != nullptr && (a.dw_partial == nullptr || a.dw_blocks < 1)) {
    throw std::invalid_argument("models/cuda rms_norm backward: the weight gradient needs the partial workspace");
  }
  if (a.rows == 0) {
    if (a.grad_weight != nullptr) {
      check_cuda(cudaMemsetAsync(a.grad_weight, 0, a.cols * element_bytes(a.dtype), stream), "zero grad_weight");
    }
    return;
  }
  const Config c = choose(a.dtype, a.cols, backward_aligned(a));
  // With a weight gradient the grid is the partials' row count; without one, any.
  const int64_t grid = a.grad_weight != nullptr ? a.dw_blocks : rms_norm_backward_blocks(a);
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    dispatch_config<T>(c, BwdLaunch{a, c, stream, grid, nullptr});
  });
}

}  // namespace fptrain::models::cuda
