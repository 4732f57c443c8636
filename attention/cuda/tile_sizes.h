// Block sizes of each kernel, shared by host code (workspace sizes) and the kernels.
#pragma once

namespace fptrain::attention::cuda {

// Forward: 2 warpgroups x 64 query rows (wgmma m64), key step 128.
constexpr int fwd_block_m(int) { return 128; }
constexpr int fwd_block_n(int) { return 128; }
// dK/dV: 8 warps x 16 keys; query step 64.
constexpr int bwd_block_n(int) { return 128; }
constexpr int bwd_block_m(int) { return 64; }
// K/V stages of the dK/dV kernel: a second one lets the next item's keys load while the
// current item computes (short documents: items of 2-3 steps). At D = 128 a second stage
// (64 KB) does not fit beside the Q, dO, dS^T and dQ staging buffers (194 KB of 227 KB).
constexpr int bwd_kv_stages(int d) { return d <= 64 ? 2 : 1; }
// Atomic dQ: a sequence of at most this many tokens is a single key block of the dK/dV kernel,
// so one CTA sees all its keys and writes its dQ directly (no fp32 buffer rows for it).
constexpr int dq_direct_max_len(int d) { return bwd_block_n(d); }
// Deterministic dQ: 4 warps x 16 query rows; key step 64.
constexpr int dq_block_m(int) { return 64; }
constexpr int dq_block_n(int) { return 64; }

// Capacity a tile list needs: sum over sequences of ceil(L / block) <= ceil(T / block) + B.
inline int tile_capacity(int total_tokens, int batch, int block) {
  return (total_tokens + block - 1) / block + batch;
}

}  // namespace fptrain::attention::cuda
