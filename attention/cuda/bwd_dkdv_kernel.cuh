// Backward mainloop on Hopper tensor cores (wgmma): dK, dV and (default) atomic dQ.
//
// One CTA owns a block of 128 keys of one KV head; two warpgroups own 64 keys each. For
// every query head of the GQA group and every query block (64 queries) that sees those
// keys, it recomputes the transposed scores so that P^T and dS^T come out as A fragments:
//   S^T  = K Q^T            (SS)     P^T = exp(scale S^T - lse)
//   dP^T = V dO^T           (SS)     dS^T = P^T (dP^T - rowsum(dO O))
//   dV  += P^T dO           (RS, dO read MN-major)
//   dK  += dS^T Q           (RS, Q read MN-major)
//   dQ  += dS K             (SS, dS^T from shared memory read M-major; each warpgroup takes
//                            half of D) added to an fp32 buffer with atomics.
// dK and dV stay in registers over the whole head group: no per-query-head copies, no
// reduction pass. Without atomics (deterministic mode) the dQ product is skipped and a
// separate dQ pass runs.
#pragma once

#include "attention/cuda/masking.cuh"
#include "attention/cuda/mma_utils.cuh"
#include "attention/cuda/params.h"
#include "attention/cuda/tile_scheduler.cuh"
#include "attention/cuda/tile_sizes.h"
#include "attention/cuda/wgmma_ops.cuh"
#include "attention/cuda/wgmma_utils.cuh"

namespace fptrain::attention::cuda {

template <int D>
struct BwdTraits {
  static constexpr int kWarpGroups = 2;
  static constexpr int kThreads = 128 * kWarpGroups;
  static constexpr int kBlockN = bwd_block_n(D);
  static constexpr int kBlockM = bwd_block_m(D);
  static_assert(kBlockN == 64 * kWarpGroups, "each warpgroup owns 64 keys");
  static_assert(kBlockM == 64, "one 64-wide slab of queries per step");
  using KVTile = SlabTile<kBlockN, D>;
  using QTile = SlabTile<kBlockM, D>;
  using DsTile = SlabTile<kBlockN, kBlockM>;  // dS^T: rows are keys
  static constexpr int kRowStatBytes = kBlockM * 4;
  // K, V, Q[2], dO[2], dS^T, lse[2], dsum[2], plus slack for 1024-byte alignment.
  static constexpr int kSmemBytes =
      2 * KVTile::kBytes + 4 * QTile::kBytes + DsTile::kBytes + 4 * kRowStatBytes + 1024;
};

template <typename T, int D, bool kAtomicDQ>
__global__ void __launch_bounds__(BwdTraits<D>::kThreads, 1) bwd_dkdv_kernel(BwdParams p) {
  using Tr = BwdTraits<D>;
  using KVTile = typename Tr::KVTile;
  using QTile = typename Tr::QTile;
  using DsTile = typename Tr::DsTile;
  constexpr int BN = Tr::kBlockN, BM = Tr::kBlockM, MT = BM / 8, OT = D / 8;
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ unsigned char smem[];
  __shared__ int item_slot;
  const uint32_t s_k = (smem_addr(smem) + 1023) & ~1023u;
  const uint32_t s_v = s_k + KVTile::kBytes;
  const uint32_t s_q0 = s_v + KVTile::kBytes;
  const uint32_t s_do0 = s_q0 + 2 * QTile::kBytes;
  const uint32_t s_ds = s_do0 + 2 * QTile::kBytes;
  float* s_lse = reinterpret_cast<float*>(smem + (s_ds + DsTile::kBytes - smem_addr(smem)));
  float* s_dsum = s_lse + 2 * BM;

  const VarlenShape& sh = p.shape;
  const int wg = threadIdx.x / 128, wl = (threadIdx.x / 32) & 3;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int row0 = wg * 64 + wl * 16;  // this warp's first key row in the block
  const int group = sh.heads_q / sh.heads_kv;
  const int64_t q_stride = int64_t(sh.heads_q) * D, kv_stride = int64_t(sh.heads_kv) * D;
  const float scale_log2 = sh.scale * kLog2e;
  const int num_items = *p.kv_tiles.num_tiles * sh.heads_kv;

  for (;;) {
    const int item = claim_item(p.kv_tiles.next_item, &item_slot);
    if (item >= num_items) break;
    const Tile tile = p.kv_tiles.tiles[item / sh.heads_kv];
    const int hk = item % sh.heads_kv;
    const int start = sh.cu_seqlens[tile.seq];
    const int len = sh.cu_seqlens[tile.seq + 1] - start;
    const int k0 = tile.block * BN;
    const BlockRange qr = query_blocks_for_key_block(tile.block, BM, BN, len, sh.causal, sh.window);
    const int q_blocks = qr.end - qr.begin;
    const int steps = q_blocks * group;  // (query head, query block) pairs

    const int64_t kv_off = int64_t(start + k0) * kv_stride + hk * D;
    load_slab_tile_async<BN, D, Tr::kThreads>(s_k, static_cast<const T*>(p.k) + kv_off, kv_stride, len - k0);
    load_slab_tile_async<BN, D, Tr::kThreads>(s_v, static_cast<const T*>(p.v) + kv_off, kv_stride, len - k0);
    auto load_q_step = [&](int step, int buf) {
      const int h = hk * group + step / q_blocks;
      const int q0 = (qr.begin + step % q_blocks) * BM;
      const int64_t off = int64_t(start + q0) * q_stride + h * D;
      load_slab_tile_async<BM, D, Tr::kThreads>(s_q0 + buf * QTile::kBytes, static_cast<const T*>(p.q) + off,
                                                q_stride, len - q0);
      load_slab_tile_async<BM, D, Tr::kThreads>(s_do0 + buf * QTile::kBytes, static_cast<const T*>(p.dout) + off,
                                                q_stride, len - q0);
      if (threadIdx.x < BM) {
        const int64_t r = int64_t(h) * sh.total_tokens + start + q0 + threadIdx.x;
        const bool valid = q0 + int(threadIdx.x) < len;
        cp_async_4(smem_addr(s_lse + buf * BM + threadIdx.x), valid ? p.lse + r : p.lse, valid);
        cp_async_4(smem_addr(s_dsum + buf * BM + threadIdx.x), valid ? p.dsum + r : p.dsum, valid);
      }
    };
    load_q_step(0, 0);
    cp_async_commit();

    float dk[OT][4], dv[OT][4];
    zero_acc(dk);
    zero_acc(dv);

    int buf = 0;
    for (int step = 0; step < steps; ++step) {
      if (step + 1 < steps) {
        load_q_step(step + 1, buf ^ 1);
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      fence_proxy_async();
      __syncthreads();
      const int h = hk * group + step / q_blocks;
      const int q0 = (qr.begin + step % q_blocks) * BM;
      const uint32_t s_q = s_q0 + buf * QTile::kBytes, s_do = s_do0 + buf * QTile::kBytes;
      const float* lse = s_lse + buf * BM;
      const float* dsum = s_dsum + buf * BM;

      // S^T = K Q^T and dP^T = V dO^T for this warpgroup's 64 keys.
      float st[MT][4], dpt[MT][4];
      zero_acc(st);
      zero_acc(dpt);
      wgmma_fence();
#pragma unroll
      for (int kt = 0; kt < D / 16; ++kt) {
        const uint32_t a = (kt / 4) * KVTile::kSlabBytes + wg * 64 * 128 + (kt % 4) * 32;
        const uint32_t b = (kt / 4) * QTile::kSlabBytes + (kt % 4) * 32;
        Wgmma<T, BM>::template ss<0, 0>(st, wgmma_desc(s_k + a, 16, 1024), wgmma_desc(s_q + b, 16, 1024), kt > 0);
      }
#pragma unroll
      for (int kt = 0; kt < D / 16; ++kt) {
        const uint32_t a = (kt / 4) * KVTile::kSlabBytes + wg * 64 * 128 + (kt % 4) * 32;
        const uint32_t b = (kt / 4) * QTile::kSlabBytes + (kt % 4) * 32;
        Wgmma<T, BM>::template ss<0, 0>(dpt, wgmma_desc(s_v + a, 16, 1024), wgmma_desc(s_do + b, 16, 1024), kt > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_acc(st);
      fence_acc(dpt);

      // P^T = exp(scale S^T - lse[q]); hidden pairs were set to -inf.
      if (block_needs_mask(q0, BM, k0, BN, len, sh.causal, sh.window))
        apply_mask<false>(st, k0 + row0, q0, len, sh.causal, sh.window);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          st[mt][e] = exp2f(fmaf(st[mt][e], scale_log2, -lse[mt * 8 + 2 * t + (e & 1)] * kLog2e));

      // dV += P^T dO (dO rows are the K dimension: MN-major).
      uint32_t pf[BM / 16][4];
      acc_to_a_frags<T, BM / 16>(pf, st);
      wgmma_fence();
#pragma unroll
      for (int kt = 0; kt < BM / 16; ++kt)
        Wgmma<T, D>::template rs<1>(dv, pf[kt], wgmma_desc(s_do + kt * 16 * 128, QTile::kSlabBytes, 1024), 1);
      wgmma_commit();

      // dS^T = P^T (dP^T - dsum[q]), unscaled (the softmax scale is applied to dK and dQ at the end).
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int e = 0; e < 4; ++e) st[mt][e] *= dpt[mt][e] - dsum[mt * 8 + 2 * t + (e & 1)];
      uint32_t dsf[BM / 16][4];
      acc_to_a_frags<T, BM / 16>(dsf, st);
      wgmma_fence();
#pragma unroll
      for (int kt = 0; kt < BM / 16; ++kt)
        Wgmma<T, D>::template rs<1>(dk, dsf[kt], wgmma_desc(s_q + kt * 16 * 128, QTile::kSlabBytes, 1024), 1);
      wgmma_commit();

      if constexpr (kAtomicDQ) {
        // dS^T -> shared memory; dQ[:, d0:d0+D/2] = dS K over all 128 keys of the block.
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int key = row0 + g + r * 8, col = mt * 8 + 2 * t;
            const uint32_t addr = s_ds + DsTile::offset(key, col & ~7) + (col & 7) * 2;
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(dsf[mt / 2][(mt & 1) * 2 + r]));
          }
        fence_proxy_async();
        __syncthreads();
        constexpr int DQN = D / 2;
        const int d0 = wg * DQN;
        float dq[DQN / 8][4];
        zero_acc(dq);
        wgmma_fence();
#pragma unroll
        for (int kt = 0; kt < BN / 16; ++kt) {
          const uint32_t a = s_ds + kt * 16 * 128;
          const uint32_t b = s_k + (d0 / 64) * KVTile::kSlabBytes + (d0 % 64) * 2 + kt * 16 * 128;
          Wgmma<T, DQN>::template ss<1, 1>(dq, wgmma_desc(a, DsTile::kSlabBytes, 1024),
                                           wgmma_desc(b, KVTile::kSlabBytes, 1024), kt > 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_acc(dq);
        float* dq_ptr = p.dq_accum + (int64_t(start + q0) * sh.heads_q + h) * D + d0;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = wl * 16 + g + r * 8;
          if (q0 + row >= len) continue;
          float* dst = dq_ptr + row * q_stride + 2 * t;
#pragma unroll
          for (int i = 0; i < DQN / 8; ++i)
            atomicAdd(reinterpret_cast<float2*>(dst + i * 8), make_float2(dq[i][2 * r], dq[i][2 * r + 1]));
        }
      }
      wgmma_wait<0>();
      fence_acc(dv);
      fence_acc(dk);
#pragma unroll
      for (int kt = 0; kt < BM / 16; ++kt)
#pragma unroll
        for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(pf[kt][j]), "+r"(dsf[kt][j])::"memory");
      __syncthreads();  // buffers of this step (and dS^T) are free again
      buf ^= 1;
    }

    // Epilogue: dK (scaled) and dV for this warp's keys.
    T* dk_ptr = static_cast<T*>(p.dk) + kv_off;
    T* dv_ptr = static_cast<T*>(p.dv) + kv_off;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + g + r * 8;
      if (k0 + row >= len) continue;
#pragma unroll
      for (int ot = 0; ot < OT; ++ot) {
        const int64_t off = row * kv_stride + ot * 8 + 2 * t;
        *reinterpret_cast<uint32_t*>(dk_ptr + off) =
            MmaType<T>::pack(dk[ot][2 * r] * sh.scale, dk[ot][2 * r + 1] * sh.scale);
        *reinterpret_cast<uint32_t*>(dv_ptr + off) = MmaType<T>::pack(dv[ot][2 * r], dv[ot][2 * r + 1]);
      }
    }
  }
}

}  // namespace fptrain::attention::cuda
