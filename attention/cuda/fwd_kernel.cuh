// Forward mainloop: one CTA computes O and LSE for a block of BM queries of one head,
// visiting the key blocks of its sequence from the last to the first (the masked
// diagonal blocks come first). 8 warps, each owning 16 query rows; Q stays in
// registers, K/V blocks are double-buffered through cp.async.
#pragma once

#include "attention/cuda/masking.cuh"
#include "attention/cuda/mma_utils.cuh"
#include "attention/cuda/params.h"
#include "attention/cuda/softmax.cuh"
#include "attention/cuda/tile_scheduler.cuh"
#include "attention/cuda/tile_sizes.h"

namespace fptrain::attention::cuda {

template <int D>
struct FwdTraits {
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBlockM = fwd_block_m(D);
  static constexpr int kBlockN = fwd_block_n(D);
  static_assert(kBlockM == 16 * kWarps, "each warp owns 16 query rows");
  static constexpr int kQBytes = kBlockM * D * 2;
  static constexpr int kKVBytes = kBlockN * D * 2;
  static constexpr int kSmemBytes = kQBytes + 4 * kKVBytes;  // Q, K[2], V[2]
};

template <typename T, int D>
__global__ void __launch_bounds__(FwdTraits<D>::kThreads, 1) fwd_kernel(FwdParams p) {
  using Tr = FwdTraits<D>;
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, KT = D / 16, NT = BN / 8, OT = D / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int item_slot;
  const uint32_t s_q = smem_addr(smem);
  const uint32_t s_k0 = s_q + Tr::kQBytes;
  const uint32_t s_v0 = s_k0 + 2 * Tr::kKVBytes;

  const VarlenShape& sh = p.shape;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int group = sh.heads_q / sh.heads_kv;
  const int64_t q_stride = int64_t(sh.heads_q) * D, kv_stride = int64_t(sh.heads_kv) * D;
  const float scale_log2 = sh.scale * 1.4426950408889634f;
  const int num_items = *p.tiles.num_tiles * sh.heads_q;

  for (;;) {
    const int item = claim_item(p.tiles.next_item, &item_slot);
    if (item >= num_items) break;
    const Tile tile = p.tiles.tiles[item / sh.heads_q];
    const int h = item % sh.heads_q, hk = h / group;
    const int start = sh.cu_seqlens[tile.seq];
    const int len = sh.cu_seqlens[tile.seq + 1] - start;
    const int q0 = tile.block * BM;
    const BlockRange kr = key_blocks_for_query_block(tile.block, BM, BN, len, sh.causal, sh.window);

    const T* q_ptr = static_cast<const T*>(p.q) + (start + q0) * q_stride + h * D;
    const T* k_ptr = static_cast<const T*>(p.k) + int64_t(start) * kv_stride + hk * D;
    const T* v_ptr = static_cast<const T*>(p.v) + int64_t(start) * kv_stride + hk * D;

    auto load_kv = [&](int n, int buf) {
      int k0 = n * BN;
      load_tile_async<BN, D, Tr::kThreads>(s_k0 + buf * Tr::kKVBytes, k_ptr + k0 * kv_stride, kv_stride,
                                           len - k0);
      load_tile_async<BN, D, Tr::kThreads>(s_v0 + buf * Tr::kKVBytes, v_ptr + k0 * kv_stride, kv_stride,
                                           len - k0);
    };

    load_tile_async<BM, D, Tr::kThreads>(s_q, q_ptr, q_stride, len - q0);
    load_kv(kr.end - 1, 0);
    cp_async_commit();

    float o[OT][4];
    zero_acc(o);
    OnlineSoftmax softmax;
    softmax.init();
    uint32_t qf[KT][4];

    int buf = 0;
    for (int n = kr.end - 1; n >= kr.begin; --n) {
      if (n > kr.begin) {
        load_kv(n - 1, buf ^ 1);
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();
      if (n == kr.end - 1) load_a_frags<KT, D>(qf, s_q, warp * 16);

      float s[NT][4];
      zero_acc(s);
      gemm_a_bt<T, KT, NT, D>(s, qf, s_k0 + buf * Tr::kKVBytes, 0);
      const int k0 = n * BN;
      if (block_needs_mask(q0, BM, k0, BN, len, sh.causal, sh.window))
        apply_mask<true>(s, q0 + warp * 16, k0, len, sh.causal, sh.window);
      softmax.update(s, o, scale_log2);

      uint32_t pf[BN / 16][4];
      acc_to_a_frags<T, BN / 16>(pf, s);
      gemm_a_b<T, BN / 16, OT, D>(o, pf, s_v0 + buf * Tr::kKVBytes, 0, 0);
      __syncthreads();  // all warps are done with `buf` before it is refilled
      buf ^= 1;
    }

    // Epilogue: normalise, write O (rows past the sequence end are dropped) and LSE.
    float lse[2];
    softmax.finish(o, sh.scale, lse);
    T* o_ptr = static_cast<T*>(p.o) + (start + q0) * q_stride + h * D;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp * 16 + g + r * 8;
      if (q0 + row >= len) continue;
      T* dst = o_ptr + row * q_stride + 2 * t;
#pragma unroll
      for (int ot = 0; ot < OT; ++ot)
        *reinterpret_cast<uint32_t*>(dst + ot * 8) = MmaType<T>::pack(o[ot][2 * r], o[ot][2 * r + 1]);
      if (t == 0) p.lse[int64_t(h) * sh.total_tokens + start + q0 + row] = lse[r];
    }
  }
}

}  // namespace fptrain::attention::cuda
