#include "attention/cuda/tile_scheduler.cuh"

#include "attention/cuda/launch.h"
#include "attention/cuda/masking.cuh"

namespace fptrain::attention::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kBuckets = 1024;  // segments of >= kBuckets - 1 blocks share the top bucket
// Shared memory of the packing pass per document boundary: cu_seqlens, two jump arrays, the
// reached and newly-reached flags. Beyond this many boundaries the pass runs in global scratch.
constexpr int kPackBytesPerDoc = 3 * 4 + 2;
constexpr int kPackSmemMaxDocs = (200 * 1024) / kPackBytesPerDoc;

// Block-wide inclusive scan of one value per thread: within each warp by shuffles, then over
// the 32 warp totals by the first warp (two barriers instead of Hillis-Steele's twenty).
__device__ int block_inclusive_scan(int value, int* buf) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int up = __shfl_up_sync(0xffffffffu, value, d);
    if (lane >= d) value += up;
  }
  if (lane == 31) buf[warp] = value;
  __syncthreads();
  if (warp == 0) {
    int total = buf[lane];
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int up = __shfl_up_sync(0xffffffffu, total, d);
      if (lane >= d) total += up;
    }
    buf[lane] = total;
  }
  __syncthreads();
  const int result = value + (warp > 0 ? buf[warp - 1] : 0);
  __syncthreads();  // buf may be reused at once
  return result;
}

// Exclusive scan of f(i) over i in [0, n), chunk by chunk; out[i] gets the prefix, the
// return value is the total (every thread gets it).
template <typename F>
__device__ int block_exclusive_scan(int n, F f, int* out, int* buf, int* carry) {
  if (threadIdx.x == 0) *carry = 0;
  __syncthreads();
  for (int base = 0; base < n; base += kThreads) {
    const int i = base + threadIdx.x;
    const int v = i < n ? f(i) : 0;
    const int incl = block_inclusive_scan(v, buf);
    if (i < n) out[i] = *carry + incl - v;
    __syncthreads();
    if (threadIdx.x == kThreads - 1) *carry += incl;
    __syncthreads();
  }
  return *carry;
}

// The document after the last one of a pack that starts at document b: documents are
// added while the pack holds at most pack_len tokens; a longer document stays alone.
__device__ int pack_end(const int* cu, int b, int batch, int pack_len) {
  const int limit = cu[b] + pack_len;
  if (cu[b + 1] > limit) return b + 1;
  int lo = b + 1, hi = batch;  // the last j in [b + 1, B] with cu[j] <= limit
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (cu[mid] <= limit) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Cuts the stream into segments (params.h): greedy packs of consecutive documents, as a
// sequential scan from document 0 would form them (each pack as long as pack_len allows),
// found in parallel: pack_end is a pointer from every document to where a pack starting there
// would end; the pack starts are the documents reached from document 0, marked by pointer
// doubling from the starts known at once (after round r, every start within 2^r packs of
// one). Writes the segment table and the lengths to seg_len (shared memory when the documents
// fit there); returns the count.
__device__ int build_segments(const VarlenShape& shape, int pack_len, TileList list, unsigned char* smem,
                              int* scan_buf, int* carry, int** seg_len_out) {
  const int batch = shape.batch, n = batch + 1;
  const bool in_smem = n <= kPackSmemMaxDocs;
  // Three int arrays (boundaries, two jump arrays) and two flag arrays, all of n entries.
  int* cu = in_smem ? reinterpret_cast<int*>(smem) : nullptr;
  int* const a = in_smem ? cu + n : list.scratch + 2 * batch;
  int* const b2 = a + n;
  unsigned char* reached = reinterpret_cast<unsigned char*>(b2 + n);
  unsigned char* fresh = reached + n;
  // Segments take their bounds from the clamped boundaries (seq_bounds' rule), so a malformed
  // cu_seqlens (the host checks it whenever it has a copy) can only drop work.
  const int* src = shape.cu_seqlens;
  const int total = shape.total_tokens;
  if (in_smem)
    for (int i = threadIdx.x; i < n; i += kThreads) cu[i] = min(max(src[i], 0), total);
  __syncthreads();
  const int* c = in_smem ? cu : src;
  auto bound = [&](int i) { return in_smem ? cu[i] : min(max(src[i], 0), total); };
  int* jump = a;
  int* jump2 = b2;
  // Seeds: document 0, every document longer than a pack (no pack can hold it) and the one
  // after it. The doubling then only has to cross the runs of short documents between them.
  for (int b = threadIdx.x; b < n; b += kThreads) {
    jump[b] = b < batch ? pack_end(c, b, batch, pack_len) : batch;
    const bool long_doc = b < batch && c[b + 1] - c[b] > pack_len;
    const bool after_long = b > 0 && c[b] - c[b - 1] > pack_len;
    reached[b] = b == 0 || long_doc || after_long;
    fresh[b] = 0;
  }
  int changed = 1;
  while (__syncthreads_or(changed)) {
    // Marks: every thread writes only the pointees of its own reached documents, and no two
    // reached documents share a pointee other than the end (which is not marked).
    for (int b = threadIdx.x; b < batch; b += kThreads)
      if (reached[b] && jump[b] < batch) fresh[jump[b]] = 1;
    __syncthreads();
    changed = 0;
    for (int b = threadIdx.x; b < n; b += kThreads) {
      if (fresh[b] && !reached[b]) {
        reached[b] = 1;
        changed = 1;
      }
      fresh[b] = 0;
      jump2[b] = jump[jump[b]];
    }
    int* t = jump;  // every thread swaps its own copies of the two pointers
    jump = jump2;
    jump2 = t;
  }
  // Segment s starts at the s-th reached document; the jump arrays are free again.
  int* seg_index = b2;
  int* seg_len = a;
  const int count = block_exclusive_scan(batch, [&](int b) { return int(reached[b]); }, seg_index, scan_buf, carry);
  for (int b = threadIdx.x; b < batch; b += kThreads) {
    if (!reached[b]) continue;
    const int end_doc = pack_end(c, b, batch, pack_len);
    const int num_docs = end_doc - b;
    const int start = bound(b);
    Segment seg{start, max(bound(end_doc), start) - start, b, num_docs, {1u, 0u, 0u, 0u}};
    if (num_docs > 1) {
      seg.len = min(seg.len, pack_len);
      for (int d = b + 1; d < end_doc; ++d) {
        const int off = bound(d) - start;
        if (off > 0 && off < seg.len) seg.doc_starts[off / 32] |= 1u << (off % 32);
      }
    }
    list.segments[seg_index[b]] = seg;
    seg_len[seg_index[b]] = seg.len;
  }
  __syncthreads();
  *seg_len_out = seg_len;
  return count;
}

__global__ void __launch_bounds__(kThreads) tile_scheduler_kernel(VarlenShape shape, TileKind kind, int bm,
                                                                   int bn, int pack_len, TileList list) {
  extern __shared__ unsigned char pack_smem[];
  __shared__ int bucket_pos[kBuckets];
  __shared__ int scan_buf[kThreads];
  __shared__ int carry;
  const int block = kind == TileKind::QueryBlocks ? bm : bn;
  int* seg_len = nullptr;
  const int segments = build_segments(shape, pack_len, list, pack_smem, scan_buf, &carry, &seg_len);
  int* order = list.scratch;                     // segments, longest first
  int* tile_start = list.scratch + shape.batch;  // first tile of each sorted segment
  auto blocks_of = [&](int s) { return ceil_div(seg_len[s], block); };

  // 1) counting sort of the segments by block count, descending
  bucket_pos[threadIdx.x] = 0;
  __syncthreads();
  for (int s = threadIdx.x; s < segments; s += kThreads) atomicAdd(&bucket_pos[min(blocks_of(s), kBuckets - 1)], 1);
  __syncthreads();
  const int bucket = kBuckets - 1 - threadIdx.x;  // thread 0 holds the largest bucket
  const int count = bucket_pos[bucket];
  const int incl = block_inclusive_scan(count, scan_buf);
  bucket_pos[bucket] = incl - count;
  __syncthreads();
  for (int s = threadIdx.x; s < segments; s += kThreads)
    order[atomicAdd(&bucket_pos[min(blocks_of(s), kBuckets - 1)], 1)] = s;
  __syncthreads();

  // 2) first tile of each segment in sorted order (exclusive scan of block counts)
  const int total = block_exclusive_scan(segments, [&](int i) { return blocks_of(order[i]); }, tile_start, scan_buf,
                                         &carry);
  if (threadIdx.x == 0) {
    *list.num_tiles = min(total, list.capacity);
    *list.next_item = 0;
  }

  // 3) each segment's tiles, heaviest block first: under a causal mask the last query
  //    blocks and the first key blocks see the most.
  for (int i = threadIdx.x; i < segments; i += kThreads) {
    const int s = order[i];
    const int n = blocks_of(s);
    for (int j = 0; j < n; ++j) {
      const int pos = tile_start[i] + j;
      const int blk = kind == TileKind::QueryBlocks ? n - 1 - j : j;
      if (pos < list.capacity) list.tiles[pos] = Tile{s, blk};
    }
  }
}

}  // namespace

void launch_tile_scheduler(const VarlenShape& shape, TileKind kind, int bm, int bn, int pack_len, TileList list,
                           cudaStream_t stream) {
  static_assert(kThreads == kBuckets, "the bucket scan gives one bucket to each thread");
  const int docs = shape.batch + 1;
  const int smem = docs <= kPackSmemMaxDocs ? docs * kPackBytesPerDoc : 0;
  check_cuda(cudaFuncSetAttribute(tile_scheduler_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  kPackSmemMaxDocs * kPackBytesPerDoc),
             "cudaFuncSetAttribute(tile scheduler shared memory)");
  tile_scheduler_kernel<<<1, kThreads, smem, stream>>>(shape, kind, bm, bn, pack_len, list);
  check_cuda(cudaGetLastError(), "tile scheduler kernel launch");
}

void run_tile_scheduler(const VarlenShape& shape, TileList list, cudaStream_t stream) {
  launch_tile_scheduler(shape, TileKind::QueryBlocks, fwd_block_m(128), fwd_block_n(128), pack_max_len(128), list,
                        stream);
}

}  // namespace fptrain::attention::cuda
