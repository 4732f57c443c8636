// NF4 dequantisation (models/cuda/fused_kernels.h): one thread per 4 packed bytes
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

}  // namespace

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
