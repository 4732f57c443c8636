// Device-side element conversions and the dtype dispatch shared by the
// project's kernels: to and from fp32, rounding to a dtype as ATen stores it.
#pragma once

#include "common/cuda/dtype.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>

namespace fptrain::common::cuda {

// Calls f(T{}) with T the element type of `d`.
template <typename F>
void dispatch_dtype(Dtype d, F&& f) {
  switch (d) {
    case Dtype::kFloat32: f(float{}); return;
    case Dtype::kBFloat16: f(__nv_bfloat16{}); return;
    case Dtype::kFloat16: f(__half{}); return;
  }
  throw std::invalid_argument("CUDA kernels: unknown dtype");
}

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

// x rounded to T and back: what an ATen op on T tensors stores. Identity for fp32.
template <typename T>
__device__ __forceinline__ float round_to(float x) {
  return to_float(from_float<T>(x));
}

}  // namespace fptrain::common::cuda
