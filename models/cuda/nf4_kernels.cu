// NF4 quantisation and dequantisation (models/cuda/fused_kernels.h).
// Quantisation: one thread per 8 weights, so the 8 threads of a block of 64 are
// neighbouring lanes that find its absmax by shuffles; one pass that reads the
// weight once and writes 4 bits per weight and its block's maximum, where the ATen
// composition makes ~8 passes over fp32 and int temporaries.
// Dequantisation: one thread per 4 packed bytes
// (8 weights, one 16-byte store of bf16/fp16), all in one block of 64; the 16
// levels and the 256-entry dynamic map come with the launch's arguments and are
// copied to shared memory. Memory-bound: it reads
// ~0.52 bytes per weight and writes the weight once, where the ATen composition
// makes ~10 passes over int and fp32 temporaries.
#include "models/cuda/kernel_utils.cuh"

namespace fptrain::models::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kBlock = 64, kAbsmaxBlock = 256;  // models/nf4.h

template <typename T>
__global__ void __launch_bounds__(kThreads) nf4_dequant_kernel(const __grid_constant__ Nf4DequantArgs a) {
  __shared__ float levels[16], dynamic_map[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) dynamic_map[i] = a.dynamic_map[i];
  if (threadIdx.x < 16) levels[threadIdx.x] = a.levels[threadIdx.x];
  __syncthreads();
  const int64_t group = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // 8 weights
  const int64_t first = group * 8;
  if (first >= a.numel) return;
  const int64_t block = first / kBlock;
  // Two roundings, as the ATen composition (a product kernel, then an add kernel).
  const float absmax =
      add_rn(mul_rn(dynamic_map[a.absmax_codes[block]], a.absmax_scales[block / kAbsmaxBlock]), *a.absmax_offset);
  const uint32_t packed = *reinterpret_cast<const uint32_t*>(a.codes + group * 4);
  float w[8];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t byte = (packed >> (8 * k)) & 0xFFu;  // little-endian: byte k holds weights 2k, 2k + 1
    w[2 * k] = mul_rn(levels[byte >> 4], absmax);
    w[2 * k + 1] = mul_rn(levels[byte & 0xFu], absmax);
  }
  T* out = static_cast<T*>(a.out) + first;
  if constexpr (sizeof(T) == 2) {
    store_vec<T, 8>(out, w);
  } else {
    const float lo[4] = {w[0], w[1], w[2], w[3]}, hi[4] = {w[4], w[5], w[6], w[7]};
    store_vec<T, 4>(out, lo);
    store_vec<T, 4>(out + 4, hi);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) nf4_quant_kernel(const __grid_constant__ Nf4QuantArgs a) {
  __shared__ float mids[15];  // bucketize's boundaries: (level i + level i+1) / 2, as ATen forms them
  if (threadIdx.x < 15) mids[threadIdx.x] = add_rn(a.levels[threadIdx.x], a.levels[threadIdx.x + 1]) * 0.5f;
  __syncthreads();
  const int64_t group = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // 8 weights
  const int64_t first = group * 8;
  const bool live = first < a.numel;
  float x[8] = {};
  if (live) load_vec<T, 8>(static_cast<const T*>(a.weight) + first, x);
  float m = 0.0f;
#pragma unroll
  for (int k = 0; k < 8; ++k) m = fmaxf(m, fabsf(x[k]));
#pragma unroll
  for (int lane = 1; lane < 8; lane <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, lane));  // every lane
  if (!live) return;
  const int64_t block = first / kBlock;
  // The last block, when shorter, divides by its maximum; the others multiply by the reciprocal.
  const bool short_block = (block + 1) * kBlock > a.numel;
  const float am = fmaxf(m, 1e-38f), reciprocal = __fdiv_rn(1.0f, am);
  uint32_t packed = 0;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const float scaled = fminf(fmaxf(short_block ? __fdiv_rn(x[k], am) : mul_rn(x[k], reciprocal), -1.0f), 1.0f);
    uint32_t index = 0;
#pragma unroll
    for (int i = 0; i < 15; ++i) index += mids[i] < scaled;  // bucketize, right=False
    packed |= index << (8 * (k / 2) + (k % 2 ? 0 : 4));       // the first of a pair in the high nibble
  }
  *reinterpret_cast<uint32_t*>(a.codes + group * 4) = packed;
  if (first % kBlock == 0) a.absmax[block] = short_block ? am : m;
}

}  // namespace

void nf4_quantize(const Nf4QuantArgs& a, cudaStream_t stream) {
  if (a.numel == 0) return;
  if (a.numel % 8 != 0) throw std::invalid_argument("nf4_quantize: numel must be a multiple of 8");
  const dim3 grid(static_cast<unsigned>(ceil_div(a.numel / 8, kThreads)));
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    nf4_quant_kernel<T><<<grid, kThreads, 0, stream>>>(a);
  });
  check_cuda(cudaGetLastError(), "nf4 quantize launch");
}

void nf4_dequantize(const Nf4DequantArgs& a, cudaStream_t stream) {
  if (a.numel == 0) return;
  if (a.numel % 8 != 0) throw std::invalid_argument("nf4_dequantize: numel must be a multiple of 8");
  const int64_t groups = a.numel / 8;
  const dim3 grid(static_cast<unsigned>(ceil_div(groups, kThreads)));
  dispatch_dtype(a.dtype, [&](auto tag) {
    using T = decltype(tag);
    nf4_dequant_kernel<T><<<grid, kThreads, 0, stream>>>(a);
  });
  check_cuda(cudaGetLastError(), "nf4 dequantize launch");
}

}  // namespace fptrain::models::cuda
