// Warp-level tensor-core building blocks: mma.sync m16n8k16, ldmatrix, cp.async,
// and a swizzled shared-memory tile layout.
//
// Fragment layouts (PTX ISA, m16n8k16, 16-bit operands), lane = 4 * g + t:
//   A 16x16: a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
//   B 16x8 : b0 (k 2t..2t+1, n g)  b1 (k 2t+8.., n g)
//   C 16x8 : c0,c1 (g, 2t..2t+1)   c2,c3 (g+8, 2t..2t+1)
// Two adjacent C tiles of one row block, converted to 16-bit, are exactly an A
// fragment: that is how P (and dS) feed the next product without shared memory.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace fptrain::attention::cuda {

template <typename T> struct MmaType;
template <> struct MmaType<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t x) {
    return __bfloat1622float2(*reinterpret_cast<__nv_bfloat162*>(&x));
  }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <> struct MmaType<__half> {
  static __device__ __forceinline__ uint32_t pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  static __device__ __forceinline__ float2 unpack(uint32_t x) {
    return __half22float2(*reinterpret_cast<__half2*>(&x));
  }
  static __device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

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

// 4-byte global->shared copy; src_bytes = 0 writes zeros.
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, bool valid) {
  int n = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}

// Row-major tile of 16-bit elements, COLS a multiple of 64, stored with the 16-byte
// chunks of each row XOR-swizzled by (row % 8): the 8 rows one ldmatrix reads then
// hit 8 different bank groups.
template <int COLS>
struct SwizzledTile {
  static_assert(COLS % 64 == 0, "rows must hold at least 8 chunks of 16 bytes");
  static constexpr int kRowBytes = COLS * 2;
  static __device__ __forceinline__ uint32_t offset(int row, int col) {  // col % 8 == 0
    int chunk = (col >> 3) ^ (row & 7);
    return row * kRowBytes + chunk * 16;
  }
};

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

// A fragments of a 16 x 16*KT block (rows row0.., all KT k-steps) from a swizzled tile.
template <int KT, int COLS>
__device__ __forceinline__ void load_a_frags(uint32_t (&a)[KT][4], uint32_t base, int row0) {
  int lane = threadIdx.x & 31;
  int row = row0 + (lane & 15);
#pragma unroll
  for (int kt = 0; kt < KT; ++kt) {
    int col = kt * 16 + (lane >> 4) * 8;
    ldmatrix_x4(a[kt], base + SwizzledTile<COLS>::offset(row, col));
  }
}

// acc[16 x 8*NT] += A[16 x 16*KT] * B^T where B is stored [n][k] (rows n0.., cols k):
// the "Q K^T" shape. NT must be even.
template <typename T, int KT, int NT, int COLS>
__device__ __forceinline__ void gemm_a_bt(float (&acc)[NT][4], const uint32_t (&a)[KT][4],
                                          uint32_t b_base, int n0) {
  int lane = threadIdx.x & 31;
  int mi = lane >> 3;
#pragma unroll
  for (int kt = 0; kt < KT; ++kt) {
#pragma unroll
    for (int nt = 0; nt < NT; nt += 2) {
      uint32_t b[4];  // b0,b1 for n-tile nt, then b0,b1 for nt+1
      int row = n0 + nt * 8 + (mi >> 1) * 8 + (lane & 7);
      int col = kt * 16 + (mi & 1) * 8;
      ldmatrix_x4(b, b_base + SwizzledTile<COLS>::offset(row, col));
      MmaType<T>::mma(acc[nt], a[kt], b[0], b[1]);
      MmaType<T>::mma(acc[nt + 1], a[kt], b[2], b[3]);
    }
  }
}

// acc[16 x 8*NT] += A[16 x 16*KT] * B where B is stored [k][n] (rows k0 + .., cols n0 + ..):
// the "P V" shape. NT must be even.
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
      MmaType<T>::mma(acc[nt], a[kt], b[0], b[1]);
      MmaType<T>::mma(acc[nt + 1], a[kt], b[2], b[3]);
    }
  }
}

// A fragments of A = M^T for a 16 x 16*KT block, where M is stored [k][m] in a swizzled
// tile (rows k, cols m0..m0+15): used to read dS^T back as dS.
template <int KT, int COLS>
__device__ __forceinline__ void load_at_frags(uint32_t (&a)[KT][4], uint32_t base, int m0) {
  int lane = threadIdx.x & 31;
  int mi = lane >> 3;
#pragma unroll
  for (int kt = 0; kt < KT; ++kt) {
    // matrices: a0 (m 0-7, k 0-7), a1 (m 8-15, k 0-7), a2 (m 0-7, k 8-15), a3 (m 8-15, k 8-15)
    int row = kt * 16 + (mi >> 1) * 8 + (lane & 7);  // k
    int col = m0 + (mi & 1) * 8;                     // m
    ldmatrix_x4_trans(a[kt], base + SwizzledTile<COLS>::offset(row, col));
  }
}

// C tiles (fp32) of a 16 x 16*KT block -> A fragments in 16-bit.
template <typename T, int KT>
__device__ __forceinline__ void acc_to_a_frags(uint32_t (&a)[KT][4], const float (&c)[2 * KT][4]) {
#pragma unroll
  for (int kt = 0; kt < KT; ++kt) {
    a[kt][0] = MmaType<T>::pack(c[2 * kt][0], c[2 * kt][1]);
    a[kt][1] = MmaType<T>::pack(c[2 * kt][2], c[2 * kt][3]);
    a[kt][2] = MmaType<T>::pack(c[2 * kt + 1][0], c[2 * kt + 1][1]);
    a[kt][3] = MmaType<T>::pack(c[2 * kt + 1][2], c[2 * kt + 1][3]);
  }
}

template <int NT>
__device__ __forceinline__ void zero_acc(float (&c)[NT][4]) {
#pragma unroll
  for (int i = 0; i < NT; ++i) c[i][0] = c[i][1] = c[i][2] = c[i][3] = 0.f;
}

}  // namespace fptrain::attention::cuda
