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
