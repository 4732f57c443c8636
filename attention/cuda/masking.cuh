// Which keys a query sees, and the block ranges that follow from it.
//
// Within one sequence of length L (positions local to the sequence), query i sees
// key j iff  j < L,  (not causal or j <= i)  and  (window == 0 or j > i - window).
#pragma once

#include <cmath>

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

__device__ __forceinline__ bool visible(int i, int j, int len, bool causal, int window) {
  return i < len && j < len && (!causal || j <= i) && (window == 0 || j > i - window);
}

// Masks a warp's accumulator tile acc[16 x 8*NT]: rows are `row0 + g (+8)`, columns
// `col0 + 8*nt + 2t (+1)`. ROWS_ARE_QUERIES picks which axis holds queries.
template <bool ROWS_ARE_QUERIES, int NT>
__device__ __forceinline__ void apply_mask(float (&acc)[NT][4], int row0, int col0, int len, bool causal,
                                           int window) {
  int lane = threadIdx.x & 31;
  int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      int r = row0 + g + (e >> 1) * 8;
      int c = col0 + nt * 8 + 2 * t + (e & 1);
      bool ok = ROWS_ARE_QUERIES ? visible(r, c, len, causal, window) : visible(c, r, len, causal, window);
      if (!ok) acc[nt][e] = -INFINITY;
    }
  }
}

}  // namespace fptrain::attention::cuda
