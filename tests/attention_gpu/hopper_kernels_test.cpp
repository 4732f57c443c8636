// Correctness of our CUDA varlen attention kernels (forward and backward) against a
// float64 reference, on fresh random inputs each run, with outputs poisoned (NaN)
// before every launch. Each error must be at most twice the error of the same-dtype
// math attention (the bf16/fp16 reference) against float64.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention/hopper_backend.h"

#ifdef FPTRAIN_HOPPER_KERNELS  // the kernels are part of this build (FPTRAIN_CUDA=ON)
#include "attention/cuda/hopper_kernels.h"

namespace fa = fptrain::attention;

namespace {

bool have_gpu() { return fa::hopper_kernels_available(); }

uint64_t fresh_seed() {
  static uint64_t seed = std::random_device{}() ^ (uint64_t(std::random_device{}()) << 32);
  return seed++;
}

at::Tensor make_cu_seqlens(const std::vector<int>& lens) {
  std::vector<int> cu{0};
  for (int l : lens) cu.push_back(cu.back() + l);
  return at::tensor(cu, at::TensorOptions().dtype(at::kInt)).to(at::kCUDA);
}

int max_len(const std::vector<int>& lens) {
  int m = 0;
  for (int l : lens) m = std::max(m, l);
  return m;
}

// The caching allocator hands freed blocks back for allocations of the same size:
// filling such blocks with NaN first means any element the kernels fail to write
// shows up as NaN.
void poison_allocator(const std::vector<std::vector<int64_t>>& shapes, at::ScalarType dtype) {
  std::vector<at::Tensor> held;
  for (const auto& s : shapes) {
    held.push_back(at::full(s, std::numeric_limits<float>::quiet_NaN(),
                            at::TensorOptions().dtype(dtype).device(at::kCUDA)));
    held.push_back(at::full(s, std::numeric_limits<float>::quiet_NaN(),
                            at::TensorOptions().dtype(at::kFloat).device(at::kCUDA)));
  }
  held.clear();
}

struct Result {
  at::Tensor o, lse, dq, dk, dv;
};

// Math attention per sequence in `ct` (float64, or the input dtype with an fp32 softmax,
// as eager attention does; a soft cap in ct, as Gemma 2's eager attention), differentiated
// by autograd.
Result reference(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& dout,
                 const std::vector<int>& lens, bool causal, int window, double scale, at::ScalarType ct,
                 double softcap = 0.0) {
  at::Tensor qc = q.to(ct).detach().requires_grad_(true);
  at::Tensor kc = k.to(ct).detach().requires_grad_(true);
  at::Tensor vc = v.to(ct).detach().requires_grad_(true);
  const int64_t hq = q.size(1), hkv = k.size(1), d = q.size(2), rep = hq / hkv;
  std::vector<at::Tensor> outs, lses;
  int64_t start = 0;
  for (int len : lens) {
    if (len == 0) continue;
    auto qs = qc.narrow(0, start, len).transpose(0, 1);  // [Hq, L, D]
    auto expand = [&](const at::Tensor& x) {
      return x.narrow(0, start, len).unsqueeze(2).expand({len, hkv, rep, d}).reshape({len, hq, d}).transpose(0, 1);
    };
    auto ks = expand(kc), vs = expand(vc);
    at::Tensor s = at::matmul(qs, ks.transpose(1, 2)) * scale;
    if (softcap > 0) s = at::tanh(s / softcap) * softcap;
    if (causal) {
      auto pos = at::arange(len, at::TensorOptions().dtype(at::kLong).device(at::kCUDA));
      auto i = pos.unsqueeze(1), j = pos.unsqueeze(0);
      auto allowed = j <= i;
      if (window > 0) allowed = allowed & ((i - j) < window);
      s = s.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
    }
    const at::ScalarType sm = ct == at::kDouble ? at::kDouble : at::kFloat;
    lses.push_back(at::logsumexp(s.to(sm), -1).detach().to(at::kFloat));
    at::Tensor p = at::softmax(s, -1, sm).to(ct);
    outs.push_back(at::matmul(p, vs).transpose(0, 1));
    start += len;
  }
  at::Tensor o = at::cat(outs, 0);
  o.backward(dout.to(ct));
  return {o.detach(), at::cat(lses, 1), qc.grad(), kc.grad(), vc.grad()};
}

double rel_err(const at::Tensor& x, const at::Tensor& ref) {
  at::Tensor r = ref.to(at::kDouble);
  double denom = r.norm().item<double>();
  return (x.to(at::kDouble) - r).norm().item<double>() / (denom > 0 ? denom : 1.0);
}

struct Case {
  at::ScalarType dtype;
  int head_dim;
  int hq, hkv;
  bool causal;
  int window;
  std::string mix;
  std::vector<int> lens;
  double softcap = 0.0;  // > 0: Gemma 2's soft-capped scores
};

std::string describe(const Case& c) {
  char buf[192];
  std::snprintf(buf, sizeof buf, "%s D=%d Hq=%d Hkv=%d %s%s%s mix=%s T=%d", c.dtype == at::kBFloat16 ? "bf16" : "fp16",
                c.head_dim, c.hq, c.hkv, c.causal ? "causal" : "full",
                c.window ? (" window=" + std::to_string(c.window)).c_str() : "",
                c.softcap > 0 ? (" softcap=" + std::to_string(c.softcap)).c_str() : "", c.mix.c_str(),
                [&] { int t = 0; for (int l : c.lens) t += l; return t; }());
  return buf;
}

// Runs one case; returns false (with gtest failures) when an error exceeds the bound.
void check_case(const Case& c, bool deterministic) {
  SCOPED_TRACE(describe(c));
  int total = 0;
  for (int l : c.lens) total += l;
  at::manual_seed(fresh_seed());
  auto opts = at::TensorOptions().dtype(c.dtype).device(at::kCUDA);
  at::Tensor q = at::randn({total, c.hq, c.head_dim}, opts);
  at::Tensor k = at::randn({total, c.hkv, c.head_dim}, opts);
  at::Tensor v = at::randn({total, c.hkv, c.head_dim}, opts);
  at::Tensor dout = at::randn({total, c.hq, c.head_dim}, opts);
  const double scale = 0.9 / std::sqrt(double(c.head_dim));

  fa::VarlenSpec spec;
  spec.cu_seqlens = make_cu_seqlens(c.lens);
  spec.max_seqlen = max_len(c.lens);
  spec.causal = c.causal;
  spec.window = c.window;
  spec.softmax_scale = scale;
  spec.softcap = c.softcap;

  poison_allocator({{total, c.hq, c.head_dim}, {c.hq, total}}, c.dtype);
  auto [o, lse] = fa::cuda::attention_forward(q, k, v, spec);
  poison_allocator({{total, c.hq, c.head_dim}, {total, c.hkv, c.head_dim}, {c.hq, total}}, c.dtype);
  auto [dq, dk, dv] = fa::cuda::attention_backward(dout, q, k, v, o, lse, spec, deterministic);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  Result r64 = reference(q, k, v, dout, c.lens, c.causal, c.window, scale, at::kDouble, c.softcap);
  Result rlo = reference(q, k, v, dout, c.lens, c.causal, c.window, scale, c.dtype, c.softcap);

  const char* names[] = {"O", "LSE", "dQ", "dK", "dV"};
  at::Tensor ours[] = {o, lse, dq, dk, dv};
  at::Tensor exact[] = {r64.o, r64.lse, r64.dq, r64.dk, r64.dv};
  at::Tensor low[] = {rlo.o, rlo.lse, rlo.dq, rlo.dk, rlo.dv};
  std::string line = describe(c) + (deterministic ? " det" : "");
  for (int i = 0; i < 5; ++i) {
    EXPECT_TRUE(at::isfinite(ours[i]).all().item<bool>()) << names[i] << " has unwritten (NaN) or non-finite values";
    const double e_ours = rel_err(ours[i], exact[i]);
    const double e_low = rel_err(low[i], exact[i]);
    char buf[96];
    std::snprintf(buf, sizeof buf, " | %s %.2e (math %.2e)", names[i], e_ours, e_low);
    line += buf;
    // Floor of 1e-6 only matters when the math reference is exact to float32 rounding.
    EXPECT_LE(e_ours, 2.0 * e_low + 1e-6) << names[i] << ": ours " << e_ours << " vs math " << e_low;
  }
  std::printf("%s\n", line.c_str());
}

std::vector<int> random_lengths(int n, int lo, int hi, uint64_t seed) {
  std::mt19937 rng{uint32_t(seed)};
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<int> out(n);
  for (int& l : out) l = dist(rng);
  return out;
}

// Instruction-data lengths: lognormal (median `median`, sigma 0.7), clipped to [1, max].
std::vector<int> lognormal_lengths(int n, double median, int max, uint64_t seed) {
  std::mt19937 rng{uint32_t(seed)};
  std::lognormal_distribution<double> dist(std::log(median), 0.7);
  std::vector<int> out(n);
  for (int& l : out) l = std::clamp(static_cast<int>(std::lround(dist(rng))), 1, max);
  return out;
}

std::vector<std::pair<std::string, std::vector<int>>> length_mixes() {
  return {
      {"one-long", {3001}},
      {"many-short", random_lengths(60, 1, 200, fresh_seed())},
      {"alpaca-like", lognormal_lengths(60, 100, 1024, fresh_seed())},
      {"edges", {1, 0, 129, 1, 0, 64, 127, 256, 1, 2, 255}},
  };
}

}  // namespace

TEST(HopperKernels, MatchesFloat64WithinTwiceMathError) {
  if (!have_gpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf})
    for (int d : {64, 128})
      for (auto [hq, hkv] : std::vector<std::pair<int, int>>{{4, 4}, {8, 2}})
        for (auto [causal, window] : std::vector<std::pair<bool, int>>{{true, 0}, {false, 0}, {true, 77}})
          for (const auto& [name, lens] : length_mixes())
            check_case(Case{dtype, d, hq, hkv, causal, window, name, lens}, false);
}

// Soft-capped scores (Gemma 2): caps small enough to bite on unit-variance scores (1.5 turns
// most of them nonlinear; 4 only the tails), with a scale other than 1/sqrt(D) as Gemma's
// query_pre_attn_scalar gives; every mask kind, GQA, both head dims and dtypes, packed and
// tiny documents, both backward modes.
TEST(HopperKernels, SoftCappedScoresMatchFloat64WithinTwiceMathError) {
  if (!have_gpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf})
    for (int d : {64, 128})
      for (auto [causal, window] : std::vector<std::pair<bool, int>>{{true, 0}, {false, 0}, {true, 77}})
        for (double cap : {1.5, 4.0})
          for (bool deterministic : {false, true}) {
            for (const auto& [name, lens] : length_mixes()) {
              Case c{dtype, d, 8, 2, causal, window, name, lens};
              c.softcap = cap;
              check_case(c, deterministic);
            }
            std::vector<int> tiny = random_lengths(200, 0, 16, fresh_seed());
            check_case(Case{dtype, d, 4, 4, causal, window, "tiny", tiny, cap}, deterministic);
          }
}

// Head dim 256 (Gemma 2 and 3): the forward with 64-key blocks and one Q stage, the dK/dV kernel
// whose warpgroups split D (P^T and dS^T through shared memory), the deterministic dQ pass;
// every mask kind, GQA, both dtypes, soft caps, documents short enough to share a 64-token
// pack, both backward modes.
TEST(HopperKernels, HeadDim256MatchesFloat64WithinTwiceMathError) {
  if (!have_gpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (at::ScalarType dtype : {at::kBFloat16, at::kHalf})
    for (auto [causal, window] : std::vector<std::pair<bool, int>>{{true, 0}, {false, 0}, {true, 77}})
      for (double cap : {0.0, 4.0})
        for (bool deterministic : {false, true}) {
          for (const auto& [name, lens] : length_mixes())
            check_case(Case{dtype, 256, 8, 2, causal, window, name, lens, cap}, deterministic);
          check_case(Case{dtype, 256, 4, 4, causal, window, "tiny", random_lengths(200, 0, 16, fresh_seed()), cap},
                     deterministic);
        }
}

TEST(HopperKernels, DeterministicBackwardMatchesAndRepeatsBitwise) {
  if (!have_gpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (int d : {64, 128, 256}) {
    Case c{at::kBFloat16, d, 8, 2, true, 0, "mixed", random_lengths(40, 1, 700, fresh_seed())};
    check_case(c, true);
    int total = 0;
    for (int l : c.lens) total += l;
    at::manual_seed(fresh_seed());
    auto opts = at::TensorOptions().dtype(c.dtype).device(at::kCUDA);
    at::Tensor q = at::randn({total, 8, d}, opts), k = at::randn({total, 2, d}, opts);
    at::Tensor v = at::randn({total, 2, d}, opts), dout = at::randn({total, 8, d}, opts);
    fa::VarlenSpec spec;
    spec.cu_seqlens = make_cu_seqlens(c.lens);
    spec.max_seqlen = max_len(c.lens);
    spec.softmax_scale = 1.0 / std::sqrt(double(d));
    auto [o, lse] = fa::cuda::attention_forward(q, k, v, spec);
    auto a = fa::cuda::attention_backward(dout, q, k, v, o, lse, spec, true);
    auto b = fa::cuda::attention_backward(dout, q, k, v, o, lse, spec, true);
    EXPECT_TRUE(at::equal(std::get<0>(a), std::get<0>(b))) << "dQ differs between deterministic runs";
    EXPECT_TRUE(at::equal(std::get<1>(a), std::get<1>(b))) << "dK differs between deterministic runs";
    EXPECT_TRUE(at::equal(std::get<2>(a), std::get<2>(b))) << "dV differs between deterministic runs";
    auto [o2, lse2] = fa::cuda::attention_forward(q, k, v, spec);
    EXPECT_TRUE(at::equal(o, o2)) << "forward is not bit-identical across runs";
  }
}

TEST(HopperKernels, AutogradFunctionGivesKernelGradients) {
  if (!have_gpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  std::vector<int> lens{300, 1, 77, 512};
  int total = 300 + 1 + 77 + 512;
  at::manual_seed(fresh_seed());
  auto opts = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA);
  at::Tensor q = at::randn({total, 8, 128}, opts).requires_grad_(true);
  at::Tensor k = at::randn({total, 4, 128}, opts).requires_grad_(true);
  at::Tensor v = at::randn({total, 4, 128}, opts).requires_grad_(true);
  at::Tensor dout = at::randn({total, 8, 128}, opts);
  fa::VarlenSpec spec;
  spec.cu_seqlens = make_cu_seqlens(lens);
  spec.max_seqlen = 512;
  spec.softmax_scale = 0.08;
  spec.window = 100;
  spec.softcap = 0.7;  // the backward must receive it from the autograd context
  at::Tensor out = fa::hopper_varlen_attention(q, k, v, spec);
  out.backward(dout);
  const bool was = at::globalContext().deterministicAlgorithms();
  at::globalContext().setDeterministicAlgorithms(true, false);
  auto [o, lse] = fa::cuda::attention_forward(q.detach(), k.detach(), v.detach(), spec);
  auto [dq, dk, dv] = fa::cuda::attention_backward(dout, q.detach(), k.detach(), v.detach(), o, lse, spec, true);
  at::globalContext().setDeterministicAlgorithms(was, false);
  EXPECT_TRUE(at::equal(out.detach(), o));
  // Atomic dQ order differs from the deterministic pass: compare to rounding.
  EXPECT_LT(rel_err(q.grad(), dq), 1e-2);
  EXPECT_TRUE(at::equal(k.grad(), dk));
  EXPECT_TRUE(at::equal(v.grad(), dv));
}

// Short documents whose boundaries fall at every offset inside a 128-row tile:
// a leading document of `offset` tokens shifts the runs of 1-200-token
// documents behind it (kernels that let one tile span several documents must
// mask exactly at each boundary). GQA and not, D 64 and 128, and the
// deterministic backward on every fourth offset.
TEST(HopperKernels, ShortDocumentsAtEveryTileOffset) {
  if (!have_gpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (int offset = 0; offset < 128; offset += 9) {
    std::vector<int> lens{offset};
    for (int l : random_lengths(24, 1, 200, fresh_seed())) lens.push_back(l);
    for (int d : {64, 128})
      for (auto [hq, hkv] : std::vector<std::pair<int, int>>{{8, 2}, {4, 4}})
        check_case(Case{at::kBFloat16, d, hq, hkv, true, 0, "offset " + std::to_string(offset), lens},
                   offset % 36 == 0);
  }
}

TEST(HopperKernels, ManyOneTokenSequences) {
  if (!have_gpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  std::vector<int> lens(3000, 1);
  for (int i = 0; i < 3000; i += 97) lens[i] = 0;
  lens.push_back(1000);
  check_case(Case{at::kBFloat16, 128, 8, 2, true, 0, "3000x1-token+1000", lens}, false);
}

// Documents of 0-16 tokens: a spanning tile holds dozens of them (and empty ones), so nearly
// every score is masked at a document boundary. Causal, full and windowed; GQA; D 64, 128 and
// 256 (packs of 64 tokens there); both backward modes.
TEST(HopperKernels, TinyDocumentsShareSpanningTiles) {
  if (!have_gpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  for (int d : {64, 128, 256})
    for (auto [causal, window] : std::vector<std::pair<bool, int>>{{true, 0}, {false, 0}, {true, 5}})
      for (bool deterministic : {false, true}) {
        std::vector<int> lens = random_lengths(300, 0, 16, fresh_seed());
        lens.push_back(300);  // and one long document among them
        std::rotate(lens.begin(), lens.begin() + 150, lens.end());
        check_case(Case{at::kBFloat16, d, 8, 2, causal, window, "tiny", lens}, deterministic);
      }
}

// The scheduler's segments are the packs a sequential greedy scan makes: from each pack's
// first document, add documents while the pack holds at most 128 tokens; a longer document
// stays alone. Checked on tiny, mixed and long documents, empty ones, and more documents than
// the scheduler's shared memory holds (its global-memory path).
TEST(HopperKernels, TileSchedulerPacksConsecutiveShortDocumentsGreedily) {
  if (!have_gpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  std::vector<std::pair<std::string, std::vector<int>>> mixes = {
      {"one", {5}},
      {"one-long", {3000}},
      {"tiny", random_lengths(500, 0, 16, fresh_seed())},
      {"short", random_lengths(300, 1, 200, fresh_seed())},
      {"alpaca-like", lognormal_lengths(300, 100, 1024, fresh_seed())},
      {"edges", {128, 0, 0, 128, 1, 127, 0, 1, 129, 64, 64, 64, 0}},
      {"20000 one-token", std::vector<int>(20000, 1)},
  };
  for (const auto& [name, lens] : mixes) {
    SCOPED_TRACE(name);
    std::vector<int> cu{0};
    for (int l : lens) cu.push_back(cu.back() + l);
    const int batch = int(lens.size());
    // {start, length, first document, documents, document starts as 4 x 32 bits}
    std::vector<std::array<uint32_t, 8>> expected;
    for (int b = 0; b < batch;) {
      int end = b + 1;
      if (lens[b] <= 128)
        while (end < batch && cu[end + 1] - cu[b] <= 128) ++end;
      std::array<uint32_t, 8> e{uint32_t(cu[b]), uint32_t(cu[end] - cu[b]), uint32_t(b), uint32_t(end - b), 1, 0, 0, 0};
      if (end - b > 1)
        for (int d = b; d < end; ++d)
          if (cu[d] - cu[b] < cu[end] - cu[b]) e[4 + (cu[d] - cu[b]) / 32] |= 1u << ((cu[d] - cu[b]) % 32);
      expected.push_back(e);
      b = end;
    }
    at::Tensor got = fa::cuda::tile_segments(make_cu_seqlens(lens), cu.back());
    ASSERT_EQ(got.size(0), int64_t(expected.size()));
    ASSERT_EQ(got.size(1), 8);
    const auto rows = got.accessor<int, 2>();
    for (size_t i = 0; i < expected.size(); ++i)
      for (int f = 0; f < 8; ++f)
        ASSERT_EQ(uint32_t(rows[i][f]), expected[i][f]) << "segment " << i << " field " << f;
  }
}

// Forward at max_seqlen 32k: the float64 reference runs in query chunks (no L x L
// autograd graph), so only O and LSE are compared here.
TEST(HopperKernels, LongSequenceForward32k) {
  if (!have_gpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  const int L = 32768, hq = 2, hkv = 1, d = 128;
  at::manual_seed(fresh_seed());
  auto opts = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA);
  at::Tensor q = at::randn({L, hq, d}, opts), k = at::randn({L, hkv, d}, opts), v = at::randn({L, hkv, d}, opts);
  fa::VarlenSpec spec;
  spec.cu_seqlens = make_cu_seqlens({L});
  spec.max_seqlen = L;
  spec.softmax_scale = 1.0 / std::sqrt(double(d));
  poison_allocator({{L, hq, d}, {hq, L}}, at::kBFloat16);
  auto [o, lse] = fa::cuda::attention_forward(q, k, v, spec);
  ASSERT_TRUE(at::isfinite(o).all().item<bool>());
  double num64 = 0, numlo = 0, den = 0;
  const int chunk = 2048;
  for (int h = 0; h < hq; ++h) {
    at::Tensor kh = k.select(1, h / (hq / hkv)), vh = v.select(1, h / (hq / hkv));
    for (int c0 = 0; c0 < L; c0 += chunk) {
      at::Tensor qh = q.select(1, h).narrow(0, c0, chunk);
      auto pos_i = at::arange(c0, c0 + chunk, at::TensorOptions().dtype(at::kLong).device(at::kCUDA)).unsqueeze(1);
      auto pos_j = at::arange(L, at::TensorOptions().dtype(at::kLong).device(at::kCUDA)).unsqueeze(0);
      auto hidden = pos_j > pos_i;
      at::Tensor s64 = at::matmul(qh.to(at::kDouble), kh.to(at::kDouble).t()) * spec.softmax_scale;
      at::Tensor o64 = at::matmul(at::softmax(s64.masked_fill(hidden, -INFINITY), -1), vh.to(at::kDouble));
      at::Tensor slo = at::matmul(qh, kh.t()) * spec.softmax_scale;
      at::Tensor olo =
          at::matmul(at::softmax(slo.masked_fill(hidden, -INFINITY), -1, at::kFloat).to(at::kBFloat16), vh);
      at::Tensor mine = o.select(1, h).narrow(0, c0, chunk).to(at::kDouble);
      num64 += (mine - o64).pow(2).sum().item<double>();
      numlo += (olo.to(at::kDouble) - o64).pow(2).sum().item<double>();
      den += o64.pow(2).sum().item<double>();
    }
  }
  const double e_ours = std::sqrt(num64 / den), e_low = std::sqrt(numlo / den);
  std::printf("32k causal forward: O rel err %.2e (math bf16 %.2e)\n", e_ours, e_low);
  EXPECT_LE(e_ours, 2.0 * e_low);
}

// Backward at max_seqlen 32k. The references (float64, and bf16 math as the
// same-dtype baseline) run per query chunk through autograd, each chunk seeing
// only its causal key prefix, so no 32k x 32k graph is ever held.
TEST(HopperKernels, LongSequenceBackward32k) {
  if (!have_gpu()) GTEST_SKIP() << "needs an sm_90 GPU";
  const int L = 32768, hq = 2, hkv = 1, d = 128, chunk = 2048;
  at::manual_seed(fresh_seed());
  auto opts = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA);
  at::Tensor q = at::randn({L, hq, d}, opts), k = at::randn({L, hkv, d}, opts), v = at::randn({L, hkv, d}, opts);
  at::Tensor dout = at::randn({L, hq, d}, opts);
  fa::VarlenSpec spec;
  spec.cu_seqlens = make_cu_seqlens({L});
  spec.max_seqlen = L;
  spec.softmax_scale = 1.0 / std::sqrt(double(d));
  poison_allocator({{L, hq, d}, {hq, L}}, at::kBFloat16);
  auto [o, lse] = fa::cuda::attention_forward(q, k, v, spec);
  poison_allocator({{L, hq, d}, {L, hkv, d}, {hq, L}}, at::kBFloat16);
  auto [dq, dk, dv] = fa::cuda::attention_backward(dout, q, k, v, o, lse, spec, /*deterministic=*/false);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  // Gradients of sum(O * dout) for one dtype, accumulated over query chunks.
  auto reference = [&](at::ScalarType dtype) {
    at::Tensor kk = k.to(dtype).detach().requires_grad_(true), vv = v.to(dtype).detach().requires_grad_(true);
    std::vector<at::Tensor> dq_chunks;
    for (int c0 = 0; c0 < L; c0 += chunk) {
      at::Tensor qc = q.narrow(0, c0, chunk).to(dtype).detach().requires_grad_(true);
      at::Tensor total = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(at::kCUDA));
      for (int h = 0; h < hq; ++h) {
        const int64_t g = h / (hq / hkv), keys = c0 + chunk;
        at::Tensor kh = kk.select(1, g).narrow(0, 0, keys), vh = vv.select(1, g).narrow(0, 0, keys);
        auto pos_i = at::arange(c0, c0 + chunk, at::TensorOptions().dtype(at::kLong).device(at::kCUDA)).unsqueeze(1);
        auto pos_j = at::arange(keys, at::TensorOptions().dtype(at::kLong).device(at::kCUDA)).unsqueeze(0);
        at::Tensor s = (at::matmul(qc.select(1, h), kh.t()) * spec.softmax_scale).masked_fill(pos_j > pos_i, -INFINITY);
        at::Tensor p = at::softmax(s, -1, dtype == at::kDouble ? at::kDouble : at::kFloat).to(dtype);
        at::Tensor oh = at::matmul(p, vh);
        total = total + (oh.to(at::kDouble) * dout.select(1, h).narrow(0, c0, chunk).to(at::kDouble)).sum();
      }
      total.backward();
      dq_chunks.push_back(qc.grad());
    }
    return std::make_tuple(at::cat(dq_chunks, 0), kk.grad(), vv.grad());
  };
  auto [dq64, dk64, dv64] = reference(at::kDouble);
  auto [dqlo, dklo, dvlo] = reference(at::kBFloat16);
  const char* names[] = {"dQ", "dK", "dV"};
  at::Tensor ours[] = {dq, dk, dv}, exact[] = {dq64, dk64, dv64}, low[] = {dqlo, dklo, dvlo};
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(at::isfinite(ours[i]).all().item<bool>()) << names[i] << " has unwritten or non-finite values";
    const double e_ours = rel_err(ours[i], exact[i]), e_low = rel_err(low[i], exact[i]);
    std::printf("32k causal backward: %s rel err %.2e (math bf16 %.2e)\n", names[i], e_ours, e_low);
    EXPECT_LE(e_ours, 2.0 * e_low) << names[i];
  }
}
#else
TEST(HopperKernels, NotBuilt) {
  EXPECT_FALSE(fptrain::attention::hopper_kernels_available());
  GTEST_SKIP() << "built without FPTRAIN_CUDA: no kernels to check";
}
#endif
