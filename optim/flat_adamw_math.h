// The arithmetic of one AdamW element, shared by the CPU reference path
// (optim/flat_adamw.cpp) and the CUDA kernel (optim/cuda/flat_adamw_kernels.cu),
// so that both round identically. Free of LibTorch.
//
// It is torch's fused AdamW (at::_fused_adamw_, the CPU kernel's vectorized path,
// ADAMW mode) operation for operation, in fp32:
//
//   w  = w * (1 - lr*wd)                                   decoupled weight decay
//   m  = fma(1-beta1, g - m, m)                            m.lerp_(g, 1-beta1)
//   v  = fma((1-beta2)*g, g, v*beta2)                     v*beta2 + (1-beta2)*g*g
//   w  = w + (-lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps)     bc_i = 1 - beta_i^step
//
// with every scalar computed on the host in double and rounded to float as torch
// does (make_adamw_scalars). The two FMAs are torch's too: the lerp is an explicit
// fmadd in its source, and its x86 build contracts the second-moment sum into one
// (measured against at::_fused_adamw_ of torch 2.11 on AVX-512: bit-identical,
// tests/trainer/flat_optimizer_test.cpp). Each operation is written out as an IEEE-rounded
// intrinsic on the device so that nvcc contracts nothing into an FMA the CPU does
// not do; the CPU file is compiled with -ffp-contract=off for the same reason.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FPTRAIN_FLAT_HD __host__ __device__ __forceinline__
#else
#define FPTRAIN_FLAT_HD inline
#endif

namespace fptrain::optim::flat {

// The per-step constants of the update (host-computed; see make_adamw_scalars).
struct AdamWScalars {
  float decay = 1.0f;            // float(1 - lr * weight_decay)
  float lerp_coeff = 0.1f;       // float(1 - beta1), or that minus 1 when it is >= 0.5
  float beta2 = 0.999f;
  float one_minus_beta2 = 0.001f;
  float bias_correction2_sqrt = 1.0f;  // float(sqrt(1 - beta2^step))
  float neg_step_size = 0.0f;          // float(-lr / (1 - beta1^step))
  float eps = 1e-8f;
  int32_t apply_decay = 0;  // weight_decay != 0
  int32_t lerp_small = 1;   // |1 - beta1| < 0.5: m + w (g - m), else g - (1 - w)(g - m)
};

// lr, betas, eps, weight decay as configured; `step` is the step being taken (1 for the first).
inline AdamWScalars make_adamw_scalars(double lr, double beta1, double beta2, double eps, double weight_decay,
                                       int64_t step) {
  // torch keeps the step count in a float tensor and reads it back as float.
  const double t = static_cast<double>(static_cast<float>(step));
  const double bias_correction1 = 1 - std::pow(beta1, t);
  const double bias_correction2 = 1 - std::pow(beta2, t);
  AdamWScalars s;
  s.apply_decay = weight_decay != 0.0;
  s.decay = static_cast<float>(1 - lr * weight_decay);
  const float lerp_weight = static_cast<float>(1 - beta1);
  s.lerp_small = std::fabs(lerp_weight) < 0.5f;
  s.lerp_coeff = s.lerp_small ? lerp_weight : lerp_weight - 1.0f;
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta2 = static_cast<float>(1 - beta2);
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.neg_step_size = static_cast<float>(-(lr / bias_correction1));
  s.eps = static_cast<float>(eps);
  return s;
}

#if defined(__CUDA_ARCH__)
FPTRAIN_FLAT_HD float f_mul(float a, float b) { return __fmul_rn(a, b); }
FPTRAIN_FLAT_HD float f_add(float a, float b) { return __fadd_rn(a, b); }
FPTRAIN_FLAT_HD float f_sub(float a, float b) { return __fsub_rn(a, b); }
FPTRAIN_FLAT_HD float f_div(float a, float b) { return __fdiv_rn(a, b); }
FPTRAIN_FLAT_HD float f_sqrt(float a) { return __fsqrt_rn(a); }
FPTRAIN_FLAT_HD float f_fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
#else
FPTRAIN_FLAT_HD float f_mul(float a, float b) { return a * b; }
FPTRAIN_FLAT_HD float f_add(float a, float b) { return a + b; }
FPTRAIN_FLAT_HD float f_sub(float a, float b) { return a - b; }
FPTRAIN_FLAT_HD float f_div(float a, float b) { return a / b; }
FPTRAIN_FLAT_HD float f_sqrt(float a) { return std::sqrt(a); }
FPTRAIN_FLAT_HD float f_fma(float a, float b, float c) { return std::fma(a, b, c); }
#endif

// One element: `g` is the (accumulated, clip-scaled) gradient; w, m, v are
// updated in place, in fp32.
FPTRAIN_FLAT_HD void adamw_element(float g, float& w, float& m, float& v, const AdamWScalars& s) {
  if (s.apply_decay) w = f_mul(w, s.decay);
  const float diff = f_sub(g, m);
  m = f_fma(s.lerp_coeff, diff, s.lerp_small ? m : g);
  v = f_fma(f_mul(s.one_minus_beta2, g), g, f_mul(v, s.beta2));
  const float denom = f_add(f_div(f_sqrt(v), s.bias_correction2_sqrt), s.eps);
  w = f_add(w, f_div(f_mul(s.neg_step_size, m), denom));
}

// ---- Masters as a bf16 weight and its 16-bit remainder ------------------------
//
// The bf16 copy of an fp32 master is its upper 16 bits rounded to nearest with ties
// away from zero (adding half a bf16 ulp to the bit pattern carries into the upper half
// exactly when the lower half is at least 0x8000). Then the master is that weight's bits
// and the master's own lower 16 bits, recoverable for every bit pattern: the upper half
// is the weight's, less one when the lower half is 0x8000 or more. Ties to even (what a
// cast does) cannot be undone so: a lower half of 0x8000 under an even weight can come
// from either neighbour, 65,537 cases for 16 bits. So every bf16 model with master
// weights rounds its copy this way, kept as an fp32 buffer or as the remainder buffer
// (optimizer.master_weights: split), and the two train bit for bit alike.
FPTRAIN_FLAT_HD uint32_t f_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}
FPTRAIN_FLAT_HD float f_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}
// The bf16 bits of a master (nearest, ties away from zero).
FPTRAIN_FLAT_HD uint16_t master_weight_bits(float master) {
  return static_cast<uint16_t>((f_bits(master) + 0x8000u) >> 16);
}
// The master's lower 16 bits: what the weight does not hold.
FPTRAIN_FLAT_HD uint16_t master_remainder(float master) { return static_cast<uint16_t>(f_bits(master) & 0xFFFFu); }
// The master again from its weight's bits and its remainder.
FPTRAIN_FLAT_HD float join_master(uint16_t weight_bits, uint16_t remainder) {
  const uint32_t upper = static_cast<uint16_t>(weight_bits - (remainder >= 0x8000u ? 1u : 0u));
  return f_from_bits((upper << 16) | remainder);
}

// The gradient the update sees: the fp32 accumulator (when there is one) plus
// the model-dtype buffer, times the clip coefficient.
FPTRAIN_FLAT_HD float effective_grad(float accum, float grad, float coef) { return f_mul(f_add(accum, grad), coef); }
FPTRAIN_FLAT_HD float effective_grad(float grad, float coef) { return f_mul(grad, coef); }

// The clip coefficient as torch.nn.utils.clip_grad_norm_ computes it in fp32:
// min(1, max_norm / (norm + 1e-6)); a NaN norm gives NaN, as torch's clamp does.
// max_norm <= 0: no clipping (1).
FPTRAIN_FLAT_HD float clip_coefficient(float norm, float max_norm) {
  if (!(max_norm > 0.0f)) return 1.0f;
  const float c = f_div(max_norm, f_add(norm, 1e-6f));
  return c > 1.0f ? 1.0f : c;
}

}  // namespace fptrain::optim::flat
