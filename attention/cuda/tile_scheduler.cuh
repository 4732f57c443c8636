// Varlen tile scheduler.
//
// One small kernel (one CTA) turns cu_seqlens into the list of (sequence, block)
// tiles sorted by work, heaviest first (counting sort on the number of inner-loop
// blocks), without a host sync. The attention kernels run a persistent grid whose
// CTAs draw (tile, head) items from an atomic counter in that order: long causal
// rows start first, the many short sequences fill the tail, no CTA idles while work
// remains, and a 1-token sequence costs one small item rather than a whole grid row.
#pragma once

#include <cuda_runtime.h>

#include "attention/cuda/params.h"
#include "attention/cuda/tile_sizes.h"

namespace fptrain::attention::cuda {

enum class TileKind { QueryBlocks, KeyBlocks };

// Enqueues the scheduler kernel on `stream`. bm/bn are the kernel's query/key block sizes;
// tiles are blocks of bm queries (QueryBlocks) or bn keys (KeyBlocks).
void launch_tile_scheduler(const VarlenShape& shape, TileKind kind, int bm, int bn, TileList list,
                           cudaStream_t stream);

// Claims the next work item for the whole CTA (thread 0 draws, the block shares it).
__device__ __forceinline__ int claim_item(int* counter, int* smem_slot) {
  if (threadIdx.x == 0) *smem_slot = atomicAdd(counter, 1);
  __syncthreads();
  int item = *smem_slot;
  __syncthreads();  // everyone has read the slot before thread 0 may overwrite it
  return item;
}

}  // namespace fptrain::attention::cuda
