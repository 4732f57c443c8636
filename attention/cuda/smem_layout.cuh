// Shared-memory addresses and the two swizzled tile layouts of 16-bit elements.
//
// SlabTile (forward and dK/dV kernels; filled by TMA, read by wgmma): a tile of ROWS x COLS
// is stored as COLS/64 slabs; slab s holds columns [64s, 64s+64) of every row, one 128-byte
// line per row, with the 16-byte chunks of a line XOR-swizzled by (row % 8). That is the
// tensor maps' 128-byte swizzle and wgmma's canonical 128B-swizzle layout both ways: read
// with rows as M/N it is K-major (8-row groups 1024 bytes apart); read with rows as K it is
// MN-major (slabs are the 64-wide MN panels).
//
// SwizzledTile (deterministic dQ kernel; filled by cp.async, read by ldmatrix): row-major,
// the 16-byte chunks of each row XOR-swizzled by (row % 8), so the 8 rows one ldmatrix
// reads hit 8 different bank groups.
#pragma once

#include <cstdint>

namespace fptrain::attention::cuda {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

template <int ROWS, int COLS>
struct SlabTile {
  static_assert(COLS % 64 == 0, "slabs are 64 columns wide");
  static constexpr int kSlabBytes = ROWS * 128;
  static constexpr int kBytes = kSlabBytes * (COLS / 64);
  static __device__ __forceinline__ uint32_t offset(int row, int col) {  // col % 8 == 0
    return (col >> 6) * kSlabBytes + row * 128 + ((((col & 63) >> 3) ^ (row & 7)) << 4);
  }
};

template <int COLS>
struct SwizzledTile {
  static_assert(COLS % 64 == 0, "rows must hold at least 8 chunks of 16 bytes");
  static constexpr int kRowBytes = COLS * 2;
  static __device__ __forceinline__ uint32_t offset(int row, int col) {  // col % 8 == 0
    int chunk = (col >> 3) ^ (row & 7);
    return row * kRowBytes + chunk * 16;
  }
};

}  // namespace fptrain::attention::cuda
