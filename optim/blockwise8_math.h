// The arithmetic of AdamW with 8-bit blockwise moments as bitsandbytes' AdamW8bit
// keeps them (optim_bits=8, block_wise=True), shared by the CPU reference
// (optim/flat_adamw8bit.cpp) and the CUDA kernel (optim/cuda/flat_adamw8bit_kernels.cu)
// so that both round identically. Free of LibTorch.
//
// Each moment is a uint8 code into a 256-value code book (optim/blockwise8.h: bitsandbytes'
// dynamic map, signed for exp_avg, unsigned for exp_avg_sq) and one fp32 absmax per block
// of kBlock consecutive elements: value = code_book[code] * absmax. A step, per block,
// follows bitsandbytes' kOptimizerStatic8bit2StateBlockwise (csrc/kernels.cu, ADAM):
//
//   g  = gradient × clip coefficient          (a non-finite gradient: moments 0, weight kept)
//   v  = fma(g, (1-beta2)·g, (code_v·absmax_v)·beta2)
//   m  = fma(1-beta1, g, (code_m·absmax_m)·beta1)
//   absmax = max |m| (|v|) over the block
//   w  = fma(step_size, m / fma(correction2, eps, sqrt(v)), w)
//   w  = w·(1 - lr·wd)                         decay after the update, when wd > 0
//   code = nearest_code(m / absmax), the sign of m kept (below)
//
// with correction2 = sqrt(1 - beta2^t), step_size = -(lr·correction2) / (1 - beta1^t).
// The three FMAs are where nvcc contracts bitsandbytes' expressions (the PTX of the same
// expressions built with bnb's flags, --use_fast_math, by nvcc 13 for sm_90). bitsandbytes then computes the divisions, square roots
// and powers with approximate instructions (div.approx, sqrt.approx, lg2/ex2.approx)
// and flushes subnormals; here every operation is IEEE-rounded, so results agree with
// bitsandbytes to a few ulp, not bit for bit (tests/trainer_gpu/flat_adamw8bit_gpu_test.cpp).
#pragma once

#include "optim/flat_adamw_math.h"

#include <cfloat>
#include <cmath>
#include <cstdint>

namespace fptrain::optim::blockwise8 {

using flat::f_add;
using flat::f_bits;
using flat::f_div;
using flat::f_fma;
using flat::f_mul;
using flat::f_sqrt;

// Elements per absmax: BLOCKSIZE_2STATE in bitsandbytes' csrc/ops.cu (0.50), the block of
// its 8-bit blockwise two-state optimizers (optim/optimizer.py allocates n/256 absmax).
constexpr int64_t kBlock = 256;
constexpr int kCodes = 256;

// The two code books of AdamW8bit: exp_avg's signed dynamic map, exp_avg_sq's unsigned one
// (optim/blockwise8.h makes them), each increasing.
struct CodeBooks {
  float exp_avg[kCodes];
  float exp_avg_sq[kCodes];
};

// The per-step constants, from the host (make_scalars).
struct Scalars {
  float beta1 = 0.9f, one_minus_beta1 = 0.1f;
  float beta2 = 0.999f, one_minus_beta2 = 0.001f;
  float eps = 1e-8f;
  float correction2 = 1.0f;  // sqrt(1 - beta2^t)
  float step_size = 0.0f;    // -(lr · correction2) / (1 - beta1^t)
  float decay = 1.0f;        // 1 - lr · wd
  int32_t apply_decay = 0;   // wd > 0
};

// As bitsandbytes computes them in fp32 from fp32 arguments; the powers are correctly
// rounded here (bitsandbytes: __powf).
inline Scalars make_scalars(double lr, double beta1, double beta2, double eps, double weight_decay, int64_t step) {
  Scalars s;
  const float lr_f = static_cast<float>(lr), wd = static_cast<float>(weight_decay);
  s.beta1 = static_cast<float>(beta1);
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta1 = 1.0f - s.beta1;
  s.one_minus_beta2 = 1.0f - s.beta2;
  s.eps = static_cast<float>(eps);
  const double t = static_cast<double>(step);
  const float correction1 = 1.0f - static_cast<float>(std::pow(static_cast<double>(s.beta1), t));
  s.correction2 = std::sqrt(1.0f - static_cast<float>(std::pow(static_cast<double>(s.beta2), t)));
  s.step_size = -(lr_f * s.correction2) / correction1;
  s.decay = 1.0f - lr_f * wd;
  s.apply_decay = wd > 0.0f;
  return s;
}

FPTRAIN_FLAT_HD bool is_finite(float x) { return (f_bits(x) & 0x7f800000u) != 0x7f800000u; }
FPTRAIN_FLAT_HD bool sign_bit(float x) { return (f_bits(x) >> 31) != 0u; }
// The block maximum as bitsandbytes folds it (fmaxf from -FLT_MAX: NaN never wins).
FPTRAIN_FLAT_HD float max_abs(float acc, float x) {
#if defined(__CUDA_ARCH__)
  return fmaxf(acc, fabsf(x));
#else
  return std::fmax(acc, std::fabs(x));
#endif
}

// The code of x (a value over its block's absmax) in an increasing 256-value book: bitsandbytes'
// quantize_2D, a binary search that ends on the nearer of the two codes around x by the
// fp32 midpoint (ties to the lower code). Deterministic: no stochastic rounding.
FPTRAIN_FLAT_HD uint8_t nearest_code(const float* book, float x, bool is_signed) {
  int pivot = 127, upper_pivot = 255, lower_pivot = 0;
  float lower = is_signed ? -1.0f : 0.0f, upper = 1.0f;
  float val = book[pivot];
  for (int step = 64; step > 0; step >>= 1) {
    if (x > val) {
      lower_pivot = pivot;
      lower = val;
      pivot += step;
    } else {
      upper_pivot = pivot;
      upper = val;
      pivot -= step;
    }
    val = book[pivot];
  }
  if (x > val) return static_cast<uint8_t>(x > f_mul(f_add(upper, val), 0.5f) ? upper_pivot : pivot);
  return static_cast<uint8_t>(x < f_mul(f_add(lower, val), 0.5f) ? lower_pivot : pivot);
}

// exp_avg's code: the nearest, moved one code toward the value's sign when the code's
// sign differs (bitsandbytes keeps the first moment's sign; uint8 wraps as there).
FPTRAIN_FLAT_HD uint8_t keep_sign(const float* book, uint8_t c, float m) {
  if (sign_bit(book[c]) != sign_bit(m)) c = static_cast<uint8_t>(m > 0.0f ? c + 1 : c - 1);
  return c;
}
FPTRAIN_FLAT_HD uint8_t quantize_signed(const float* book, float m, float absmax) {
  return keep_sign(book, nearest_code(book, f_div(m, absmax), true), m);
}
FPTRAIN_FLAT_HD uint8_t quantize_unsigned(const float* book, float v, float absmax) {
  return nearest_code(book, f_div(v, absmax), false);
}
FPTRAIN_FLAT_HD float dequantize(const float* book, uint8_t code, float absmax) { return f_mul(book[code], absmax); }

// Phase 1 of an element: the new moments from the stored ones (dequantised) and the
// gradient `graw` (before the clip coefficient). False for a non-finite gradient: the
// moments become 0 and the weight must stay as it is.
FPTRAIN_FLAT_HD bool update_moments(float graw, float coef, float m_old, float v_old, float& m, float& v,
                                    const Scalars& s) {
  if (!is_finite(graw)) {
    m = 0.0f;
    v = 0.0f;
    return false;
  }
  const float g = f_mul(graw, coef);
  v = f_fma(g, f_mul(s.one_minus_beta2, g), f_mul(v_old, s.beta2));
  m = f_fma(s.one_minus_beta1, g, f_mul(m_old, s.beta1));
  return true;
}

// Phase 2: the weight after the Adam update, before weight decay (a model of lower
// precision without master weights rounds between the two, as bitsandbytes stores T).
FPTRAIN_FLAT_HD float adam_update(float w, float m, float v, const Scalars& s) {
  return f_fma(s.step_size, f_div(m, f_fma(s.correction2, s.eps, f_sqrt(v))), w);
}
FPTRAIN_FLAT_HD float apply_decay(float w, const Scalars& s) { return s.apply_decay ? f_mul(w, s.decay) : w; }

}  // namespace fptrain::optim::blockwise8
