// Backward mainloops.
//
// dK/dV kernel: one CTA owns a block of BN keys of one KV head and visits, for every
// query head of its GQA group, the query blocks that see those keys; dK and dV
// accumulate in registers over the whole group (no per-query-head copies, no
// reduction pass). 8 warps, each owning 16 keys. It works on transposed tiles
// (S^T = K Q^T), so P^T and dS^T are already A fragments for dV += P^T dO and
// dK += dS^T Q. In the default mode it also adds dS K into an fp32 dQ buffer with
// atomics (dS^T goes through shared memory for that).
//
// dQ kernel (deterministic mode): one CTA owns BM queries of one head and visits their
// key blocks, recomputing S and dP; no atomics, so results are bit-identical per run.
#pragma once

#include "attention/cuda/masking.cuh"
#include "attention/cuda/mma_utils.cuh"
#include "attention/cuda/params.h"
#include "attention/cuda/tile_scheduler.cuh"
#include "attention/cuda/tile_sizes.h"

namespace fptrain::attention::cuda {

__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, bool valid) {
  int n = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(n));
}

template <int D>
struct BwdTraits {
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBlockN = bwd_block_n(D);
  static constexpr int kBlockM = bwd_block_m(D);
  static_assert(kBlockN == 16 * kWarps, "each warp owns 16 keys");
  static constexpr int kKVBytes = kBlockN * D * 2;
  static constexpr int kQBytes = kBlockM * D * 2;
  static constexpr int kDsBytes = kBlockN * kBlockM * 2;
  static constexpr int kRowStatBytes = kBlockM * 4;
  // K, V, Q[2], dO[2], dS^T, lse[2], dsum[2]
  static constexpr int kSmemBytes = 2 * kKVBytes + 4 * kQBytes + kDsBytes + 4 * kRowStatBytes;
};

// A operand read straight from a swizzled tile, one k-step at a time (keeps registers
// for the accumulators): acc[16 x 8*NT] += A[rows a_row0.., 16*KT] * B^T, B stored [n][k].
template <typename T, int KT, int NT, int COLS>
__device__ __forceinline__ void gemm_sa_bt(float (&acc)[NT][4], uint32_t a_base, int a_row0, uint32_t b_base) {
  int lane = threadIdx.x & 31;
#pragma unroll
  for (int kt = 0; kt < KT; ++kt) {
    uint32_t a[1][4];
    ldmatrix_x4(a[0], a_base + SwizzledTile<COLS>::offset(a_row0 + (lane & 15), kt * 16 + (lane >> 4) * 8));
#pragma unroll
    for (int nt = 0; nt < NT; nt += 2) {
      uint32_t b[4];
      int mi = lane >> 3;
      int row = nt * 8 + (mi >> 1) * 8 + (lane & 7);
      int col = kt * 16 + (mi & 1) * 8;
      ldmatrix_x4(b, b_base + SwizzledTile<COLS>::offset(row, col));
      MmaType<T>::mma(acc[nt], a[0], b[0], b[1]);
      MmaType<T>::mma(acc[nt + 1], a[0], b[2], b[3]);
    }
  }
}

template <typename T, int D, bool kAtomicDQ>
__global__ void __launch_bounds__(BwdTraits<D>::kThreads, 1) bwd_dkdv_kernel(BwdParams p) {
  using Tr = BwdTraits<D>;
  constexpr int BN = Tr::kBlockN, BM = Tr::kBlockM, MT = BM / 8, OT = D / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ int item_slot;
  const uint32_t s_k = smem_addr(smem);
  const uint32_t s_v = s_k + Tr::kKVBytes;
  const uint32_t s_q0 = s_v + Tr::kKVBytes;
  const uint32_t s_do0 = s_q0 + 2 * Tr::kQBytes;
  const uint32_t s_ds = s_do0 + 2 * Tr::kQBytes;
  float* s_lse = reinterpret_cast<float*>(smem + 2 * Tr::kKVBytes + 4 * Tr::kQBytes + Tr::kDsBytes);
  float* s_dsum = s_lse + 2 * BM;

  const VarlenShape& sh = p.shape;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int group = sh.heads_q / sh.heads_kv;
  const int64_t q_stride = int64_t(sh.heads_q) * D, kv_stride = int64_t(sh.heads_kv) * D;
  const float scale_log2 = sh.scale * 1.4426950408889634f;
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
    load_tile_async<BN, D, Tr::kThreads>(s_k, static_cast<const T*>(p.k) + kv_off, kv_stride, len - k0);
    load_tile_async<BN, D, Tr::kThreads>(s_v, static_cast<const T*>(p.v) + kv_off, kv_stride, len - k0);

    auto load_q_step = [&](int step, int buf) {
      const int h = hk * group + step / q_blocks;
      const int q0 = (qr.begin + step % q_blocks) * BM;
      const int64_t off = int64_t(start + q0) * q_stride + h * D;
      load_tile_async<BM, D, Tr::kThreads>(s_q0 + buf * Tr::kQBytes, static_cast<const T*>(p.q) + off,
                                           q_stride, len - q0);
      load_tile_async<BM, D, Tr::kThreads>(s_do0 + buf * Tr::kQBytes, static_cast<const T*>(p.dout) + off,
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
      __syncthreads();
      const int h = hk * group + step / q_blocks;
      const int q0 = (qr.begin + step % q_blocks) * BM;
      const uint32_t s_q = s_q0 + buf * Tr::kQBytes, s_do = s_do0 + buf * Tr::kQBytes;
      const float* lse = s_lse + buf * BM;
      const float* dsum = s_dsum + buf * BM;

      // S^T = K Q^T for this warp's 16 keys, then P^T = exp(scale * S^T - lse[q]).
      float st[MT][4];
      zero_acc(st);
      gemm_sa_bt<T, D / 16, MT, D>(st, s_k, warp * 16, s_q);
      if (block_needs_mask(q0, BM, k0, BN, len, sh.causal, sh.window))
        apply_mask<false>(st, k0 + warp * 16, q0, len, sh.causal, sh.window);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float l2 = lse[mt * 8 + 2 * t + (e & 1)] * 1.4426950408889634f;
          st[mt][e] = exp2f(fmaf(st[mt][e], scale_log2, -l2));
        }
      }
      // dP^T = V dO^T
      float dpt[MT][4];
      zero_acc(dpt);
      gemm_sa_bt<T, D / 16, MT, D>(dpt, s_v, warp * 16, s_do);

      uint32_t pf[BM / 16][4];
      acc_to_a_frags<T, BM / 16>(pf, st);
      gemm_a_b<T, BM / 16, OT, D>(dv, pf, s_do, 0, 0);  // dV += P^T dO

      // dS^T = P^T * (dP^T - dsum[q])  (unscaled; the softmax scale is applied at the end)
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) st[mt][e] *= dpt[mt][e] - dsum[mt * 8 + 2 * t + (e & 1)];
      }
      uint32_t dsf[BM / 16][4];
      acc_to_a_frags<T, BM / 16>(dsf, st);
      gemm_a_b<T, BM / 16, OT, D>(dk, dsf, s_q, 0, 0);  // dK += dS^T Q

      if constexpr (kAtomicDQ) {
        // dS^T -> shared memory (swizzled [key][query]), then dQ = dS K with warps
        // splitting 4 query row groups x 2 halves of D.
        using DsTile = SwizzledTile<BM>;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const int key = warp * 16 + g + r * 8, col = mt * 8 + 2 * t;
            uint32_t addr = s_ds + DsTile::offset(key, col & ~7) + (col & 7) * 2;
            uint32_t v = MmaType<T>::pack(st[mt][2 * r], st[mt][2 * r + 1]);
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v));
          }
        }
        __syncthreads();
        constexpr int DQT = D / 2 / 8;
        const int m0 = (warp & 3) * 16, d0 = (warp >> 2) * (D / 2);
        float dq[DQT][4];
        zero_acc(dq);
#pragma unroll
        for (int kt = 0; kt < BN / 16; ++kt) {
          uint32_t a[1][4];
          {
            const int mi = lane >> 3;
            const int row = kt * 16 + (mi >> 1) * 8 + (lane & 7);
            const int col = m0 + (mi & 1) * 8;
            ldmatrix_x4_trans(a[0], s_ds + DsTile::offset(row, col));
          }
          gemm_a_b<T, 1, DQT, D>(dq, a, s_k, kt * 16, d0);
        }
        float* dq_ptr = p.dq_accum + (int64_t(start + q0) * sh.heads_q + h) * D;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = m0 + g + r * 8;
          if (q0 + row >= len) continue;
          float* dst = dq_ptr + row * q_stride + d0 + 2 * t;
#pragma unroll
          for (int i = 0; i < DQT; ++i) {
            atomicAdd(dst + i * 8, dq[i][2 * r]);
            atomicAdd(dst + i * 8 + 1, dq[i][2 * r + 1]);
          }
        }
      }
      __syncthreads();  // buffers of this step (and dS^T) are free again
      buf ^= 1;
    }

    // Epilogue: dK (scaled) and dV for this warp's keys.
    T* dk_ptr = static_cast<T*>(p.dk) + kv_off;
    T* dv_ptr = static_cast<T*>(p.dv) + kv_off;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = warp * 16 + g + r * 8;
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

template <typename T, int D>
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
  const float scale_log2 = sh.scale * 1.4426950408889634f;
  const int num_items = *p.q_tiles.num_tiles * sh.heads_q;

  for (;;) {
    const int item = claim_item(p.q_tiles.next_item, &item_slot);
    if (item >= num_items) break;
    const Tile tile = p.q_tiles.tiles[item / sh.heads_q];
    const int h = item % sh.heads_q, hk = h / group;
    const int start = sh.cu_seqlens[tile.seq];
    const int len = sh.cu_seqlens[tile.seq + 1] - start;
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
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = q0 + warp * 16 + g + r * 8;
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
      const int kb = n * BN;
      if (block_needs_mask(q0, BM, kb, BN, len, sh.causal, sh.window))
        apply_mask<true>(s, q0 + warp * 16, kb, len, sh.causal, sh.window);
      float dp[NT][4];
      zero_acc(dp);
      gemm_sa_bt<T, D / 16, NT, D>(dp, s_do, warp * 16, s_v);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e >> 1;
          const float pr = exp2f(fmaf(s[nt][e], scale_log2, -lse2[r]));
          s[nt][e] = pr * (dp[nt][e] - dsum[r]);
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
            MmaType<T>::pack(dq[ot][2 * r] * sh.scale, dq[ot][2 * r + 1] * sh.scale);
    }
  }
}

}  // namespace fptrain::attention::cuda
