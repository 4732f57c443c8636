// Forward kernel: warp-specialized, TMA-fed, wgmma mainloop.
//
// Warpgroup 0 is the producer: one thread draws (tile, head) items heaviest first from the
// scheduler's counter and streams Q (two stages; one at D = 256) and K/V blocks (two stages)
// into shared memory with bulk tensor copies, each stage guarded by a full/empty mbarrier pair.
// Warpgroups 1 and 2 are consumers, 64 query rows each, BM = 128, BN = 128 (64 at D = 256):
//   S_n = Q K_n^T (wgmma SS)  ->  online softmax in registers  ->  O += P_n V_n (wgmma RS).
// Two overlaps hide the softmax: within a warpgroup, S_n is issued together with
// P_{n-1} V_{n-1}, so the exponentials of block n run while that product is in flight; and
// the two consumer warpgroups take turns issuing their products (named barriers), so
// one's softmax runs while the other's matrix products use the tensor cores.
// Key blocks are visited last to first so the masked diagonal blocks come first.
// With a soft cap (kSoftcap, Gemma 2) each S_n becomes tanh(scale S_n / cap) before the mask
// and the softmax exponentiates with the cap instead of the scale (softmax.cuh, ScoreCap).
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
struct FwdTraits {
  static constexpr int kThreads = 384;  // producer warpgroup + 2 consumer warpgroups
  static constexpr int kBlockM = fwd_block_m(D);
  static constexpr int kBlockN = fwd_block_n(D);
  static_assert(kBlockM == 128, "two consumer warpgroups x 64 rows");
  using QTile = SlabTile<kBlockM, D>;
  using KVTile = SlabTile<kBlockN, D>;
  static constexpr int kQStages = fwd_q_stages(D);
  static constexpr int kKvStages = 2;
  static constexpr int kBarrierBytes = 64 + 2 * kItemSlotInts * 4;  // 8 mbarriers + 2 item slots
  // Q[kQStages], K[2], V[2], barriers, plus slack to align to the 1024-byte swizzle pattern.
  static constexpr int kSmemBytes =
      kQStages * QTile::kBytes + kKvStages * 2 * KVTile::kBytes + kBarrierBytes + 1024;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory of one CTA");
  static constexpr int kConsumerWarps = 8;
  static constexpr int kConsumerThreads = 256;
};

struct FwdTensorMaps {
  CUtensorMap q, k, v;  // [T, H, D] viewed as (D, H, T), boxes of 64 x 1 x 128, 128B swizzle
};

// Shared memory of one CTA: Q[kQStages], K[2], V[2] as slab tiles from a 1024-byte aligned
// base, then 8-byte mbarriers q_full[2], q_empty[2], kv_full[2], kv_empty[2] (the Q ones used
// up to kQStages), then per Q stage the item the producer decoded (publish_item).
template <int D>
struct FwdSmem {
  using QTile = typename FwdTraits<D>::QTile;
  using KVTile = typename FwdTraits<D>::KVTile;
  uint32_t q0, k0, v0, bar;
  volatile int* items;

  __device__ __forceinline__ explicit FwdSmem(unsigned char* smem) {
    q0 = (smem_addr(smem) + 1023) & ~1023u;
    k0 = q0 + FwdTraits<D>::kQStages * QTile::kBytes;
    v0 = k0 + 2 * KVTile::kBytes;
    bar = v0 + 2 * KVTile::kBytes;
    items = reinterpret_cast<volatile int*>(smem + (bar + 64 - smem_addr(smem)));
  }
  __device__ __forceinline__ uint32_t q_full(int s) const { return bar + 8 * s; }
  __device__ __forceinline__ uint32_t q_empty(int s) const { return bar + 16 + 8 * s; }
  __device__ __forceinline__ uint32_t kv_full(int s) const { return bar + 32 + 8 * s; }
  __device__ __forceinline__ uint32_t kv_empty(int s) const { return bar + 48 + 8 * s; }
  __device__ __forceinline__ volatile int* item_slot(int s) const { return items + kItemSlotInts * s; }
};

// Producer (one thread): draws items, publishes each in its Q stage's slot, loads Q once per
// item and K/V for every key block it visits, last block first.
template <typename T, int D>
__device__ __forceinline__ void fwd_producer(const FwdParams& p, const FwdTensorMaps& maps, const FwdSmem<D>& sm,
                                             int group, int num_items) {
  using Tr = FwdTraits<D>;
  using QTile = typename Tr::QTile;
  using KVTile = typename Tr::KVTile;
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, SLABS = D / 64, QS = Tr::kQStages;
  const VarlenShape& sh = p.shape;
  int q_iter = 0, kv_iter = 0;
  for (;;) {
    const int item = atomicAdd(p.tiles.next_item, 1);
    const int qs = q_iter % QS;
    mbar_wait(sm.q_empty(qs), ((q_iter / QS) & 1) ^ 1);
    if (item >= num_items) {
      sm.item_slot(qs)[0] = -1;
      mbar_arrive(sm.q_full(qs));
      break;
    }
    const WorkItem w = decode_item(p.tiles, item, sh.heads_q);
    const Tile tile = w.tile;
    const int h = w.head, hk = h / group;
    const Segment seg = load_segment(p.tiles, tile.seg);
    const int start = seg.start, len = seg.len;
    publish_item(sm.item_slot(qs), item, tile.block, seg);
    const BlockRange kr = key_blocks_for_query_block(tile.block, BM, BN, len, sh.causal, sh.window);
    mbar_arrive_expect_tx(sm.q_full(qs), QTile::kBytes);
#pragma unroll
    for (int sl = 0; sl < SLABS; ++sl)
      tma_load_3d(sm.q0 + qs * QTile::kBytes + sl * QTile::kSlabBytes, &maps.q, sm.q_full(qs), sl * 64, h,
                  start + tile.block * BM);
    for (int n = kr.end - 1; n >= kr.begin; --n) {
      const int ks = kv_iter & 1;
      mbar_wait(sm.kv_empty(ks), ((kv_iter >> 1) & 1) ^ 1);
      mbar_arrive_expect_tx(sm.kv_full(ks), 2 * KVTile::kBytes);
#pragma unroll
      for (int sl = 0; sl < SLABS; ++sl) {
        tma_load_3d(sm.k0 + ks * KVTile::kBytes + sl * KVTile::kSlabBytes, &maps.k, sm.kv_full(ks), sl * 64, hk,
                    start + n * BN);
        tma_load_3d(sm.v0 + ks * KVTile::kBytes + sl * KVTile::kSlabBytes, &maps.v, sm.kv_full(ks), sl * 64, hk,
                    start + n * BN);
      }
      ++kv_iter;
    }
    ++q_iter;
  }
}

// Where a consumer thread sits: its warpgroup (0 or 1), lane and fragment coordinates
// (g, t), its warp's first row in the query block, and the pingpong's named barriers.
struct FwdConsumerThread {
  int cw, lane, g, t, row0, my_turn, other_turn;
};

// One item's query block as the consumers see it.
struct FwdItem {
  int h, start, len, q0;
  bool packed;  // a pack of several documents (its one block is masked at their boundaries)
  BlockRange kr;
};

// S = Q K_ks^T for this warpgroup's 64 query rows (SS wgmmas over D).
template <typename T, int D>
__device__ __forceinline__ void fwd_issue_s(float (&s)[FwdTraits<D>::kBlockN / 8][4], uint32_t s_q, uint32_t s_k,
                                            int cw) {
  using QTile = typename FwdTraits<D>::QTile;
  using KVTile = typename FwdTraits<D>::KVTile;
#pragma unroll
  for (int kt = 0; kt < D / 16; ++kt) {
    const uint32_t a = s_q + (kt / 4) * QTile::kSlabBytes + cw * 64 * 128 + (kt % 4) * 32;
    const uint32_t b = s_k + (kt / 4) * KVTile::kSlabBytes + (kt % 4) * 32;
    Wgmma<T, FwdTraits<D>::kBlockN>::template ss<0, 0>(s, wgmma_desc(a, 16, 1024), wgmma_desc(b, 16, 1024), kt > 0);
  }
}

// O += P V_ks with P in registers (RS wgmmas over the key block).
template <typename T, int D>
__device__ __forceinline__ void fwd_issue_pv(float (&o)[D / 8][4], const uint32_t (&pf)[FwdTraits<D>::kBlockN / 16][4],
                                             uint32_t s_v) {
  using KVTile = typename FwdTraits<D>::KVTile;
#pragma unroll
  for (int kt = 0; kt < FwdTraits<D>::kBlockN / 16; ++kt)
    Wgmma<T, D>::template rs<1>(o, pf[kt], wgmma_desc(s_v + kt * 16 * 128, KVTile::kSlabBytes, 1024), 1);
}

// The registers of one item's computation. The members are listed in reverse order of first
// use: with this order nvcc emits exactly the code of the kernel before it was split into
// functions (any order computes the same; the SASS was compared byte for byte).
template <int D>
struct FwdItemRegs {
  float lse[2];                                // row log-sum-exp, for the epilogue
  float alpha[2];                              // per-row rescale factors of O
  float s[FwdTraits<D>::kBlockN / 8][4];       // scores, then probabilities, of one key block
  uint32_t pf[FwdTraits<D>::kBlockN / 16][4];  // the probabilities as A fragments
  OnlineSoftmax softmax;
  float o[D / 8][4];                           // output accumulator
};

// Mainloop of one query block: key blocks last to first; S_n is issued with P_{n+1} V_{n+1}
// and its softmax runs while that product is in flight. Leaves the unnormalised O and the
// row statistics in r, releases the Q stage and every K/V stage it consumed, and returns
// the advanced K/V stage counter.
template <typename T, int D, bool kSoftcap>
__device__ __forceinline__ int fwd_consumer_mainloop(FwdItemRegs<D>& r, const FwdSmem<D>& sm, const VarlenShape& sh,
                                                     const FwdItem& it, int qs, int kv_iter,
                                                     const FwdConsumerThread& th, float scale_log2, float cap_pre) {
  using Tr = FwdTraits<D>;
  using QTile = typename Tr::QTile;
  using KVTile = typename Tr::KVTile;
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, NT = BN / 8;
  const uint32_t s_q = sm.q0 + qs * QTile::kBytes;
  auto release = [&](uint32_t bar) {
    if (th.lane == 0) mbar_arrive(bar);
  };
  auto mask = [&](float (&s)[NT][4], int n) {
    if (block_needs_mask(it.q0, BM, n * BN, BN, it.len, sh.causal, sh.window))
      apply_mask<true>(s, it.q0 + th.row0, n * BN, it.len, sh.causal, sh.window);
  };
  // A pack is one key block (the first visited): every row tested against its own document,
  // found from the document starts in the item slot.
  auto mask_first = [&](float (&s)[NT][4], int n) {
    if (it.packed) {
      DocSpan doc[2];
      slot_doc_spans(sm.item_slot(qs), it.len, it.q0 + th.row0 + th.g, doc);
      apply_doc_mask<true>(s, it.q0 + th.row0, n * BN, doc, sh.causal, sh.window);
      mbar_arrive(sm.q_empty(qs));  // this thread's slot loads are done (see fwd_consumer)
    } else {
      mask(s, n);
    }
  };

  auto& o = r.o;
  auto& softmax = r.softmax;
  auto& pf = r.pf;
  auto& s = r.s;
  auto& alpha = r.alpha;
  zero_acc(o);
  softmax.init();

  // First (last-positioned) key block: S only.
  int n = it.kr.end - 1;
  int ks_prev = kv_iter & 1;
  mbar_wait(sm.kv_full(ks_prev), (kv_iter >> 1) & 1);
  named_barrier_sync(th.my_turn, 256);
  wgmma_fence();
  fwd_issue_s<T, D>(s, s_q, sm.k0 + ks_prev * KVTile::kBytes, th.cw);
  wgmma_commit();
  named_barrier_arrive(th.other_turn, 256);
  wgmma_wait<0>();
  fence_acc(s);
  if (n == it.kr.begin) release(sm.q_empty(qs));
  ScoreCap<kSoftcap>::apply(s, cap_pre);
  mask_first(s, n);
  softmax.scores_to_probs(s, scale_log2, alpha);
  acc_to_a_frags<T, BN / 16>(pf, s);
  ++kv_iter;

  for (n = it.kr.end - 2; n >= it.kr.begin; --n) {
    const int ks = kv_iter & 1;
    mbar_wait(sm.kv_full(ks), (kv_iter >> 1) & 1);
    named_barrier_sync(th.my_turn, 256);
    wgmma_fence();
    fwd_issue_s<T, D>(s, s_q, sm.k0 + ks * KVTile::kBytes, th.cw);
    wgmma_commit();
    fwd_issue_pv<T, D>(o, pf, sm.v0 + ks_prev * KVTile::kBytes);
    wgmma_commit();
    named_barrier_arrive(th.other_turn, 256);
    wgmma_wait<1>();  // S_n is ready; P_{n+1} V_{n+1} may still run
    fence_acc(s);
    if (n == it.kr.begin) release(sm.q_empty(qs));
    ScoreCap<kSoftcap>::apply(s, cap_pre);
    mask(s, n);
    softmax.scores_to_probs(s, scale_log2, alpha);
    wgmma_wait<0>();
    fence_acc(o);
    fence_frags(pf);
    release(sm.kv_empty(ks_prev));
    OnlineSoftmax::rescale(o, alpha);
    acc_to_a_frags<T, BN / 16>(pf, s);
    ks_prev = ks;
    ++kv_iter;
  }

  named_barrier_sync(th.my_turn, 256);
  wgmma_fence();
  fwd_issue_pv<T, D>(o, pf, sm.v0 + ks_prev * KVTile::kBytes);
  wgmma_commit();
  named_barrier_arrive(th.other_turn, 256);
  wgmma_wait<0>();
  fence_acc(o);
  fence_frags(pf);
  release(sm.kv_empty(ks_prev));
  return kv_iter;
}

// Normalises O and writes it (rows past the sequence end are dropped) and the LSE.
template <typename T, int D, bool kSoftcap>
__device__ __forceinline__ void fwd_epilogue(const FwdParams& p, FwdItemRegs<D>& r, const FwdItem& it,
                                             const FwdConsumerThread& th, int64_t q_stride) {
  constexpr int OT = D / 8;
  const VarlenShape& sh = p.shape;
  auto& o = r.o;
  auto& lse = r.lse;
  r.softmax.finish(o, ScoreCap<kSoftcap>::exp_scale(sh.scale, sh.softcap), lse);
  T* o_ptr = static_cast<T*>(p.o) + (it.start + it.q0) * q_stride + it.h * D;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = th.row0 + th.g + r * 8;
    if (it.q0 + row >= it.len) continue;
    T* dst = o_ptr + row * q_stride + 2 * th.t;
#pragma unroll
    for (int ot = 0; ot < OT; ++ot)
      *reinterpret_cast<uint32_t*>(dst + ot * 8) = Pair16<T>::pack(o[ot][2 * r], o[ot][2 * r + 1]);
    if (th.t == 0) p.lse[int64_t(it.h) * sh.total_tokens + it.start + it.q0 + row] = lse[r];
  }
}

// Consumer warpgroup cw (0 or 1): takes the producer's items in order until the end marker.
template <typename T, int D, bool kSoftcap>
__device__ __forceinline__ void fwd_consumer(const FwdParams& p, const FwdSmem<D>& sm, int cw) {
  using Tr = FwdTraits<D>;
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN;
  const VarlenShape& sh = p.shape;
  FwdConsumerThread th;
  th.cw = cw;
  th.lane = threadIdx.x & 31;
  th.g = th.lane >> 2;
  th.t = th.lane & 3;
  th.row0 = cw * 64 + ((threadIdx.x / 32) & 3) * 16;  // this warp's first row in the block
  th.my_turn = 1 + cw;                                 // named barrier ids (0 is __syncthreads)
  th.other_turn = 2 - cw;
  const int64_t q_stride = int64_t(sh.heads_q) * D;
  const float scale_log2 = ScoreCap<kSoftcap>::exp_scale(sh.scale, sh.softcap) * 1.4426950408889634f;
  const float cap_pre = kSoftcap ? sh.scale / sh.softcap : 0.f;
  if (cw == 1) named_barrier_arrive(1, 256);  // consumer 0 issues first

  int q_iter = 0, kv_iter = 0;
  for (;;) {
    const int qs = q_iter % Tr::kQStages;
    mbar_wait(sm.q_full(qs), (q_iter / Tr::kQStages) & 1);
    volatile int* slot = sm.item_slot(qs);
    const int item = slot[0];
    if (item < 0) break;
    const int block = slot[1];
    FwdItem it;
    it.h = item % sh.heads_q;
    it.start = slot[2];
    it.len = slot[3];
    it.packed = slot[4] > 1;
    // Each thread arrives for its own slot loads, so the barrier alone orders them before the
    // producer's next store (racecheck credits nothing else); kept out of the key-block loop,
    // where an all-thread arrival cost 7% at 8k. A pack's threads still read its document
    // starts from the slot in the mainloop and arrive there.
    if (!it.packed) mbar_arrive(sm.q_empty(qs));
    it.q0 = block * BM;
    it.kr = key_blocks_for_query_block(block, BM, BN, it.len, sh.causal, sh.window);

    FwdItemRegs<D> r;
    kv_iter = fwd_consumer_mainloop<T, D, kSoftcap>(r, sm, sh, it, qs, kv_iter, th, scale_log2, cap_pre);
    fwd_epilogue<T, D, kSoftcap>(p, r, it, th, q_stride);
    ++q_iter;
  }
}

template <typename T, int D, bool kSoftcap>
__global__ void __launch_bounds__(FwdTraits<D>::kThreads, 1)
    fwd_kernel(const __grid_constant__ FwdParams p, const __grid_constant__ FwdTensorMaps maps) {
  using Tr = FwdTraits<D>;
  extern __shared__ unsigned char smem[];
  const FwdSmem<D> sm(smem);
  if (threadIdx.x == 0) {
    for (int s = 0; s < 2; ++s) {
      mbar_init(sm.q_full(s), 1);
      // Q stage empty: every consumer thread once it has read the item slot, and each warp
      // once its wgmmas are done with Q.
      mbar_init(sm.q_empty(s), Tr::kConsumerThreads + Tr::kConsumerWarps);
      mbar_init(sm.kv_full(s), 1);
      mbar_init(sm.kv_empty(s), Tr::kConsumerWarps);
    }
    mbar_init_fence();
  }
  __syncthreads();

  const VarlenShape& sh = p.shape;
  const int group = sh.heads_q / sh.heads_kv;
  const int num_items = *p.tiles.num_tiles * sh.heads_q;
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    regs_decrease<24>();
    if (threadIdx.x != 0) return;
    fwd_producer<T, D>(p, maps, sm, group, num_items);
  } else {
    regs_increase<240>();
    fwd_consumer<T, D, kSoftcap>(p, sm, wg - 1);
  }
}

}  // namespace fptrain::attention::cuda
