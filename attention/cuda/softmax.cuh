// Online softmax over a warp's 16-row score tile (each thread holds 2 rows, a row's
// columns spread over the 4 threads of a quad). Works in base 2: exp(x) = exp2(x*log2 e).
#pragma once

#include <cmath>

namespace fptrain::attention::cuda {

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// 2^x on the special-function unit, flushing denormal results to zero (exp2f adds range
// fix-ups around the same instruction; the probabilities never need denormals).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float fast_log2(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Soft-capped scores (Gemma 2's attn_logit_softcapping): the softmax sees
// cap * tanh(scale * s / cap) instead of scale * s. The kernels replace each raw score s by
// t = tanh(s * scale / cap) and then exponentiate with cap in place of the softmax scale,
// so the online softmax, the LSE and the backward's recomputation keep their form; the
// backward's dS gains the factor d(cap t)/d(scale s) = 1 - t^2 (the scale is applied at the
// end as without a cap). tanh(x) = 1 - 2 / (2^(2x log2 e) + 1) with the argument clamped to
// 2^64 (tanh is 1 in fp32 long before): one ex2, and the reciprocal on the FMA pipe (a
// bit-trick guess within 12.5% and three Newton steps: ~1e-7), since the special-function
// unit is the forward's bottleneck already (a second ex2 and rcp.approx there cost 35% at
// D = 128). Absolute error a few ulp of 1, which cap (50 in Gemma 2) turns into ~1e-5 in the
// logit; tanh.approx (2^-11 relative) would move the logits by up to 0.02.
__device__ __forceinline__ float rcp_newton(float x) {  // x in [1, 2^64]
  float y = __int_as_float(0x7EF311C3 - __float_as_int(x));
#pragma unroll
  for (int i = 0; i < 3; ++i) y = y * fmaf(-x, y, 2.f);
  return y;
}
__device__ __forceinline__ float softcap_tanh(float x) {
  return fmaf(-2.f, rcp_newton(fast_exp2(fminf(x * 2.8853900817779268f, 64.f)) + 1.f), 1.f);
}

// Which softcap a kernel was built for: kSoftcap = false compiles to the uncapped kernel.
template <bool kSoftcap>
struct ScoreCap {
  // The factor the softmax exponentiates the (possibly capped) scores with.
  __host__ __device__ static float exp_scale(float scale, float softcap) { return kSoftcap ? softcap : scale; }
  // Raw scores -> tanh(s * scale / cap), in place (nothing without a cap).
  template <int R, int C>
  __device__ __forceinline__ static void apply(float (&s)[R][C], float pre) {
    if constexpr (kSoftcap) {
#pragma unroll
      for (int i = 0; i < R; ++i)
#pragma unroll
        for (int e = 0; e < C; ++e) s[i][e] = softcap_tanh(s[i][e] * pre);
    }
  }
  // 1 - t^2 recovered from a probability p = 2^(t cap log2e - lse2): t = (log2 p + lse2) /
  // (cap log2 e). p = 0 (masked or underflowed) contributes nothing: 0 then.
  __device__ __forceinline__ static float dtanh_from_prob(float p, float lse2, float inv_cap_log2) {
    if constexpr (!kSoftcap) return 1.f;
    const float t = (fast_log2(p) + lse2) * inv_cap_log2;
    return p > 0.f ? fmaf(-t, t, 1.f) : 0.f;
  }
};

struct OnlineSoftmax {
  float row_max[2];  // running max of the raw scores (unscaled), -inf until a key is seen
  float row_sum[2];  // this thread's partial sum of exp; reduced over the quad at the end

  __device__ __forceinline__ void init() {
    row_max[0] = row_max[1] = -INFINITY;
    row_sum[0] = row_sum[1] = 0.f;
  }

  // One online-softmax step in two halves, so that the exponentials of a new score block
  // can run while the previous P V product is still writing o: first the scores become P
  // and the per-row rescale factors are returned, then o is rescaled once that product is done.
  template <int NT>
  __device__ __forceinline__ void scores_to_probs(float (&s)[NT][4], float scale_log2, float (&alpha)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = row_max[r];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      mx = quad_max(mx);
      // A row with no visible key yet keeps -inf; 0 as its reference makes
      // exp2(-inf - ref) = 0 instead of NaN.
      const float ref = mx == -INFINITY ? 0.f : mx * scale_log2;
      alpha[r] = fast_exp2(row_max[r] * scale_log2 - ref);
      row_max[r] = mx;
      float sum = 0.f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        s[nt][2 * r] = fast_exp2(fmaf(s[nt][2 * r], scale_log2, -ref));
        s[nt][2 * r + 1] = fast_exp2(fmaf(s[nt][2 * r + 1], scale_log2, -ref));
        sum += s[nt][2 * r] + s[nt][2 * r + 1];
      }
      row_sum[r] = row_sum[r] * alpha[r] + sum;
    }
  }
  template <int OT>
  __device__ __forceinline__ static void rescale(float (&o)[OT][4], const float (&alpha)[2]) {
#pragma unroll
    for (int ot = 0; ot < OT; ++ot) {
      o[ot][0] *= alpha[0];
      o[ot][1] *= alpha[0];
      o[ot][2] *= alpha[1];
      o[ot][3] *= alpha[1];
    }
  }

  // Normalises o and returns each row's natural-log sum-exp of the scaled scores.
  template <int OT>
  __device__ __forceinline__ void finish(float (&o)[OT][4], float scale, float (&lse)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = quad_sum(row_sum[r]);
      float inv = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
      for (int ot = 0; ot < OT; ++ot) {
        o[ot][2 * r] *= inv;
        o[ot][2 * r + 1] *= inv;
      }
      lse[r] = sum > 0.f ? row_max[r] * scale + logf(sum) : INFINITY;
    }
  }
};

}  // namespace fptrain::attention::cuda
