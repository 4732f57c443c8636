// Register fragments: the per-thread pieces of tensor-core tiles that both mma.sync and
// wgmma use, and the 16-bit element types (bf16, fp16) packed two to a register.
//
// Fragment layouts (PTX ISA, m16n8k16, 16-bit operands), lane = 4 * g + t:
//   A 16x16: a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
//   B 16x8 : b0 (k 2t..2t+1, n g)  b1 (k 2t+8.., n g)
//   C 16x8 : c0,c1 (g, 2t..2t+1)   c2,c3 (g+8, 2t..2t+1)
// A wgmma m64nN accumulator is float[N/8][4] in the same per-warp C layout (warp w of the
// warpgroup holds rows 16w..16w+15), and wgmma's register A operand is this A fragment.
// Two adjacent C tiles of one row block, converted to 16-bit, are exactly an A fragment:
// that is how P (and dS) feed the next product without shared memory.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace fptrain::attention::cuda {

// Two floats <-> one 32-bit register holding two 16-bit values of type T (low half first).
template <typename T> struct Pair16;
template <> struct Pair16<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t x) {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&x));
  }
};
template <> struct Pair16<__half> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t x) {
    return __half22float2(*reinterpret_cast<__half2*>(&x));
  }
};

// C tiles (fp32) of a 16 x 16*KT block -> A fragments in 16-bit.
template <typename T, int KT>
__device__ __forceinline__ void acc_to_a_frags(uint32_t (&a)[KT][4], const float (&c)[2 * KT][4]) {
#pragma unroll
  for (int kt = 0; kt < KT; ++kt) {
    a[kt][0] = Pair16<T>::pack(c[2 * kt][0], c[2 * kt][1]);
    a[kt][1] = Pair16<T>::pack(c[2 * kt][2], c[2 * kt][3]);
    a[kt][2] = Pair16<T>::pack(c[2 * kt + 1][0], c[2 * kt + 1][1]);
    a[kt][3] = Pair16<T>::pack(c[2 * kt + 1][2], c[2 * kt + 1][3]);
  }
}

template <int NT>
__device__ __forceinline__ void zero_acc(float (&c)[NT][4]) {
#pragma unroll
  for (int i = 0; i < NT; ++i) c[i][0] = c[i][1] = c[i][2] = c[i][3] = 0.f;
}

}  // namespace fptrain::attention::cuda
