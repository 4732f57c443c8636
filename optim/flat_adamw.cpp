// CPU reference of the flat-buffer optimizer operations, and the dispatch to the
// CUDA kernels. Compiled with -ffp-contract=off (optim/CMakeLists.txt): the
// per-element arithmetic must round exactly as written in flat_adamw_math.h.
#include "optim/flat_adamw.h"

#include "optim/cpu_parallel.h"
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "optim/cuda/flat_adamw_cuda.h"
#include "optim/flat_cpu_masters.h"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace fptrain::optim::flat {
namespace {

constexpr int64_t kStepGrain = 1 << 14;
constexpr int64_t kNormChunk = 1 << 14;  // fixed, so the CPU sum does not depend on the thread count

void check_buffer(const at::Tensor& t, const char* what, const at::Tensor& like) {
  if (!t.defined()) throw std::invalid_argument(std::string("flat optimizer: ") + what + " is undefined");
  if (t.dim() != 1 || !t.is_contiguous() || t.numel() != like.numel() || t.device() != like.device())
    throw std::invalid_argument(std::string("flat optimizer: ") + what +
                                " must be a contiguous 1-D buffer of the gradient buffer's length and device");
}

void check_dtype(const at::Tensor& t, at::ScalarType expected, const char* what) {
  if (t.scalar_type() != expected)
    throw std::invalid_argument(std::string("flat optimizer: ") + what + " must be " + c10::toString(expected) +
                                ", not " + c10::toString(t.scalar_type()));
}

void check_model_dtype(const at::Tensor& t) {
  const auto s = t.scalar_type();
  if (s != at::kFloat && s != at::kBFloat16 && s != at::kHalf)
    throw std::invalid_argument(std::string("flat optimizer: unsupported model dtype ") + c10::toString(s));
}

template <typename F>
void dispatch_model_dtype(at::ScalarType s, F&& f) {
  switch (s) {
    case at::kFloat: f(float{}); return;
    case at::kBFloat16: f(c10::BFloat16{}); return;
    case at::kHalf: f(c10::Half{}); return;
    default: throw std::invalid_argument(std::string("flat optimizer: unsupported dtype ") + c10::toString(s));
  }
}

// ---- CPU reference -----------------------------------------------------------

// A piece of the gradient buffer on the CPU: logical elements [begin, end), `g` null: zeros.
template <typename P>
struct CpuPiece {
  const P* g = nullptr;
  int64_t begin = 0, end = 0;
};

// Adds x² of logical elements [lo, hi) of one piece into the 16 lanes of a chunk starting at
// `base`: element i goes to lane (i - base) % 16 before `body_end`, to lane 0 after, as the
// one-buffer loop placed them, so a buffer cut anywhere on a multiple of 16 sums alike.
template <typename P>
void add_squares(const CpuPiece<P>& p, const float* acc, int64_t lo, int64_t hi, int64_t base, int64_t body_end,
                 std::array<float, 16>& lanes) {
  if (p.g == nullptr && acc == nullptr) return;  // x = 0: adding +0 to a lane (never -0) changes nothing
  const P* g = p.g ? p.g - p.begin : nullptr;
  auto value = [&](int64_t i) { return (g ? static_cast<float>(g[i]) : 0.0f) + (acc ? acc[i] : 0.0f); };
  const int64_t body = std::min(hi, body_end);
  int64_t i = lo;
  for (; i < body && (i - base) % 16 != 0; ++i) {
    const float x = value(i);
    lanes[static_cast<size_t>((i - base) % 16)] += x * x;
  }
  if (g) {  // the hot loop as the one-buffer code wrote it: 16 independent sums, vectorized
    for (; i + 16 <= body; i += 16)
      for (size_t k = 0; k < 16; ++k) {
        const int64_t j = i + static_cast<int64_t>(k);
        const float x = static_cast<float>(g[j]) + (acc ? acc[j] : 0.0f);
        lanes[k] += x * x;
      }
  }
  for (; i < body; ++i) {
    const float x = value(i);
    lanes[static_cast<size_t>((i - base) % 16)] += x * x;
  }
  for (; i < hi; ++i) {
    const float x = value(i);
    lanes[0] += x * x;
  }
}

// Chunks of kNormChunk logical elements (whatever the pieces), each summed in 16 fp32 lanes
// and then in double; the chunks added in order: the one-buffer order, bit for bit.
template <typename P>
void cpu_grad_norm(const std::vector<CpuPiece<P>>& pieces, const float* acc, int64_t n, double max_norm,
                   const at::Tensor& norm, const at::Tensor& coef) {
  const int64_t chunks = (n + kNormChunk - 1) / kNormChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
  at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t begin = c * kNormChunk, end = std::min(n, begin + kNormChunk);
      const int64_t body_end = begin + (end - begin) / 16 * 16;
      std::array<float, 16> lanes{};
      auto it = std::upper_bound(pieces.begin(), pieces.end(), begin,
                                 [](int64_t at, const CpuPiece<P>& p) { return at < p.end; });
      for (; it != pieces.end() && it->begin < end; ++it)
        add_squares(*it, acc, std::max(begin, it->begin), std::min(end, it->end), begin, body_end, lanes);
      double s = 0.0;
      for (float l : lanes) s += l;
      partial[static_cast<size_t>(c)] = s;
    }
  });
  double total = 0.0;
  for (double p : partial) total += p;
  const float n2 = static_cast<float>(std::sqrt(total));
  norm.data_ptr<float>()[0] = n2;
  coef.data_ptr<float>()[0] = clip_coefficient(n2, static_cast<float>(max_norm));
}

// One call's buffers (the lambda of cpu_step captured them before).
template <typename P, Masters kM>
struct StepBuffers {
  using M = std::conditional_t<kM != Masters::kNone, float, P>;
  P* w_model;
  float* w_master;
  uint16_t* remainder;
  M *m_ptr, *v_ptr;
  const P* g_ptr;
  const float* acc;
  float c;
  AdamWScalars s;
};

template <typename P, Masters kM>
FPTRAIN_CPU_BODY void step_range(const StepBuffers<P, kM>& a, int64_t begin, int64_t end) {
  using M = typename StepBuffers<P, kM>::M;
  for (int64_t i = begin; i < end; ++i) {
    const float graw = static_cast<float>(a.g_ptr[i]);
    const float g = a.acc ? effective_grad(a.acc[i], graw, a.c) : effective_grad(graw, a.c);
    float w;
    if constexpr (kM == Masters::kFp32) w = a.w_master[i];
    else if constexpr (kM == Masters::kSplit) w = join_master(a.w_model[i].x, a.remainder[i]);
    else w = static_cast<float>(a.w_model[i]);
    float m = static_cast<float>(a.m_ptr[i]), v = static_cast<float>(a.v_ptr[i]);
    adamw_element(g, w, m, v, a.s);
    a.m_ptr[i] = static_cast<M>(m);
    a.v_ptr[i] = static_cast<M>(v);
    if constexpr (kM == Masters::kFp32) a.w_master[i] = w;
    if constexpr (kM == Masters::kSplit) a.remainder[i] = master_remainder(w);
    a.w_model[i] = kM == Masters::kNone ? static_cast<P>(w) : model_copy<P>(w);
  }
}

template <typename P, Masters kM>
void cpu_step(const at::Tensor& weights, const at::Tensor& master, const at::Tensor& exp_avg,
              const at::Tensor& exp_avg_sq, const at::Tensor& grads, const at::Tensor& accum, const at::Tensor& coef,
              const AdamWScalars& s) {
  using M = typename StepBuffers<P, kM>::M;
  const StepBuffers<P, kM> a{weights.data_ptr<P>(),
                             kM == Masters::kFp32 ? master.data_ptr<float>() : nullptr,
                             kM == Masters::kSplit ? reinterpret_cast<uint16_t*>(master.data_ptr<int16_t>()) : nullptr,
                             exp_avg.data_ptr<M>(),
                             exp_avg_sq.data_ptr<M>(),
                             grads.data_ptr<P>(),
                             accum.defined() ? accum.data_ptr<float>() : nullptr,
                             coef.defined() ? coef.data_ptr<float>()[0] : 1.0f,
                             s};
  parallel_for_fma(0, weights.numel(), kStepGrain,
                   [&](int64_t begin, int64_t end) FPTRAIN_CPU_LAMBDA { step_range(a, begin, end); });
}

template <typename P>
void cpu_accumulate(const at::Tensor& accum, const at::Tensor& grads) {
  float* acc = accum.data_ptr<float>();
  P* g = grads.data_ptr<P>();
  at::parallel_for(0, grads.numel(), kStepGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      acc[i] = acc[i] + static_cast<float>(g[i]);
      g[i] = P(0.0f);
    }
  });
}

// ---- ATen fallback for CUDA tensors in a build without our kernels ------------

void aten_grad_norm(const std::vector<GradPiece>& pieces, int64_t n, const at::Tensor& accum, double max_norm,
                    const at::Tensor& norm, const at::Tensor& coef) {
  at::Tensor x = at::zeros({n}, norm.options());
  for (const GradPiece& p : pieces)
    if (p.grads.defined()) x.narrow(0, p.offset, p.numel).copy_(p.grads);
  if (accum.defined()) x = x + accum;
  const at::Tensor total = at::linalg_vector_norm(x, 2);
  norm.copy_(total.reshape(norm.sizes()));
  if (max_norm > 0) coef.copy_(at::clamp_max(max_norm / (total + 1e-6), 1.0).reshape(coef.sizes()));
  else coef.fill_(1.0);
}

// The pieces cover [0, n) in order without gaps, those with storage 1-D, contiguous, of their
// length, one floating dtype, on norm's device. Returns n; `like`: the first with storage.
int64_t check_pieces(const std::vector<GradPiece>& pieces, const at::Tensor& norm, const at::Tensor*& like) {
  int64_t n = 0;
  for (const GradPiece& p : pieces) {
    if (p.offset != n || p.numel < 0)
      throw std::invalid_argument("flat optimizer: gradient pieces must cover the buffer in order, without gaps");
    n += p.numel;
    if (!p.grads.defined()) continue;
    if (p.grads.dim() != 1 || !p.grads.is_contiguous() || p.grads.numel() != p.numel ||
        p.grads.device() != norm.device())
      throw std::invalid_argument("flat optimizer: a gradient piece must be a contiguous 1-D tensor of its length "
                                  "on the norm's device");
    check_model_dtype(p.grads);
    if (like) check_dtype(p.grads, like->scalar_type(), "every gradient piece");
    else like = &p.grads;
  }
  return n;
}

void aten_step(const at::Tensor& weights, const at::Tensor& master, const at::Tensor& exp_avg,
               const at::Tensor& exp_avg_sq, const at::Tensor& grads, const at::Tensor& accum, const at::Tensor& coef,
               const AdamWHyper& h) {
  at::Tensor g = grads.to(at::kFloat);
  if (accum.defined()) g = g + accum;
  if (coef.defined()) g = g * coef;
  const at::Tensor step = at::full({}, static_cast<double>(h.step), weights.options().dtype(at::kFloat));
  const bool split = master.defined() && master.scalar_type() == at::kShort;
  const at::Tensor target = split ? join_masters(weights, master) : master.defined() ? master : weights;
  at::_fused_adamw_({target}, {g.to(target.scalar_type())}, {exp_avg}, {exp_avg_sq}, {}, {step}, h.lr, h.beta1,
                    h.beta2, h.weight_decay, h.eps, /*amsgrad=*/false, /*maximize=*/false);
  if (split) split_masters(target, weights, master);
  else if (master.defined()) copy_masters_to_model(master, weights);
}

}  // namespace

bool cuda_kernels_built() { return cuda::kernels_built(); }

void grad_norm(const at::Tensor& grads, const at::Tensor& accum, double max_norm, const at::Tensor& norm,
               const at::Tensor& coef) {
  check_buffer(grads, "the gradient buffer", grads);
  grad_norm(std::vector<GradPiece>{{grads, 0, grads.numel()}}, accum, max_norm, norm, coef);
}

void grad_norm(const std::vector<GradPiece>& pieces, const at::Tensor& accum, double max_norm,
               const at::Tensor& norm, const at::Tensor& coef) {
  const at::Tensor* like = nullptr;  // the first piece with storage: dtype and device of them all
  const int64_t n = check_pieces(pieces, norm, like);
  if (accum.defined() && (accum.dim() != 1 || !accum.is_contiguous() || accum.numel() != n ||
                          accum.device() != norm.device()))
    throw std::invalid_argument("flat optimizer: the fp32 accumulator must be a contiguous 1-D buffer of the "
                                "gradients' length and device");
  if (accum.defined()) check_dtype(accum, at::kFloat, "the fp32 accumulator");
  for (const at::Tensor* t : {&norm, &coef}) {
    if (!t->defined() || t->numel() != 1 || t->scalar_type() != at::kFloat || t->device() != norm.device())
      throw std::invalid_argument("flat optimizer: norm and coef must be fp32 scalars on the gradients' device");
  }
  const at::ScalarType dtype = like ? like->scalar_type() : at::kFloat;  // no storage at all: zeros, any dtype
  if (norm.is_cuda() && cuda::kernels_built()) {
    cuda::grad_norm(pieces, dtype, n, accum, max_norm, norm, coef);
    return;
  }
  if (!norm.is_cpu()) {  // CUDA without the kernels, or another device
    aten_grad_norm(pieces, n, accum, max_norm, norm, coef);
    return;
  }
  dispatch_model_dtype(dtype, [&](auto tag) {
    using P = decltype(tag);
    std::vector<CpuPiece<P>> cpu;
    for (const GradPiece& p : pieces)
      cpu.push_back({p.grads.defined() ? p.grads.data_ptr<P>() : nullptr, p.offset, p.offset + p.numel});
    cpu_grad_norm<P>(cpu, accum.defined() ? accum.data_ptr<float>() : nullptr, n, max_norm, norm, coef);
  });
}

void adamw_step(const at::Tensor& weights, const at::Tensor& master, const at::Tensor& exp_avg,
                const at::Tensor& exp_avg_sq, const at::Tensor& grads, const at::Tensor& accum,
                const at::Tensor& coef, const AdamWHyper& hyper) {
  check_buffer(grads, "the gradient buffer", grads);
  check_buffer(weights, "the weight buffer", grads);
  check_buffer(exp_avg, "exp_avg", grads);
  check_buffer(exp_avg_sq, "exp_avg_sq", grads);
  check_model_dtype(weights);
  check_dtype(grads, weights.scalar_type(), "the gradient buffer");
  const at::ScalarType moments = master.defined() ? at::kFloat : weights.scalar_type();
  check_dtype(exp_avg, moments, "exp_avg");
  check_dtype(exp_avg_sq, moments, "exp_avg_sq");
  const bool split = master.defined() && master.scalar_type() == at::kShort;
  if (master.defined()) {
    check_buffer(master, "the master weights", grads);
    if (split && weights.scalar_type() != at::kBFloat16)
      throw std::invalid_argument("flat optimizer: split masters (int16 remainders) need bf16 weights");
    if (!split) check_dtype(master, at::kFloat, "the master weights");
    if (weights.scalar_type() == at::kFloat)
      throw std::invalid_argument("flat optimizer: fp32 weights take no separate master weights");
  }
  if (accum.defined()) {
    check_buffer(accum, "the fp32 accumulator", grads);
    check_dtype(accum, at::kFloat, "the fp32 accumulator");
  }
  if (coef.defined() && (coef.numel() != 1 || coef.scalar_type() != at::kFloat || coef.device() != grads.device()))
    throw std::invalid_argument("flat optimizer: the clip coefficient must be an fp32 scalar on the gradients' device");

  const AdamWScalars s =
      make_adamw_scalars(hyper.lr, hyper.beta1, hyper.beta2, hyper.eps, hyper.weight_decay, hyper.step);
  if (grads.is_cuda() && cuda::kernels_built()) {
    cuda::adamw_step(weights, master, exp_avg, exp_avg_sq, grads, accum, coef, s);
    return;
  }
  if (!grads.is_cpu()) {  // CUDA without the kernels, or another device
    aten_step(weights, master, exp_avg, exp_avg_sq, grads, accum, coef, hyper);
    return;
  }
  dispatch_model_dtype(weights.scalar_type(), [&](auto tag) {
    using P = decltype(tag);
    if constexpr (std::is_same_v<P, float>) {
      cpu_step<P, Masters::kNone>(weights, master, exp_avg, exp_avg_sq, grads, accum, coef, s);
    } else if (split) {
      if constexpr (std::is_same_v<P, c10::BFloat16>)
        cpu_step<P, Masters::kSplit>(weights, master, exp_avg, exp_avg_sq, grads, accum, coef, s);
    } else if (master.defined()) {
      cpu_step<P, Masters::kFp32>(weights, master, exp_avg, exp_avg_sq, grads, accum, coef, s);
    } else {
      cpu_step<P, Masters::kNone>(weights, master, exp_avg, exp_avg_sq, grads, accum, coef, s);
    }
  });
}

void accumulate(const at::Tensor& accum, const at::Tensor& grads) {
  check_buffer(grads, "the gradient buffer", grads);
  check_model_dtype(grads);
  check_buffer(accum, "the fp32 accumulator", grads);
  check_dtype(accum, at::kFloat, "the fp32 accumulator");
  if (grads.is_cuda() && cuda::kernels_built()) {
    cuda::accumulate(accum, grads);
    return;
  }
  if (!grads.is_cpu()) {  // CUDA without the kernels, or another device
    accum.add_(grads);
    grads.zero_();
    return;
  }
  dispatch_model_dtype(grads.scalar_type(), [&](auto tag) { cpu_accumulate<decltype(tag)>(accum, grads); });
}

// ---- masters as bf16 weights and remainders ------------------------------------
// ATen integer arithmetic over the bit patterns, on any device (flat_adamw_math.h's rules), in
// chunks: its int64 temporaries would otherwise be several times a 7B's buffers.
namespace {

constexpr int64_t kBitsChunk = int64_t{1} << 22;

at::Tensor bits_of(const at::Tensor& t, at::ScalarType as) { return t.view(as).to(at::kLong); }

// Low 16 bits of int64 values as int16 (two's complement).
at::Tensor as_int16(const at::Tensor& u16) { return at::where(u16.ge(0x8000), u16 - 0x10000, u16).to(at::kShort); }

void join_chunk(const at::Tensor& weights, const at::Tensor& remainder, const at::Tensor& out) {
  const at::Tensor w = at::bitwise_and(bits_of(weights, at::kShort), 0xFFFF);
  const at::Tensor r = at::bitwise_and(bits_of(remainder, at::kShort), 0xFFFF);
  const at::Tensor upper = at::bitwise_and(w - r.ge(0x8000).to(at::kLong), 0xFFFF);
  const at::Tensor bits = at::bitwise_or(at::bitwise_left_shift(upper, 16), r);
  // The low 32 bits of each int64 as int32, viewed as fp32.
  out.view(at::kInt).copy_(at::where(bits.ge(int64_t{1} << 31), bits - (int64_t{1} << 32), bits));
}

void split_chunk(const at::Tensor& master, const at::Tensor& weights, const at::Tensor& remainder) {
  const at::Tensor bits = at::bitwise_and(bits_of(master, at::kInt), 0xFFFFFFFFLL);
  weights.view(at::kShort).copy_(as_int16(at::bitwise_and(at::bitwise_right_shift(bits + 0x8000, 16), 0xFFFF)));
  if (remainder.defined()) remainder.copy_(as_int16(at::bitwise_and(bits, 0xFFFF)));
}

}  // namespace

at::Tensor join_masters(const at::Tensor& weights, const at::Tensor& remainder) {
  const at::Tensor out = at::empty(weights.sizes(), weights.options().dtype(at::kFloat));
  const at::Tensor w = weights.reshape({-1}), r = remainder.reshape({-1}), o = out.view({-1});
  for (int64_t i = 0; i < w.numel(); i += kBitsChunk) {
    const int64_t n = std::min(kBitsChunk, w.numel() - i);
    join_chunk(w.narrow(0, i, n), r.narrow(0, i, n), o.narrow(0, i, n));
  }
  return out;
}

void split_masters(const at::Tensor& master, const at::Tensor& weights, const at::Tensor& remainder) {
  for (int64_t i = 0; i < master.numel(); i += kBitsChunk) {
    const int64_t n = std::min(kBitsChunk, master.numel() - i);
    split_chunk(master.narrow(0, i, n), weights.narrow(0, i, n),
                remainder.defined() ? remainder.narrow(0, i, n) : remainder);
  }
}

void copy_masters_to_model(const at::Tensor& master, const at::Tensor& weights) {
  if (weights.scalar_type() != at::kBFloat16) {
    weights.copy_(master);
    return;
  }
  split_masters(master, weights, at::Tensor());  // the weights only
}

}  // namespace fptrain::optim::flat
