// Hopper warpgroup MMA plumbing: shared-memory descriptors for the 128-byte swizzled
// layout, the fences wgmma needs, and the "slab" tile layout both wgmma and our
// cp.async loads agree on.
//
// Slab layout: a tile of ROWS x COLS 16-bit elements is stored as COLS/64 slabs; slab s
// holds columns [64s, 64s+64) of every row, one 128-byte line per row, with the 16-byte
// chunks of a line XOR-swizzled by (row % 8). That is wgmma's canonical 128B-swizzle
// layout both ways: read with rows as M/N it is K-major (8-row groups 1024 bytes apart);
// read with rows as K it is MN-major (slabs are the 64-wide MN panels).
#pragma once

#include <cstdint>

#include "attention/cuda/mma_utils.cuh"

namespace fptrain::attention::cuda {

template <int ROWS, int COLS>
struct SlabTile {
  static_assert(COLS % 64 == 0, "slabs are 64 columns wide");
  static constexpr int kSlabBytes = ROWS * 128;
  static constexpr int kBytes = kSlabBytes * (COLS / 64);
  static __device__ __forceinline__ uint32_t offset(int row, int col) {  // col % 8 == 0
    return (col >> 6) * kSlabBytes + row * 128 + ((((col & 63) >> 3) ^ (row & 7)) << 4);
  }
};

// Copies ROWS x COLS elements of a packed [T, H, D] tensor into a slab tile; rows at or
// past valid_rows become zeros.
template <int ROWS, int COLS, int THREADS, typename T>
__device__ __forceinline__ void load_slab_tile_async(uint32_t smem_base, const T* gmem, int64_t row_stride,
                                                     int valid_rows) {
  constexpr int kChunksPerRow = COLS / 8;
  constexpr int kChunks = ROWS * kChunksPerRow;
  static_assert(kChunks % THREADS == 0, "tile copy must split evenly");
#pragma unroll
  for (int i = 0; i < kChunks / THREADS; ++i) {
    const int c = threadIdx.x % THREADS + i * THREADS;
    const int row = c / kChunksPerRow, col = (c % kChunksPerRow) * 8;
    const bool valid = row < valid_rows;
    const T* src = valid ? gmem + row * row_stride + col : gmem;
    cp_async_16(smem_base + SlabTile<ROWS, COLS>::offset(row, col), src, valid);
  }
}

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
// Shared memory written through the generic proxy (cp.async, st.shared) must be made
// visible to the async proxy (wgmma) before a barrier the readers wait on.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Keeps the compiler from moving accesses of an accumulator across wgmma waits.
template <int NT>
__device__ __forceinline__ void fence_acc(float (&c)[NT][4]) {
#pragma unroll
  for (int i = 0; i < NT; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+f"(c[i][j])::"memory");
}

}  // namespace fptrain::attention::cuda
