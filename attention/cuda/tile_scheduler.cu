#include "attention/cuda/tile_scheduler.cuh"

#include "attention/cuda/launch.h"
#include "attention/cuda/masking.cuh"

namespace fptrain::attention::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kBuckets = 1024;  // sequences of >= kBuckets - 1 blocks share the top bucket

// Block-wide inclusive scan of one value per thread (Hillis-Steele in shared memory).
__device__ int block_inclusive_scan(int value, int* buf) {
  buf[threadIdx.x] = value;
  __syncthreads();
  for (int d = 1; d < kThreads; d <<= 1) {
    const int add = threadIdx.x >= d ? buf[threadIdx.x - d] : 0;
    __syncthreads();
    buf[threadIdx.x] += add;
    __syncthreads();
  }
  const int result = buf[threadIdx.x];
  __syncthreads();
  return result;
}

__global__ void __launch_bounds__(kThreads) tile_scheduler_kernel(VarlenShape shape, TileKind kind, int bm,
                                                                   int bn, TileList list) {
  __shared__ int bucket_pos[kBuckets];
  __shared__ int scan_buf[kThreads];
  __shared__ int carry;
  const int block = kind == TileKind::QueryBlocks ? bm : bn;
  const int batch = shape.batch;
  int* order = list.scratch;          // sequences, longest first
  int* tile_start = list.scratch + batch;  // first tile of each sorted sequence
  auto blocks_of = [&](int b) { return ceil_div(seq_bounds(shape.cu_seqlens, b, shape.total_tokens).len, block); };

  // 1) counting sort of the sequences by block count, descending
  bucket_pos[threadIdx.x] = 0;
  __syncthreads();
  for (int b = threadIdx.x; b < batch; b += kThreads) atomicAdd(&bucket_pos[min(blocks_of(b), kBuckets - 1)], 1);
  __syncthreads();
  const int bucket = kBuckets - 1 - threadIdx.x;  // thread 0 holds the largest bucket
  const int count = bucket_pos[bucket];
  const int incl = block_inclusive_scan(count, scan_buf);
  bucket_pos[bucket] = incl - count;
  __syncthreads();
  for (int b = threadIdx.x; b < batch; b += kThreads)
    order[atomicAdd(&bucket_pos[min(blocks_of(b), kBuckets - 1)], 1)] = b;
  __syncthreads();

  // 2) first tile of each sequence in sorted order (exclusive scan of block counts)
  if (threadIdx.x == 0) carry = 0;
  __syncthreads();
  for (int base = 0; base < batch; base += kThreads) {
    const int i = base + threadIdx.x;
    const int n = i < batch ? blocks_of(order[i]) : 0;
    const int incl_n = block_inclusive_scan(n, scan_buf);
    if (i < batch) tile_start[i] = carry + incl_n - n;
    __syncthreads();
    if (threadIdx.x == kThreads - 1) carry += incl_n;
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    *list.num_tiles = carry;
    *list.next_item = 0;
  }
  __syncthreads();

  // 3) each sequence's tiles, heaviest block first: under a causal mask the last query
  //    blocks and the first key blocks see the most.
  for (int i = threadIdx.x; i < batch; i += kThreads) {
    const int b = order[i];
    const int n = blocks_of(b);
    for (int j = 0; j < n; ++j) {
      const int pos = tile_start[i] + j;
      const int blk = kind == TileKind::QueryBlocks ? n - 1 - j : j;
      if (pos < list.capacity) list.tiles[pos] = Tile{b, blk};
    }
  }
}

}  // namespace

void launch_tile_scheduler(const VarlenShape& shape, TileKind kind, int bm, int bn, TileList list,
                           cudaStream_t stream) {
  static_assert(kThreads == kBuckets, "the bucket scan gives one bucket to each thread");
  tile_scheduler_kernel<<<1, kThreads, 0, stream>>>(shape, kind, bm, bn, list);
  check_cuda(cudaGetLastError(), "tile scheduler kernel launch");
}

}  // namespace fptrain::attention::cuda
