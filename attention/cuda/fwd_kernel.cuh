// Forward kernel: warp-specialized, TMA-fed, wgmma mainloop.
//
// Warpgroup 0 is the producer: one thread draws (tile, head) items heaviest first from the
// scheduler's counter and streams Q (two stages) and K/V blocks (two stages) into shared
// memory with bulk tensor copies, each stage guarded by a full/empty mbarrier pair.
// Warpgroups 1 and 2 are consumers, 64 query rows each, BM = 128, BN = 128:
//   S_n = Q K_n^T (wgmma SS)  ->  online softmax in registers  ->  O += P_n V_n (wgmma RS).
// Two overlaps hide the softmax: within a warpgroup, S_n is issued together with
// P_{n-1} V_{n-1}, so the exponentials of block n run while that product is in flight; and
// the two consumer warpgroups take turns issuing their products (named barriers), so
// one's softmax runs while the other's matrix products use the tensor cores.
// Key blocks are visited last to first so the masked diagonal blocks come first.
#pragma once

#include <cuda.h>

#include "attention/cuda/masking.cuh"
#include "attention/cuda/mma_utils.cuh"
#include "attention/cuda/params.h"
#include "attention/cuda/softmax.cuh"
#include "attention/cuda/tile_sizes.h"
#include "attention/cuda/tma_pipeline.cuh"
#include "attention/cuda/wgmma_ops.cuh"
#include "attention/cuda/wgmma_utils.cuh"

namespace fptrain::attention::cuda {

template <int D>
struct FwdTraits {
  static constexpr int kThreads = 384;  // producer warpgroup + 2 consumer warpgroups
  static constexpr int kBlockM = fwd_block_m(D);
  static constexpr int kBlockN = fwd_block_n(D);
  static_assert(kBlockM == 128, "two consumer warpgroups x 64 rows");
  using QTile = SlabTile<kBlockM, D>;
  using KVTile = SlabTile<kBlockN, D>;
  static constexpr int kStages = 2;
  static constexpr int kBarrierBytes = 128;  // 8 mbarriers + 2 decoded item slots
  // Q[2], K[2], V[2], barriers, plus slack to align to the 1024-byte swizzle pattern.
  static constexpr int kSmemBytes = kStages * (QTile::kBytes + 2 * KVTile::kBytes) + kBarrierBytes + 1024;
  static constexpr int kConsumerWarps = 8;
  static constexpr int kConsumerThreads = 256;
};

struct FwdTensorMaps {
  CUtensorMap q, k, v;  // [T, H, D] viewed as (D, H, T), boxes of 64 x 1 x 128, 128B swizzle
};

template <typename T, int D>
__global__ void __launch_bounds__(FwdTraits<D>::kThreads, 1)
    fwd_kernel(const __grid_constant__ FwdParams p, const __grid_constant__ FwdTensorMaps maps) {
  using Tr = FwdTraits<D>;
  using QTile = typename Tr::QTile;
  using KVTile = typename Tr::KVTile;
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, NT = BN / 8, OT = D / 8, SLABS = D / 64;
  extern __shared__ unsigned char smem[];
  const uint32_t s_q0 = (smem_addr(smem) + 1023) & ~1023u;
  const uint32_t s_k0 = s_q0 + 2 * QTile::kBytes;
  const uint32_t s_v0 = s_k0 + 2 * KVTile::kBytes;
  const uint32_t s_bar = s_v0 + 2 * KVTile::kBytes;
  // mbarriers (8 bytes each): q_full[2], q_empty[2], kv_full[2], kv_empty[2]
  auto q_full = [&](int s) { return s_bar + 8 * s; };
  auto q_empty = [&](int s) { return s_bar + 16 + 8 * s; };
  auto kv_full = [&](int s) { return s_bar + 32 + 8 * s; };
  auto kv_empty = [&](int s) { return s_bar + 48 + 8 * s; };
  // Per Q stage, the item the producer decoded: {item, block, sequence start, length}, so
  // the consumers start without a chain of dependent global loads.
  volatile int* items = reinterpret_cast<volatile int*>(smem + (s_bar + 64 - smem_addr(smem)));

  if (threadIdx.x == 0) {
    for (int s = 0; s < 2; ++s) {
      mbar_init(q_full(s), 1);
      // Q stage empty: every consumer thread once it has read the item slot, and each warp
      // once its wgmmas are done with Q.
      mbar_init(q_empty(s), Tr::kConsumerThreads + Tr::kConsumerWarps);
      mbar_init(kv_full(s), 1);
      mbar_init(kv_empty(s), Tr::kConsumerWarps);
    }
    mbar_init_fence();
  }
  __syncthreads();

  const VarlenShape& sh = p.shape;
  const int group = sh.heads_q / sh.heads_kv;
  const int num_items = *p.tiles.num_tiles * sh.heads_q;
  const int wg = threadIdx.x / 128;

  if (wg == 0) {
    // ---------------- producer ----------------
    regs_decrease<24>();
    if (threadIdx.x != 0) return;
    int q_iter = 0, kv_iter = 0;
    for (;;) {
      const int item = atomicAdd(p.tiles.next_item, 1);
      const int qs = q_iter & 1;
      mbar_wait(q_empty(qs), ((q_iter >> 1) & 1) ^ 1);
      if (item >= num_items) {
        items[4 * qs] = -1;
        mbar_arrive(q_full(qs));
        break;
      }
      const Tile tile = p.tiles.tiles[item / sh.heads_q];
      const int h = item % sh.heads_q, hk = h / group;
      const SeqBounds seq = seq_bounds(sh.cu_seqlens, tile.seq, sh.total_tokens);
      const int start = seq.start, len = seq.len;
      items[4 * qs] = item;
      items[4 * qs + 1] = tile.block;
      items[4 * qs + 2] = start;
      items[4 * qs + 3] = len;
      const BlockRange kr = key_blocks_for_query_block(tile.block, BM, BN, len, sh.causal, sh.window);
      mbar_arrive_expect_tx(q_full(qs), QTile::kBytes);
#pragma unroll
      for (int sl = 0; sl < SLABS; ++sl)
        tma_load_3d(s_q0 + qs * QTile::kBytes + sl * QTile::kSlabBytes, &maps.q, q_full(qs), sl * 64, h,
                    start + tile.block * BM);
      for (int n = kr.end - 1; n >= kr.begin; --n) {
        const int ks = kv_iter & 1;
        mbar_wait(kv_empty(ks), ((kv_iter >> 1) & 1) ^ 1);
        mbar_arrive_expect_tx(kv_full(ks), 2 * KVTile::kBytes);
#pragma unroll
        for (int sl = 0; sl < SLABS; ++sl) {
          tma_load_3d(s_k0 + ks * KVTile::kBytes + sl * KVTile::kSlabBytes, &maps.k, kv_full(ks), sl * 64, hk,
                      start + n * BN);
          tma_load_3d(s_v0 + ks * KVTile::kBytes + sl * KVTile::kSlabBytes, &maps.v, kv_full(ks), sl * 64, hk,
                      start + n * BN);
        }
        ++kv_iter;
      }
      ++q_iter;
    }
  } else {
    // ---------------- consumers ----------------
    regs_increase<240>();
    const int cw = wg - 1;  // consumer warpgroup 0 or 1
    const int lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int row0 = cw * 64 + ((threadIdx.x / 32) & 3) * 16;  // this warp's first row in the block
    const int my_turn = 1 + cw, other_turn = 2 - cw;          // named barrier ids (0 is __syncthreads)
    const int64_t q_stride = int64_t(sh.heads_q) * D;
    const float scale_log2 = sh.scale * 1.4426950408889634f;
    auto release = [&](uint32_t bar) {
      if (lane == 0) mbar_arrive(bar);
    };
    if (cw == 1) named_barrier_arrive(1, 256);  // consumer 0 issues first

    int q_iter = 0, kv_iter = 0;
    for (;;) {
      const int qs = q_iter & 1;
      mbar_wait(q_full(qs), (q_iter >> 1) & 1);
      const int item = items[4 * qs];
      if (item < 0) break;
      const Tile tile{0, items[4 * qs + 1]};
      const int h = item % sh.heads_q;
      const int start = items[4 * qs + 2];
      const int len = items[4 * qs + 3];
      // Each thread arrives for its own slot loads, so the barrier alone orders them before
      // the producer's next store (racecheck credits nothing else); kept out of the key-block
      // loop, where an all-thread arrival cost 7% at 8k.
      mbar_arrive(q_empty(qs));
      const int q0 = tile.block * BM;
      const BlockRange kr = key_blocks_for_query_block(tile.block, BM, BN, len, sh.causal, sh.window);
      const uint32_t s_q = s_q0 + qs * QTile::kBytes;

      auto issue_s = [&](float (&s)[NT][4], int ks) {
        const uint32_t s_k = s_k0 + ks * KVTile::kBytes;
#pragma unroll
        for (int kt = 0; kt < D / 16; ++kt) {
          const uint32_t a = s_q + (kt / 4) * QTile::kSlabBytes + cw * 64 * 128 + (kt % 4) * 32;
          const uint32_t b = s_k + (kt / 4) * KVTile::kSlabBytes + (kt % 4) * 32;
          Wgmma<T, BN>::template ss<0, 0>(s, wgmma_desc(a, 16, 1024), wgmma_desc(b, 16, 1024), kt > 0);
        }
      };
      auto issue_pv = [&](float (&o)[OT][4], const uint32_t (&pf)[BN / 16][4], int ks) {
        const uint32_t s_v = s_v0 + ks * KVTile::kBytes;
#pragma unroll
        for (int kt = 0; kt < BN / 16; ++kt)
          Wgmma<T, D>::template rs<1>(o, pf[kt], wgmma_desc(s_v + kt * 16 * 128, KVTile::kSlabBytes, 1024), 1);
      };
      auto mask = [&](float (&s)[NT][4], int n) {
        if (block_needs_mask(q0, BM, n * BN, BN, len, sh.causal, sh.window))
          apply_mask<true>(s, q0 + row0, n * BN, len, sh.causal, sh.window);
      };
      auto keep_alive = [&](uint32_t (&pf)[BN / 16][4]) {
#pragma unroll
        for (int kt = 0; kt < BN / 16; ++kt)
#pragma unroll
          for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(pf[kt][j])::"memory");
      };

      float o[OT][4];
      zero_acc(o);
      OnlineSoftmax softmax;
      softmax.init();
      uint32_t pf[BN / 16][4];
      float s[NT][4];
      float alpha[2];

      // First (last-positioned) key block: S only.
      int n = kr.end - 1;
      int ks_prev = kv_iter & 1;
      mbar_wait(kv_full(ks_prev), (kv_iter >> 1) & 1);
      named_barrier_sync(my_turn, 256);
      wgmma_fence();
      issue_s(s, ks_prev);
      wgmma_commit();
      named_barrier_arrive(other_turn, 256);
      wgmma_wait<0>();
      fence_acc(s);
      if (n == kr.begin) release(q_empty(qs));
      mask(s, n);
      softmax.scores_to_probs(s, scale_log2, alpha);
      acc_to_a_frags<T, BN / 16>(pf, s);
      ++kv_iter;

      for (n = kr.end - 2; n >= kr.begin; --n) {
        const int ks = kv_iter & 1;
        mbar_wait(kv_full(ks), (kv_iter >> 1) & 1);
        named_barrier_sync(my_turn, 256);
        wgmma_fence();
        issue_s(s, ks);
        wgmma_commit();
        issue_pv(o, pf, ks_prev);
        wgmma_commit();
        named_barrier_arrive(other_turn, 256);
        wgmma_wait<1>();  // S_n is ready; P_{n+1} V_{n+1} may still run
        fence_acc(s);
        if (n == kr.begin) release(q_empty(qs));
        mask(s, n);
        softmax.scores_to_probs(s, scale_log2, alpha);
        wgmma_wait<0>();
        fence_acc(o);
        keep_alive(pf);
        release(kv_empty(ks_prev));
        OnlineSoftmax::rescale(o, alpha);
        acc_to_a_frags<T, BN / 16>(pf, s);
        ks_prev = ks;
        ++kv_iter;
      }

      named_barrier_sync(my_turn, 256);
      wgmma_fence();
      issue_pv(o, pf, ks_prev);
      wgmma_commit();
      named_barrier_arrive(other_turn, 256);
      wgmma_wait<0>();
      fence_acc(o);
      keep_alive(pf);
      release(kv_empty(ks_prev));

      // Epilogue: normalise, write O (rows past the sequence end are dropped) and LSE.
      float lse[2];
      softmax.finish(o, sh.scale, lse);
      T* o_ptr = static_cast<T*>(p.o) + (start + q0) * q_stride + h * D;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = row0 + g + r * 8;
        if (q0 + row >= len) continue;
        T* dst = o_ptr + row * q_stride + 2 * t;
#pragma unroll
        for (int ot = 0; ot < OT; ++ot)
          *reinterpret_cast<uint32_t*>(dst + ot * 8) = MmaType<T>::pack(o[ot][2 * r], o[ot][2 * r + 1]);
        if (t == 0) p.lse[int64_t(h) * sh.total_tokens + start + q0 + row] = lse[r];
      }
      ++q_iter;
    }
  }
}

}  // namespace fptrain::attention::cuda
