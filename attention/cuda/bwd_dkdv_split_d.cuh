// The dK/dV kernel's consumers at head dim 256 (BwdTraits<D>::kSplitD): dK and dV of 64 keys
// x 256 would need 256 accumulator registers a thread, so both consumer warpgroups work on
// the same 64 keys and each owns half of D. Per step (64 queries of one head):
//   S^T  = K Q_w^T, dP^T = V dO_w^T   for this warpgroup's 32 queries (m64 n32, K over D)
//   P^T, dS^T (bf16) -> shared memory, double-buffered by step; both halves then in place
//   dV[:, half] += P^T dO[:, half]     (SS: P^T K-major, dO MN-major)
//   dK[:, half] += dS^T Q[:, half]     (SS)
//   dQ[:, half]  = dS K[:, half]       (bwd_dq_product, as the other head dims)
// So no product is computed twice: the score products are split by queries, the gradient
// products by D, and P^T and dS^T cross between the warpgroups through shared memory. The
// producer, consumer loop, epilogue, shared memory and dQ path are bwd_dkdv_kernel.cuh's (one
// K/V and one Q stage); this file holds the step.
#pragma once

#include "attention/cuda/bwd_dkdv_kernel.cuh"

namespace fptrain::attention::cuda {

// Registers of one split step (besides dK, dV and dQ): this warpgroup's 32 query columns.
struct BwdSplitStepRegs {
  static constexpr int NT = 4;  // 32 queries / 8
  float st[NT][4];              // S^T, then P^T, then dS^T
  float dpt[NT][4];             // dP^T
  float2 lse2[NT];              // lse (base 2) of this thread's query columns
  float2 dsum2[NT];             // rowsum(dO O) of the same columns
};

// acc = A B^T over D for all 64 keys (A: K or V) against this warpgroup's 32 rows of the query
// tile (B: Q or dO), both K-major: S^T or dP^T for 32 queries.
template <typename T, int D>
__device__ __forceinline__ void split_issue_kt_product(float (&acc)[4][4], uint32_t s_a, uint32_t s_b, int cw) {
  using KVTile = typename BwdTraits<D>::KVTile;
  using QTile = typename BwdTraits<D>::QTile;
#pragma unroll
  for (int kt = 0; kt < D / 16; ++kt) {
    const uint32_t a = (kt / 4) * KVTile::kSlabBytes + (kt % 4) * 32;
    const uint32_t b = (kt / 4) * QTile::kSlabBytes + cw * 32 * 128 + (kt % 4) * 32;
    Wgmma<T, 32>::template ss<0, 0>(acc, wgmma_desc(s_a + a, 16, 1024), wgmma_desc(s_b + b, 16, 1024), kt > 0);
  }
}

// acc += A B for this warpgroup's half of D: A (P^T or dS^T, 64 keys x 64 queries, K-major) from
// shared memory, B the query tile (dO or Q) read MN-major from column d0.
template <typename T, int D>
__device__ __forceinline__ void split_issue_grad_product(float (&acc)[D / 16][4], uint32_t s_a, uint32_t s_b, int d0) {
  using QTile = typename BwdTraits<D>::QTile;
#pragma unroll
  for (int kt = 0; kt < BwdTraits<D>::kBlockM / 16; ++kt)
    Wgmma<T, D / 2>::template ss<0, 1>(acc, wgmma_desc(s_a + kt * 32, 16, 1024),
                                       wgmma_desc(s_b + (d0 / 64) * QTile::kSlabBytes + kt * 16 * 128,
                                                  QTile::kSlabBytes, 1024),
                                       1);
}

// This thread's values of st (64 keys x this warpgroup's 32 queries) into the shared tile at
// s_tile (rows keys, columns queries), as 16-bit pairs.
template <typename T, int D>
__device__ __forceinline__ void split_store_tile(const float (&st)[4][4], uint32_t s_tile, const BwdConsumerThread& th) {
  using DsTile = typename BwdTraits<D>::DsTile;
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int key = th.row0 + th.g + r * 8, col = th.cw * 32 + nt * 8 + 2 * th.t;
      const uint32_t addr = s_tile + DsTile::offset(key, col & ~7) + (col & 7) * 2;
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(Pair16<T>::pack(st[nt][2 * r], st[nt][2 * r + 1])));
    }
}

// P^T and dS^T of this warpgroup's 32 queries (S^T and dP^T are in flight when called).
template <typename T, int D, bool kSoftcap>
__device__ __forceinline__ void split_probs_and_grads(BwdSplitStepRegs& r, const BwdSmem<D>& sm,
                                                      const VarlenShape& sh, const BwdItem& it, int qs, int q0,
                                                      uint32_t s_pt, uint32_t s_ds, const BwdConsumerThread& th,
                                                      float scale_log2, float cap_pre) {
  using Tr = BwdTraits<D>;
  constexpr int BN = Tr::kBlockN, BM = Tr::kBlockM;
  const float inv_exp_scale_log2 = 1.f / scale_log2;  // soft cap only: 1 / (cap log2 e)
  const float* lse = sm.lse(qs) + th.cw * 32;
  const float* dsum = sm.dsum(qs) + th.cw * 32;
  const int c0 = q0 + th.cw * 32;  // this warpgroup's first query
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) r.lse2[nt] = *reinterpret_cast<const float2*>(lse + nt * 8 + 2 * th.t);
  wgmma_wait<1>();  // S^T ready, dP^T may still run
  fence_acc(r.st);
  ScoreCap<kSoftcap>::apply(r.st, cap_pre);
  if (it.packed) {  // every key row tested against its own document
    DocSpan doc[2];
    slot_doc_spans(sm.item_slot(it.stage), it.len, it.k0 + th.row0 + th.g, doc);
    apply_doc_mask<false>(r.st, it.k0 + th.row0, c0, doc, sh.causal, sh.window);
  } else if (block_needs_mask(q0, BM, it.k0, BN, it.len, sh.causal, sh.window)) {
    apply_mask<false>(r.st, it.k0 + th.row0, c0, it.len, sh.causal, sh.window);
  }
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      r.st[nt][e] = fast_exp2(fmaf(r.st[nt][e], scale_log2, (e & 1) ? -r.lse2[nt].y : -r.lse2[nt].x));
  split_store_tile<T, D>(r.st, s_pt, th);
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) r.dsum2[nt] = *reinterpret_cast<const float2*>(dsum + nt * 8 + 2 * th.t);
  wgmma_wait<0>();
  fence_acc(r.dpt);
  // dS^T = P^T (dP^T - dsum[q]) (times 1 - t^2 under a soft cap), unscaled as in the other head dims.
#pragma unroll
  for (int nt = 0; nt < 4; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float dcap = ScoreCap<kSoftcap>::dtanh_from_prob(r.st[nt][e], (e & 1) ? r.lse2[nt].y : r.lse2[nt].x,
                                                             inv_exp_scale_log2);
      r.st[nt][e] *= r.dpt[nt][e] - ((e & 1) ? r.dsum2[nt].y : r.dsum2[nt].x);
      if constexpr (kSoftcap) r.st[nt][e] *= dcap;
    }
  split_store_tile<T, D>(r.st, s_ds, th);
  fence_proxy_async();
  named_barrier_sync(1, 256);  // both warpgroups' P^T and dS^T are in place
}

// One step: query block q0 of head h against the block's 64 keys, this warpgroup's half of D.
template <typename T, int D, bool kAtomicDQ, bool kSoftcap>
__device__ __forceinline__ void split_consumer_step(float (&dk)[D / 16][4], float (&dv)[D / 16][4],
                                                    float (&dq)[D / 16][4], const BwdTensorMaps& maps,
                                                    const BwdSmem<D>& sm, const VarlenShape& sh, const BwdItem& it,
                                                    void* dq_out, int q_iter, int h, int q0,
                                                    const BwdConsumerThread& th, float scale_log2, float cap_pre) {
  using Tr = BwdTraits<D>;
  using QTile = typename Tr::QTile;
  using DsTile = typename Tr::DsTile;
  const int qs = q_iter % Tr::kQStages, buf = q_iter & 1;
  const uint32_t s_q = sm.q0 + qs * QTile::kBytes, s_do = sm.do0 + qs * QTile::kBytes;
  const uint32_t s_ds = sm.ds0 + buf * DsTile::kBytes, s_pt = sm.pt0 + buf * DsTile::kBytes;
  const int d0 = th.cw * (D / 2);
  BwdSplitStepRegs r;
  zero_acc(r.st);
  zero_acc(r.dpt);
  wgmma_fence();
  split_issue_kt_product<T, D>(r.st, it.s_k, s_q, th.cw);
  wgmma_commit();
  split_issue_kt_product<T, D>(r.dpt, it.s_v, s_do, th.cw);
  wgmma_commit();
  split_probs_and_grads<T, D, kSoftcap>(r, sm, sh, it, qs, q0, s_pt, s_ds, th, scale_log2, cap_pre);
  wgmma_fence();
  split_issue_grad_product<T, D>(dv, s_pt, s_do, d0);
  split_issue_grad_product<T, D>(dk, s_ds, s_q, d0);
  wgmma_commit();
  if constexpr (kAtomicDQ) {
    bwd_dq_product<T, D>(maps, sm, dq, s_ds, qs, h, sh, it, dq_out, q0, th);  // waits for all products
  } else {
    wgmma_wait<0>();
    bwd_release(sm.q_empty(qs));
  }
  fence_acc(dv);
  fence_acc(dk);
}

}  // namespace fptrain::attention::cuda
