// Block sizes of each kernel, shared by host code (workspace sizes) and the kernels.
#pragma once

#include <cstdint>

namespace fptrain::attention::cuda {

// Forward: 2 warpgroups x 64 query rows (wgmma m64), key step 128; at D = 256 key step 64 and
// one Q stage: Q (64 KB) and two K/V stages (2 x 64 KB) fill 192 of the 227 KB, and each
// consumer thread holds the 64 x 256 output (128 registers) beside 64 keys' scores (32).
constexpr int fwd_block_m(int) { return 128; }
constexpr int fwd_block_n(int d) { return d == 256 ? 64 : 128; }
constexpr int fwd_q_stages(int d) { return d == 256 ? 1 : 2; }
// dK/dV: 8 warps x 16 keys; query step 64. At D = 256 the two consumer warpgroups share 64
// keys and split D (dK and dV of 64 keys x 256 would take 256 registers a thread).
constexpr int bwd_block_n(int d) { return d == 256 ? 64 : 128; }
constexpr int bwd_block_m(int) { return 64; }
constexpr bool bwd_split_d(int d) { return d == 256; }
// K/V stages of the dK/dV kernel: a second one lets the next item's keys load while the
// current item computes (short documents: items of 2-3 steps). At D = 128 a second stage
// (64 KB) does not fit beside the Q, dO, dS^T and dQ staging buffers (194 KB of 227 KB).
constexpr int bwd_kv_stages(int d) { return d <= 64 ? 2 : 1; }
// Q/dO stages of the dK/dV kernel: one at D = 256 (K, V, Q, dO: 128 KB; P^T and dS^T
// double-buffered 32 KB; dQ staging 64 KB).
constexpr int bwd_q_stages(int d) { return d == 256 ? 1 : 2; }
// Atomic dQ: a sequence of at most this many tokens is a single key block of the dK/dV kernel,
// so one CTA sees all its keys and writes its dQ directly (no fp32 buffer rows for it).
constexpr int dq_direct_max_len(int d) { return bwd_block_n(d); }
// Spanning tiles: consecutive documents of at most this many tokens in all form one segment,
// so one tile serves them all (one block in every kernel; a pack's dQ is written directly).
// At most 128 (a pack's document starts are a 128-bit mask).
constexpr int pack_max_len(int d) { return fwd_block_n(d) < 128 ? fwd_block_n(d) : 128; }
constexpr bool pack_is_one_block(int d) {
  return pack_max_len(d) <= fwd_block_m(d) && pack_max_len(d) <= fwd_block_n(d) &&
         pack_max_len(d) <= bwd_block_n(d) && pack_max_len(d) <= dq_direct_max_len(d) && pack_max_len(d) <= 128;
}
static_assert(pack_is_one_block(64) && pack_is_one_block(128) && pack_is_one_block(256),
              "a pack must be a single block of every kernel");
// Deterministic dQ: 4 warps x 16 query rows; key step 64.
constexpr int dq_block_m(int) { return 64; }
constexpr int dq_block_n(int) { return 64; }

// Capacity a tile list needs: sum over segments of ceil(L / block) <= ceil(T / block) + B.
inline int tile_capacity(int total_tokens, int batch, int block) {
  return (total_tokens + block - 1) / block + batch;
}
// Scratch of the scheduler kernel: the sorted order and first tile of each segment (2B), and two
// jump arrays and the reached flags of the packing pass (3(B+1)).
inline int64_t tile_list_scratch_ints(int batch) { return 2 * int64_t(batch) + 3 * (int64_t(batch) + 1); }

}  // namespace fptrain::attention::cuda
