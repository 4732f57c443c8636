// The torch-fa2 backend against the reference backend on CUDA: outputs and
// gradients in bf16/fp16 are as close to an fp32 reference as the bf16/fp16
// reference backend is; the sliding window has exactly Hugging Face's width
// (window - 1 earlier keys plus the token itself); GQA works without expansion.
#include "attention/varlen_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace fptrain::attention {
namespace {

struct Outputs {
  at::Tensor out, dq, dk, dv;
};

struct Inputs {
  at::Tensor q, k, v, upstream;  // fp32 on CUDA
  VarlenSpec spec;
};

Inputs make_inputs(const std::vector<int32_t>& lengths, int64_t hq, int64_t hkv, int64_t d,
                   int64_t window) {
  at::manual_seed(42);
  std::vector<int32_t> cu{0};
  for (int32_t len : lengths) cu.push_back(cu.back() + len);
  const int64_t T = cu.back();
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA);
  Inputs in;
  in.q = at::randn({T, hq, d}, f32);
  in.k = at::randn({T, hkv, d}, f32);
  in.v = at::randn({T, hkv, d}, f32);
  in.upstream = at::randn({T, hq, d}, f32);
  in.spec.cu_seqlens_cpu = at::tensor(cu, at::kInt);
  in.spec.cu_seqlens = in.spec.cu_seqlens_cpu.to(at::kCUDA);
  in.spec.max_seqlen = *std::max_element(lengths.begin(), lengths.end());
  in.spec.window = window;
  in.spec.softmax_scale = 1.0 / std::sqrt(static_cast<double>(d));
  return in;
}

// Rounds the inputs to `dtype` first, so every run sees the same values.
Outputs run(const Inputs& in, at::ScalarType dtype, Backend backend, at::ScalarType compute,
        const VarlenSpec& spec) {
  auto leaf = [&](const at::Tensor& x) { return x.to(dtype).to(compute).detach().requires_grad_(true); };
  at::Tensor q = leaf(in.q), k = leaf(in.k), v = leaf(in.v);
  at::Tensor out = varlen_attention(q, k, v, spec, backend);
  (out.to(at::kFloat) * in.upstream.to(dtype).to(at::kFloat)).sum().backward();
  return {out.detach().to(at::kFloat), q.grad().to(at::kFloat), k.grad().to(at::kFloat),
          v.grad().to(at::kFloat)};
}

// Relative error, with a floor on the denominator: some exact gradients are
// identically zero (with a window of 1 every softmax has one entry, so dq = dk = 0),
// and then the error is measured against an RMS of 1e-3 per element instead.
double rel_err(const at::Tensor& got, const at::Tensor& want) {
  const double floor = 1e-3 * std::sqrt(static_cast<double>(std::max<int64_t>(want.numel(), 1)));
  return (got.to(at::kDouble) - want.to(at::kDouble)).norm().item<double>() /
         std::max(want.to(at::kDouble).norm().item<double>(), floor);
}

struct Case {
  std::vector<int32_t> lengths;
  int64_t hq, hkv, d, window;
  at::ScalarType dtype;
};

class TorchFa2VsReference : public ::testing::TestWithParam<Case> {};

TEST_P(TorchFa2VsReference, AsAccurateAsTheReferenceInTheSameDtype) {
  ASSERT_TRUE(at::hasCUDA()) << "this suite needs a CUDA device";
  const Case c = GetParam();
  const Inputs in = make_inputs(c.lengths, c.hq, c.hkv, c.d, c.window);
  const Outputs exact = run(in, c.dtype, Backend::kReference, at::kFloat, in.spec);
  const Outputs ref16 = run(in, c.dtype, Backend::kReference, c.dtype, in.spec);
  const Outputs fa2 = run(in, c.dtype, Backend::kTorchFA2, c.dtype, in.spec);
  const char* names[] = {"out", "dq", "dk", "dv"};
  const at::Tensor Outputs::*fields[] = {&Outputs::out, &Outputs::dq, &Outputs::dk, &Outputs::dv};
  for (int i = 0; i < 4; ++i) {
    const double e_fa2 = rel_err(fa2.*fields[i], exact.*fields[i]);
    const double e_ref = rel_err(ref16.*fields[i], exact.*fields[i]);
    EXPECT_LE(e_fa2, 2.0 * e_ref + 0.1 / 256) << names[i];
    std::printf("[torch-fa2 %s %s] rel err vs fp32 reference: torch-fa2 %.3g, reference in %s %.3g\n",
                c10::toString(c.dtype), names[i], e_fa2, c10::toString(c.dtype), e_ref);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TorchFa2VsReference,
    ::testing::Values(Case{{1, 37, 128, 300, 77}, 8, 2, 64, 0, at::kBFloat16},     // GQA
                      Case{{1, 37, 128, 300, 77}, 8, 8, 128, 0, at::kHalf},        // MHA, fp16
                      Case{{5, 200, 1, 129, 64}, 8, 4, 64, 48, at::kBFloat16},     // sliding window
                      Case{{300, 2, 33}, 4, 1, 32, 1, at::kBFloat16},              // window 1, MQA
                      Case{{64, 63, 65}, 4, 2, 64, 1000, at::kBFloat16}));         // window > lengths

// The window must be exactly as wide as Hugging Face's: comparing against the
// fp32 reference with a window one narrower or wider must be far worse.
TEST(TorchFa2Window, HasHuggingFaceWidth) {
  ASSERT_TRUE(at::hasCUDA()) << "this suite needs a CUDA device";
  const int64_t W = 17;
  const Inputs in = make_inputs({90, 3, 150}, 4, 2, 64, W);
  const Outputs fa2 = run(in, at::kBFloat16, Backend::kTorchFA2, at::kBFloat16, in.spec);
  auto error_with_window = [&](int64_t w) {
    VarlenSpec spec = in.spec;
    spec.window = w;
    return rel_err(fa2.out, run(in, at::kBFloat16, Backend::kReference, at::kFloat, spec).out);
  };
  const double same = error_with_window(W), narrower = error_with_window(W - 1),
               wider = error_with_window(W + 1);
  std::printf("[torch-fa2 window %ld] err vs reference window %ld: %.3g, %ld: %.3g, %ld: %.3g\n", W, W, same,
              W - 1, narrower, W + 1, wider);
  EXPECT_LT(same, 1e-2);
  EXPECT_GT(narrower, 5 * same);
  EXPECT_GT(wider, 5 * same);
}

TEST(TorchFa2, EmptySequencesInThePack) {
  ASSERT_TRUE(at::hasCUDA()) << "this suite needs a CUDA device";
  const Inputs in = make_inputs({0, 40, 0, 0, 17, 0}, 4, 2, 64, 0);
  const Outputs exact = run(in, at::kBFloat16, Backend::kReference, at::kFloat, in.spec);
  const Outputs fa2 = run(in, at::kBFloat16, Backend::kTorchFA2, at::kBFloat16, in.spec);
  EXPECT_LT(rel_err(fa2.out, exact.out), 1e-2);
  EXPECT_LT(rel_err(fa2.dq, exact.dq), 2e-2);
}

TEST(TorchFa2, RejectsFp32) {
  ASSERT_TRUE(at::hasCUDA()) << "this suite needs a CUDA device";
  const Inputs in = make_inputs({8}, 2, 2, 64, 0);
  EXPECT_THROW(varlen_attention(in.q, in.k, in.v, in.spec, Backend::kTorchFA2), std::invalid_argument);
}

}  // namespace
}  // namespace fptrain::attention
