// The warp-level tensor-core path of the deterministic dQ kernel: cp.async tile loads into
// SwizzledTile layouts, ldmatrix, and mma.sync m16n8k16 products of a warp's 16 rows
// (fragment layouts in fragments.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <type_traits>

#include "attention/cuda/fragments.cuh"
#include "attention/cuda/smem_layout.cuh"

namespace fptrain::attention::cuda {

// c[16x8] += a[16x16] * b[16x8], fp32 accumulators; T: bf16 or fp16 operands.
#define FPTRAIN_MMA_M16N8K16(PTX_TYPE)                                                                  \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." PTX_TYPE "." PTX_TYPE                          \
               ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                           \
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                         \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>, "bf16 or fp16 operands");
  if constexpr (std::is_same_v<T, __nv_bfloat16>) FPTRAIN_MMA_M16N8K16("bf16");
  else FPTRAIN_MMA_M16N8K16("f16");
}
#undef FPTRAIN_MMA_M16N8K16

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// 16-byte global->shared copy; src_bytes = 0 writes zeros (rows past a sequence's end).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Copies ROWS x COLS elements (rows of a packed [T, H, D] tensor) into a swizzled tile.
// Rows at or past `valid_rows` are zero-filled.
template <int ROWS, int COLS, int THREADS, typename T>
__device__ __forceinline__ void load_tile_async(uint32_t smem_base, const T* gmem, int64_t row_stride,
                                                int valid_rows) {
  constexpr int kChunksPerRow = COLS / 8;
  constexpr int kChunks = ROWS * kChunksPerRow;
  static_assert(kChunks % THREADS == 0, "tile copy must split evenly");
#pragma unroll
  for (int i = 0; i < kChunks / THREADS; ++i) {
    int c = threadIdx.x + i * THREADS;
    int row = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
    bool valid = row < valid_rows;
    const T* src = valid ? gmem + row * row_stride + col : gmem;
    cp_async_16(smem_base + SwizzledTile<COLS>::offset(row, col), src, valid);
  }
}

// acc[16 x 8*NT] += A[rows a_row0.., 16*KT] * B^T, A and B (stored [n][k]) in swizzled
// tiles: the "Q K^T" shape. A is read one k-step at a time (keeps registers for the
// accumulators). NT must be even.
template <typename T, int KT, int NT, int COLS>
__device__ __forceinline__ void gemm_sa_bt(float (&acc)[NT][4], uint32_t a_base, int a_row0, uint32_t b_base) {
  int lane = threadIdx.x & 31;
#pragma unroll
  for (int kt = 0; kt < KT; ++kt) {
    uint32_t a[1][4];
    ldmatrix_x4(a[0], a_base + SwizzledTile<COLS>::offset(a_row0 + (lane & 15), kt * 16 + (lane >> 4) * 8));
#pragma unroll
    for (int nt = 0; nt < NT; nt += 2) {
      uint32_t b[4];
      int mi = lane >> 3;
      int row = nt * 8 + (mi >> 1) * 8 + (lane & 7);
      int col = kt * 16 + (mi & 1) * 8;
      ldmatrix_x4(b, b_base + SwizzledTile<COLS>::offset(row, col));
      mma_m16n8k16<T>(acc[nt], a[0], b[0], b[1]);
      mma_m16n8k16<T>(acc[nt + 1], a[0], b[2], b[3]);
    }
  }
}

// acc[16 x 8*NT] += A[16 x 16*KT] * B, A in registers, B stored [k][n] in a swizzled tile
// (rows k0 + .., cols n0 + ..): the "P V" shape. NT must be even.
template <typename T, int KT, int NT, int COLS>
__device__ __forceinline__ void gemm_a_b(float (&acc)[NT][4], const uint32_t (&a)[KT][4],
                                         uint32_t b_base, int k0, int n0) {
  int lane = threadIdx.x & 31;
  int mi = lane >> 3;
#pragma unroll
  for (int kt = 0; kt < KT; ++kt) {
#pragma unroll
    for (int nt = 0; nt < NT; nt += 2) {
      uint32_t b[4];
      int row = k0 + kt * 16 + (mi & 1) * 8 + (lane & 7);
      int col = n0 + nt * 8 + (mi >> 1) * 8;
      ldmatrix_x4_trans(b, b_base + SwizzledTile<COLS>::offset(row, col));
      mma_m16n8k16<T>(acc[nt], a[kt], b[0], b[1]);
      mma_m16n8k16<T>(acc[nt + 1], a[kt], b[2], b[3]);
    }
  }
}

}  // namespace fptrain::attention::cuda
