// Varlen tile scheduler.
//
// One small kernel (one CTA) turns cu_seqlens into the list of (segment, block) tiles
// without a host sync. First it cuts the stream into segments: runs of consecutive short
// documents of at most pack_max_len(D) tokens in all become one segment (a pack: one tile
// serves them all, masked at their boundaries), longer documents stay alone. Then segments
// longest first (counting sort on their block count), and within a segment its blocks
// heaviest first (causal: the last query blocks, the first key blocks). The attention
// kernels run a persistent grid whose CTAs draw (tile, head) items from an atomic counter in
// that order: the long work starts first, the many short segments fill the tail, no CTA
// idles while work remains, and the CTAs running at any moment work on the same few
// documents, so their K/V (forward) or Q/dO and dQ (backward) stay in L2.
#pragma once

#include <cuda_runtime.h>

#include "attention/cuda/masking.cuh"
#include "attention/cuda/params.h"
#include "attention/cuda/tile_sizes.h"

namespace fptrain::attention::cuda {

enum class TileKind { QueryBlocks, KeyBlocks };

// Enqueues the scheduler kernel on `stream`. bm/bn are the kernel's query/key block sizes;
// tiles are blocks of bm queries (QueryBlocks) or bn keys (KeyBlocks); pack_len: the head
// dim's pack_max_len (the same for every kernel of one attention call).
void launch_tile_scheduler(const VarlenShape& shape, TileKind kind, int bm, int bn, int pack_len, TileList list,
                           cudaStream_t stream);

// Work item i of a kernel that runs `heads` heads of every tile: tile i / heads, head i % heads.
struct WorkItem {
  Tile tile;
  int head;
};
__device__ __forceinline__ WorkItem decode_item(const TileList& list, int item, int heads) {
  return {list.tiles[item / heads], item % heads};
}

// The decoded item a producer hands its consumers through shared memory, so they start without
// a chain of dependent global loads: {item, block, segment start, length, documents, the
// pack's document starts[4]}, padded to 16 ints.
constexpr int kItemSlotInts = 16;
__device__ __forceinline__ void publish_item(volatile int* slot, int item, int block, const Segment& seg) {
  slot[0] = item;
  slot[1] = block;
  slot[2] = seg.start;
  slot[3] = seg.len;
  slot[4] = seg.num_docs;
#pragma unroll
  for (int i = 0; i < 4; ++i) slot[5 + i] = int(seg.doc_starts[i]);
}
// The documents of rows `row` and `row + 8` of the pack published in `slot` (len tokens).
__device__ __forceinline__ void slot_doc_spans(const volatile int* slot, int len, int row, DocSpan (&doc)[2]) {
  const unsigned w0 = slot[5], w1 = slot[6], w2 = slot[7], w3 = slot[8];
  doc[0] = pack_doc_span(w0, w1, w2, w3, len, row);
  doc[1] = pack_doc_span(w0, w1, w2, w3, len, row + 8);
}

// Claims the next work item for the whole CTA (thread 0 draws, the block shares it).
__device__ __forceinline__ int claim_item(int* counter, int* smem_slot) {
  if (threadIdx.x == 0) *smem_slot = atomicAdd(counter, 1);
  __syncthreads();
  int item = *smem_slot;
  __syncthreads();  // everyone has read the slot before thread 0 may overwrite it
  return item;
}

}  // namespace fptrain::attention::cuda
