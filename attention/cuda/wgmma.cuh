// Hopper warpgroup MMA (wgmma): shared-memory operand descriptors for the SlabTile layout
// (smem_layout.cuh), the fence / commit / wait sequence, the register fences that keep
// accumulators and A fragments in place across the asynchronous products, and
// Wgmma<T, N>: m64nNk16 with fp32 accumulators, for the shapes the kernels use.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace fptrain::attention::cuda {

// Descriptor of a 128B-swizzled operand starting at smem_addr (1024-byte aligned pattern).
// K-major: lbo unused (16), sbo = 1024 (next 8 rows). MN-major: lbo = distance between
// 64-wide panels (the slab size), sbo = 1024 (next 8 rows along K).
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t smem_addr, uint32_t lbo, uint32_t sbo) {
  uint64_t d = (smem_addr & 0x3FFFF) >> 4;
  d |= uint64_t((lbo & 0x3FFFF) >> 4) << 16;
  d |= uint64_t((sbo & 0x3FFFF) >> 4) << 32;
  d |= uint64_t(1) << 62;  // 128-byte swizzle
  return d;
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Keeps the compiler from moving accesses of an accumulator across wgmma waits.
template <int NT>
__device__ __forceinline__ void fence_acc(float (&c)[NT][4]) {
#pragma unroll
  for (int i = 0; i < NT; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+f"(c[i][j])::"memory");
}

// Keeps A fragments that an RS wgmma reads in their registers until that product has been
// waited for (the compiler does not know the asynchronous read).
template <int KT>
__device__ __forceinline__ void fence_frags(uint32_t (&a)[KT][4]) {
#pragma unroll
  for (int kt = 0; kt < KT; ++kt)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(a[kt][j])::"memory");
}
template <int KT>
__device__ __forceinline__ void fence_frags(uint32_t (&a)[KT][4], uint32_t (&b)[KT][4]) {
#pragma unroll
  for (int kt = 0; kt < KT; ++kt)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(a[kt][j]), "+r"(b[kt][j])::"memory");
}

// Wgmma<T, N>::ss: D (+)= A * B, A and B from shared memory descriptors; TA/TB: A/B is MN-major.
// Wgmma<T, N>::rs: D (+)= A * B, A from registers (A fragments, fragments.cuh), B from shared memory.
// The accumulator is float[N/8][4] in the mma.sync C-tile layout (warp w of the warpgroup
// holds rows 16w..16w+15). The PTX operand list must be literal, so each shape is spelled out
// by FPTRAIN_WGMMA: its N/2 accumulators are operands %0.., followed by operands P0..P6.
template <typename T, int N> struct Wgmma;

#define FPTRAIN_WGMMA_ACC4(i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define FPTRAIN_WGMMA_ACC_N32 \
  FPTRAIN_WGMMA_ACC4(0), FPTRAIN_WGMMA_ACC4(1), FPTRAIN_WGMMA_ACC4(2), FPTRAIN_WGMMA_ACC4(3)
#define FPTRAIN_WGMMA_ACC_N64 \
  FPTRAIN_WGMMA_ACC_N32, FPTRAIN_WGMMA_ACC4(4), FPTRAIN_WGMMA_ACC4(5), FPTRAIN_WGMMA_ACC4(6), FPTRAIN_WGMMA_ACC4(7)
#define FPTRAIN_WGMMA_ACC_N128                                                                       \
  FPTRAIN_WGMMA_ACC_N64, FPTRAIN_WGMMA_ACC4(8), FPTRAIN_WGMMA_ACC4(9), FPTRAIN_WGMMA_ACC4(10),       \
      FPTRAIN_WGMMA_ACC4(11), FPTRAIN_WGMMA_ACC4(12), FPTRAIN_WGMMA_ACC4(13), FPTRAIN_WGMMA_ACC4(14), \
      FPTRAIN_WGMMA_ACC4(15)
#define FPTRAIN_WGMMA_ACC_N256                                                                         \
  FPTRAIN_WGMMA_ACC_N128, FPTRAIN_WGMMA_ACC4(16), FPTRAIN_WGMMA_ACC4(17), FPTRAIN_WGMMA_ACC4(18),         \
      FPTRAIN_WGMMA_ACC4(19), FPTRAIN_WGMMA_ACC4(20), FPTRAIN_WGMMA_ACC4(21), FPTRAIN_WGMMA_ACC4(22),     \
      FPTRAIN_WGMMA_ACC4(23), FPTRAIN_WGMMA_ACC4(24), FPTRAIN_WGMMA_ACC4(25), FPTRAIN_WGMMA_ACC4(26),     \
      FPTRAIN_WGMMA_ACC4(27), FPTRAIN_WGMMA_ACC4(28), FPTRAIN_WGMMA_ACC4(29), FPTRAIN_WGMMA_ACC4(30),     \
      FPTRAIN_WGMMA_ACC4(31)
#define FPTRAIN_WGMMA_REGS_N32 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}"
#define FPTRAIN_WGMMA_REGS_N64 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}"
#define FPTRAIN_WGMMA_REGS_N128 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}"

#define FPTRAIN_WGMMA_REGS_N256 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127}"

#define FPTRAIN_WGMMA(T, PTX_TYPE, N, REGS, ACC, P0, P1, P2, P3, P4, P5, P6)                                \
  template <>                                                                                                \
  struct Wgmma<T, N> {                                                                                       \
    template <int TA, int TB>                                                                                \
    static __device__ __forceinline__ void ss(float (&d)[N / 8][4], uint64_t da, uint64_t db, int accumulate) { \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P2 ", 0;\n"                                          \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX_TYPE "." PTX_TYPE " " REGS ", %" #P0  \
                   ", %" #P1 ", p, 1, 1, %" #P3 ", %" #P4 ";\n}\n"                                             \
                   : ACC                                                                                     \
                   : "l"(da), "l"(db), "r"(accumulate), "n"(TA), "n"(TB));                                   \
    }                                                                                                        \
    template <int TB>                                                                                        \
    static __device__ __forceinline__ void rs(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t db,     \
                                              int accumulate) {                                              \
      asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" #P5 ", 0;\n"                                          \
                   "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32." PTX_TYPE "." PTX_TYPE " " REGS ", {%" #P0 \
                   ",%" #P1 ",%" #P2 ",%" #P3 "}, %" #P4 ", p, 1, 1, %" #P6 ";\n}\n"                          \
                   : ACC                                                                                     \
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate), "n"(TB));         \
    }                                                                                                        \
  };

FPTRAIN_WGMMA(__nv_bfloat16, "bf16", 32, FPTRAIN_WGMMA_REGS_N32, FPTRAIN_WGMMA_ACC_N32, 16, 17, 18, 19, 20, 21, 22)
FPTRAIN_WGMMA(__nv_bfloat16, "bf16", 64, FPTRAIN_WGMMA_REGS_N64, FPTRAIN_WGMMA_ACC_N64, 32, 33, 34, 35, 36, 37, 38)
FPTRAIN_WGMMA(__nv_bfloat16, "bf16", 128, FPTRAIN_WGMMA_REGS_N128, FPTRAIN_WGMMA_ACC_N128, 64, 65, 66, 67, 68, 69, 70)
FPTRAIN_WGMMA(__nv_bfloat16, "bf16", 256, FPTRAIN_WGMMA_REGS_N256, FPTRAIN_WGMMA_ACC_N256, 128, 129, 130, 131, 132, 133,
              134)
FPTRAIN_WGMMA(__half, "f16", 32, FPTRAIN_WGMMA_REGS_N32, FPTRAIN_WGMMA_ACC_N32, 16, 17, 18, 19, 20, 21, 22)
FPTRAIN_WGMMA(__half, "f16", 64, FPTRAIN_WGMMA_REGS_N64, FPTRAIN_WGMMA_ACC_N64, 32, 33, 34, 35, 36, 37, 38)
FPTRAIN_WGMMA(__half, "f16", 128, FPTRAIN_WGMMA_REGS_N128, FPTRAIN_WGMMA_ACC_N128, 64, 65, 66, 67, 68, 69, 70)
FPTRAIN_WGMMA(__half, "f16", 256, FPTRAIN_WGMMA_REGS_N256, FPTRAIN_WGMMA_ACC_N256, 128, 129, 130, 131, 132, 133, 134)

#undef FPTRAIN_WGMMA
#undef FPTRAIN_WGMMA_REGS_N256
#undef FPTRAIN_WGMMA_REGS_N128
#undef FPTRAIN_WGMMA_REGS_N64
#undef FPTRAIN_WGMMA_REGS_N32
#undef FPTRAIN_WGMMA_ACC_N256
#undef FPTRAIN_WGMMA_ACC_N128
#undef FPTRAIN_WGMMA_ACC_N64
#undef FPTRAIN_WGMMA_ACC_N32
#undef FPTRAIN_WGMMA_ACC4

}  // namespace fptrain::attention::cuda
