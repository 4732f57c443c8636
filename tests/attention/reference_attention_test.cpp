// The reference backend against a naive computation written independently:
// one query row at a time, only over the keys that row may see (no masks), in
// fp64. Covers causal, sliding windows, GQA, 1-token and empty sequences,
// soft-capped scores (Gemma 2), and gradients.
#include "attention/varlen_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <vector>

namespace fptrain::attention {
namespace {

struct Case {
  std::vector<int32_t> lengths;
  int64_t q_heads, kv_heads, head_dim;
  int64_t window;  // 0 = full causal
  double scale;
  double softcap = 0.0;  // > 0: scores become softcap * tanh(scores / softcap)
};

at::Tensor cu_seqlens_of(const std::vector<int32_t>& lengths) {
  std::vector<int32_t> cu{0};
  for (int32_t len : lengths) cu.push_back(cu.back() + len);
  return at::tensor(cu, at::kInt);
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << "lengths {";
  for (int32_t len : c.lengths) *os << len << ",";
  *os << "} heads " << c.q_heads << "/" << c.kv_heads << " head_dim " << c.head_dim << " window "
      << c.window << " scale " << c.scale << " softcap " << c.softcap;
}

int64_t max_of(const std::vector<int32_t>& lengths) {
  return lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
}

// Row by row: query i of a sequence starting at `start` sees keys
// max(start, i - window + 1) .. i of kv head h / n_rep.
at::Tensor naive_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                           const std::vector<int32_t>& lengths, int64_t window, double scale, double softcap = 0.0) {
  const int64_t n_rep = q.size(1) / k.size(1);
  std::vector<at::Tensor> rows;
  int64_t start = 0;
  for (int32_t len : lengths) {
    for (int64_t i = start; i < start + len; ++i) {
      const int64_t first = window > 0 ? std::max(start, i - window + 1) : start;
      std::vector<at::Tensor> heads;
      for (int64_t h = 0; h < q.size(1); ++h) {
        const at::Tensor keys = k.slice(0, first, i + 1).select(1, h / n_rep);    // [n, D]
        const at::Tensor values = v.slice(0, first, i + 1).select(1, h / n_rep);  // [n, D]
        at::Tensor s = at::mv(keys, q[i][h]) * scale;                             // [n]
        if (softcap > 0) s = softcap * at::tanh(s / softcap);
        heads.push_back(at::mv(values.t(), at::softmax(s, 0)));                   // [D]
      }
      rows.push_back(at::stack(heads, 0));
    }
    start += len;
  }
  return at::stack(rows, 0);
}

double rel_err(const at::Tensor& got, const at::Tensor& want) {
  const double denom = want.to(at::kDouble).norm().item<double>();
  return (got.to(at::kDouble) - want.to(at::kDouble)).norm().item<double>() / std::max(denom, 1e-300);
}

class ReferenceVsNaive : public ::testing::TestWithParam<Case> {};

TEST_P(ReferenceVsNaive, OutputsAndGradientsMatchInFp64) {
  const Case c = GetParam();
  at::manual_seed(1234);
  int64_t T = 0;
  for (int32_t len : c.lengths) T += len;
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor q0 = at::randn({T, c.q_heads, c.head_dim}, opts);
  const at::Tensor k0 = at::randn({T, c.kv_heads, c.head_dim}, opts);
  const at::Tensor v0 = at::randn({T, c.kv_heads, c.head_dim}, opts);
  const at::Tensor upstream = at::randn({T, c.q_heads, c.head_dim}, opts);

  VarlenSpec spec;
  spec.cu_seqlens = cu_seqlens_of(c.lengths);
  spec.max_seqlen = max_of(c.lengths);
  spec.window = c.window;
  spec.softmax_scale = c.scale;
  spec.softcap = c.softcap;

  auto run = [&](bool naive) {
    at::Tensor q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true),
               v = v0.clone().requires_grad_(true);
    at::Tensor out = naive ? naive_attention(q, k, v, c.lengths, c.window, c.scale, c.softcap)
                           : varlen_attention(q, k, v, spec, Backend::kReference);
    (out * upstream).sum().backward();
    return std::vector<at::Tensor>{out.detach(), q.grad(), k.grad(), v.grad()};
  };
  const auto got = run(false), want = run(true);
  const char* names[] = {"output", "dq", "dk", "dv"};
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(got[i].sizes(), want[i].sizes()) << names[i];
    EXPECT_LT(rel_err(got[i], want[i]), 1e-12) << names[i];
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ReferenceVsNaive,
    ::testing::Values(Case{{7}, 2, 2, 8, 0, 0.35},                // one sequence, MHA
                      Case{{5, 1, 9, 3, 6}, 4, 2, 8, 0, 0.25},    // packed, GQA, a 1-token sequence
                      Case{{5, 1, 9, 3, 6}, 4, 1, 16, 3, 0.25},   // sliding window, MQA
                      Case{{4, 0, 6, 0, 2}, 6, 3, 8, 4, 0.5},     // empty sequences in the pack
                      Case{{12, 2}, 2, 2, 4, 1, 1.0},             // window 1: each token sees itself
                      Case{{10, 11}, 4, 2, 8, 64, 0.125},         // window longer than every sequence
                      Case{{7}, 2, 2, 8, 0, 0.35, 0.8},           // soft-capped scores (a cap that bites)
                      Case{{5, 1, 9, 3, 6}, 4, 2, 8, 3, 0.25, 1.5}));  // soft-cap with a window and GQA

TEST(ReferenceAttention, Fp32MatchesFp64AndStaysFp32) {
  at::manual_seed(7);
  const std::vector<int32_t> lengths{6, 1, 13};
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor q = at::randn({20, 4, 8}, f64), k = at::randn({20, 2, 8}, f64),
                   v = at::randn({20, 2, 8}, f64);
  VarlenSpec spec;
  spec.cu_seqlens = cu_seqlens_of(lengths);
  spec.max_seqlen = 13;
  spec.window = 5;
  spec.softmax_scale = 0.3;
  const at::Tensor out = varlen_attention(q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat), spec,
                                          Backend::kReference);
  EXPECT_EQ(out.scalar_type(), at::kFloat);
  EXPECT_LT(rel_err(out, naive_attention(q, k, v, lengths, 5, 0.3)), 1e-6);
}

TEST(ReferenceAttention, HostCopyOfCuSeqlensGivesTheSameResult) {
  at::manual_seed(3);
  const at::Tensor q = at::randn({9, 2, 8}), k = at::randn({9, 2, 8}), v = at::randn({9, 2, 8});
  VarlenSpec spec;
  spec.cu_seqlens = cu_seqlens_of({4, 5});
  spec.max_seqlen = 5;
  const at::Tensor a = varlen_attention(q, k, v, spec, Backend::kReference);
  spec.cu_seqlens_cpu = spec.cu_seqlens.clone();
  const at::Tensor b = varlen_attention(q, k, v, spec, Backend::kReference);
  EXPECT_TRUE(at::equal(a, b));
}

TEST(ReferenceAttention, NoTokensGivesAnEmptyResult) {
  const at::Tensor q = at::zeros({0, 2, 8}), k = at::zeros({0, 1, 8}), v = at::zeros({0, 1, 8});
  VarlenSpec spec;
  spec.cu_seqlens = cu_seqlens_of({0, 0});
  const at::Tensor out = varlen_attention(q, k, v, spec, Backend::kReference);
  EXPECT_EQ(out.sizes(), q.sizes());
}

}  // namespace
}  // namespace fptrain::attention
