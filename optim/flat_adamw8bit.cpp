// The AdamW step with 8-bit blockwise moments over flat buffers: checks, the CPU
// reference, dispatch to optim/cuda/. Compiled with -ffp-contract=off
// (optim/CMakeLists.txt): the arithmetic must round exactly as written in
// optim/blockwise8_math.h, as the CUDA kernel spells it out.
#include "optim/flat_adamw.h"

#include "optim/blockwise8.h"
#include "optim/cuda/flat_adamw_cuda.h"
#include "optim/flat_cpu_masters.h"

#include "optim/cpu_parallel.h"
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cfloat>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace fptrain::optim::flat {
namespace {

using blockwise8::kBlock;

constexpr int64_t kBlockGrain = 64;  // blocks per CPU task

void check(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("flat optimizer (8-bit moments): " + what);
}

void check_like(const at::Tensor& t, const char* what, int64_t n, const at::Tensor& like, at::ScalarType dtype) {
  check(t.defined() && t.dim() == 1 && t.is_contiguous() && t.numel() == n && t.device() == like.device() &&
            t.scalar_type() == dtype,
        std::string(what) + " must be a contiguous 1-D " + c10::toString(dtype) + " buffer of " + std::to_string(n) +
            " elements on the gradients' device");
}

void check_args(const at::Tensor& weights, const at::Tensor& master, const Moments8bit& q, const at::Tensor& grads,
                const at::Tensor& accum, const at::Tensor& coef) {
  check(grads.defined(), "the gradient buffer is undefined");
  const int64_t n = grads.numel();
  const auto dtype = grads.scalar_type();
  check(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf,
        std::string("unsupported model dtype ") + c10::toString(dtype));
  check(n % kBlock == 0, "the length " + std::to_string(n) + " is not a multiple of the block (" +
                             std::to_string(kBlock) + ")");
  check_like(grads, "the gradient buffer", n, grads, dtype);
  check_like(weights, "the weight buffer", n, grads, dtype);
  check_like(q.exp_avg, "exp_avg's codes", n, grads, at::kByte);
  check_like(q.exp_avg_sq, "exp_avg_sq's codes", n, grads, at::kByte);
  check_like(q.exp_avg_absmax, "exp_avg's absmax", n / kBlock, grads, at::kFloat);
  check_like(q.exp_avg_sq_absmax, "exp_avg_sq's absmax", n / kBlock, grads, at::kFloat);
  if (master.defined()) {
    check(dtype != at::kFloat, "fp32 weights take no separate master weights");
    const bool split = master.scalar_type() == at::kShort;
    check(!split || dtype == at::kBFloat16, "split masters (int16 remainders) need bf16 weights");
    check_like(master, "the master weights", n, grads, split ? at::kShort : at::kFloat);
  }
  if (accum.defined()) check_like(accum, "the fp32 accumulator", n, grads, at::kFloat);
  check(!coef.defined() || (coef.numel() == 1 && coef.scalar_type() == at::kFloat && coef.device() == grads.device()),
        "the clip coefficient must be an fp32 scalar on the gradients' device");
}

// ---- CPU reference -----------------------------------------------------------
// Where the update's weight lives, read and written (flat_adamw.cpp's three forms).
template <typename P, Masters kM>
struct WeightAccess {
  P* model;
  float* master;
  uint16_t* remainder;
  float read(int64_t i) const {
    if constexpr (kM == Masters::kFp32) return master[i];
    else if constexpr (kM == Masters::kSplit) return join_master(model[i].x, remainder[i]);
    else return static_cast<float>(model[i]);
  }
  // The Adam update, the weight decay, the stores; without masters a model below fp32
  // rounds between the two as bitsandbytes stores its T.
  void update(int64_t i, float m, float v, const blockwise8::Scalars& s) const {
    float w = blockwise8::adam_update(read(i), m, v, s);
    if constexpr (kM == Masters::kNone && !std::is_same_v<P, float>) w = static_cast<float>(static_cast<P>(w));
    w = blockwise8::apply_decay(w, s);
    if constexpr (kM == Masters::kFp32) master[i] = w;
    if constexpr (kM == Masters::kSplit) remainder[i] = master_remainder(w);
    model[i] = kM == Masters::kNone ? static_cast<P>(w) : model_copy<P>(w);
  }
};

// One call's buffers (the lambda of cpu_step8 captured them before).
template <typename P, Masters kM>
struct Step8 {
  WeightAccess<P, kM> w;
  uint8_t *mc, *vc;
  float *ma, *va;
  const P* g;
  const float* acc;
  float c;
  const blockwise8::CodeBooks* books;
  const blockwise8::CodeLookup *m_codes, *v_codes;
  blockwise8::Scalars s;
};

template <typename P, Masters kM>
FPTRAIN_CPU_BODY void step8_blocks(const Step8<P, kM>& a, int64_t b0, int64_t b1) {
  float m[kBlock], v[kBlock];
  bool live[kBlock];
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t base = b * kBlock;
    float m_max = -FLT_MAX, v_max = -FLT_MAX;  // bitsandbytes' fold
    for (int64_t k = 0; k < kBlock; ++k) {
      const int64_t i = base + k;
      const float graw = a.acc ? f_add(a.acc[i], static_cast<float>(a.g[i])) : static_cast<float>(a.g[i]);
      live[k] = blockwise8::update_moments(graw, a.c, blockwise8::dequantize(a.books->exp_avg, a.mc[i], a.ma[b]),
                                           blockwise8::dequantize(a.books->exp_avg_sq, a.vc[i], a.va[b]), m[k], v[k],
                                           a.s);
      m_max = blockwise8::max_abs(m_max, m[k]);
      v_max = blockwise8::max_abs(v_max, v[k]);
    }
    a.ma[b] = m_max;
    a.va[b] = v_max;
    for (int64_t k = 0; k < kBlock; ++k) {
      if (live[k]) a.w.update(base + k, m[k], v[k], a.s);
      a.mc[base + k] = a.m_codes->quantize_signed(m[k], m_max);
      a.vc[base + k] = a.v_codes->quantize_unsigned(v[k], v_max);
    }
  }
}

template <typename P, Masters kM>
void cpu_step8(const at::Tensor& weights, const at::Tensor& master, const Moments8bit& q, const at::Tensor& grads,
               const at::Tensor& accum, const at::Tensor& coef, const blockwise8::Scalars& s) {
  const Step8<P, kM> a{
      {weights.data_ptr<P>(), kM == Masters::kFp32 ? master.data_ptr<float>() : nullptr,
       kM == Masters::kSplit ? reinterpret_cast<uint16_t*>(master.data_ptr<int16_t>()) : nullptr},
      q.exp_avg.data_ptr<uint8_t>(), q.exp_avg_sq.data_ptr<uint8_t>(),
      q.exp_avg_absmax.data_ptr<float>(), q.exp_avg_sq_absmax.data_ptr<float>(),
      grads.data_ptr<P>(), accum.defined() ? accum.data_ptr<float>() : nullptr,
      coef.defined() ? coef.data_ptr<float>()[0] : 1.0f,
      &blockwise8::code_books(), &blockwise8::exp_avg_lookup(), &blockwise8::exp_avg_sq_lookup(), s};
  parallel_for_fma(0, grads.numel() / kBlock, kBlockGrain,
                   [&](int64_t b0, int64_t b1) FPTRAIN_CPU_LAMBDA { step8_blocks(a, b0, b1); });
}

}  // namespace

void adamw8bit_step(const at::Tensor& weights, const at::Tensor& master, const Moments8bit& moments,
                    const at::Tensor& grads, const at::Tensor& accum, const at::Tensor& coef,
                    const AdamWHyper& hyper) {
  check_args(weights, master, moments, grads, accum, coef);
  const blockwise8::Scalars s =
      blockwise8::make_scalars(hyper.lr, hyper.beta1, hyper.beta2, hyper.eps, hyper.weight_decay, hyper.step);
  if (grads.numel() == 0) return;
  if (grads.is_cuda()) {
    check(cuda::kernels_built(), "CUDA buffers need the CUDA kernels (a build with FPTRAIN_CUDA)");
    cuda::adamw8bit_step(weights, master, moments, grads, accum, coef, s);
    return;
  }
  check(grads.is_cpu(), std::string("unsupported device ") + grads.device().str());
  const bool split = master.defined() && master.scalar_type() == at::kShort;
  switch (weights.scalar_type()) {
    case at::kFloat: return cpu_step8<float, Masters::kNone>(weights, master, moments, grads, accum, coef, s);
    case at::kBFloat16:
      if (split) return cpu_step8<c10::BFloat16, Masters::kSplit>(weights, master, moments, grads, accum, coef, s);
      if (master.defined())
        return cpu_step8<c10::BFloat16, Masters::kFp32>(weights, master, moments, grads, accum, coef, s);
      return cpu_step8<c10::BFloat16, Masters::kNone>(weights, master, moments, grads, accum, coef, s);
    default:  // fp16 (check_args allows no other)
      if (master.defined())
        return cpu_step8<c10::Half, Masters::kFp32>(weights, master, moments, grads, accum, coef, s);
      return cpu_step8<c10::Half, Masters::kNone>(weights, master, moments, grads, accum, coef, s);
  }
}

}  // namespace fptrain::optim::flat
