// The fused ops' reference path (models/fused_ops.h) on the CPU:
//   - its forward is the model's own computation (models/rms_norm.cpp, the
//     residual add of CausalLM::decoder_layer, models/rope.cpp, CausalLM::mlp)
//     bit for bit, in fp32 and bf16;
//   - its gradients (written out as formulas, the ones the CUDA kernels
//     implement) equal autograd through the model's ATen operations within
//     1e-6 in fp32 (RoPE and SwiGLU bit for bit), and central finite
//     differences in fp64 within 1e-6;
//   - Gemma's forms (fused_gemma_rms_norm, fused_add_gemma_rms_norm,
//     fused_geglu): forward bit for bit models/gemma_ops.cpp's composition,
//     gradients autograd's through it (the same bounds), GemmaOps over AtenOps
//     unchanged (the composition, bit for bit);
//   - a decoder layer written with the fused ops equals CausalLM's composition;
//   - path choice and bad arguments.
// The CUDA kernels against this path: tests/models_gpu/fused_ops_cuda_test.cpp.
#include "attention/varlen_attention.h"
#include "models/aten_ops.h"
#include "models/fused_ops.h"
#include "models/gemma_ops.h"
#include "models/rms_norm.h"
#include "models/rope.h"
#include "tests/models/model_test_util.h"

#include <c10/core/GradMode.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace fptrain::models {
namespace {

using testing::rel_err;
using Tensors = std::vector<at::Tensor>;

constexpr double kTolerance = 1e-6;   // ||got - want|| / ||want||
constexpr double kEps = 1e-5;         // RMSNorm epsilon used throughout
constexpr FusedPath kRef = FusedPath::kReference;

at::Tensor leaf(const at::Tensor& t) { return t.detach().clone().requires_grad_(true); }

Tensors leaves(const Tensors& ts) {
  Tensors out;
  for (const auto& t : ts) out.push_back(leaf(t));
  return out;
}

// Gradients of sum_i <outputs_i, upstream_i> with respect to `inputs`
// (undefined outputs and upstreams are skipped: that output is unused).
Tensors grads_of(const Tensors& outputs, const Tensors& upstream, const Tensors& inputs) {
  Tensors outs, ups;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (upstream[i].defined()) outs.push_back(outputs[i]), ups.push_back(upstream[i]);
  }
  return torch::autograd::grad(outs, inputs, ups, /*retain_graph=*/false, /*create_graph=*/false,
                               /*allow_unused=*/true);
}

using Fn = std::function<Tensors(const Tensors&)>;

// The same gradients by central differences, every element, in fp64.
Tensors finite_differences(const Fn& f, const Tensors& inputs0, const Tensors& upstream, double h = 1e-6) {
  const c10::NoGradGuard no_grad;
  Tensors inputs;
  for (const auto& t : inputs0) inputs.push_back(t.detach().to(at::kDouble).contiguous().clone());
  auto loss = [&]() {
    const Tensors out = f(inputs);
    double l = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      if (upstream[i].defined()) l += (out[i].to(at::kDouble) * upstream[i].to(at::kDouble)).sum().item<double>();
    }
    return l;
  };
  Tensors grads;
  for (auto& in : inputs) {
    at::Tensor g = at::zeros_like(in);
    double* p = in.data_ptr<double>();
    double* gp = g.data_ptr<double>();
    for (int64_t e = 0; e < in.numel(); ++e) {
      const double orig = p[e];
      p[e] = orig + h;
      const double plus = loss();
      p[e] = orig - h;
      const double minus = loss();
      p[e] = orig;
      gp[e] = (plus - minus) / (2 * h);
    }
    grads.push_back(g);
  }
  return grads;
}

void expect_grads_close(const Tensors& got, const Tensors& want, double tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].defined(), want[i].defined()) << what << ": gradient " << i;
    if (!got[i].defined()) continue;
    EXPECT_EQ(got[i].sizes(), want[i].sizes()) << what << ": gradient " << i;
    EXPECT_LE(rel_err(got[i], want[i]), tolerance) << what << ": gradient " << i;
  }
}

void expect_grads_equal(const Tensors& got, const Tensors& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].defined(), want[i].defined()) << what << ": gradient " << i;
    if (got[i].defined()) {
      EXPECT_EQ(got[i].scalar_type(), want[i].scalar_type()) << what << ": gradient " << i;
      EXPECT_TRUE(at::equal(got[i], want[i])) << what << ": gradient " << i << " differs by up to "
                                              << (got[i].to(at::kDouble) - want[i].to(at::kDouble)).abs().max().item<double>();
    }
  }
}

at::Tensor randn(at::IntArrayRef shape, at::ScalarType dtype, double scale = 1.0) {
  return (scale * at::randn(shape)).to(dtype);
}

// ---- RMSNorm --------------------------------------------------------------------

// CausalLM's residual add.
at::Tensor model_residual_add(const at::Tensor& residual, const at::Tensor& update, double scale) {
  return scale != 1.0 ? residual + update * scale : residual + update;
}

struct NormCase {
  std::vector<int64_t> shape;  // of x; the last entry is H
  double scale;                // update scale; 0: the plain variant
};

const std::vector<NormCase> kNormCases = {
    {{1, 16}, 0}, {{7, 64}, 0}, {{2, 5, 48}, 0}, {{3, 7}, 0},           // plain; odd H
    {{1, 16}, 1}, {{9, 64}, 1}, {{2, 3, 40}, 1}, {{5, 13}, 1},          // residual add
    {{6, 32}, 0.25}, {{4, 24}, 0.5},                                    // Granite's residual_multiplier
};

std::string label(const NormCase& c) {
  std::string s = c.scale == 0 ? "plain" : "add, scale " + std::to_string(c.scale);
  s += ", shape [";
  for (size_t i = 0; i < c.shape.size(); ++i) s += (i ? "," : "") + std::to_string(c.shape[i]);
  return s + "]";
}

// The op under test (reference path) and the model's own operations.
Tensors fused_norm(const Tensors& in, double scale) {  // in: {x, w} or {x, update, w}
  if (scale == 0) return {fused_rms_norm(in[0], in[1], kEps, kRef)};
  const AddRmsNormOutput o = fused_add_rms_norm(in[0], in[1], in[2], kEps, scale, kRef);
  return {o.sum, o.normed};
}
Tensors model_norm(const Tensors& in, double scale) {
  if (scale == 0) return {rms_norm(in[0], in[1], kEps)};
  const at::Tensor sum = model_residual_add(in[0], in[1], scale);
  return {sum, rms_norm(sum, in[2], kEps)};
}

Tensors norm_inputs(const NormCase& c, at::ScalarType dtype) {
  const int64_t H = c.shape.back();
  Tensors in{randn(c.shape, dtype)};
  if (c.scale != 0) in.push_back(randn(c.shape, dtype, 0.7));
  in.push_back((1.0 + 0.3 * at::randn({H})).to(dtype));
  return in;
}

// The same mathematics entirely in fp64 (rms_norm.cpp computes in fp32 even
// for fp64 inputs, as transformers does, so its own differences would be fp32 noise).
Tensors exact_norm(const Tensors& in, double scale) { return testing::exact_rms_norm(in, scale, kEps); }

// A norm's forms under test: the op (reference path), the model's ATen operations, the same
// mathematics in fp64, and its inputs ({x, w} or {x, update, w}).
struct NormForm {
  Tensors (*fused)(const Tensors&, double);
  Tensors (*model)(const Tensors&, double);
  Tensors (*exact)(const Tensors&, double);
  Tensors (*inputs)(const NormCase&, at::ScalarType);
};

void expect_forward_bit_for_bit(const NormForm& f) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (const NormCase& c : kNormCases) {
      SCOPED_TRACE(label(c) + " " + c10::toString(dtype));
      const Tensors in = f.inputs(c, dtype);
      const Tensors got = f.fused(in, c.scale), want = f.model(in, c.scale);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].sizes(), want[i].sizes());
        EXPECT_EQ(got[i].scalar_type(), dtype);
        EXPECT_TRUE(at::equal(got[i], want[i])) << "output " << i;
      }
    }
  }
}

// In bf16, judged against fp64: at most as far as autograd's bf16 gradients of the model's
// operations (x 1.5, plus a floor below bf16's resolution).
void expect_bf16_gradients_as_accurate_as_autograd(const NormForm& f, const char* name) {
  for (const NormCase& c : {NormCase{{64, 256}, 0}, NormCase{{64, 256}, 1}, NormCase{{33, 200}, 0.25}}) {
    SCOPED_TRACE(label(c));
    const Tensors in = f.inputs(c, at::kBFloat16);
    Tensors upstream = {randn(c.shape, at::kBFloat16)};
    if (c.scale != 0) upstream.insert(upstream.begin(), randn(c.shape, at::kBFloat16));
    Tensors in64, up64;
    for (const auto& t : in) in64.push_back(t.to(at::kDouble));
    for (const auto& t : upstream) up64.push_back(t.to(at::kDouble));
    const Tensors a = leaves(in), b = leaves(in), e = leaves(in64);
    const Tensors ours = grads_of(f.fused(a, c.scale), upstream, a);
    const Tensors autograd = grads_of(f.model(b, c.scale), upstream, b);
    const Tensors exact = grads_of(f.exact(e, c.scale), up64, e);
    for (size_t i = 0; i < ours.size(); ++i) {
      EXPECT_EQ(ours[i].scalar_type(), at::kBFloat16);
      const double o = rel_err(ours[i], exact[i]), r = rel_err(autograd[i], exact[i]);
      EXPECT_LE(o, 1.5 * r + 0.1 / 256) << "gradient " << i << ": ours " << o << ", autograd " << r;
      std::printf("[%s reference bf16 cpu %s] gradient %zu rel err vs fp64: %.3g (autograd of the model's ops: %.3g)\n",
                  name, label(c).c_str(), i, o, r);
    }
  }
}

const NormForm kLlamaNorm{fused_norm, model_norm, exact_norm, norm_inputs};

TEST(FusedRmsNorm, ReferenceForwardIsTheModelsComputationBitForBit) {
  at::manual_seed(1);
  expect_forward_bit_for_bit(kLlamaNorm);
}

TEST(FusedRmsNorm, GradientsEqualAutogradOfTheModelsOperations) {
  at::manual_seed(2);
  double worst = 0;
  for (const NormCase& c : kNormCases) {
    const Tensors in = norm_inputs(c, at::kFloat);
    const bool add = c.scale != 0;
    // Upstream gradients: of both outputs; of the normalised output only (the
    // sum unused); of the sum only (the normalised output unused).
    std::vector<Tensors> upstreams = {{randn(c.shape, at::kFloat)}};
    if (add) {
      upstreams = {{randn(c.shape, at::kFloat), randn(c.shape, at::kFloat)},
                   {at::Tensor(), randn(c.shape, at::kFloat)},
                   {randn(c.shape, at::kFloat), at::Tensor()}};
    }
    for (size_t u = 0; u < upstreams.size(); ++u) {
      SCOPED_TRACE(label(c) + ", upstream pattern " + std::to_string(u));
      const Tensors a = leaves(in), b = leaves(in);
      const Tensors got = grads_of(fused_norm(a, c.scale), upstreams[u], a);
      const Tensors want = grads_of(model_norm(b, c.scale), upstreams[u], b);
      if (add && u == 2) {  // no path through the norm: the weight gets no gradient
        EXPECT_FALSE(got.back().defined());
        EXPECT_TRUE(at::equal(got[0], want[0]) && at::equal(got[1], want[1]));
        continue;
      }
      expect_grads_close(got, want, kTolerance, "vs autograd");
      for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, rel_err(got[i], want[i]));
    }
  }
  std::printf("[fused_rms_norm reference fp32 cpu] gradients vs autograd of the model's ops: max rel err %.3g\n", worst);
}

TEST(FusedRmsNorm, GradientsMatchFiniteDifferencesInFp64) {
  at::manual_seed(3);
  for (const NormCase& c : {NormCase{{3, 8}, 0}, NormCase{{2, 3, 5}, 0}, NormCase{{3, 8}, 1}, NormCase{{4, 6}, 0.25}}) {
    SCOPED_TRACE(label(c));
    const Tensors in = norm_inputs(c, at::kDouble);
    Tensors upstream = {randn(c.shape, at::kDouble)};
    if (c.scale != 0) upstream.push_back(randn(c.shape, at::kDouble));
    const Tensors a = leaves(in);
    const Tensors got = grads_of(fused_norm(a, c.scale), upstream, a);
    const Tensors want = finite_differences([&](const Tensors& x) { return exact_norm(x, c.scale); }, in, upstream);
    expect_grads_close(got, want, kTolerance, "vs finite differences");
  }
}

// In bf16 the formulas round where autograd rounds (the normalised value's
// gradient, the input gradient before the residual's is added), but sum in
// another order and form the weight gradient from fp32 products (autograd
// rounds each product to bf16 before the sum): judged against fp64, as the
// GPU suite judges the kernels.
TEST(FusedRmsNorm, Bf16GradientsAsAccurateAsAutogradsOwn) {
  at::manual_seed(11);
  expect_bf16_gradients_as_accurate_as_autograd(kLlamaNorm, "fused_rms_norm");
}

TEST(FusedRmsNorm, OnlyWhatRequiresGradGetsAGradient) {
  at::manual_seed(4);
  const at::Tensor x = leaf(at::randn({5, 16})), u = leaf(at::randn({5, 16}));
  const at::Tensor w = at::randn({16});  // frozen
  const AddRmsNormOutput o = fused_add_rms_norm(x, u, w, kEps, 0.5, kRef);
  (o.normed.sum() + o.sum.sum()).backward();
  EXPECT_TRUE(x.grad().defined());
  EXPECT_TRUE(u.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  {
    const c10::NoGradGuard no_grad;
    EXPECT_FALSE(fused_rms_norm(x, w, kEps).requires_grad());
  }
}

// ---- rotary embeddings ------------------------------------------------------------

// Packed positions restarting per example, as the batcher makes them.
at::Tensor packed_positions(const std::vector<int64_t>& lengths) {
  Tensors parts;
  for (int64_t n : lengths) parts.push_back(at::arange(n, at::kLong));
  return at::cat(parts);
}

RotaryTables tables_for(int64_t head_dim, const at::Tensor& positions, at::ScalarType dtype) {
  RopeConfig rope;
  rope.theta = 10000.0;
  return rotary_tables(rope_inv_freq(rope, head_dim), positions, dtype);
}

Tensors fused_rope(const Tensors& in, const RotaryTables& t) {
  const RotaryOutput o = fused_rotary(in[0], in[1], t, kRef);
  return {o.q, o.k};
}
Tensors model_rope(const Tensors& in, const RotaryTables& t) { return {apply_rotary(in[0], t), apply_rotary(in[1], t)}; }

TEST(FusedRotary, ReferenceEqualsApplyRotaryBitForBitForwardAndBackward) {
  at::manual_seed(5);
  const at::Tensor positions = packed_positions({5, 1, 9, 3});  // T = 18
  const int64_t T = positions.size(0);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (int64_t D : {int64_t{2}, int64_t{6}, int64_t{16}, int64_t{64}}) {
      SCOPED_TRACE("head_dim " + std::to_string(D) + " " + c10::toString(dtype));
      const RotaryTables t = tables_for(D, positions, dtype);
      const Tensors in = {randn({T, 4, D}, dtype), randn({T, 2, D}, dtype)};
      const Tensors a = leaves(in), b = leaves(in);
      const Tensors got = fused_rope(a, t), want = model_rope(b, t);
      for (int i = 0; i < 2; ++i) EXPECT_TRUE(at::equal(got[i], want[i])) << "output " << i;
      const Tensors up = {randn({T, 4, D}, dtype), randn({T, 2, D}, dtype)};
      expect_grads_equal(grads_of(got, up, a), grads_of(want, up, b), "vs autograd");
      // Only q used downstream: k gets no gradient; q's is unchanged.
      const Tensors c = leaves(in), d = leaves(in);
      const Tensors only_q = grads_of(fused_rope(c, t), {up[0], at::Tensor()}, c);
      EXPECT_TRUE(at::equal(only_q[0], grads_of(model_rope(d, t), {up[0], at::Tensor()}, d)[0]));
      EXPECT_FALSE(only_q[1].defined());
    }
  }
}

TEST(FusedRotary, StridedInputsFromOneProjection) {
  // q and k as views of one [T, (Hq + 2 Hk) * D] qkv projection.
  at::manual_seed(6);
  const int64_t T = 11, Hq = 4, Hk = 2, D = 8;
  const RotaryTables t = tables_for(D, packed_positions({4, 7}), at::kFloat);
  const at::Tensor qkv = leaf(at::randn({T, (Hq + 2 * Hk) * D}));
  const at::Tensor q = qkv.narrow(1, 0, Hq * D).view({T, Hq, D}), k = qkv.narrow(1, Hq * D, Hk * D).view({T, Hk, D});
  const RotaryOutput o = fused_rotary(q, k, t, kRef);
  EXPECT_TRUE(at::equal(o.q, apply_rotary(q, t)));
  EXPECT_TRUE(at::equal(o.k, apply_rotary(k, t)));
  EXPECT_TRUE(o.q.is_contiguous() && o.k.is_contiguous());
}

TEST(FusedRotary, GradientsMatchFiniteDifferencesInFp64) {
  at::manual_seed(7);
  const at::Tensor positions = packed_positions({3, 4});
  const int64_t T = positions.size(0), D = 8;
  const RotaryTables t = tables_for(D, positions, at::kDouble);
  const Tensors in = {at::randn({T, 3, D}, at::kDouble), at::randn({T, 1, D}, at::kDouble)};
  const Tensors up = {at::randn({T, 3, D}, at::kDouble), at::randn({T, 1, D}, at::kDouble)};
  const Tensors a = leaves(in);
  expect_grads_close(grads_of(fused_rope(a, t), up, a),
                     finite_differences([&](const Tensors& x) { return fused_rope(x, t); }, in, up),
                     kTolerance, "vs finite differences");
}

// ---- SwiGLU -------------------------------------------------------------------------

TEST(FusedSwiglu, ReferenceEqualsSiluTimesUpBitForBitForwardAndBackward) {
  at::manual_seed(8);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (const std::vector<int64_t>& shape : {std::vector<int64_t>{1, 8}, {13, 24}, {2, 3, 11}}) {
      SCOPED_TRACE(std::to_string(shape.back()) + " " + c10::toString(dtype));
      const Tensors in = {randn(shape, dtype, 2.0), randn(shape, dtype)};
      const Tensors up = {randn(shape, dtype)};
      const Tensors a = leaves(in), b = leaves(in);
      const at::Tensor got = fused_swiglu(a[0], a[1], kRef), want = at::silu(b[0]) * b[1];
      EXPECT_TRUE(at::equal(got, want));
      expect_grads_equal(grads_of({got}, up, a), grads_of({want}, up, b), "vs autograd");

      // One [.., 2I] projection: silu(first half) * second half, as a model
      // with a fused gate/up projection would write it on views of it.
      // (Against the separate tensors only close: the CPU's vectorised silu
      // rounds differently from its scalar tail, and the layouts differ.)
      const int64_t I = shape.back();
      const at::Tensor gate_up0 = at::cat({in[0], in[1]}, -1);
      const Tensors p = leaves({gate_up0}), q = leaves({gate_up0});
      const at::Tensor packed = fused_swiglu_packed(p[0], kRef);
      const at::Tensor on_views = at::silu(q[0].narrow(-1, 0, I)) * q[0].narrow(-1, I, I);
      EXPECT_TRUE(at::equal(packed, on_views));
      expect_grads_equal(grads_of({packed}, up, p), grads_of({on_views}, up, q), "packed vs autograd");
      EXPECT_LE(rel_err(packed, want), dtype == at::kFloat ? kTolerance : 1e-2);
    }
  }
}

TEST(FusedSwiglu, GradientsMatchFiniteDifferencesInFp64) {
  at::manual_seed(9);
  const Tensors in = {2.0 * at::randn({4, 6}, at::kDouble), at::randn({4, 6}, at::kDouble)};
  const Tensors up = {at::randn({4, 6}, at::kDouble)};
  const Tensors a = leaves(in);
  expect_grads_close(grads_of({fused_swiglu(a[0], a[1], kRef)}, up, a),
                     finite_differences([](const Tensors& x) { return Tensors{fused_swiglu(x[0], x[1], kRef)}; }, in, up),
                     kTolerance, "vs finite differences");
  const Tensors packed_in = {at::cat({in[0], in[1]}, -1)};
  const Tensors p = leaves(packed_in);
  expect_grads_close(grads_of({fused_swiglu_packed(p[0], kRef)}, up, p),
                     finite_differences([](const Tensors& x) { return Tensors{fused_swiglu_packed(x[0], kRef)}; },
                                        packed_in, up),
                     kTolerance, "packed vs finite differences");
}

// ---- Gemma's RMSNorm and GELU-tanh gating -------------------------------------------------

Tensors fused_gemma_norm(const Tensors& in, double scale) {
  if (scale == 0) return {fused_gemma_rms_norm(in[0], in[1], kEps, kRef)};
  const AddRmsNormOutput o = fused_add_gemma_rms_norm(in[0], in[1], in[2], kEps, scale, kRef);
  return {o.sum, o.normed};
}
Tensors model_gemma_norm(const Tensors& in, double scale) {  // GemmaOps' ATen composition
  if (scale == 0) return {gemma_rms_norm(in[0], in[1], kEps)};
  const at::Tensor sum = model_residual_add(in[0], in[1], scale);
  return {sum, gemma_rms_norm(sum, in[2], kEps)};
}
Tensors exact_gemma_norm(const Tensors& in, double scale) {
  auto norm = [](const at::Tensor& s, const at::Tensor& w) {
    return s * at::rsqrt(s.pow(2).mean(-1, /*keepdim=*/true) + kEps) * (1.0 + w);
  };
  if (scale == 0) return {norm(in[0], in[1])};
  const at::Tensor sum = in[0] + in[1] * scale;
  return {sum, norm(sum, in[2])};
}

// Gemma's weights sit around 0 (the factor is 1 + w).
Tensors gemma_norm_inputs(const NormCase& c, at::ScalarType dtype) {
  Tensors in = norm_inputs(c, dtype);
  in.back() = (0.3 * at::randn({c.shape.back()})).to(dtype);
  return in;
}

const NormForm kGemmaNorm{fused_gemma_norm, model_gemma_norm, exact_gemma_norm, gemma_norm_inputs};

TEST(FusedGemmaRmsNorm, ReferenceForwardIsTheCompositionBitForBit) {
  at::manual_seed(21);
  expect_forward_bit_for_bit(kGemmaNorm);
}

TEST(FusedGemmaRmsNorm, GradientsEqualAutogradOfTheComposition) {
  at::manual_seed(22);
  for (const NormCase& c : kNormCases) {
    const Tensors in = gemma_norm_inputs(c, at::kFloat);
    const bool add = c.scale != 0;
    std::vector<Tensors> upstreams = {{randn(c.shape, at::kFloat)}};
    if (add) {
      upstreams = {{randn(c.shape, at::kFloat), randn(c.shape, at::kFloat)}, {at::Tensor(), randn(c.shape, at::kFloat)}};
    }
    for (size_t u = 0; u < upstreams.size(); ++u) {
      SCOPED_TRACE(label(c) + ", upstream pattern " + std::to_string(u));
      const Tensors a = leaves(in), b = leaves(in);
      expect_grads_close(grads_of(fused_gemma_norm(a, c.scale), upstreams[u], a),
                         grads_of(model_gemma_norm(b, c.scale), upstreams[u], b), kTolerance, "vs autograd");
    }
  }
  for (const NormCase& c : {NormCase{{3, 8}, 0}, NormCase{{2, 3, 5}, 0}, NormCase{{4, 6}, 0.25}}) {
    SCOPED_TRACE(label(c) + " vs finite differences");
    const Tensors in = gemma_norm_inputs(c, at::kDouble);
    Tensors upstream = {randn(c.shape, at::kDouble)};
    if (c.scale != 0) upstream.push_back(randn(c.shape, at::kDouble));
    const Tensors a = leaves(in);
    expect_grads_close(grads_of(fused_gemma_norm(a, c.scale), upstream, a),
                       finite_differences([&](const Tensors& x) { return exact_gemma_norm(x, c.scale); }, in, upstream),
                       kTolerance, "vs finite differences");
  }
}

// In bf16 the reference rounds where autograd does (nothing before the input
// gradient's cast in Gemma's fp32 chain); its sums run in another order.
TEST(FusedGemmaRmsNorm, Bf16GradientsAsAccurateAsAutogradsOwn) {
  at::manual_seed(23);
  expect_bf16_gradients_as_accurate_as_autograd(kGemmaNorm, "fused_gemma_rms_norm");
}

TEST(FusedGeglu, ReferenceEqualsGeluTanhTimesUpBitForBitForwardAndBackward) {
  at::manual_seed(24);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (const std::vector<int64_t>& shape : {std::vector<int64_t>{1, 8}, {13, 24}, {2, 3, 11}}) {
      SCOPED_TRACE(std::to_string(shape.back()) + " " + c10::toString(dtype));
      const Tensors in = {randn(shape, dtype, 2.0), randn(shape, dtype)};
      const Tensors up = {randn(shape, dtype)};
      const Tensors a = leaves(in), b = leaves(in);
      const at::Tensor got = fused_geglu(a[0], a[1], kRef), want = at::gelu(b[0], "tanh") * b[1];
      EXPECT_TRUE(at::equal(got, want));
      expect_grads_equal(grads_of({got}, up, a), grads_of({want}, up, b), "vs autograd");
      // The halves of one [.., 2I] projection, against the composition on its views.
      const int64_t I = shape.back();
      const Tensors p = leaves({at::cat({in[0], in[1]}, -1)}), q = leaves({p[0]});
      const at::Tensor packed = fused_geglu_packed(p[0], kRef);
      const at::Tensor on_views = at::gelu(q[0].narrow(-1, 0, I), "tanh") * q[0].narrow(-1, I, I);
      EXPECT_TRUE(at::equal(packed, on_views));
      expect_grads_equal(grads_of({packed}, up, p), grads_of({on_views}, up, q), "packed vs autograd");
    }
  }
  const Tensors in = {2.0 * at::randn({4, 6}, at::kDouble), at::randn({4, 6}, at::kDouble)};
  const Tensors up = {at::randn({4, 6}, at::kDouble)};
  const Tensors a = leaves(in);
  expect_grads_close(grads_of({fused_geglu(a[0], a[1], kRef)}, up, a),
                     finite_differences([](const Tensors& x) { return Tensors{fused_geglu(x[0], x[1], kRef)}; }, in, up),
                     kTolerance, "vs finite differences");
}

// Over a set without the kernels GemmaOps is the ATen composition, as before.
TEST(GemmaOps, OverAtenOpsIsTheComposition) {
  at::manual_seed(25);
  const GemmaOps ops(std::make_shared<AtenOps>(attention::Backend::kReference, nullptr));
  EXPECT_FALSE(ops.fused_kernels());
  const at::Tensor x = randn({5, 24}, at::kBFloat16), u = randn({5, 24}, at::kBFloat16);
  const at::Tensor w = randn({24}, at::kBFloat16, 0.3), gate_up = randn({5, 48}, at::kBFloat16, 2.0);
  EXPECT_TRUE(at::equal(ops.norm(x, w, kEps), gemma_rms_norm(x, w, kEps)));
  const AddRmsNormOutput o = ops.add_norm(x, u, w, kEps, 1.0);
  EXPECT_TRUE(at::equal(o.sum, x + u) && at::equal(o.normed, gemma_rms_norm(x + u, w, kEps)));
  const at::Tensor gate = gate_up.narrow(1, 0, 24), upv = gate_up.narrow(1, 24, 24);
  EXPECT_TRUE(at::equal(ops.gated_activation(gate, upv), at::gelu(gate, "tanh") * upv));
  EXPECT_TRUE(at::equal(ops.gated_activation_packed(gate_up), at::gelu(gate, "tanh") * upv));
}

// ---- a decoder layer written with the fused ops ---------------------------------------

struct LayerWeights {
  at::Tensor w_in, w_post, wq, wk, wv, wo, wg, wu, wd;
};

struct LayerShape {
  int64_t hidden = 32, heads = 4, kv_heads = 2, head_dim = 8, intermediate = 48;
  double residual_multiplier = 1.0;
};

// CausalLM::decoder_layer as written today (rms_norm, apply_rotary, silu * up, residual_add).
at::Tensor model_layer(const at::Tensor& x, const LayerWeights& w, const LayerShape& s, const RotaryTables& rope,
                       const attention::VarlenSpec& spec) {
  const int64_t T = x.size(0);
  auto residual_add = [&](const at::Tensor& r, const at::Tensor& u) { return model_residual_add(r, u, s.residual_multiplier); };
  const at::Tensor h0 = rms_norm(x, w.w_in, kEps);
  const at::Tensor q = apply_rotary(at::linear(h0, w.wq).view({T, s.heads, s.head_dim}), rope);
  const at::Tensor k = apply_rotary(at::linear(h0, w.wk).view({T, s.kv_heads, s.head_dim}), rope);
  const at::Tensor v = at::linear(h0, w.wv).view({T, s.kv_heads, s.head_dim});
  const at::Tensor attn = at::linear(
      attention::varlen_attention(q, k, v, spec, attention::Backend::kReference).reshape({T, -1}), w.wo);
  const at::Tensor h = residual_add(x, attn);
  const at::Tensor n = rms_norm(h, w.w_post, kEps);
  return residual_add(h, at::linear(at::silu(at::linear(n, w.wg)) * at::linear(n, w.wu), w.wd));
}

// The same layer through the fused ops, as the integration into causal_lm.cpp would write it.
at::Tensor fused_layer(const at::Tensor& x, const LayerWeights& w, const LayerShape& s, const RotaryTables& rope,
                       const attention::VarlenSpec& spec, FusedPath path) {
  const int64_t T = x.size(0);
  const at::Tensor h0 = fused_rms_norm(x, w.w_in, kEps, path);
  const RotaryOutput qk = fused_rotary(at::linear(h0, w.wq).view({T, s.heads, s.head_dim}),
                                       at::linear(h0, w.wk).view({T, s.kv_heads, s.head_dim}), rope, path);
  const at::Tensor v = at::linear(h0, w.wv).view({T, s.kv_heads, s.head_dim});
  const at::Tensor attn = at::linear(
      attention::varlen_attention(qk.q, qk.k, v, spec, attention::Backend::kReference).reshape({T, -1}), w.wo);
  const AddRmsNormOutput post = fused_add_rms_norm(x, attn, w.w_post, kEps, s.residual_multiplier, path);
  const at::Tensor mlp =
      at::linear(fused_swiglu(at::linear(post.normed, w.wg), at::linear(post.normed, w.wu), path), w.wd);
  return model_residual_add(post.sum, mlp, s.residual_multiplier);
}

TEST(FusedOps, DecoderLayerEqualsTheModelsComposition) {
  for (double multiplier : {1.0, 0.22}) {
    SCOPED_TRACE("residual_multiplier " + std::to_string(multiplier));
    at::manual_seed(10);
    LayerShape s;
    s.residual_multiplier = multiplier;
    const int64_t H = s.hidden, qd = s.heads * s.head_dim, kd = s.kv_heads * s.head_dim, I = s.intermediate;
    const Tensors params = {1.0 + 0.2 * at::randn({H}), 1.0 + 0.2 * at::randn({H}), 0.2 * at::randn({qd, H}),
                            0.2 * at::randn({kd, H}), 0.2 * at::randn({kd, H}), 0.2 * at::randn({H, qd}),
                            0.2 * at::randn({I, H}), 0.2 * at::randn({I, H}), 0.2 * at::randn({H, I})};
    const std::vector<int64_t> lengths = {6, 1, 9};
    const at::Tensor positions = packed_positions(lengths);
    const int64_t T = positions.size(0);
    const RotaryTables rope = tables_for(s.head_dim, positions, at::kFloat);
    attention::VarlenSpec spec;
    spec.cu_seqlens = at::tensor(std::vector<int32_t>{0, 6, 7, 16}, at::kInt);
    spec.cu_seqlens_cpu = spec.cu_seqlens;
    spec.max_seqlen = 9;
    spec.softmax_scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
    const at::Tensor x0 = at::randn({T, H});
    const at::Tensor upstream = at::randn({T, H});

    auto run = [&](bool fused) {
      Tensors p = leaves(params);
      p.insert(p.begin(), leaf(x0));
      const LayerWeights w{p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9]};
      const at::Tensor y = fused ? fused_layer(p[0], w, s, rope, spec, FusedPath::kAuto)
                                 : model_layer(p[0], w, s, rope, spec);
      Tensors out = grads_of({y}, {upstream}, p);
      out.insert(out.begin(), y.detach());
      return out;
    };
    const Tensors got = run(true), want = run(false);
    EXPECT_TRUE(at::equal(got[0], want[0])) << "layer output";
    double worst = 0;
    for (size_t i = 1; i < got.size(); ++i) {
      EXPECT_LE(rel_err(got[i], want[i]), kTolerance) << "gradient " << i - 1 << " (0 = x, then the weights)";
      worst = std::max(worst, rel_err(got[i], want[i]));
    }
    std::printf("[fused ops decoder layer fp32 cpu, residual_multiplier %.2f] output bit-identical; gradients max rel "
                "err %.3g\n", multiplier, worst);
  }
}

// ---- paths and errors -----------------------------------------------------------------

void expect_invalid(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    return;
  }
  ADD_FAILURE() << "no std::invalid_argument (expected one mentioning '" << needle << "')";
}

TEST(FusedOps, PathsOnTheCpu) {
  EXPECT_FALSE(fused_cuda_kernels_available(at::kCPU));
  // On the CPU kAuto runs the reference; kCuda says why it cannot run.
  const at::Tensor x = at::randn({4, 8}), w = at::ones({8});
  EXPECT_TRUE(at::equal(fused_rms_norm(x, w, kEps), rms_norm(x, w, kEps)));
  expect_invalid([&] { fused_rms_norm(x, w, kEps, FusedPath::kCuda); }, "the tensors are on cpu");
  expect_invalid([&] { fused_swiglu(x, x, FusedPath::kCuda); }, "CUDA path does not apply");
  expect_invalid([&] { fused_gemma_rms_norm(x, w, kEps, FusedPath::kCuda); }, "fused_gemma_rms_norm: the CUDA path");
  expect_invalid([&] { fused_geglu(x, x, FusedPath::kCuda); }, "fused_geglu: the CUDA path");
  std::printf("fused ops: CUDA kernels %s in this build\n", fused_cuda_kernels_built() ? "are" : "are not");
}

TEST(FusedOps, BadArgumentsAreClearErrors) {
  const at::Tensor x = at::randn({4, 8});
  expect_invalid([&] { fused_rms_norm(x, at::ones({7}), kEps); }, "weight must be [H] = [8]");
  expect_invalid([&] { fused_add_rms_norm(x, at::randn({4, 7}), at::ones({8}), kEps); }, "update must have");
  const RotaryTables t = tables_for(8, at::arange(4, at::kLong), at::kFloat);
  expect_invalid([&] { fused_rotary(at::randn({4, 2, 8}), at::randn({3, 2, 8}), t); }, "differ in tokens");
  expect_invalid([&] { fused_rotary(at::randn({4, 2, 8}), at::randn({4, 2, 8}), tables_for(8, at::arange(5, at::kLong), at::kFloat)); },
                 "cos and sin must be [T, 1, head_dim]");
  expect_invalid([&] { fused_rotary(at::randn({4, 2, 7}), at::randn({4, 2, 7}), t); }, "head_dim must be even");
  expect_invalid([&] { fused_swiglu(x, at::randn({4, 9})); }, "one shape");
  expect_invalid([&] { fused_swiglu_packed(at::randn({4, 7})); }, "[..., 2I]");
  expect_invalid([&] { fused_add_gemma_rms_norm(x, at::randn({4, 7}), at::ones({8}), kEps); },
                 "fused_add_gemma_rms_norm: update must have");
  expect_invalid([&] { fused_geglu_packed(at::randn({4, 7})); }, "fused_geglu_packed: gate_up must be");
}

}  // namespace
}  // namespace fptrain::models
