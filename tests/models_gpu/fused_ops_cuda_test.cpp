// The fused CUDA kernels (models/fused_ops.h, models/cuda/) against the ATen
// reference path on the same device, forward and backward:
//   fp32:       every output and gradient within 1e-5 (relative, norm-wise) of
//               the reference; RoPE bit for bit.
//   bf16, fp16: RoPE bit for bit (same roundings, no reduction); the residual
//               sum bit for bit; RMSNorm's and SwiGLU's outputs within 2 units
//               in the last place of the reference's (RMSNorm sums squares in
//               another order, so rstd may differ in fp32's last bits, which can
//               move a rounding of the normalised value by one unit; SwiGLU's
//               exp may be compiled differently); and every output and
//               gradient no further from an fp64 computation from the same
//               inputs than twice the reference's own error, or below a tenth
//               of the dtype's epsilon (2^-8 bf16, 2^-11 fp16) — the criterion
//               of the decoder's bf16 suite (bf16_parity.h).
// Sizes: T = 1 and T not a multiple of any block size, hidden 64..12288 (the
// register-cached and the looped RMSNorm kernels, 16-byte vectors and single
// elements), head_dim 64/128 and one with head_dim/2 odd, strided q/k, the
// packed gate/up layout. The weight gradient is bitwise repeatable.
// Gemma's variants (RMSNorm with (1 + w) in fp32, GELU-tanh gating) against
// the ATen composition itself (models/gemma_ops.cpp: gemma_rms_norm, the
// residual add before it, gelu(gate, 'tanh') * up) under autograd, by the same
// criteria (GELU-tanh's outputs within 2 units in the last place: tanhf's
// contraction into FMAs may differ from ATen's build); GemmaOps over
// FusedCudaOps runs them, over AtenOps the composition.
// Last, timing printouts for the Llama-3.2-1B shape (T = 16384, hidden 2048,
// intermediate 8192, 32 q heads, 8 kv heads, head_dim 64, bf16) and Gemma 2
// 2B's (hidden 2304, intermediate 9216): forward + backward of each op, fused
// against the model's ATen operations.
#include "models/aten_ops.h"
#include "models/fused_cuda_ops.h"
#include "models/fused_ops.h"
#include "models/gemma_ops.h"
#include "models/rms_norm.h"
#include "models/rope.h"
#include "tests/models/model_test_util.h"
#include "tests/models_gpu/fused_kernels_required.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace fptrain::models {
namespace {

using testing::rel_err;
using Tensors = std::vector<at::Tensor>;

constexpr double kEps = 1e-5;
constexpr double kFp32Tolerance = 1e-5;
constexpr double kMaxErrorRatio = 2.0;

const at::Device kCuda(at::kCUDA, 0);

at::Tensor leaf(const at::Tensor& t) { return t.detach().clone().requires_grad_(true); }
Tensors leaves(const Tensors& ts) {
  Tensors out;
  for (const auto& t : ts) out.push_back(leaf(t));
  return out;
}

Tensors grads_of(const Tensors& outputs, const Tensors& upstream, const Tensors& inputs) {
  Tensors outs, ups;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (upstream[i].defined()) outs.push_back(outputs[i]), ups.push_back(upstream[i]);
  }
  return torch::autograd::grad(outs, inputs, ups, false, false, /*allow_unused=*/true);
}

at::Tensor randn(at::IntArrayRef shape, at::ScalarType dtype, double scale = 1.0) {
  return (scale * at::randn(shape, at::TensorOptions().device(kCuda))).to(dtype);
}

Tensors to_double(const Tensors& ts) {
  Tensors out;
  for (const auto& t : ts) out.push_back(t.defined() ? t.to(at::kDouble) : t);
  return out;
}

// Distance in units in the last place of two 16-bit tensors (bf16 or fp16).
at::Tensor ordered(const at::Tensor& t) {
  const at::Tensor u = t.contiguous().view(at::kShort).to(at::kInt).bitwise_and(0xFFFF);
  const at::Tensor magnitude = u.bitwise_and(0x7FFF);
  return at::where(u.ge(0x8000), -magnitude, magnitude);
}
int64_t max_ulps(const at::Tensor& a, const at::Tensor& b) {
  return (ordered(a) - ordered(b)).abs().max().item<int64_t>();
}
double mismatch_fraction(const at::Tensor& a, const at::Tensor& b) {
  return a.ne(b).to(at::kDouble).mean().item<double>();
}

double error_floor(at::ScalarType dtype) { return dtype == at::kHalf ? 0.1 / 2048 : 0.1 / 256; }

const char* dtype_name(at::ScalarType t) {
  return t == at::kFloat ? "fp32" : t == at::kBFloat16 ? "bf16" : "fp16";
}

struct Worst {
  double fp32 = 0;        // max rel err fused vs reference, fp32
  double ratio = 0;       // max (fused err / reference err) vs fp64, 16-bit
  int64_t ulps = 0;       // max ulps between fused and reference outputs, 16-bit
  void print(const char* op) const {
    std::printf("[%s cuda] fp32: max rel err vs reference %.3g; 16-bit: max error ratio vs fp64 (fused / reference) "
                "%.3f, max ulps between outputs %lld\n",
                op, fp32, ratio, static_cast<long long>(ulps));
  }
};

// Compares outputs (or gradients) of the fused path with the reference path
// and, for 16-bit types, both with the fp64 computation `exact`.
void judge(const Tensors& fused, const Tensors& ref, const Tensors& exact, at::ScalarType dtype, const std::string& what,
           Worst& worst, int64_t max_output_ulps = -1) {
  ASSERT_EQ(fused.size(), ref.size());
  for (size_t i = 0; i < fused.size(); ++i) {
    SCOPED_TRACE(what + " " + std::to_string(i));
    ASSERT_EQ(fused[i].defined(), ref[i].defined());
    if (!fused[i].defined()) continue;
    EXPECT_EQ(fused[i].scalar_type(), ref[i].scalar_type());
    EXPECT_EQ(fused[i].sizes(), ref[i].sizes());
    if (dtype == at::kFloat) {
      const double e = rel_err(fused[i], ref[i]);
      EXPECT_LE(e, kFp32Tolerance);
      worst.fp32 = std::max(worst.fp32, e);
      continue;
    }
    const double ours = rel_err(fused[i], exact[i]), theirs = rel_err(ref[i], exact[i]);
    EXPECT_LE(ours, kMaxErrorRatio * theirs + error_floor(dtype)) << "fused " << ours << " vs reference " << theirs;
    worst.ratio = std::max(worst.ratio, ours / std::max(theirs, 1e-30));
    if (max_output_ulps >= 0) {
      const int64_t u = max_ulps(fused[i], ref[i]);
      EXPECT_LE(u, max_output_ulps) << "mismatching elements: " << mismatch_fraction(fused[i], ref[i]);
      worst.ulps = std::max(worst.ulps, u);
    }
  }
}

// ---- RMSNorm ----------------------------------------------------------------------

Tensors norm_op(const Tensors& in, double scale, FusedPath path) {
  if (scale == 0) return {fused_rms_norm(in[0], in[1], kEps, path)};
  const AddRmsNormOutput o = fused_add_rms_norm(in[0], in[1], in[2], kEps, scale, path);
  return {o.sum, o.normed};
}

Tensors exact_norm(const Tensors& in, double scale) { return testing::exact_rms_norm(in, scale, kEps); }

struct NormShape {
  int64_t T, H;
};

// Register-cached rows (<= 1024 vectors) and looped rows, 16-byte vectors and single elements.
const std::vector<NormShape> kNormShapes = {{1, 2048},   {7, 4096},  {1000, 8192}, {2049, 2048}, {333, 64},
                                            {129, 1000}, {50, 999},  {65, 2050},   {40, 12288},  {3, 4100}};

TEST(FusedRmsNormCuda, MatchesTheReferenceForwardAndBackward) {
  REQUIRE_FUSED_KERNELS();
  Worst worst;
  at::manual_seed(1);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (const NormShape& s : kNormShapes) {
      for (double scale : {0.0, 1.0, 0.22}) {
        const std::string label = std::string(dtype_name(dtype)) + " T " + std::to_string(s.T) + " H " +
                                  std::to_string(s.H) + (scale == 0 ? " plain" : " add, scale " + std::to_string(scale));
        SCOPED_TRACE(label);
        Tensors in{randn({s.T, s.H}, dtype)};
        if (scale != 0) in.push_back(randn({s.T, s.H}, dtype, 0.7));
        in.push_back(randn({s.H}, at::kFloat, 0.3).add_(1.0).to(dtype));
        // Both outputs used, and (with the add) only the normalised one.
        std::vector<Tensors> upstreams = {{randn({s.T, s.H}, dtype)}};
        if (scale != 0) {
          upstreams = {{randn({s.T, s.H}, dtype), randn({s.T, s.H}, dtype)}, {at::Tensor(), randn({s.T, s.H}, dtype)}};
        }
        for (const Tensors& up : upstreams) {
          const Tensors a = leaves(in), b = leaves(in), e = leaves(to_double(in));
          const Tensors fo = norm_op(a, scale, FusedPath::kCuda), ro = norm_op(b, scale, FusedPath::kReference);
          const Tensors eo = exact_norm(e, scale);
          if (scale != 0) EXPECT_TRUE(at::equal(fo[0], ro[0])) << "the residual sum";
          judge(fo, ro, eo, dtype, "output", worst, /*max_output_ulps=*/2);
          judge(grads_of(fo, up, a), grads_of(ro, up, b), grads_of(eo, to_double(up), e), dtype, "gradient", worst);
        }
      }
    }
  }
  worst.print("fused_rms_norm");
}

// ---- Gemma's RMSNorm: (1 + w) in fp32, one rounding ----------------------------------

Tensors gemma_norm_op(const Tensors& in, double scale, FusedPath path) {
  if (scale == 0) return {fused_gemma_rms_norm(in[0], in[1], kEps, path)};
  const AddRmsNormOutput o = fused_add_gemma_rms_norm(in[0], in[1], in[2], kEps, scale, path);
  return {o.sum, o.normed};
}

// The ATen composition GemmaOps runs without the kernels (add_then_norm's residual add).
Tensors aten_gemma_norm(const Tensors& in, double scale) {
  if (scale == 0) return {gemma_rms_norm(in[0], in[1], kEps)};
  const at::Tensor sum = residual_add(in[0], in[1], scale);
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

TEST(FusedGemmaRmsNormCuda, MatchesTheAtenCompositionForwardAndBackward) {
  REQUIRE_FUSED_KERNELS();
  Worst worst;
  at::manual_seed(6);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (const NormShape& s : kNormShapes) {
      for (double scale : {0.0, 1.0, 0.22}) {
        const std::string label = std::string(dtype_name(dtype)) + " T " + std::to_string(s.T) + " H " +
                                  std::to_string(s.H) + (scale == 0 ? " plain" : " add, scale " + std::to_string(scale));
        SCOPED_TRACE(label);
        Tensors in{randn({s.T, s.H}, dtype)};
        if (scale != 0) in.push_back(randn({s.T, s.H}, dtype, 0.7));
        in.push_back(randn({s.H}, dtype, 0.3));  // Gemma's weights sit around 0: the factor is 1 + w
        std::vector<Tensors> upstreams = {{randn({s.T, s.H}, dtype)}};
        if (scale != 0) {
          upstreams = {{randn({s.T, s.H}, dtype), randn({s.T, s.H}, dtype)}, {at::Tensor(), randn({s.T, s.H}, dtype)}};
        }
        for (const Tensors& up : upstreams) {
          const Tensors a = leaves(in), b = leaves(in), e = leaves(to_double(in));
          const Tensors fo = gemma_norm_op(a, scale, FusedPath::kCuda), ao = aten_gemma_norm(b, scale);
          const Tensors eo = exact_gemma_norm(e, scale);
          EXPECT_TRUE(at::equal(gemma_norm_op(in, scale, FusedPath::kReference).back(), ao.back().detach()))
              << "the reference path is the composition";
          if (scale != 0) EXPECT_TRUE(at::equal(fo[0], ao[0])) << "the residual sum";
          judge(fo, ao, eo, dtype, "output", worst, /*max_output_ulps=*/2);
          judge(grads_of(fo, up, a), grads_of(ao, up, b), grads_of(eo, to_double(up), e), dtype, "gradient", worst);
        }
      }
    }
  }
  worst.print("fused_gemma_rms_norm");
}

TEST(FusedRmsNormCuda, WeightGradientIsBitwiseRepeatable) {
  REQUIRE_FUSED_KERNELS();
  at::manual_seed(2);
  for (bool gemma : {false, true}) {
    for (int64_t H : {int64_t{2048}, int64_t{12288}}) {
      const Tensors in = {randn({3000, H}, at::kBFloat16), randn({3000, H}, at::kBFloat16), randn({H}, at::kBFloat16)};
      const Tensors up = {randn({3000, H}, at::kBFloat16), randn({3000, H}, at::kBFloat16)};
      Tensors first;
      for (int run = 0; run < 3; ++run) {
        const Tensors a = leaves(in);
        const Tensors out = gemma ? gemma_norm_op(a, 1.0, FusedPath::kCuda) : norm_op(a, 1.0, FusedPath::kCuda);
        const Tensors g = grads_of(out, up, a);
        if (run == 0) first = g;
        for (size_t i = 0; i < g.size(); ++i) {
          EXPECT_TRUE(at::equal(g[i], first[i])) << (gemma ? "gemma " : "") << "H " << H << " gradient " << i;
        }
      }
    }
  }
}

// ---- rotary embeddings --------------------------------------------------------------

RotaryTables tables_for(int64_t T, int64_t head_dim, at::ScalarType dtype) {
  // Packed examples of varied lengths: positions restart at every boundary.
  std::vector<at::Tensor> parts;
  int64_t left = T;
  for (int64_t n = 1; left > 0; n = n * 3 + 1) {
    const int64_t len = std::min(left, n % 1500 + 1);
    parts.push_back(at::arange(len, at::kLong));
    left -= len;
  }
  RopeConfig rope;
  rope.theta = 500000.0;
  return rotary_tables(rope_inv_freq(rope, head_dim).to(kCuda), at::cat(parts).to(kCuda), dtype);
}

TEST(FusedRotaryCuda, BitIdenticalToTheReferenceForwardAndBackward) {
  REQUIRE_FUSED_KERNELS();
  at::manual_seed(3);
  const struct {
    int64_t T, Hq, Hk, D;
  } shapes[] = {{1, 32, 8, 64}, {1000, 32, 8, 64}, {4097, 32, 8, 128}, {77, 4, 4, 128}, {33, 3, 1, 6}, {5, 2, 1, 2}};
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (const auto& s : shapes) {
      for (bool strided : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " T " + std::to_string(s.T) + " heads " + std::to_string(s.Hq) +
                     "/" + std::to_string(s.Hk) + " head_dim " + std::to_string(s.D) + (strided ? " strided" : ""));
        const RotaryTables t = tables_for(s.T, s.D, dtype);
        // Strided: q and k as views of one qkv projection [T, (Hq + 2 Hk) * D].
        const at::Tensor qkv = randn({s.T, (s.Hq + 2 * s.Hk) * s.D}, dtype);
        const Tensors base = {leaf(qkv), leaf(qkv)};
        auto views = [&](const at::Tensor& p) -> Tensors {
          if (!strided) return {p.narrow(1, 0, s.Hq * s.D).contiguous().view({s.T, s.Hq, s.D}),
                                p.narrow(1, s.Hq * s.D, s.Hk * s.D).contiguous().view({s.T, s.Hk, s.D})};
          return {p.narrow(1, 0, s.Hq * s.D).view({s.T, s.Hq, s.D}),
                  p.narrow(1, s.Hq * s.D, s.Hk * s.D).view({s.T, s.Hk, s.D})};
        };
        const Tensors fa = views(base[0]), ra = views(base[1]);
        const RotaryOutput fo = fused_rotary(fa[0], fa[1], t, FusedPath::kCuda);
        const RotaryOutput ro = fused_rotary(ra[0], ra[1], t, FusedPath::kReference);
        EXPECT_TRUE(at::equal(fo.q, ro.q)) << "q";
        EXPECT_TRUE(at::equal(fo.k, ro.k)) << "k";
        EXPECT_TRUE(at::equal(fo.q, apply_rotary(fa[0], t)));
        const Tensors up = {randn({s.T, s.Hq, s.D}, dtype), randn({s.T, s.Hk, s.D}, dtype)};
        const Tensors fg = grads_of({fo.q, fo.k}, up, {base[0]}), rg = grads_of({ro.q, ro.k}, up, {base[1]});
        EXPECT_TRUE(at::equal(fg[0], rg[0])) << "gradient";
      }
    }
  }
}

// ---- SwiGLU ---------------------------------------------------------------------------

TEST(FusedSwigluCuda, MatchesTheReferenceForwardAndBackward) {
  REQUIRE_FUSED_KERNELS();
  Worst worst;
  at::manual_seed(4);
  const struct {
    int64_t T, I;
  } shapes[] = {{1, 8192}, {777, 8192}, {4096, 11008}, {129, 1000}, {33, 13}};
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (const auto& s : shapes) {
      for (bool packed : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " T " + std::to_string(s.T) + " I " + std::to_string(s.I) +
                     (packed ? " packed" : " separate"));
        const Tensors in = packed ? Tensors{randn({s.T, 2 * s.I}, dtype, 2.0)}
                                  : Tensors{randn({s.T, s.I}, dtype, 2.0), randn({s.T, s.I}, dtype)};
        const Tensors up = {randn({s.T, s.I}, dtype)};
        auto op = [&](const Tensors& x, FusedPath path) {
          return packed ? fused_swiglu_packed(x[0], path) : fused_swiglu(x[0], x[1], path);
        };
        auto exact = [&](const Tensors& x) {
          const at::Tensor g = packed ? x[0].narrow(-1, 0, s.I) : x[0], u = packed ? x[0].narrow(-1, s.I, s.I) : x[1];
          return g * at::sigmoid(g) * u;
        };
        const Tensors a = leaves(in), b = leaves(in), e = leaves(to_double(in));
        const Tensors fo = {op(a, FusedPath::kCuda)}, ro = {op(b, FusedPath::kReference)}, eo = {exact(e)};
        judge(fo, ro, eo, dtype, "output", worst, /*max_output_ulps=*/1);
        judge(grads_of(fo, up, a), grads_of(ro, up, b), grads_of(eo, to_double(up), e), dtype, "gradient", worst);
      }
    }
  }
  worst.print("fused_swiglu");
}

// Inputs that are intermediates of the graph receive their gradients in place (Liger's saving):
// the same gradients as fresh buffers give, the intermediate's memory holds them afterwards, a
// second backward through the graph fails loudly, and a leaf input is never written.
TEST(FusedSwigluCuda, WritesGradientsOverIntermediateInputsOnly) {
  REQUIRE_FUSED_KERNELS();
  at::manual_seed(5);
  const int64_t T = 777, I = 1000;
  for (bool packed : {false, true}) {
    SCOPED_TRACE(packed ? "packed" : "separate");
    const Tensors in = packed ? Tensors{randn({T, 2 * I}, at::kBFloat16, 2.0)}
                              : Tensors{randn({T, I}, at::kBFloat16, 2.0), randn({T, I}, at::kBFloat16)};
    const at::Tensor up = randn({T, I}, at::kBFloat16);
    auto op = [&](const Tensors& x) {
      return packed ? fused_swiglu_packed(x[0], FusedPath::kCuda) : fused_swiglu(x[0], x[1], FusedPath::kCuda);
    };
    const Tensors fresh_leaves = leaves(in), copies = leaves(in), scratch_leaves = leaves(in);
    const Tensors fresh = grads_of({op(fresh_leaves)}, {up}, fresh_leaves);
    for (size_t i = 0; i < in.size(); ++i) EXPECT_TRUE(at::equal(fresh_leaves[i], copies[i]));  // leaves: untouched

    Tensors scratch;  // intermediates: leaf * 1 (exact)
    for (const at::Tensor& t : scratch_leaves) scratch.push_back(t * 1.0);
    const at::Tensor out = op(scratch);
    torch::autograd::backward({out}, {up}, /*retain_graph=*/true);
    for (size_t i = 0; i < in.size(); ++i) {
      EXPECT_TRUE(at::equal(scratch_leaves[i].grad(), fresh[i])) << "input " << i;
      EXPECT_TRUE(at::equal(scratch[i], fresh[i])) << "input " << i << " does not hold its gradient";
    }
    EXPECT_THROW(torch::autograd::backward({out}, {up}), c10::Error);
  }
}

// ---- GELU-tanh gating (Gemma) ------------------------------------------------------------

TEST(FusedGegluCuda, MatchesTheAtenCompositionForwardAndBackward) {
  REQUIRE_FUSED_KERNELS();
  Worst worst;
  at::manual_seed(7);
  const struct {
    int64_t T, I;
  } shapes[] = {{1, 9216}, {777, 8192}, {2049, 9216}, {129, 1000}, {33, 13}, {5, 7}};
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (const auto& s : shapes) {
      for (bool packed : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " T " + std::to_string(s.T) + " I " + std::to_string(s.I) +
                     (packed ? " packed" : " separate"));
        // Packed: gate and up are the strided halves of one [T, 2I] gate_up projection.
        const Tensors in = packed ? Tensors{randn({s.T, 2 * s.I}, dtype, 2.0)}
                                  : Tensors{randn({s.T, s.I}, dtype, 2.0), randn({s.T, s.I}, dtype)};
        const Tensors up = {randn({s.T, s.I}, dtype)};
        auto halves = [&](const Tensors& x) -> Tensors {
          if (!packed) return x;
          return {x[0].narrow(-1, 0, s.I), x[0].narrow(-1, s.I, s.I)};
        };
        auto composition = [&](const Tensors& x) {  // GemmaOps' ATen gating (on the halves' views)
          const Tensors h = halves(x);
          return at::gelu(h[0], "tanh") * h[1];
        };
        auto fused = [&](const Tensors& x) {
          return packed ? fused_geglu_packed(x[0], FusedPath::kCuda) : fused_geglu(x[0], x[1], FusedPath::kCuda);
        };
        const Tensors a = leaves(in), b = leaves(in), e = leaves(to_double(in));
        const Tensors fo = {fused(a)}, ao = {composition(b)}, eo = {composition(e)};
        const at::Tensor ref = packed ? fused_geglu_packed(in[0], FusedPath::kReference)
                                      : fused_geglu(in[0], in[1], FusedPath::kReference);
        EXPECT_TRUE(at::equal(ref, ao[0].detach())) << "the reference path is the composition";
        // 1 as SwiGLU's (measured 0 on an H100, 2026-11-26).
        judge(fo, ao, eo, dtype, "output", worst, /*max_output_ulps=*/1);
        judge(grads_of(fo, up, a), grads_of(ao, up, b), grads_of(eo, to_double(up), e), dtype, "gradient", worst);
      }
    }
  }
  worst.print("fused_geglu");
}

// GemmaOps takes the kernels' variants over the fused set (bit for bit the
// fused ops), the ATen composition over AtenOps.
TEST(GemmaOpsCuda, OverTheFusedSetRunsTheKernels) {
  REQUIRE_FUSED_KERNELS();
  at::manual_seed(8);
  const auto backend = attention::Backend::kReference;
  const GemmaOps fused(std::make_shared<FusedCudaOps>(backend, nullptr));
  const GemmaOps aten(std::make_shared<AtenOps>(backend, nullptr));
  EXPECT_TRUE(fused.fused_kernels());
  EXPECT_FALSE(aten.fused_kernels());
  const at::ScalarType bf16 = at::kBFloat16;
  const at::Tensor x = randn({37, 2304}, bf16), u = randn({37, 2304}, bf16), w = randn({2304}, bf16, 0.3);
  const at::Tensor gate_up = randn({37, 2 * 9216}, bf16, 2.0);
  const at::Tensor gate = gate_up.narrow(1, 0, 9216), upv = gate_up.narrow(1, 9216, 9216);
  EXPECT_TRUE(at::equal(fused.norm(x, w, kEps), fused_gemma_rms_norm(x, w, kEps, FusedPath::kCuda)));
  EXPECT_TRUE(at::equal(aten.norm(x, w, kEps), gemma_rms_norm(x, w, kEps)));
  const AddRmsNormOutput f = fused.add_norm(x, u, w, kEps, 1.0);
  const AddRmsNormOutput k = fused_add_gemma_rms_norm(x, u, w, kEps, 1.0, FusedPath::kCuda);
  EXPECT_TRUE(at::equal(f.sum, k.sum) && at::equal(f.normed, k.normed));
  const AddRmsNormOutput r = aten.add_norm(x, u, w, kEps, 1.0);
  EXPECT_TRUE(at::equal(r.normed, gemma_rms_norm(x + u, w, kEps)));
  EXPECT_TRUE(at::equal(fused.gated_activation(gate, upv), fused_geglu(gate, upv, FusedPath::kCuda)));
  EXPECT_TRUE(at::equal(fused.gated_activation_packed(gate_up), fused_geglu_packed(gate_up, FusedPath::kCuda)));
  EXPECT_TRUE(at::equal(aten.gated_activation(gate, upv), at::gelu(gate, "tanh") * upv));
  EXPECT_TRUE(at::equal(aten.gated_activation_packed(gate_up), at::gelu(gate, "tanh") * upv));
}

// ---- time for the Llama-3.2-1B shape ----------------------------------------------------

// New leaves on the same storage (no allocation, so they do not count as held).
Tensors fresh_leaves(const Tensors& ts) {
  Tensors out;
  for (const auto& t : ts) out.push_back(t.detach().requires_grad_(true));
  return out;
}

struct Timing {
  double ms = 0;        // forward + backward, mean
  double held_mib = 0;  // allocated after the forward (outputs + what the backward keeps), above the inputs
};

// `step` runs a forward pass and returns {outputs, inputs to differentiate}; the
// backward gets `upstream`. Timed with device synchronisation around each iteration.
Timing time_op(const std::function<std::pair<Tensors, Tensors>()>& step, const Tensors& upstream, int iterations = 20) {
  Timing t;
  for (int i = 0; i < iterations + 3; ++i) {  // 3 warm-up iterations
    c10::cuda::device_synchronize();
    const auto start = std::chrono::steady_clock::now();
    const int64_t before = c10::cuda::CUDACachingAllocator::getDeviceStats(0)
                               .allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
                               .current;
    auto [outputs, inputs] = step();
    const int64_t after = c10::cuda::CUDACachingAllocator::getDeviceStats(0)
                              .allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
                              .current;
    const Tensors grads = grads_of(outputs, upstream, inputs);
    c10::cuda::device_synchronize();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (i < 3) continue;
    t.ms += ms / iterations;
    t.held_mib = static_cast<double>(after - before) / (1 << 20);
  }
  return t;
}

TEST(FusedOpsCuda, TimeForTheLlama1BShape) {
  REQUIRE_FUSED_KERNELS();
  const int64_t T = 16384, H = 2048, I = 8192, Hq = 32, Hk = 8, D = 64, layers = 16;
  const at::ScalarType bf16 = at::kBFloat16;
  at::manual_seed(5);
  const at::Tensor x = randn({T, H}, bf16), r = randn({T, H}, bf16), w = randn({H}, bf16, 0.1).add_(1.0);
  const at::Tensor gy = randn({T, H}, bf16), gs = randn({T, H}, bf16);
  const at::Tensor q = randn({T, Hq, D}, bf16), k = randn({T, Hk, D}, bf16);
  const at::Tensor gq = randn({T, Hq, D}, bf16), gk = randn({T, Hk, D}, bf16);
  const RotaryTables tables = tables_for(T, D, bf16);
  const at::Tensor gate = randn({T, I}, bf16, 2.0), upv = randn({T, I}, bf16), gout = randn({T, I}, bf16);

  struct Row {
    const char* op;
    Timing fused, reference, model;
  };
  std::vector<Row> rows;
  auto norm = [&](FusedPath path) {
    return [&, path]() -> std::pair<Tensors, Tensors> {
      const Tensors in = fresh_leaves({x, w});
      return {{fused_rms_norm(in[0], in[1], kEps, path)}, in};
    };
  };
  rows.push_back({"rms_norm", time_op(norm(FusedPath::kCuda), {gy}), time_op(norm(FusedPath::kReference), {gy}),
                  time_op([&]() -> std::pair<Tensors, Tensors> {
                    const Tensors in = fresh_leaves({x, w});
                    return {{rms_norm(in[0], in[1], kEps)}, in};
                  }, {gy})});
  auto add_norm = [&](FusedPath path) {
    return [&, path]() -> std::pair<Tensors, Tensors> {
      const Tensors in = fresh_leaves({x, r, w});
      const AddRmsNormOutput o = fused_add_rms_norm(in[0], in[1], in[2], kEps, 1.0, path);
      return {{o.sum, o.normed}, in};
    };
  };
  rows.push_back({"residual add + rms_norm", time_op(add_norm(FusedPath::kCuda), {gs, gy}),
                  time_op(add_norm(FusedPath::kReference), {gs, gy}),
                  time_op([&]() -> std::pair<Tensors, Tensors> {
                    const Tensors in = fresh_leaves({x, r, w});
                    const at::Tensor sum = in[0] + in[1];
                    return {{sum, rms_norm(sum, in[2], kEps)}, in};
                  }, {gs, gy})});
  auto rope = [&](FusedPath path) {
    return [&, path]() -> std::pair<Tensors, Tensors> {
      const Tensors in = fresh_leaves({q, k});
      const RotaryOutput o = fused_rotary(in[0], in[1], tables, path);
      return {{o.q, o.k}, in};
    };
  };
  rows.push_back({"rope q+k", time_op(rope(FusedPath::kCuda), {gq, gk}), time_op(rope(FusedPath::kReference), {gq, gk}),
                  time_op([&]() -> std::pair<Tensors, Tensors> {
                    const Tensors in = fresh_leaves({q, k});
                    return {{apply_rotary(in[0], tables), apply_rotary(in[1], tables)}, in};
                  }, {gq, gk})});
  auto swiglu = [&](FusedPath path) {
    return [&, path]() -> std::pair<Tensors, Tensors> {
      const Tensors in = fresh_leaves({gate, upv});
      return {{fused_swiglu(in[0], in[1], path)}, in};
    };
  };
  rows.push_back({"swiglu", time_op(swiglu(FusedPath::kCuda), {gout}), time_op(swiglu(FusedPath::kReference), {gout}),
                  time_op([&]() -> std::pair<Tensors, Tensors> {
                    const Tensors in = fresh_leaves({gate, upv});
                    return {{at::silu(in[0]) * in[1]}, in};
                  }, {gout})});

  std::printf("[fused ops cuda] forward + backward, T %lld, hidden %lld, intermediate %lld, heads %lld/%lld, head_dim "
              "%lld, bf16 (ms; MiB allocated after the forward: outputs + saved for backward)\n",
              static_cast<long long>(T), static_cast<long long>(H), static_cast<long long>(I),
              static_cast<long long>(Hq), static_cast<long long>(Hk), static_cast<long long>(D));
  double fused_layer = 0, model_layer = 0;
  for (const Row& row : rows) {
    std::printf("  %-24s fused %7.3f ms %7.1f MiB | reference path %7.3f ms %7.1f MiB | model ATen ops %7.3f ms %7.1f MiB "
                "| speedup vs model %.2fx\n",
                row.op, row.fused.ms, row.fused.held_mib, row.reference.ms, row.reference.held_mib, row.model.ms,
                row.model.held_mib, row.model.ms / row.fused.ms);
    fused_layer += row.fused.ms;
    model_layer += row.model.ms;
    EXPECT_GT(row.fused.ms, 0.0);
  }
  // Per decoder layer: one plain norm (input_layernorm), one residual add + norm
  // (post_attention_layernorm), RoPE on q and k, SwiGLU; plus the final norm.
  const double fused_step = layers * fused_layer + rows[0].fused.ms, model_step = layers * model_layer + rows[0].model.ms;
  std::printf("  per step (%lld layers + final norm): fused %.1f ms, model ATen ops %.1f ms, saved %.1f ms\n",
              static_cast<long long>(layers), fused_step, model_step, model_step - fused_step);
}

// Gemma 2 2B's shape: hidden 2304, intermediate 9216; a layer has three plain
// norms (input, post-attention, post-MLP), one residual add + norm and one gating.
TEST(FusedOpsCuda, TimeForTheGemma2_2BShape) {
  REQUIRE_FUSED_KERNELS();
  const int64_t T = 16384, H = 2304, I = 9216;
  const at::ScalarType bf16 = at::kBFloat16;
  at::manual_seed(9);
  const at::Tensor x = randn({T, H}, bf16), r = randn({T, H}, bf16), w = randn({H}, bf16, 0.3);
  const at::Tensor gy = randn({T, H}, bf16), gs = randn({T, H}, bf16);
  const at::Tensor gate = randn({T, I}, bf16, 2.0), upv = randn({T, I}, bf16), gout = randn({T, I}, bf16);
  auto norm = [&](bool fused) {
    return [&, fused]() -> std::pair<Tensors, Tensors> {
      const Tensors in = fresh_leaves({x, w});
      return {{fused ? fused_gemma_rms_norm(in[0], in[1], kEps, FusedPath::kCuda) : gemma_rms_norm(in[0], in[1], kEps)},
              in};
    };
  };
  auto add_norm = [&](bool fused) {
    return [&, fused]() -> std::pair<Tensors, Tensors> {
      const Tensors in = fresh_leaves({x, r, w});
      if (fused) {
        const AddRmsNormOutput o = fused_add_gemma_rms_norm(in[0], in[1], in[2], kEps, 1.0, FusedPath::kCuda);
        return {{o.sum, o.normed}, in};
      }
      const at::Tensor sum = in[0] + in[1];
      return {{sum, gemma_rms_norm(sum, in[2], kEps)}, in};
    };
  };
  auto geglu = [&](bool fused) {
    return [&, fused]() -> std::pair<Tensors, Tensors> {
      const Tensors in = fresh_leaves({gate, upv});
      return {{fused ? fused_geglu(in[0], in[1], FusedPath::kCuda) : at::gelu(in[0], "tanh") * in[1]}, in};
    };
  };
  const struct {
    const char* op;
    Timing fused, model;
    int per_layer;
  } rows[] = {{"gemma rms_norm", time_op(norm(true), {gy}), time_op(norm(false), {gy}), 3},
              {"residual add + gemma norm", time_op(add_norm(true), {gs, gy}), time_op(add_norm(false), {gs, gy}), 1},
              {"geglu (gelu tanh)", time_op(geglu(true), {gout}), time_op(geglu(false), {gout}), 1}};
  std::printf("[fused ops cuda] Gemma forms, forward + backward, T %lld, hidden %lld, intermediate %lld, bf16\n",
              static_cast<long long>(T), static_cast<long long>(H), static_cast<long long>(I));
  double fused_layer = 0, model_layer = 0;
  for (const auto& row : rows) {
    std::printf("  %-26s fused %7.3f ms %7.1f MiB | model ATen ops %7.3f ms %7.1f MiB | speedup %.2fx\n", row.op,
                row.fused.ms, row.fused.held_mib, row.model.ms, row.model.held_mib, row.model.ms / row.fused.ms);
    fused_layer += row.per_layer * row.fused.ms;
    model_layer += row.per_layer * row.model.ms;
    EXPECT_GT(row.fused.ms, 0.0);
  }
  std::printf("  per layer: fused %.2f ms, model ATen ops %.2f ms (26 layers: saved %.1f ms per step)\n", fused_layer,
              model_layer, 26 * (model_layer - fused_layer));
}

}  // namespace
}  // namespace fptrain::models
