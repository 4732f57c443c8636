// Backward kernel on Hopper tensor cores: dK, dV and (default) atomic dQ, warp-specialized.
//
// One CTA owns a block of 128 keys of one KV head. Warpgroup 0 is the producer: one warp
// draws (key block, KV head) items heaviest first, loads K and V with bulk tensor copies,
// then streams Q, dO (TMA) and the rows' lse and rowsum(dO O) for every query head of the
// GQA group and every query block (64 queries) that sees those keys, two stages deep.
// Warpgroups 1 and 2 own 64 keys each and recompute the transposed scores, so that P^T
// and dS^T come out as A fragments:
//   S^T  = K Q^T            (SS)     P^T = exp(scale S^T - lse)
//   dP^T = V dO^T           (SS)     dS^T = P^T (dP^T - rowsum(dO O))
//   dV  += P^T dO           (RS, dO read MN-major)
//   dK  += dS^T Q           (RS, Q read MN-major)
//   dQ  += dS K             (SS, dS^T from shared memory read M-major; each warpgroup takes
//                            half of D), staged in shared memory and added to an fp32 buffer
//                            by bulk tensor reductions (one thread issues them; no per-thread
//                            atomics on the consumers' path).
// dK and dV stay in registers over the whole head group: no per-query-head copies, no
// reduction pass. Without atomics (deterministic mode) the dQ product is skipped and a
// separate dQ pass runs.
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
struct BwdTraits {
  static constexpr int kThreads = 384;  // producer warpgroup + 2 consumer warpgroups
  static constexpr int kBlockN = bwd_block_n(D);
  static constexpr int kBlockM = bwd_block_m(D);
  static_assert(kBlockN == 128, "two consumer warpgroups x 64 keys");
  static_assert(kBlockM == 64, "one 64-wide slab of queries per step");
  using KVTile = SlabTile<kBlockN, D>;
  using QTile = SlabTile<kBlockM, D>;
  using DsTile = SlabTile<kBlockN, kBlockM>;  // dS^T: rows are keys
  static constexpr int kRowStatBytes = kBlockM * 4;
  static constexpr int kConsumerThreads = 256;
  // dQ staging per consumer warpgroup: 64 query rows x D/2 fp32 as 32-float (128-byte) slabs.
  static constexpr int kDqSlabBytes = kBlockM * 128;
  static constexpr int kDqBytes = (D / 2 / 32) * kDqSlabBytes;
  // K, V, Q[2], dO[2], dS^T[2], dQ staging x2, lse[2], dsum[2], barriers, plus slack for
  // 1024-byte alignment.
  static constexpr int kSmemBytes = 2 * KVTile::kBytes + 4 * QTile::kBytes + 2 * DsTile::kBytes + 2 * kDqBytes +
                                    4 * kRowStatBytes + 128 + 1024;
};

struct BwdTensorMaps {
  CUtensorMap q, dout;  // boxes of 64 x 1 x 64 rows
  CUtensorMap k, v;     // boxes of 64 x 1 x 128 rows
  CUtensorMap dq;       // fp32 dQ buffer, boxes of 32 x 1 x 64 rows
};

template <typename T, int D, bool kAtomicDQ>
__global__ void __launch_bounds__(BwdTraits<D>::kThreads, 1)
    bwd_dkdv_kernel(const __grid_constant__ BwdParams p, const __grid_constant__ BwdTensorMaps maps) {
  using Tr = BwdTraits<D>;
  using KVTile = typename Tr::KVTile;
  using QTile = typename Tr::QTile;
  using DsTile = typename Tr::DsTile;
  constexpr int BN = Tr::kBlockN, BM = Tr::kBlockM, MT = BM / 8, OT = D / 8, SLABS = D / 64;
  constexpr float kLog2e = 1.4426950408889634f;
  extern __shared__ unsigned char smem[];
  const uint32_t s_k = (smem_addr(smem) + 1023) & ~1023u;
  const uint32_t s_v = s_k + KVTile::kBytes;
  const uint32_t s_q0 = s_v + KVTile::kBytes;
  const uint32_t s_do0 = s_q0 + 2 * QTile::kBytes;
  const uint32_t s_ds0 = s_do0 + 2 * QTile::kBytes;
  const uint32_t s_dq0 = s_ds0 + 2 * DsTile::kBytes;
  const uint32_t s_stats = s_dq0 + 2 * Tr::kDqBytes;  // lse[2][BM], dsum[2][BM]
  const uint32_t s_bar = s_stats + 4 * Tr::kRowStatBytes;
  float* stats = reinterpret_cast<float*>(smem + (s_stats - smem_addr(smem)));
  // mbarriers: kv_full, kv_empty, q_full[2], q_empty[2]; then the decoded item
  // {item, block, sequence start, length}.
  const uint32_t kv_full = s_bar, kv_empty = s_bar + 8;
  auto q_full = [&](int s) { return s_bar + 16 + 8 * s; };
  auto q_empty = [&](int s) { return s_bar + 32 + 8 * s; };
  volatile int* item_slot = reinterpret_cast<volatile int*>(smem + (s_bar + 48 - smem_addr(smem)));

  if (threadIdx.x == 0) {
    mbar_init(kv_full, 1);
    // Empty barriers count every consumer thread: each arrives after its own reads of the
    // item slot / row statistics (see release below).
    mbar_init(kv_empty, Tr::kConsumerThreads);
    for (int s = 0; s < 2; ++s) {
      mbar_init(q_full(s), 32);  // the producer warp's lanes (row statistics) and lane 0's copies
      mbar_init(q_empty(s), Tr::kConsumerThreads);
    }
    mbar_init_fence();
  }
  __syncthreads();

  const VarlenShape& sh = p.shape;
  const int group = sh.heads_q / sh.heads_kv;
  const int num_items = *p.kv_tiles.num_tiles * sh.heads_kv;
  const int wg = threadIdx.x / 128;
  const int lane = threadIdx.x & 31;

  if (wg == 0) {
    // ---------------- producer (one warp) ----------------
    regs_decrease<24>();
    if (threadIdx.x >= 32) return;
    int item_iter = 0, q_iter = 0;
    for (;;) {
      int item = 0;
      if (lane == 0) item = atomicAdd(p.kv_tiles.next_item, 1);
      item = __shfl_sync(0xffffffffu, item, 0);
      mbar_wait(kv_empty, (item_iter & 1) ^ 1);
      if (item >= num_items) {
        if (lane == 0) {
          item_slot[0] = -1;
          mbar_arrive(kv_full);
        }
        break;
      }
      const Tile tile = p.kv_tiles.tiles[item / sh.heads_kv];
      const int hk = item % sh.heads_kv;
      const SeqBounds seq = seq_bounds(sh.cu_seqlens, tile.seq, sh.total_tokens);
      const int start = seq.start, len = seq.len;
      const BlockRange qr = query_blocks_for_key_block(tile.block, BM, BN, len, sh.causal, sh.window);
      if (lane == 0) {
        item_slot[0] = item;
        item_slot[1] = tile.block;
        item_slot[2] = start;
        item_slot[3] = len;
        mbar_arrive_expect_tx(kv_full, 2 * KVTile::kBytes);
#pragma unroll
        for (int sl = 0; sl < SLABS; ++sl) {
          tma_load_3d(s_k + sl * KVTile::kSlabBytes, &maps.k, kv_full, sl * 64, hk, start + tile.block * BN);
          tma_load_3d(s_v + sl * KVTile::kSlabBytes, &maps.v, kv_full, sl * 64, hk, start + tile.block * BN);
        }
      }
      for (int hi = 0; hi < group; ++hi) {
        const int h = hk * group + hi;
        for (int m = qr.begin; m < qr.end; ++m) {
          const int qs = q_iter & 1;
          mbar_wait(q_empty(qs), ((q_iter >> 1) & 1) ^ 1);
          const int q0 = m * BM;
          // Row statistics: plain loads (their rows need not be 16-byte aligned).
          float* lse = stats + qs * BM;
          float* dsum = stats + 2 * BM + qs * BM;
#pragma unroll
          for (int i = lane; i < BM; i += 32) {
            const bool valid = q0 + i < len;
            const int64_t r = int64_t(h) * sh.total_tokens + start + q0 + i;
            lse[i] = valid ? p.lse[r] * kLog2e : 0.f;  // base 2
            dsum[i] = valid ? p.dsum[r] : 0.f;
          }
          if (lane == 0) {
            mbar_arrive_expect_tx(q_full(qs), 2 * QTile::kBytes);
#pragma unroll
            for (int sl = 0; sl < SLABS; ++sl) {
              tma_load_3d(s_q0 + qs * QTile::kBytes + sl * QTile::kSlabBytes, &maps.q, q_full(qs), sl * 64, h,
                          start + q0);
              tma_load_3d(s_do0 + qs * QTile::kBytes + sl * QTile::kSlabBytes, &maps.dout, q_full(qs), sl * 64, h,
                          start + q0);
            }
          } else {
            mbar_arrive(q_full(qs));
          }
          ++q_iter;
        }
      }
      ++item_iter;
    }
  } else {
    // ---------------- consumers ----------------
    regs_increase<240>();
    const int cw = wg - 1;
    const int wl = (threadIdx.x / 32) & 3;
    const int g = lane >> 2, t = lane & 3;
    const int row0 = cw * 64 + wl * 16;  // this warp's first key row in the block
    const int64_t kv_stride = int64_t(sh.heads_kv) * D;
    const float scale_log2 = sh.scale * kLog2e;
    // Every thread arrives for itself: the producer's plain stores of the next item slot and
    // row statistics are then ordered after each thread's own loads by the barrier alone
    // (racecheck does not credit __syncwarp + one lane's arrival).
    auto release = [&](uint32_t bar) { mbar_arrive(bar); };

    int item_iter = 0, q_iter = 0;
    for (;;) {
      mbar_wait(kv_full, item_iter & 1);
      const int item = item_slot[0];
      if (item < 0) break;
      const Tile tile{0, item_slot[1]};
      const int hk = item % sh.heads_kv;
      const int start = item_slot[2];
      const int len = item_slot[3];
      const int k0 = tile.block * BN;
      const BlockRange qr = query_blocks_for_key_block(tile.block, BM, BN, len, sh.causal, sh.window);
      const int q_blocks = qr.end - qr.begin;
      const int steps = q_blocks * group;

      float dk[OT][4], dv[OT][4];
      zero_acc(dk);
      zero_acc(dv);

      for (int step = 0; step < steps; ++step) {
        const int qs = q_iter & 1;
        mbar_wait(q_full(qs), (q_iter >> 1) & 1);
        const int h = hk * group + step / q_blocks;
        const int q0 = (qr.begin + step % q_blocks) * BM;
        const uint32_t s_q = s_q0 + qs * QTile::kBytes, s_do = s_do0 + qs * QTile::kBytes;
        const uint32_t s_ds = s_ds0 + (q_iter & 1) * DsTile::kBytes;
        const float* lse = stats + qs * BM;
        const float* dsum = stats + 2 * BM + qs * BM;

        // S^T = K Q^T and dP^T = V dO^T for this warpgroup's 64 keys.
        float st[MT][4], dpt[MT][4];
        zero_acc(st);
        zero_acc(dpt);
        wgmma_fence();
#pragma unroll
        for (int kt = 0; kt < D / 16; ++kt) {
          const uint32_t a = (kt / 4) * KVTile::kSlabBytes + cw * 64 * 128 + (kt % 4) * 32;
          const uint32_t b = (kt / 4) * QTile::kSlabBytes + (kt % 4) * 32;
          Wgmma<T, BM>::template ss<0, 0>(st, wgmma_desc(s_k + a, 16, 1024), wgmma_desc(s_q + b, 16, 1024), kt > 0);
        }
        wgmma_commit();
#pragma unroll
        for (int kt = 0; kt < D / 16; ++kt) {
          const uint32_t a = (kt / 4) * KVTile::kSlabBytes + cw * 64 * 128 + (kt % 4) * 32;
          const uint32_t b = (kt / 4) * QTile::kSlabBytes + (kt % 4) * 32;
          Wgmma<T, BM>::template ss<0, 0>(dpt, wgmma_desc(s_v + a, 16, 1024), wgmma_desc(s_do + b, 16, 1024),
                                          kt > 0);
        }
        wgmma_commit();
        // Row statistics of this thread's query columns, read while the products run.
        float2 lse2[MT];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) lse2[mt] = *reinterpret_cast<const float2*>(lse + mt * 8 + 2 * t);
        wgmma_wait<1>();  // S^T ready, dP^T may still run
        fence_acc(st);

        // P^T = exp(scale S^T - lse[q]); hidden pairs were set to -inf.
        if (block_needs_mask(q0, BM, k0, BN, len, sh.causal, sh.window))
          apply_mask<false>(st, k0 + row0, q0, len, sh.causal, sh.window);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            st[mt][e] = fast_exp2(fmaf(st[mt][e], scale_log2, (e & 1) ? -lse2[mt].y : -lse2[mt].x));

        // dV += P^T dO (dO rows are the K dimension: MN-major).
        uint32_t pf[BM / 16][4];
        acc_to_a_frags<T, BM / 16>(pf, st);
        float2 dsum2[MT];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) dsum2[mt] = *reinterpret_cast<const float2*>(dsum + mt * 8 + 2 * t);
        wgmma_wait<0>();
        fence_acc(dpt);
        wgmma_fence();
#pragma unroll
        for (int kt = 0; kt < BM / 16; ++kt)
          Wgmma<T, D>::template rs<1>(dv, pf[kt], wgmma_desc(s_do + kt * 16 * 128, QTile::kSlabBytes, 1024), 1);
        wgmma_commit();

        // dS^T = P^T (dP^T - dsum[q]), unscaled (the softmax scale is applied to dK and dQ at the end).
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int e = 0; e < 4; ++e) st[mt][e] *= dpt[mt][e] - ((e & 1) ? dsum2[mt].y : dsum2[mt].x);
        uint32_t dsf[BM / 16][4];
        acc_to_a_frags<T, BM / 16>(dsf, st);
        wgmma_fence();
#pragma unroll
        for (int kt = 0; kt < BM / 16; ++kt)
          Wgmma<T, D>::template rs<1>(dk, dsf[kt], wgmma_desc(s_q + kt * 16 * 128, QTile::kSlabBytes, 1024), 1);
        wgmma_commit();

        if constexpr (kAtomicDQ) {
          // dS^T -> shared memory (double-buffered); dQ[:, d0:d0+D/2] = dS K over all 128 keys.
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              const int key = row0 + g + r * 8, col = mt * 8 + 2 * t;
              const uint32_t addr = s_ds + DsTile::offset(key, col & ~7) + (col & 7) * 2;
              asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(dsf[mt / 2][(mt & 1) * 2 + r]));
            }
          fence_proxy_async();
          named_barrier_sync(1, 256);  // both consumer warpgroups' dS^T are in place
          constexpr int DQN = D / 2;
          const int d0 = cw * DQN;
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
          release(q_empty(qs));
          // Stage dQ (fp32) in this warpgroup's slabs, then one thread adds it to the global
          // buffer with bulk tensor reductions. Rows past the sequence end hold exact zeros
          // (their P is 0), so adding them to the next sequence's rows changes nothing.
          const bool issuer = wl == 0 && lane == 0;
          const uint32_t s_dq = s_dq0 + cw * Tr::kDqBytes;
          if (issuer) bulk_wait_read();  // the previous step's reduction has read the slabs
          named_barrier_sync(2 + cw, 128);
#pragma unroll
          for (int i = 0; i < DQN / 8; ++i)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              const int row = wl * 16 + g + r * 8, c = i * 8 + 2 * t;
              const uint32_t addr = s_dq + (c / 32) * Tr::kDqSlabBytes + row * 128 +
                                    ((((c % 32) >> 2) ^ (row & 7)) << 4) + (c & 3) * 4;
              asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(dq[i][2 * r]),
                           "f"(dq[i][2 * r + 1]));
            }
          fence_proxy_async();
          named_barrier_sync(2 + cw, 128);
          if (issuer) {
#pragma unroll
            for (int sl = 0; sl < DQN / 32; ++sl)
              tma_reduce_add_3d(&maps.dq, s_dq + sl * Tr::kDqSlabBytes, d0 + sl * 32, h, start + q0);
            bulk_commit();
          }
        } else {
          wgmma_wait<0>();
          release(q_empty(qs));
        }
        fence_acc(dv);
        fence_acc(dk);
#pragma unroll
        for (int kt = 0; kt < BM / 16; ++kt)
#pragma unroll
          for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(pf[kt][j]), "+r"(dsf[kt][j])::"memory");
        ++q_iter;
      }
      release(kv_empty);  // K and V are no longer read

      // Epilogue: dK (scaled) and dV for this warp's keys.
      const int64_t kv_off = int64_t(start + k0) * kv_stride + hk * D;
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
      ++item_iter;
    }
    if (kAtomicDQ && wl == 0 && lane == 0) bulk_wait();  // staging must outlive the reductions
  }
}

}  // namespace fptrain::attention::cuda
