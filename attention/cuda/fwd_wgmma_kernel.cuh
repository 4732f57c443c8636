// Forward mainloop on Hopper tensor cores (wgmma).
//
// One CTA = two warpgroups; each owns 64 of the block's 128 query rows. Per key block:
// S = Q K^T as a shared-memory x shared-memory wgmma (m64n128), the online softmax in
// registers, then O += P V with P fed from registers (the S accumulator converted to
// 16-bit is already wgmma's A-fragment layout) and V read MN-major from the same slab
// layout that K uses. K/V blocks are double-buffered through cp.async; key blocks are
// visited last to first so the masked diagonal blocks come first.
#pragma once

#include "attention/cuda/masking.cuh"
#include "attention/cuda/mma_utils.cuh"
#include "attention/cuda/params.h"
#include "attention/cuda/softmax.cuh"
#include "attention/cuda/tile_scheduler.cuh"
#include "attention/cuda/tile_sizes.h"
#include "attention/cuda/wgmma_ops.cuh"
#include "attention/cuda/wgmma_utils.cuh"

namespace fptrain::attention::cuda {

template <int D>
struct FwdTraits {
  static constexpr int kWarpGroups = 2;
  static constexpr int kThreads = 128 * kWarpGroups;
  static constexpr int kBlockM = fwd_block_m(D);
  static constexpr int kBlockN = fwd_block_n(D);
  static_assert(kBlockM == 64 * kWarpGroups, "each warpgroup owns 64 query rows");
  using QTile = SlabTile<kBlockM, D>;
  using KVTile = SlabTile<kBlockN, D>;
  // Q, K[2], V[2], plus slack to align the base to the 1024-byte swizzle pattern.
  static constexpr int kSmemBytes = QTile::kBytes + 4 * KVTile::kBytes + 1024;
};

template <typename T, int D>
__global__ void __launch_bounds__(FwdTraits<D>::kThreads, 1) fwd_kernel(FwdParams p) {
  using Tr = FwdTraits<D>;
  using QTile = typename Tr::QTile;
  using KVTile = typename Tr::KVTile;
  constexpr int BM = Tr::kBlockM, BN = Tr::kBlockN, NT = BN / 8, OT = D / 8;
  extern __shared__ unsigned char smem[];
  __shared__ int item_slot;
  const uint32_t s_q = (smem_addr(smem) + 1023) & ~1023u;
  const uint32_t s_k0 = s_q + QTile::kBytes;
  const uint32_t s_v0 = s_k0 + 2 * KVTile::kBytes;

  const VarlenShape& sh = p.shape;
  const int wg = threadIdx.x / 128;
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int row0 = wg * 64 + ((threadIdx.x / 32) & 3) * 16;  // this warp's first row in the block
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
      const int k0 = n * BN;
      load_slab_tile_async<BN, D, Tr::kThreads>(s_k0 + buf * KVTile::kBytes, k_ptr + k0 * kv_stride, kv_stride,
                                                len - k0);
      load_slab_tile_async<BN, D, Tr::kThreads>(s_v0 + buf * KVTile::kBytes, v_ptr + k0 * kv_stride, kv_stride,
                                                len - k0);
    };
    load_slab_tile_async<BM, D, Tr::kThreads>(s_q, q_ptr, q_stride, len - q0);
    load_kv(kr.end - 1, 0);
    cp_async_commit();

    float o[OT][4];
    zero_acc(o);
    OnlineSoftmax softmax;
    softmax.init();

    int buf = 0;
    for (int n = kr.end - 1; n >= kr.begin; --n) {
      if (n > kr.begin) {
        load_kv(n - 1, buf ^ 1);
        cp_async_commit();
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      fence_proxy_async();
      __syncthreads();

      // S = Q K^T (this warpgroup's 64 rows x BN keys), K-major operands.
      float s[NT][4];
      zero_acc(s);
      const uint32_t s_k = s_k0 + buf * KVTile::kBytes, s_v = s_v0 + buf * KVTile::kBytes;
      wgmma_fence();
#pragma unroll
      for (int kt = 0; kt < D / 16; ++kt) {
        const uint32_t a = s_q + (kt / 4) * QTile::kSlabBytes + wg * 64 * 128 + (kt % 4) * 32;
        const uint32_t b = s_k + (kt / 4) * KVTile::kSlabBytes + (kt % 4) * 32;
        Wgmma<T, BN>::template ss<0, 0>(s, wgmma_desc(a, 16, 1024), wgmma_desc(b, 16, 1024), kt > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_acc(s);

      const int k0 = n * BN;
      if (block_needs_mask(q0, BM, k0, BN, len, sh.causal, sh.window))
        apply_mask<true>(s, q0 + row0, k0, len, sh.causal, sh.window);
      softmax.update(s, o, scale_log2);

      // O += P V: P from registers, V MN-major (rows are keys = K, slabs are 64-wide N panels).
      uint32_t pf[BN / 16][4];
      acc_to_a_frags<T, BN / 16>(pf, s);
      wgmma_fence();
#pragma unroll
      for (int kt = 0; kt < BN / 16; ++kt)
        Wgmma<T, D>::template rs<1>(o, pf[kt], wgmma_desc(s_v + kt * 16 * 128, KVTile::kSlabBytes, 1024), 1);
      wgmma_commit();
      wgmma_wait<0>();
      fence_acc(o);
#pragma unroll
      for (int kt = 0; kt < BN / 16; ++kt)
#pragma unroll
        for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(pf[kt][j])::"memory");
      __syncthreads();  // all warps are done with `buf` before it is refilled
      buf ^= 1;
    }

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
  }
}

}  // namespace fptrain::attention::cuda
