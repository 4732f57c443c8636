// Which keys a query sees, and the block ranges that follow from it.
//
// Within one sequence of length L (positions local to the sequence), query i sees
// key j iff  j < L,  (not causal or j <= i)  and  (window == 0 or j > i - window).
// The kernels tile segments (params.h): one document, or a pack of short ones, where
// query and key must also lie in the same document (pack_doc_span, apply_doc_mask).
#pragma once

#include <cmath>

#include "attention/cuda/params.h"

namespace fptrain::attention::cuda {

// Start and length of sequence b, clamped to [0, T]: a malformed cu_seqlens (the host checks
// it whenever it has a copy) can then only drop work, never read or write out of bounds.
struct SeqBounds {
  int start, len;
};
__host__ __device__ __forceinline__ SeqBounds seq_bounds(const int* cu_seqlens, int b, int total_tokens) {
  const int lo = min(max(cu_seqlens[b], 0), total_tokens);
  const int hi = min(max(cu_seqlens[b + 1], lo), total_tokens);
  return {lo, hi - lo};
}

// Whether token tok lies in a sequence of 1..max_len tokens (binary search of cu_seqlens; a
// token no sequence covers gives false).
__device__ __forceinline__ bool token_in_short_sequence(const int* cu_seqlens, int batch, int total_tokens, int tok,
                                                        int max_len) {
  int lo = 0, hi = batch + 1;  // first j in [0, B] with cu_seqlens[j] > tok
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (cu_seqlens[mid] > tok) hi = mid;
    else lo = mid + 1;
  }
  const int b = lo - 1;
  if (b < 0 || b >= batch) return false;
  const SeqBounds s = seq_bounds(cu_seqlens, b, total_tokens);
  return s.len <= max_len && tok >= s.start && tok < s.start + s.len;
}

struct BlockRange {
  int begin, end;  // [begin, end) in blocks
};

__host__ __device__ __forceinline__ int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Key blocks (of bn keys) that query block m (of bm queries) must visit.
__host__ __device__ __forceinline__ BlockRange key_blocks_for_query_block(int m, int bm, int bn, int len,
                                                                          bool causal, int window) {
  int q0 = m * bm, q1 = min(len, q0 + bm);
  int k_end = causal ? q1 : len;
  int k_begin = window > 0 ? max(0, q0 - window + 1) : 0;
  return {k_begin / bn, ceil_div(k_end, bn)};
}

// Query blocks (of bm queries) that see some key of key block n (of bn keys).
__host__ __device__ __forceinline__ BlockRange query_blocks_for_key_block(int n, int bm, int bn, int len,
                                                                          bool causal, int window) {
  int k0 = n * bn, k1 = min(len, k0 + bn);
  int q_begin = causal ? k0 : 0;
  int q_end = window > 0 ? min(len, k1 - 1 + window) : len;
  return {q_begin / bm, ceil_div(q_end, bm)};
}

// True when some (query, key) pair of the block pair is hidden (or out of range),
// so the per-element mask must run.
__device__ __forceinline__ bool block_needs_mask(int q0, int bm, int k0, int bn, int len, bool causal,
                                                 int window) {
  if (q0 + bm > len || k0 + bn > len) return true;
  if (causal && k0 + bn - 1 > q0) return true;
  if (window > 0 && k0 <= q0 + bm - 1 - window) return true;
  return false;
}

// The document holding row `row` of a pack of `len` tokens, as pack-local [lo, hi), from the
// pack's document starts (Segment::doc_starts; bit 0 is always set): the nearest start at or
// before the row and the next one after it. Rows past the end get [len, len): nothing.
struct DocSpan {
  int lo, hi;
};
__device__ __forceinline__ DocSpan pack_doc_span(unsigned w0, unsigned w1, unsigned w2, unsigned w3, int len,
                                                 int row) {
  if (row >= len) return {len, len};
  const unsigned long long low = (static_cast<unsigned long long>(w1) << 32) | w0 | 1ull;
  const unsigned long long high = (static_cast<unsigned long long>(w3) << 32) | w2;
  auto upto = [](int bit) { return ~0ull >> (63 - bit); };  // bits 0..bit
  int lo, hi = len;
  if (row >= 64) {
    const unsigned long long m = high & upto(row - 64);
    lo = m ? 127 - __clzll(m) : 63 - __clzll(low);
    const unsigned long long above = high & ~upto(row - 64);
    if (above) hi = 64 + __ffsll(above) - 1;
  } else {
    lo = 63 - __clzll(low & upto(row));
    const unsigned long long above = low & ~upto(row);
    if (above) hi = __ffsll(above) - 1;
    else if (high) hi = 64 + __ffsll(high) - 1;
  }
  return {lo, min(hi, len)};
}

// Query i sees key j (segment-local) iff both lie in the document [lo, hi) of the row they
// were tested for, and the causal and window rules allow it.
__device__ __forceinline__ bool visible_in_doc(int i, int j, DocSpan doc, bool causal, int window) {
  return doc.lo <= min(i, j) && max(i, j) < doc.hi && (!causal || j <= i) && (window == 0 || j > i - window);
}

// The segment of a tile, in two 16-byte loads.
__device__ __forceinline__ Segment load_segment(const TileList& list, int seg) {
  const int4 a = reinterpret_cast<const int4*>(list.segments + seg)[0];
  const int4 b = reinterpret_cast<const int4*>(list.segments + seg)[1];
  return {a.x, a.y, a.z, a.w, {unsigned(b.x), unsigned(b.y), unsigned(b.z), unsigned(b.w)}};
}

__device__ __forceinline__ bool visible(int i, int j, int len, bool causal, int window) {
  return i < len && j < len && (!causal || j <= i) && (window == 0 || j > i - window);
}

// Masks a warp's accumulator tile acc[16 x 8*NT]: rows are `row0 + g (+8)`, columns
// `col0 + 8*nt + 2t (+1)`; ROWS_ARE_QUERIES picks which axis holds queries. An entry is hidden
// (-inf) unless visible(r, query, key) holds, r (0 or 1) telling which of the thread's two rows.
template <bool ROWS_ARE_QUERIES, int NT, typename Visible>
__device__ __forceinline__ void mask_tile(float (&acc)[NT][4], int row0, int col0, Visible visible) {
  int lane = threadIdx.x & 31;
  int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      int r = row0 + g + (e >> 1) * 8;
      int c = col0 + nt * 8 + 2 * t + (e & 1);
      bool ok = ROWS_ARE_QUERIES ? visible(e >> 1, r, c) : visible(e >> 1, c, r);
      if (!ok) acc[nt][e] = -INFINITY;
    }
  }
}

// The mask of one document of `len` tokens.
template <bool ROWS_ARE_QUERIES, int NT>
__device__ __forceinline__ void apply_mask(float (&acc)[NT][4], int row0, int col0, int len, bool causal,
                                           int window) {
  mask_tile<ROWS_ARE_QUERIES>(acc, row0, col0,
                              [&](int, int i, int j) { return visible(i, j, len, causal, window); });
}

// The mask of a pack: each of the thread's two rows is tested against its own document; used
// on the pack's one block (it straddles every boundary).
template <bool ROWS_ARE_QUERIES, int NT>
__device__ __forceinline__ void apply_doc_mask(float (&acc)[NT][4], int row0, int col0, const DocSpan (&doc)[2],
                                               bool causal, int window) {
  mask_tile<ROWS_ARE_QUERIES>(acc, row0, col0,
                              [&](int r, int i, int j) { return visible_in_doc(i, j, doc[r], causal, window); });
}

}  // namespace fptrain::attention::cuda
