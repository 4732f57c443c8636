// Backward kernel on Hopper tensor cores: dK, dV and (default) atomic dQ, warp-specialized.
//
// One CTA owns a block of 128 keys of one KV head (64 at head dim 256, where the consumers
// split D instead: bwd_dkdv_split_d.cuh). Warpgroup 0 is the producer: one warp
// draws (key block, KV head) items heaviest first, loads K and V with bulk tensor copies
// (two stages at D = 64, one at D = 128; before waiting for a stage it asks L2 for the next
// item's K, V and first Q, dO and row statistics, so short items do not wait on DRAM),
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
//                            A segment that fits this key block (a document or a pack of
//                            <= 128 tokens) has no other CTA adding to its rows: its dQ is written straight out in the
//                            output type, and the buffer is neither zeroed nor converted there.
// dK and dV stay in registers over the whole head group: no per-query-head copies, no
// reduction pass. Without atomics (deterministic mode) the dQ product is skipped and a
// separate dQ pass runs.
#pragma once

#include <cuda.h>

#include "attention/cuda/fragments.cuh"
#include "attention/cuda/masking.cuh"
#include "attention/cuda/params.h"
#include "attention/cuda/smem_layout.cuh"
#include "attention/cuda/softmax.cuh"
#include "attention/cuda/tile_scheduler.cuh"
#include "attention/cuda/tile_sizes.h"
#include "attention/cuda/tma_pipeline.cuh"
#include "attention/cuda/wgmma.cuh"

namespace fptrain::attention::cuda {

template <int D>
struct BwdTraits {
  static constexpr int kThreads = 384;  // producer warpgroup + 2 consumer warpgroups
  static constexpr int kBlockN = bwd_block_n(D);
  static constexpr int kBlockM = bwd_block_m(D);
  static constexpr bool kSplitD = bwd_split_d(D);  // bwd_dkdv_split_d.cuh
  static_assert(kBlockN == (kSplitD ? 64 : 128), "two consumer warpgroups x 64 keys, or both on 64 keys");
  static_assert(dq_direct_max_len(D) <= kBlockN, "a direct-dQ sequence must be one key block");
  static_assert(kBlockM == 64, "one 64-wide slab of queries per step");
  static constexpr int kKvStages = bwd_kv_stages(D);
  static constexpr int kQStages = bwd_q_stages(D);
  using KVTile = SlabTile<kBlockN, D>;
  using QTile = SlabTile<kBlockM, D>;
  using DsTile = SlabTile<kBlockN, kBlockM>;  // dS^T: rows are keys
  static constexpr int kRowStatBytes = kBlockM * 4;
  static constexpr int kConsumerThreads = 256;
  // dQ staging per consumer warpgroup: 64 query rows x D/2 fp32 as 32-float (128-byte) slabs.
  static constexpr int kDqSlabBytes = kBlockM * 128;
  static constexpr int kDqBytes = (D / 2 / 32) * kDqSlabBytes;
  // (K, V) per stage, Q and dO per Q stage, dS^T[2] (and P^T[2] when D is split), dQ staging
  // x2, lse[2], dsum[2], barriers, plus slack for 1024-byte alignment.
  static constexpr int kDsTiles = kSplitD ? 4 : 2;
  static constexpr int kSmemBytes = kKvStages * 2 * KVTile::kBytes + kQStages * 2 * QTile::kBytes +
                                    kDsTiles * DsTile::kBytes + 2 * kDqBytes + 4 * kRowStatBytes + 64 +
                                    2 * kItemSlotInts * 4 + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one CTA");
};

struct BwdTensorMaps {
  CUtensorMap q, dout;  // boxes of 64 x 1 x 64 rows
  CUtensorMap k, v;     // boxes of 64 x 1 x 128 rows
  CUtensorMap dq;       // fp32 dQ buffer, boxes of 32 x 1 x 64 rows
};

// Shared memory of one CTA: (K, V) per K/V stage, Q and dO per Q stage, dS^T[2] (then P^T[2]
// when D is split) as slab tiles from a 1024-byte aligned base, dQ staging (one set of fp32 slabs per consumer warpgroup), the row
// statistics lse[2][BM] (base 2) and dsum[2][BM], then 8-byte mbarriers kv_full[2],
// kv_empty[2], q_full[2], q_empty[2] and per K/V stage the decoded item (publish_item).
template <int D>
struct BwdSmem {
  using Tr = BwdTraits<D>;
  uint32_t k0, q0, do0, ds0, pt0, dq0, bar;
  float* stats;
  volatile int* item_slots;

  __device__ __forceinline__ explicit BwdSmem(unsigned char* smem) {
    k0 = (smem_addr(smem) + 1023) & ~1023u;
    q0 = k0 + Tr::kKvStages * 2 * Tr::KVTile::kBytes;
    do0 = q0 + Tr::kQStages * Tr::QTile::kBytes;
    ds0 = do0 + Tr::kQStages * Tr::QTile::kBytes;
    pt0 = ds0 + 2 * Tr::DsTile::kBytes;  // P^T[2]: split D only
    dq0 = ds0 + Tr::kDsTiles * Tr::DsTile::kBytes;
    const uint32_t s_stats = dq0 + 2 * Tr::kDqBytes;
    bar = s_stats + 4 * Tr::kRowStatBytes;
    stats = reinterpret_cast<float*>(smem + (s_stats - smem_addr(smem)));
    item_slots = reinterpret_cast<volatile int*>(smem + (bar + 64 - smem_addr(smem)));
  }
  __device__ __forceinline__ uint32_t k(int s) const { return k0 + s * 2 * Tr::KVTile::kBytes; }
  __device__ __forceinline__ uint32_t v(int s) const { return k(s) + Tr::KVTile::kBytes; }
  __device__ __forceinline__ volatile int* item_slot(int s) const { return item_slots + kItemSlotInts * s; }
  __device__ __forceinline__ uint32_t kv_full(int s) const { return bar + 8 * s; }
  __device__ __forceinline__ uint32_t kv_empty(int s) const { return bar + 16 + 8 * s; }
  __device__ __forceinline__ uint32_t q_full(int s) const { return bar + 32 + 8 * s; }
  __device__ __forceinline__ uint32_t q_empty(int s) const { return bar + 48 + 8 * s; }
  __device__ __forceinline__ float* lse(int s) const { return stats + s * Tr::kBlockM; }
  __device__ __forceinline__ float* dsum(int s) const { return stats + 2 * Tr::kBlockM + s * Tr::kBlockM; }
};

// Producer (one warp): draws items, publishes each in its K/V stage's item slot, loads K and
// V once per item, then for every query head of the group and every query block that sees
// those keys the rows' lse and dsum (plain loads by the lanes) and Q and dO (lane 0's bulk
// copies). A drawn item's first loads are prefetched into L2 before the wait for a free K/V
// stage: with one stage that wait lasts until the previous item's last step is done.
template <typename T, int D>
__device__ __forceinline__ void bwd_producer(const BwdParams& p, const BwdTensorMaps& maps, const BwdSmem<D>& sm,
                                             int group, int num_items, int lane) {
  using Tr = BwdTraits<D>;
  using KVTile = typename Tr::KVTile;
  using QTile = typename Tr::QTile;
  constexpr int BN = Tr::kBlockN, BM = Tr::kBlockM, SLABS = D / 64;
  constexpr float kLog2e = 1.4426950408889634f;
  const VarlenShape& sh = p.shape;
  constexpr int KVS = Tr::kKvStages;
  int item_iter = 0, q_iter = 0;
  for (;;) {
    int item = 0;
    if (lane == 0) item = atomicAdd(p.kv_tiles.next_item, 1);
    item = __shfl_sync(0xffffffffu, item, 0);
    const int ks = item_iter % KVS;
    const int kv_phase = (item_iter / KVS) & 1;
    if (item >= num_items) {
      mbar_wait(sm.kv_empty(ks), kv_phase ^ 1);
      if (lane == 0) {
        sm.item_slot(ks)[0] = -1;
        mbar_arrive(sm.kv_full(ks));
      }
      break;
    }
    const WorkItem w = decode_item(p.kv_tiles, item, sh.heads_kv);
    const Tile tile = w.tile;
    const int hk = w.head;
    const Segment seg = load_segment(p.kv_tiles, tile.seg);
    const int start = seg.start, len = seg.len;
    const BlockRange qr = query_blocks_for_key_block(tile.block, BM, BN, len, sh.causal, sh.window);
    if (qr.begin < qr.end) {
      const int h0 = hk * group, q_first = start + qr.begin * BM;
      if (lane == 0) {
#pragma unroll
        for (int sl = 0; sl < SLABS; ++sl) {
          tma_prefetch_3d(&maps.k, sl * 64, hk, start + tile.block * BN);
          tma_prefetch_3d(&maps.v, sl * 64, hk, start + tile.block * BN);
          tma_prefetch_3d(&maps.q, sl * 64, h0, q_first);
          tma_prefetch_3d(&maps.dout, sl * 64, h0, q_first);
        }
      }
      if (lane < BM / 16) {  // every 64-byte piece of the first block's row statistics
        const int64_t r = int64_t(h0) * sh.total_tokens + min(q_first + lane * 16, sh.total_tokens - 1);
        prefetch_l2(p.lse + r);
        prefetch_l2(p.dsum + r);
      }
    }
    mbar_wait(sm.kv_empty(ks), kv_phase ^ 1);
    if (lane == 0) {
      publish_item(sm.item_slot(ks), item, tile.block, seg);
      mbar_arrive_expect_tx(sm.kv_full(ks), 2 * KVTile::kBytes);
#pragma unroll
      for (int sl = 0; sl < SLABS; ++sl) {
        tma_load_3d(sm.k(ks) + sl * KVTile::kSlabBytes, &maps.k, sm.kv_full(ks), sl * 64, hk,
                    start + tile.block * BN);
        tma_load_3d(sm.v(ks) + sl * KVTile::kSlabBytes, &maps.v, sm.kv_full(ks), sl * 64, hk,
                    start + tile.block * BN);
      }
    }
    for (int hi = 0; hi < group; ++hi) {
      const int h = hk * group + hi;
      for (int m = qr.begin; m < qr.end; ++m) {
        const int qs = q_iter % Tr::kQStages;
        mbar_wait(sm.q_empty(qs), ((q_iter / Tr::kQStages) & 1) ^ 1);
        const int q0 = m * BM;
        // Row statistics: plain loads (their rows need not be 16-byte aligned).
        float* lse = sm.lse(qs);
        float* dsum = sm.dsum(qs);
#pragma unroll
        for (int i = lane; i < BM; i += 32) {
          const bool valid = q0 + i < len;
          const int64_t r = int64_t(h) * sh.total_tokens + start + q0 + i;
          lse[i] = valid ? p.lse[r] * kLog2e : 0.f;  // base 2
          dsum[i] = valid ? p.dsum[r] : 0.f;
        }
        if (lane == 0) {
          mbar_arrive_expect_tx(sm.q_full(qs), 2 * QTile::kBytes);
#pragma unroll
          for (int sl = 0; sl < SLABS; ++sl) {
            tma_load_3d(sm.q0 + qs * QTile::kBytes + sl * QTile::kSlabBytes, &maps.q, sm.q_full(qs), sl * 64, h,
                        start + q0);
            tma_load_3d(sm.do0 + qs * QTile::kBytes + sl * QTile::kSlabBytes, &maps.dout, sm.q_full(qs), sl * 64,
                        h, start + q0);
          }
        } else {
          mbar_arrive(sm.q_full(qs));
        }
        ++q_iter;
      }
    }
    ++item_iter;
  }
}

// Where a consumer thread sits: its warpgroup (0 or 1), warp in the warpgroup, lane and
// fragment coordinates (g, t), and its warp's first key row in the block.
struct BwdConsumerThread {
  int cw, wl, lane, g, t, row0;
};

// One item's key block as the consumers see it.
struct BwdItem {
  int hk, start, len, k0;
  bool packed;        // a pack of several documents (its one block is masked at their boundaries)
  int stage;          // its K/V stage (whose item slot holds a pack's document starts)
  uint32_t s_k, s_v;  // that stage's K and V
};

// Every consumer thread arrives for itself: the producer's plain stores of the next item
// slot and row statistics are then ordered after each thread's own loads by the barrier
// alone (racecheck does not credit __syncwarp + one lane's arrival).
__device__ __forceinline__ void bwd_release(uint32_t bar) { mbar_arrive(bar); }

// Atomic-dQ mode: dS^T -> shared memory (double-buffered); then bwd_dq_product.
template <typename T, int D>
__device__ __forceinline__ void bwd_store_ds(const uint32_t (&dsf)[BwdTraits<D>::kBlockM / 16][4], uint32_t s_ds,
                                             const BwdConsumerThread& th) {
  using DsTile = typename BwdTraits<D>::DsTile;
  constexpr int MT = BwdTraits<D>::kBlockM / 8;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int key = th.row0 + th.g + r * 8, col = mt * 8 + 2 * th.t;
      const uint32_t addr = s_ds + DsTile::offset(key, col & ~7) + (col & 7) * 2;
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(dsf[mt / 2][(mt & 1) * 2 + r]));
    }
  fence_proxy_async();
  named_barrier_sync(1, 256);  // both consumer warpgroups' dS^T are in place
}

// dQ[:, d0:d0+D/2] = dS K over the block's keys for this warpgroup's half of D (dS^T in shared
// memory at s_ds), staged (fp32) in its slabs, then added to the global buffer by one thread's
// bulk tensor reductions. Releases the Q stage.
template <typename T, int D>
__device__ __forceinline__ void bwd_dq_product(const BwdTensorMaps& maps, const BwdSmem<D>& sm,
                                               float (&dq)[D / 16][4], uint32_t s_ds, int qs, int h,
                                               const VarlenShape& sh, const BwdItem& it, void* dq_out, int q0,
                                               const BwdConsumerThread& th) {
  using Tr = BwdTraits<D>;
  using KVTile = typename Tr::KVTile;
  using DsTile = typename Tr::DsTile;
  constexpr int BN = Tr::kBlockN;
  constexpr int DQN = D / 2;
  const int d0 = th.cw * DQN;
  zero_acc(dq);
  wgmma_fence();
#pragma unroll
  for (int kt = 0; kt < BN / 16; ++kt) {
    const uint32_t a = s_ds + kt * 16 * 128;
    const uint32_t b = it.s_k + (d0 / 64) * KVTile::kSlabBytes + (d0 % 64) * 2 + kt * 16 * 128;
    Wgmma<T, DQN>::template ss<1, 1>(dq, wgmma_desc(a, DsTile::kSlabBytes, 1024),
                                     wgmma_desc(b, KVTile::kSlabBytes, 1024), kt > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  fence_acc(dq);
  bwd_release(sm.q_empty(qs));
  if (it.len <= dq_direct_max_len(D)) {
    // The whole segment is this key block: no other CTA adds to these rows, so dQ (scaled)
    // goes straight to its place, rows past the sequence end dropped.
    const int64_t row_stride = int64_t(sh.heads_q) * D;
    T* out = static_cast<T*>(dq_out) + int64_t(it.start + q0) * row_stride + int64_t(h) * D + d0;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = th.wl * 16 + th.g + r * 8;
      if (q0 + row >= it.len) continue;
#pragma unroll
      for (int i = 0; i < DQN / 8; ++i)
        *reinterpret_cast<uint32_t*>(out + row * row_stride + i * 8 + 2 * th.t) =
            Pair16<T>::pack(dq[i][2 * r] * sh.scale, dq[i][2 * r + 1] * sh.scale);
    }
    return;
  }
  // Stage dQ (fp32) in this warpgroup's slabs, then one thread adds it to the global
  // buffer with bulk tensor reductions. Rows past the sequence end hold exact zeros
  // (their P is 0), so adding them to the next sequence's rows changes nothing.
  const bool issuer = th.wl == 0 && th.lane == 0;
  const uint32_t s_dq = sm.dq0 + th.cw * Tr::kDqBytes;
  if (issuer) bulk_wait_read();  // the previous step's reduction has read the slabs
  named_barrier_sync(2 + th.cw, 128);
#pragma unroll
  for (int i = 0; i < DQN / 8; ++i)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = th.wl * 16 + th.g + r * 8, c = i * 8 + 2 * th.t;
      const uint32_t addr = s_dq + (c / 32) * Tr::kDqSlabBytes + row * 128 +
                            ((((c % 32) >> 2) ^ (row & 7)) << 4) + (c & 3) * 4;
      asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(dq[i][2 * r]), "f"(dq[i][2 * r + 1]));
    }
  fence_proxy_async();
  named_barrier_sync(2 + th.cw, 128);
  if (issuer) {
#pragma unroll
    for (int sl = 0; sl < DQN / 32; ++sl)
      tma_reduce_add_3d(&maps.dq, s_dq + sl * Tr::kDqSlabBytes, d0 + sl * 32, h, it.start + q0);
    bulk_commit();
  }
}

// The registers of one step (besides dK, dV and dQ). The members are listed in reverse order
// of first use: with this order nvcc emits exactly the code of the kernel before it was split
// into functions (any order computes the same; the SASS was compared byte for byte).
template <int D>
struct BwdStepRegs {
  static constexpr int MT = BwdTraits<D>::kBlockM / 8;
  uint32_t dsf[MT / 2][4];                      // dS^T as A fragments
  float2 dsum2[MT];                             // rowsum(dO O) of this thread's query columns
  uint32_t pf[MT / 2][4];                       // P^T as A fragments
  float2 lse2[MT];                              // lse (base 2) of this thread's query columns
  float dpt[MT][4];                             // dP^T
  float st[MT][4];                              // S^T, then P^T, then dS^T
};

// acc (+)= A B^T for this warpgroup's 64 rows of the key-block tile at s_a (K or V) against the
// query tile at s_b (Q or dO), both K-major over D: S^T = K Q^T, dP^T = V dO^T.
template <typename T, int D>
__device__ __forceinline__ void bwd_issue_kt_product(float (&acc)[BwdTraits<D>::kBlockM / 8][4], uint32_t s_a,
                                                     uint32_t s_b, int cw) {
  using KVTile = typename BwdTraits<D>::KVTile;
  using QTile = typename BwdTraits<D>::QTile;
#pragma unroll
  for (int kt = 0; kt < D / 16; ++kt) {
    const uint32_t a = (kt / 4) * KVTile::kSlabBytes + cw * 64 * 128 + (kt % 4) * 32;
    const uint32_t b = (kt / 4) * QTile::kSlabBytes + (kt % 4) * 32;
    Wgmma<T, BwdTraits<D>::kBlockM>::template ss<0, 0>(acc, wgmma_desc(s_a + a, 16, 1024),
                                                       wgmma_desc(s_b + b, 16, 1024), kt > 0);
  }
}

// acc += frags * B with frags (P^T or dS^T) in registers and B the query tile at s_b (dO or
// Q) read MN-major: dV += P^T dO, dK += dS^T Q.
template <typename T, int D>
__device__ __forceinline__ void bwd_issue_rs(float (&acc)[D / 8][4],
                                             const uint32_t (&frags)[BwdTraits<D>::kBlockM / 16][4], uint32_t s_b) {
  using QTile = typename BwdTraits<D>::QTile;
#pragma unroll
  for (int kt = 0; kt < BwdTraits<D>::kBlockM / 16; ++kt)
    Wgmma<T, D>::template rs<1>(acc, frags[kt], wgmma_desc(s_b + kt * 16 * 128, QTile::kSlabBytes, 1024), 1);
}

// One step of the mainloop: query block q0 of head h against this warpgroup's 64 keys.
// Recomputes S^T and dP^T, forms P^T and dS^T in registers, accumulates dV and dK, and
// (atomic mode) dQ; releases the Q stage.
template <typename T, int D, bool kAtomicDQ, bool kSoftcap>
__device__ __forceinline__ void bwd_consumer_step(float (&dk)[D / 8][4], float (&dv)[D / 8][4], BwdStepRegs<D>& r,
                                                  float (&dq)[D / 16][4], const BwdTensorMaps& maps,
                                                  const BwdSmem<D>& sm, const VarlenShape& sh, const BwdItem& it,
                                                  void* dq_out, int q_iter, int h, int q0,
                                                  const BwdConsumerThread& th, float scale_log2, float cap_pre) {
  const float inv_exp_scale_log2 = 1.f / scale_log2;  // soft cap only: 1 / (cap log2 e)
  using Tr = BwdTraits<D>;
  using QTile = typename Tr::QTile;
  using DsTile = typename Tr::DsTile;
  constexpr int BN = Tr::kBlockN, BM = Tr::kBlockM, MT = BM / 8;
  const int qs = q_iter & 1;
  const uint32_t s_q = sm.q0 + qs * QTile::kBytes, s_do = sm.do0 + qs * QTile::kBytes;
  const uint32_t s_ds = sm.ds0 + qs * DsTile::kBytes;
  const float* lse = sm.lse(qs);
  const float* dsum = sm.dsum(qs);

  auto& st = r.st;
  auto& dpt = r.dpt;
  auto& lse2 = r.lse2;
  auto& pf = r.pf;
  auto& dsum2 = r.dsum2;
  auto& dsf = r.dsf;

  // S^T = K Q^T and dP^T = V dO^T for this warpgroup's 64 keys.
  zero_acc(st);
  zero_acc(dpt);
  wgmma_fence();
  bwd_issue_kt_product<T, D>(st, it.s_k, s_q, th.cw);
  wgmma_commit();
  bwd_issue_kt_product<T, D>(dpt, it.s_v, s_do, th.cw);
  wgmma_commit();
  // Row statistics of this thread's query columns, read while the products run.
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) lse2[mt] = *reinterpret_cast<const float2*>(lse + mt * 8 + 2 * th.t);
  wgmma_wait<1>();  // S^T ready, dP^T may still run
  fence_acc(st);
  ScoreCap<kSoftcap>::apply(st, cap_pre);  // soft cap: S^T -> tanh (nothing without one)

  // P^T = exp(scale S^T - lse[q]); hidden pairs were set to -inf.
  if (it.packed) {  // every key row tested against its own document
    DocSpan doc[2];
    slot_doc_spans(sm.item_slot(it.stage), it.len, it.k0 + th.row0 + th.g, doc);
    apply_doc_mask<false>(st, it.k0 + th.row0, q0, doc, sh.causal, sh.window);
  } else if (block_needs_mask(q0, BM, it.k0, BN, it.len, sh.causal, sh.window))
    apply_mask<false>(st, it.k0 + th.row0, q0, it.len, sh.causal, sh.window);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      st[mt][e] = fast_exp2(fmaf(st[mt][e], scale_log2, (e & 1) ? -lse2[mt].y : -lse2[mt].x));

  // dV += P^T dO (dO rows are the K dimension: MN-major).
  acc_to_a_frags<T, BM / 16>(pf, st);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) dsum2[mt] = *reinterpret_cast<const float2*>(dsum + mt * 8 + 2 * th.t);
  wgmma_wait<0>();
  fence_acc(dpt);
  wgmma_fence();
  bwd_issue_rs<T, D>(dv, pf, s_do);
  wgmma_commit();

  // dS^T = P^T (dP^T - dsum[q]), unscaled (the softmax scale is applied to dK and dQ at the end);
  // a soft cap's factor 1 - t^2 comes from P^T itself (keeping t would spill at D = 128).
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float dcap = ScoreCap<kSoftcap>::dtanh_from_prob(st[mt][e], (e & 1) ? lse2[mt].y : lse2[mt].x,
                                                             inv_exp_scale_log2);
      st[mt][e] *= dpt[mt][e] - ((e & 1) ? dsum2[mt].y : dsum2[mt].x);
      if constexpr (kSoftcap) st[mt][e] *= dcap;
    }
  acc_to_a_frags<T, BM / 16>(dsf, st);
  wgmma_fence();
  bwd_issue_rs<T, D>(dk, dsf, s_q);
  wgmma_commit();

  if constexpr (kAtomicDQ) {
    bwd_store_ds<T, D>(dsf, s_ds, th);
    bwd_dq_product<T, D>(maps, sm, dq, s_ds, qs, h, sh, it, dq_out, q0, th);
  } else {
    wgmma_wait<0>();
    bwd_release(sm.q_empty(qs));
  }
  fence_acc(dv);
  fence_acc(dk);
  fence_frags(pf, dsf);
}

// dK (scaled) and dV of this warp's keys, columns [d0, d0 + 8 OT) (all of D, or a split-D
// warpgroup's half); rows past the sequence end are dropped.
template <typename T, int D, int OT>
__device__ __forceinline__ void bwd_epilogue(const BwdParams& p, float (&dk)[OT][4], float (&dv)[OT][4],
                                             const BwdItem& it, const BwdConsumerThread& th, int64_t kv_stride,
                                             int d0) {
  const VarlenShape& sh = p.shape;
  const int64_t kv_off = int64_t(it.start + it.k0) * kv_stride + it.hk * D + d0;
  T* dk_ptr = static_cast<T*>(p.dk) + kv_off;
  T* dv_ptr = static_cast<T*>(p.dv) + kv_off;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = th.row0 + th.g + r * 8;
    if (it.k0 + row >= it.len) continue;
#pragma unroll
    for (int ot = 0; ot < OT; ++ot) {
      const int64_t off = row * kv_stride + ot * 8 + 2 * th.t;
      *reinterpret_cast<uint32_t*>(dk_ptr + off) =
          Pair16<T>::pack(dk[ot][2 * r] * sh.scale, dk[ot][2 * r + 1] * sh.scale);
      *reinterpret_cast<uint32_t*>(dv_ptr + off) = Pair16<T>::pack(dv[ot][2 * r], dv[ot][2 * r + 1]);
    }
  }
}

// The step of the split-D consumers (head dim 256; bwd_dkdv_split_d.cuh, which launch_template.cuh
// includes).
template <typename T, int D, bool kAtomicDQ, bool kSoftcap>
__device__ __forceinline__ void split_consumer_step(float (&dk)[D / 16][4], float (&dv)[D / 16][4],
                                                    float (&dq)[D / 16][4], const BwdTensorMaps& maps,
                                                    const BwdSmem<D>& sm, const VarlenShape& sh, const BwdItem& it,
                                                    void* dq_out, int q_iter, int h, int q0,
                                                    const BwdConsumerThread& th, float scale_log2, float cap_pre);

// Consumer warpgroup cw (0 or 1): takes the producer's items in order until the end marker;
// dK and dV of its 64 keys (split D: of the block's 64 keys, its half of D) stay in registers
// over every step of the item.
template <typename T, int D, bool kAtomicDQ, bool kSoftcap>
__device__ __forceinline__ void bwd_consumer(const BwdParams& p, const BwdTensorMaps& maps, const BwdSmem<D>& sm,
                                             int group, int cw, int lane) {
  using Tr = BwdTraits<D>;
  constexpr int BN = Tr::kBlockN, BM = Tr::kBlockM;
  constexpr float kLog2e = 1.4426950408889634f;
  const VarlenShape& sh = p.shape;
  BwdConsumerThread th;
  th.cw = cw;
  th.wl = (threadIdx.x / 32) & 3;
  th.lane = lane;
  th.g = lane >> 2;
  th.t = lane & 3;
  // This warp's first key row in the block: split D, both warpgroups cover the block's 64 keys.
  th.row0 = (Tr::kSplitD ? 0 : cw * 64) + th.wl * 16;
  constexpr int AT = Tr::kSplitD ? D / 16 : D / 8;  // dK and dV column tiles of this warpgroup
  const int d0 = Tr::kSplitD ? cw * (D / 2) : 0;
  const int64_t kv_stride = int64_t(sh.heads_kv) * D;
  const float scale_log2 = ScoreCap<kSoftcap>::exp_scale(sh.scale, sh.softcap) * kLog2e;
  const float cap_pre = kSoftcap ? sh.scale / sh.softcap : 0.f;

  constexpr int KVS = Tr::kKvStages, QS = Tr::kQStages;
  int item_iter = 0, q_iter = 0;
  for (;;) {
    const int ks = item_iter % KVS;
    mbar_wait(sm.kv_full(ks), (item_iter / KVS) & 1);
    volatile int* slot = sm.item_slot(ks);
    const int item = slot[0];
    if (item < 0) break;
    const int block = slot[1];
    BwdItem it;
    it.hk = item % sh.heads_kv;
    it.start = slot[2];
    it.len = slot[3];
    it.packed = slot[4] > 1;
    it.stage = ks;
    it.k0 = block * BN;
    it.s_k = sm.k(ks);
    it.s_v = sm.v(ks);

    const BlockRange qr = query_blocks_for_key_block(block, BM, BN, it.len, sh.causal, sh.window);
    const int q_blocks = qr.end - qr.begin;
    const int steps = q_blocks * group;

    float dk[AT][4], dv[AT][4];
    zero_acc(dk);
    zero_acc(dv);
    for (int step = 0; step < steps; ++step) {
      mbar_wait(sm.q_full(unsigned(q_iter) % QS), (unsigned(q_iter) / QS) & 1);
      const int h = it.hk * group + step / q_blocks;
      const int q0 = (qr.begin + step % q_blocks) * BM;
      if constexpr (Tr::kSplitD) {
        float dq[D / 16][4];  // atomic mode: dQ of this warpgroup's half of D
        split_consumer_step<T, D, kAtomicDQ, kSoftcap>(dk, dv, dq, maps, sm, sh, it, p.dq, q_iter, h, q0, th,
                                                       scale_log2, cap_pre);
      } else {
        BwdStepRegs<D> r;
        float dq[D / 16][4];  // atomic mode: dQ of this warpgroup's half of D
        bwd_consumer_step<T, D, kAtomicDQ, kSoftcap>(dk, dv, r, dq, maps, sm, sh, it, p.dq, q_iter, h, q0, th,
                                                     scale_log2, cap_pre);
      }
      ++q_iter;
    }
    bwd_release(sm.kv_empty(ks));  // K and V are no longer read
    bwd_epilogue<T, D, AT>(p, dk, dv, it, th, kv_stride, d0);
    ++item_iter;
  }
  if (kAtomicDQ && th.wl == 0 && lane == 0) bulk_wait();  // staging must outlive the reductions
}

template <typename T, int D, bool kAtomicDQ, bool kSoftcap>
__global__ void __launch_bounds__(BwdTraits<D>::kThreads, 1)
    bwd_dkdv_kernel(const __grid_constant__ BwdParams p, const __grid_constant__ BwdTensorMaps maps) {
  using Tr = BwdTraits<D>;
  extern __shared__ unsigned char smem[];
  const BwdSmem<D> sm(smem);
  if (threadIdx.x == 0) {
    for (int s = 0; s < Tr::kKvStages; ++s) {
      mbar_init(sm.kv_full(s), 1);
      // Empty barriers count every consumer thread: each arrives after its own reads of the
      // item slot / row statistics (bwd_release).
      mbar_init(sm.kv_empty(s), Tr::kConsumerThreads);
    }
    for (int s = 0; s < 2; ++s) {
      mbar_init(sm.q_full(s), 32);  // the producer warp's lanes (row statistics) and lane 0's copies
      mbar_init(sm.q_empty(s), Tr::kConsumerThreads);
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
    regs_decrease<24>();
    if (threadIdx.x >= 32) return;
    bwd_producer<T, D>(p, maps, sm, group, num_items, lane);
  } else {
    regs_increase<240>();
    bwd_consumer<T, D, kAtomicDQ, kSoftcap>(p, maps, sm, group, wg - 1, lane);
  }
}

}  // namespace fptrain::attention::cuda
