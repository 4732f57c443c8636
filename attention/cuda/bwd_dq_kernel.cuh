// Deterministic dQ pass (mma.sync): one CTA owns BM queries of one head and visits their
// key blocks, recomputing S and dP, then dQ += dS K; no atomics, so runs are bit-identical.
#pragma once

#include "attention/cuda/fragments.cuh"
#include "attention/cuda/masking.cuh"
#include "attention/cuda/params.h"
#include "attention/cuda/smem_layout.cuh"
#include "attention/cuda/softmax.cuh"
#include "attention/cuda/tile_scheduler.cuh"
#include "attention/cuda/tile_sizes.h"
#include "attention/cuda/warp_mma.cuh"

namespace fptrain::attention::cuda {

template <int D>
struct DqTraits {
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBlockM = dq_block_m(D);
  static constexpr int kBlockN = dq_block_n(D);
  static_assert(kBlockM == 16 * kWarps, "each warp owns 16 query rows");
  static constexpr int kQBytes = kBlockM * D * 2;
  static constexpr int kKVBytes = kBlockN * D * 2;
  static constexpr int kSmemBytes = 2 * kQBytes + 4 * kKVBytes;  // Q, dO, K[2], V[2]
};

template <typename T, int D, bool kSoftcap>
__global__ void __launch_bounds__(DqTraits<D>::kThreads) bwd_dq_kernel(BwdParams p) {
  using Tr = DqTraits<D>;
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, NT = BN / 8, OT = D / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int item_slot;
  const uint32_t s_q = smem_addr(smem);
  const uint32_t s_do = s_q + Tr::kQBytes;
  const uint32_t s_k0 = s_do + Tr::kQBytes;
  const uint32_t s_v0 = s_k0 + 2 * Tr::kKVBytes;

  const VarlenShape& sh = p.shape;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int group = sh.heads_q / sh.heads_kv;
  const int64_t q_stride = int64_t(sh.heads_q) * D, kv_stride = int64_t(sh.heads_kv) * D;
  const float scale_log2 = ScoreCap<kSoftcap>::exp_scale(sh.scale, sh.softcap) * 1.4426950408889634f;
  const float cap_pre = kSoftcap ? sh.scale / sh.softcap : 0.f;
  const int num_items = *p.q_tiles.num_tiles * sh.heads_q;

  for (;;) {
    const int item = claim_item(p.q_tiles.next_item, &item_slot);
    if (item >= num_items) break;
    const WorkItem w = decode_item(p.q_tiles, item, sh.heads_q);
    const Tile tile = w.tile;
    const int h = w.head, hk = h / group;
    const Segment seg = load_segment(p.q_tiles, tile.seg);
    const int start = seg.start, len = seg.len;
    const int q0 = tile.block * BM;
    const BlockRange kr = key_blocks_for_query_block(tile.block, BM, BN, len, sh.causal, sh.window);

    const int64_t q_off = int64_t(start + q0) * q_stride + h * D;
    const T* k_ptr = static_cast<const T*>(p.k) + int64_t(start) * kv_stride + hk * D;
    const T* v_ptr = static_cast<const T*>(p.v) + int64_t(start) * kv_stride + hk * D;
    auto load_kv = [&](int n, int buf) {
      const int kb = n * BN;
      load_tile_async<BN, D, Tr::kThreads>(s_k0 + buf * Tr::kKVBytes, k_ptr + kb * kv_stride, kv_stride,
                                           len - kb);
      load_tile_async<BN, D, Tr::kThreads>(s_v0 + buf * Tr::kKVBytes, v_ptr + kb * kv_stride, kv_stride,
                                           len - kb);
    };
    load_tile_async<BM, D, Tr::kThreads>(s_q, static_cast<const T*>(p.q) + q_off, q_stride, len - q0);
    load_tile_async<BM, D, Tr::kThreads>(s_do, static_cast<const T*>(p.dout) + q_off, q_stride, len - q0);
    load_kv(kr.begin, 0);
    cp_async_commit();

    // Each thread's two rows: lse (base 2) and dsum.
    float lse2[2], dsum[2];
    DocSpan doc[2];  // in a pack: the document of each row (unused otherwise)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = q0 + warp * 16 + g + r * 8;
      doc[r] = pack_doc_span(seg.doc_starts[0], seg.doc_starts[1], seg.doc_starts[2], seg.doc_starts[3], len, row);
      const int64_t idx = int64_t(h) * sh.total_tokens + start + row;
      lse2[r] = row < len ? p.lse[idx] * 1.4426950408889634f : 0.f;
      dsum[r] = row < len ? p.dsum[idx] : 0.f;
    }

    float dq[OT][4];
    zero_acc(dq);
    int buf = 0;
    for (int n = kr.begin; n < kr.end; ++n) {
      if (n + 1 < kr.end) {
        load_kv(n + 1, buf ^ 1);
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
      const uint32_t s_k = s_k0 + buf * Tr::kKVBytes, s_v = s_v0 + buf * Tr::kKVBytes;
      float s[NT][4];
      zero_acc(s);
      gemm_sa_bt<T, D / 16, NT, D>(s, s_q, warp * 16, s_k);
      ScoreCap<kSoftcap>::apply(s, cap_pre);
      const int kb = n * BN;
      if (seg.num_docs > 1)
        apply_doc_mask<true>(s, q0 + warp * 16, kb, doc, sh.causal, sh.window);
      else if (block_needs_mask(q0, BM, kb, BN, len, sh.causal, sh.window))
        apply_mask<true>(s, q0 + warp * 16, kb, len, sh.causal, sh.window);
      float dp[NT][4];
      zero_acc(dp);
      gemm_sa_bt<T, D / 16, NT, D>(dp, s_do, warp * 16, s_v);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e >> 1;
          // A capped score's tanh t is still in s: dS gains 1 - t^2; a masked one is -inf there,
          // so it contributes 0 (not 0 * inf).
          const float dcap = kSoftcap ? fmaf(-s[nt][e], s[nt][e], 1.f) : 1.f;
          const float pr = fast_exp2(fmaf(s[nt][e], scale_log2, -lse2[r]));
          s[nt][e] = pr * (dp[nt][e] - dsum[r]);
          if constexpr (kSoftcap) s[nt][e] = pr > 0.f ? s[nt][e] * dcap : 0.f;
        }
      }
      uint32_t dsf[BN / 16][4];
      acc_to_a_frags<T, BN / 16>(dsf, s);
      gemm_a_b<T, BN / 16, OT, D>(dq, dsf, s_k, 0, 0);  // dQ += dS K
      __syncthreads();
      buf ^= 1;
    }

    T* dq_ptr = static_cast<T*>(p.dq) + q_off;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp * 16 + g + r * 8;
      if (q0 + row >= len) continue;
#pragma unroll
      for (int ot = 0; ot < OT; ++ot)
        *reinterpret_cast<uint32_t*>(dq_ptr + row * q_stride + ot * 8 + 2 * t) =
            Pair16<T>::pack(dq[ot][2 * r] * sh.scale, dq[ot][2 * r + 1] * sh.scale);
    }
  }
}

}  // namespace fptrain::attention::cuda
