#include "attention/cuda/tile_scheduler.cuh"

#include <stdexcept>
#include <string>

#include "attention/cuda/masking.cuh"

namespace fptrain::attention::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kBuckets = 1024;  // work counts >= kBuckets - 1 share the top bucket

__device__ __forceinline__ int tile_work(TileKind kind, int block, int bm, int bn, int len, bool causal,
                                         int window) {
  BlockRange r = kind == TileKind::QueryBlocks
                     ? key_blocks_for_query_block(block, bm, bn, len, causal, window)
                     : query_blocks_for_key_block(block, bm, bn, len, causal, window);
  return min(max(r.end - r.begin, 0), kBuckets - 1);
}

__global__ void __launch_bounds__(kThreads) tile_scheduler_kernel(VarlenShape shape, TileKind kind, int bm,
                                                                   int bn, TileList list) {
  __shared__ int hist[kBuckets];
  __shared__ int offset[kBuckets];
  const int block = kind == TileKind::QueryBlocks ? bm : bn;
  for (int i = threadIdx.x; i < kBuckets; i += kThreads) hist[i] = 0;
  __syncthreads();

  // 1) histogram of work per tile
  for (int b = threadIdx.x; b < shape.batch; b += kThreads) {
    int len = shape.cu_seqlens[b + 1] - shape.cu_seqlens[b];
    int nblocks = ceil_div(len, block);
    for (int i = 0; i < nblocks; ++i)
      atomicAdd(&hist[tile_work(kind, i, bm, bn, len, shape.causal, shape.window)], 1);
  }
  __syncthreads();

  // 2) exclusive scan from the heaviest bucket down (Hillis-Steele over reversed index)
  int idx = kBuckets - 1 - threadIdx.x;  // kThreads == kBuckets
  int val = hist[idx];
  offset[threadIdx.x] = val;
  __syncthreads();
  for (int d = 1; d < kBuckets; d <<= 1) {
    int add = threadIdx.x >= d ? offset[threadIdx.x - d] : 0;
    __syncthreads();
    offset[threadIdx.x] += add;
    __syncthreads();
  }
  int inclusive = offset[threadIdx.x];
  __syncthreads();
  hist[idx] = inclusive - val;  // reuse hist as the running write position of bucket idx
  if (threadIdx.x == kThreads - 1) {
    *list.num_tiles = inclusive;
    *list.next_item = 0;
  }
  __syncthreads();

  // 3) scatter
  for (int b = threadIdx.x; b < shape.batch; b += kThreads) {
    int len = shape.cu_seqlens[b + 1] - shape.cu_seqlens[b];
    int nblocks = ceil_div(len, block);
    for (int i = 0; i < nblocks; ++i) {
      int pos = atomicAdd(&hist[tile_work(kind, i, bm, bn, len, shape.causal, shape.window)], 1);
      if (pos < list.capacity) list.tiles[pos] = Tile{b, i};
    }
  }
}

}  // namespace

void launch_tile_scheduler(const VarlenShape& shape, TileKind kind, int bm, int bn, TileList list,
                           cudaStream_t stream) {
  static_assert(kThreads == kBuckets, "the scan gives one bucket to each thread");
  tile_scheduler_kernel<<<1, kThreads, 0, stream>>>(shape, kind, bm, bn, list);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("attention/cuda/tile_scheduler.cu: launch failed: ") +
                             cudaGetErrorString(err));
}

}  // namespace fptrain::attention::cuda
