// The optimizer over flat buffers: the layout and its shard mapping, parameters
// and gradients as views of one buffer each (autograd accumulating into them),
// padding that stays zero, and the AdamW step against at::_fused_adamw_.
#include "optim/adamw.h"
#include "optim/flat_adamw.h"
#include "optim/flat_layout.h"

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace fptrain::optim {
namespace {

using Shapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// A gradient set as a test sets it: into the .grad view while there is one (resident
// storage, or after a backward), else by hand (collected into the lazy buckets).
void set_grad(at::Tensor& p, const at::Tensor& g) {
  c10::NoGradGuard no_grad;
  if (p.grad().defined()) p.mutable_grad().copy_(g);
  else p.mutable_grad() = g.to(p.scalar_type()).clone();
}

// Odd sizes on purpose: none is a multiple of the alignment.
Shapes odd_shapes() {
  return {{"embed", {37, 5}}, {"a", {129}}, {"b", {3, 7, 11}}, {"empty", {0}}, {"c", {1}}, {"d", {300}}};
}

TEST(TrainFlatLayout, SegmentsAreAlignedAndTheTotalSplitsIntoShards) {
  for (int64_t shards : {1, 2, 3, 8}) {
    const FlatLayout layout(odd_shapes(), 128, shards);
    EXPECT_EQ(layout.total() % (128 * shards), 0);
    EXPECT_EQ(layout.shard_size() % 128, 0);
    int64_t end = 0, numel = 0;
    for (const FlatSegment& s : layout.segments()) {
      EXPECT_EQ(s.offset % 128, 0) << s.name;
      EXPECT_GE(s.offset, end) << s.name;  // in order, not overlapping
      end = s.offset + s.numel;
      numel += s.numel;
    }
    EXPECT_LE(end, layout.total());
    EXPECT_EQ(layout.numel(), numel);
  }
  EXPECT_EQ(FlatLayout(odd_shapes(), 128, 1).segments()[1].offset, 256);  // 185 elements round up to 256
  EXPECT_THROW(FlatLayout(odd_shapes(), 0, 1), std::invalid_argument);
  EXPECT_THROW(FlatLayout(odd_shapes(), 128, 0), std::invalid_argument);
}

TEST(TrainFlatLayout, ShardPiecesCoverEveryParameterElementExactlyOnce) {
  for (int64_t alignment : {1, 8, 128}) {
    for (int64_t shards : {1, 2, 3, 8}) {
      const FlatLayout layout(odd_shapes(), alignment, shards);
      std::vector<int> seen_flat(static_cast<size_t>(layout.total()), 0);
      std::vector<std::vector<int>> seen(layout.segments().size());
      for (size_t i = 0; i < seen.size(); ++i) seen[i].assign(static_cast<size_t>(layout.segments()[i].numel), 0);
      for (int64_t r = 0; r < shards; ++r) {
        int64_t prev_end = r * layout.shard_size();  // one bucket: shard r is one range
        for (const ShardPiece& p : layout.shard_pieces(r)) {
          const FlatSegment& s = layout.segments().at(p.segment);
          ASSERT_GT(p.numel, 0);
          // Inside the shard, in flat order, and where the segment says.
          EXPECT_GE(p.flat_offset, prev_end);
          EXPECT_LE(p.flat_offset + p.numel, (r + 1) * layout.shard_size());
          EXPECT_EQ(p.local_offset, p.flat_offset - r * layout.shard_size());
          EXPECT_EQ(p.flat_offset, s.offset + p.segment_offset);
          prev_end = p.flat_offset + p.numel;
          for (int64_t k = 0; k < p.numel; ++k) {
            ++seen[p.segment][static_cast<size_t>(p.segment_offset + k)];
            ++seen_flat[static_cast<size_t>(p.flat_offset + k)];
          }
        }
      }
      for (size_t i = 0; i < seen.size(); ++i)
        for (int c : seen[i]) ASSERT_EQ(c, 1) << layout.segments()[i].name << " alignment " << alignment
                                              << " shards " << shards;
      // What no piece covers is padding, and segment_at agrees.
      for (int64_t f = 0; f < layout.total(); ++f)
        ASSERT_EQ(seen_flat[static_cast<size_t>(f)] == 1, layout.segment_at(f) >= 0) << f;
    }
  }
}

TEST(TrainFlatLayout, ShardsOfTheLayoutSplitParameters) {
  // 3 shards of a 2-parameter layout: the middle shard holds the end of one and the start of the other.
  const FlatLayout layout({{"x", {200}}, {"y", {200}}}, 8, 3);
  EXPECT_EQ(layout.total(), 408);  // 200 + 200, rounded up to 24
  const auto middle = layout.shard_pieces(1);
  ASSERT_EQ(middle.size(), 2u);
  EXPECT_EQ(middle[0].segment, 0u);
  EXPECT_EQ(middle[0].segment_offset, 136);
  EXPECT_EQ(middle[0].numel, 64);
  EXPECT_EQ(middle[1].segment, 1u);
  EXPECT_EQ(middle[1].segment_offset, 0);
  EXPECT_EQ(middle[1].numel, 72);
}

// ---- parameters and gradients as views -----------------------------------------

std::vector<at::Tensor> make_params(at::ScalarType dtype, uint64_t seed = 3) {
  at::manual_seed(seed);
  std::vector<at::Tensor> out;
  for (const auto& [name, shape] : odd_shapes()) out.push_back(at::randn(shape).to(dtype).requires_grad_(true));
  return out;
}

std::vector<std::string> names() {
  std::vector<std::string> out;
  for (const auto& [name, shape] : odd_shapes()) out.push_back(name);
  return out;
}

// A scalar function of every parameter (each used, so each gets a gradient).
at::Tensor objective(const std::vector<at::Tensor>& params, double scale) {
  at::Tensor total = at::zeros({}, params[0].options().requires_grad(false));
  for (size_t i = 0; i < params.size(); ++i)
    total = total + (params[i] * params[i]).sum() * (scale * static_cast<double>(i + 1));
  return total;
}

at::Tensor padding_mask(const FlatLayout& layout) {
  at::Tensor mask = at::ones({layout.total()}, at::kBool);
  for (const FlatSegment& s : layout.segments()) mask.narrow(0, s.offset, s.numel).fill_(false);
  return mask;
}

void expect_zero_padding(const at::Tensor& flat, const FlatLayout& layout, const char* what) {
  const at::Tensor pad = flat.masked_select(padding_mask(layout));
  EXPECT_GT(pad.numel(), 0);
  EXPECT_EQ(pad.count_nonzero().item<int64_t>(), 0) << what;
}

TEST(TrainFlatParameters, ParametersAreLeafViewsOfTheWeightBuffer) {
  auto params = make_params(at::kBFloat16);
  std::vector<at::Tensor> before;
  for (const auto& p : params) before.push_back(p.detach().clone());
  AdamW opt(names(), params, OptimizerSection{});
  const FlatParameters& flat = opt.flat();
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor& p = params[i];
    EXPECT_TRUE(p.is_leaf());
    EXPECT_TRUE(p.requires_grad());
    EXPECT_TRUE(at::equal(p.detach(), before[i])) << "values kept";
    const FlatSegment& s = flat.layout().segments()[i];
    if (s.numel == 0) continue;
    EXPECT_EQ(static_cast<char*>(p.data_ptr()),
              static_cast<char*>(flat.weights().data_ptr()) + s.offset * flat.weights().element_size());
  }
  // Editing the flat buffer changes the model's tensors, and the reverse.
  {
    c10::NoGradGuard no_grad;
    flat.segment(flat.weights(), 2).fill_(2.0);
    EXPECT_EQ(params[2].detach().sum().item<double>(), 2.0 * params[2].numel());
    params[1].detach().fill_(-1.0);
  }
  EXPECT_EQ(flat.segment(flat.weights(), 1).sum().item<double>(), -129.0);
}

TEST(TrainFlatParameters, AutogradAccumulatesIntoTheFlatGradientBuffer) {
  auto params = make_params(at::kFloat);
  std::vector<at::Tensor> copies;  // separate tensors: autograd's ordinary accumulation
  for (const auto& p : params) copies.push_back(p.detach().clone().requires_grad_(true));
  OptimizerSection resident;  // one buffer, its views installed for good (lazy: tests/trainer/lazy_gradients_test.cpp)
  resident.gradient_storage = optim::GradStorage::kResident;
  AdamW opt(names(), params, resident);
  const FlatParameters& flat = opt.flat();
  std::vector<at::Tensor> views;
  for (const auto& p : params) views.push_back(p.grad());
  objective(params, 1.0).backward();
  objective(params, 0.5).backward();
  objective(copies, 1.0).backward();
  objective(copies, 0.5).backward();
  for (size_t i = 0; i < params.size(); ++i) {
    // The same .grad tensor as before the first backward (added into, not replaced) ...
    EXPECT_TRUE(params[i].grad().is_same(views[i])) << i;
    // ... holding the sum of both passes, in the flat buffer.
    EXPECT_TRUE(at::allclose(flat.segment(flat.gradients().gathered(), i), copies[i].grad(), 1e-6, 1e-6)) << i;
  }
  EXPECT_GT(flat.gradients().gathered().abs().sum().item<double>(), 0.0);
  expect_zero_padding(flat.gradients().gathered(), flat.layout(), "gradient padding after backward");
  // Zeroing is a memset of the buffer: the views stay.
  opt.zero_grad();
  EXPECT_EQ(flat.gradients().gathered().count_nonzero().item<int64_t>(), 0);
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(params[i].grad().is_same(views[i]));
  objective(params, 1.0).backward();
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(params[i].grad().is_same(views[i]));
}

TEST(TrainFlatParameters, PaddingStaysZeroThroughSteps) {
  auto params = make_params(at::kBFloat16);
  OptimizerSection o;
  o.weight_decay = 0.1;
  AdamW opt(names(), params, o);
  for (int s = 0; s < 3; ++s) {
    objective(params, 1.0).backward();
    opt.accumulate_gradients();
    objective(params, 2.0).backward();
    opt.grad_norm(0.5);
    opt.step(1e-2);
  }
  const FlatLayout& layout = opt.flat().layout();
  expect_zero_padding(opt.flat().weights(), layout, "weights");
  expect_zero_padding(opt.master(), layout, "master weights");
  expect_zero_padding(opt.exp_avg(), layout, "exp_avg");
  expect_zero_padding(opt.exp_avg_sq(), layout, "exp_avg_sq");
  expect_zero_padding(opt.accumulator(), layout, "fp32 accumulator");
  EXPECT_GT(opt.exp_avg_sq().abs().sum().item<double>(), 0.0);
}

// ---- the step against at::_fused_adamw_ --------------------------------------

// How many elements differ, and by how many units in the last place at most.
struct UlpDiff {
  int64_t differing = 0;
  int64_t differing_in_body = 0;  // before the last numel % 16 elements (torch's vectorized body)
  int64_t max_ulp = 0;
};

UlpDiff ulp_diff(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.contiguous(), y = b.contiguous();
  const float* p = x.data_ptr<float>();
  const float* q = y.data_ptr<float>();
  const int64_t body = x.numel() - x.numel() % 16;
  UlpDiff d;
  for (int64_t i = 0; i < x.numel(); ++i) {
    int32_t u, v;
    std::memcpy(&u, p + i, 4);
    std::memcpy(&v, q + i, 4);
    if (u == v) continue;
    ++d.differing;
    d.differing_in_body += i < body;
    // Ordered integer view of floats: the distance in representable values.
    const int64_t ou = u < 0 ? int64_t(INT32_MIN) - u : u, ov = v < 0 ? int64_t(INT32_MIN) - v : v;
    d.max_ulp = std::max<int64_t>(d.max_ulp, std::llabs(ou - ov));
  }
  return d;
}

struct Case {
  double lr, beta1, beta2, eps, weight_decay, max_norm;
};

// The flat step (fp32 weights) and torch's fused AdamW per tensor, both fed the
// same gradients for 4 steps (with clipping: the reference grads are scaled by
// the flat path's own coefficient, so the update alone is compared).
void compare_with_fused_adamw(const Case& c) {
  at::set_num_threads(2);
  auto params = make_params(at::kFloat, 5);
  std::vector<at::Tensor> ref_w, ref_m, ref_v, steps;
  for (const auto& p : params) {
    ref_w.push_back(p.detach().clone());
    ref_m.push_back(at::zeros_like(ref_w.back()));
    ref_v.push_back(at::zeros_like(ref_w.back()));
  }
  OptimizerSection o;
  o.beta1 = c.beta1;
  o.beta2 = c.beta2;
  o.eps = c.eps;
  o.weight_decay = c.weight_decay;
  AdamW opt(names(), params, o);
  at::Tensor step_count = at::zeros({}, at::kFloat);
  for (int s = 0; s < 4; ++s) {
    at::manual_seed(100 + s);
    std::vector<at::Tensor> grads;
    for (const auto& p : params) grads.push_back(at::randn(p.sizes()) * 3.0);
    {
      c10::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) set_grad(params[i], grads[i]);
    }
    const double norm = opt.grad_norm(c.max_norm).item<double>();
    double expected_norm = 0;
    for (const auto& g : grads) expected_norm += g.to(at::kDouble).pow(2).sum().item<double>();
    EXPECT_NEAR(norm, std::sqrt(expected_norm), 1e-6 * std::sqrt(expected_norm));
    const float coef = c.max_norm > 0 ? std::min(1.0f, static_cast<float>(c.max_norm) / (static_cast<float>(norm) + 1e-6f))
                                      : 1.0f;
    if (c.max_norm > 0) EXPECT_LT(coef, 1.0f);
    std::vector<at::Tensor> scaled;
    for (const auto& g : grads) scaled.push_back(c.max_norm > 0 ? g * at::scalar_tensor(coef, at::kFloat) : g);
    step_count.add_(1);
    std::vector<at::Tensor> step_list(params.size(), step_count);
    at::_fused_adamw_(ref_w, scaled, ref_m, ref_v, {}, step_list, c.lr, c.beta1, c.beta2, c.weight_decay, c.eps,
                      false, false);
    opt.step(c.lr);
  }
  const auto state = opt.state();
  UlpDiff worst;
  int64_t total = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    for (const auto& [got, want] : {std::pair{state[3 * i].second, ref_w[i]}, std::pair{state[3 * i + 1].second, ref_m[i]},
                                    std::pair{state[3 * i + 2].second, ref_v[i]}}) {
      const UlpDiff d = ulp_diff(got, want);
      worst.differing += d.differing;
      worst.differing_in_body += d.differing_in_body;
      worst.max_ulp = std::max(worst.max_ulp, d.max_ulp);
      total += got.numel();
    }
  }
  std::printf("flat step vs at::_fused_adamw_ (lr %g, betas %g/%g, wd %g, clip %g), 4 steps: %lld of %lld values "
              "differ (%lld outside torch's scalar tails), max %lld ulp\n",
              c.lr, c.beta1, c.beta2, c.weight_decay, c.max_norm, (long long)worst.differing, (long long)total,
              (long long)worst.differing_in_body, (long long)worst.max_ulp);
  // Ours and the vectorized body of torch's CPU kernel (AVX2/AVX-512) round
  // identically; its scalar tail (the last numel % vector-width elements of each
  // tensor) rounds the second moment differently from its own body, by up to 1 ulp.
  EXPECT_LE(worst.max_ulp, 1);
}

TEST(TrainFlatAdamW, StepMatchesFusedAdamWOnFp32) {
  compare_with_fused_adamw({1e-2, 0.9, 0.999, 1e-8, 0.0, 0.0});
  compare_with_fused_adamw({3e-3, 0.9, 0.95, 1e-8, 0.1, 1.0});
  compare_with_fused_adamw({1e-3, 0.3, 0.99, 1e-6, 0.01, 0.5});  // 1 - beta1 >= 0.5: the other lerp form
}

TEST(TrainFlatAdamW, MasterWeightsFollowFusedAdamWOnTheFp32Masters) {
  auto params = make_params(at::kBFloat16, 9);
  OptimizerSection o;
  o.weight_decay = 0.05;
  AdamW opt(names(), params, o);
  std::vector<at::Tensor> ref_w, ref_m, ref_v;
  for (const auto& p : params) {
    ref_w.push_back(p.detach().to(at::kFloat));
    ref_m.push_back(at::zeros_like(ref_w.back()));
    ref_v.push_back(at::zeros_like(ref_w.back()));
  }
  at::Tensor step_count = at::zeros({}, at::kFloat);
  for (int s = 0; s < 3; ++s) {
    at::manual_seed(200 + s);
    std::vector<at::Tensor> grads;
    {
      c10::NoGradGuard no_grad;
      for (auto& p : params) {
        grads.push_back(at::randn(p.sizes()).to(at::kBFloat16));
        set_grad(p, grads.back());
      }
    }
    std::vector<at::Tensor> g32;
    for (const auto& g : grads) g32.push_back(g.to(at::kFloat));
    step_count.add_(1);
    at::_fused_adamw_(ref_w, g32, ref_m, ref_v, {}, std::vector<at::Tensor>(params.size(), step_count), 1e-2, 0.9,
                      0.999, 0.05, 1e-8, false, false);
    opt.step(1e-2);
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const at::Tensor master = opt.flat().segment(opt.master(), i);
    EXPECT_LE(ulp_diff(master, ref_w[i]).max_ulp, 1) << i;
    at::Tensor rounded = at::empty_like(params[i].detach()).reshape({-1});
    flat::copy_masters_to_model(master.reshape({-1}), rounded);
    EXPECT_TRUE(at::equal(params[i].detach().reshape({-1}), rounded)) << "the model holds the rounded master";
  }
}

// ---- masters as the bf16 weight and a 16-bit remainder -------------------------

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// Every fp32 bit pattern class: the pair (weight, remainder) gives the master back, and the weight
// is the master rounded to nearest bf16 with ties away from zero.
TEST(TrainSplitMasters, WeightAndRemainderAreTheMaster) {
  std::vector<uint32_t> patterns = {0x00000000u, 0x80000000u, 0x3F808000u, 0x3F818000u, 0xBF808000u, 0xBF818000u,
                                    0x3F80FFFFu, 0x3F807FFFu, 0x7F7FFFFFu, 0x7F800000u, 0xFF800000u, 0x00008000u,
                                    0x007FFFFFu, 0x7FC00000u, 0xFFFFFFFFu, 0x4049000Fu};
  uint64_t state = 12345;
  for (int i = 0; i < 200000; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    patterns.push_back(static_cast<uint32_t>(state >> 32));
  }
  for (uint32_t u : patterns) {
    float m;
    std::memcpy(&m, &u, 4);
    const uint16_t w = flat::master_weight_bits(m), r = flat::master_remainder(m);
    ASSERT_EQ(bits(flat::join_master(w, r)), u) << std::hex << u;
    if (!std::isfinite(m) || std::fabs(m) >= 3.38e38f) continue;
    // Nearest, ties away from zero: the other neighbour is at least as far, strictly when not a tie.
    const float near = flat::f_from_bits(uint32_t{w} << 16);
    const uint32_t other_bits = (r >= 0x8000 ? uint32_t{w} - 1 : uint32_t{w} + 1) << 16;
    const double d = std::fabs(double(near) - m), d_other = std::fabs(double(flat::f_from_bits(other_bits)) - m);
    if (r == 0x8000) {
      ASSERT_EQ(d, d_other) << std::hex << u;
      ASSERT_GE(std::fabs(near), std::fabs(m)) << std::hex << u;  // away from zero
    } else {
      ASSERT_LT(d, d_other) << std::hex << u;
    }
  }
  // The ATen forms over the same patterns, as the checkpoints and fallbacks use them.
  const at::Tensor m = at::from_blob(patterns.data(), {int64_t(patterns.size())}, at::kInt).clone().view(at::kFloat);
  at::Tensor w = at::empty({m.numel()}, at::kBFloat16), r = at::empty({m.numel()}, at::kShort);
  flat::split_masters(m, w, r);
  EXPECT_TRUE(at::equal(flat::join_masters(w, r).view(at::kInt), m.view(at::kInt)));
  for (int64_t i = 0; i < 1000; ++i) {
    float x;  // from the pattern itself: a NaN read through a tensor may come back quieted
    std::memcpy(&x, &patterns[static_cast<size_t>(i)], 4);
    EXPECT_EQ(static_cast<uint16_t>(w.view(at::kShort)[i].item<int16_t>()), flat::master_weight_bits(x));
    EXPECT_EQ(static_cast<uint16_t>(r[i].item<int16_t>()), flat::master_remainder(x));
  }
}

// The split masters train bit for bit as the fp32 masters: weights, masters and moments, with
// weight decay, clipping and fp32 gradient sums; state() saves the fp32 masters, which load into
// either form.
TEST(TrainSplitMasters, StepsAreTheFp32MastersBitForBit) {
  at::set_num_threads(2);
  auto fp32_params = make_params(at::kBFloat16, 21), split_params = make_params(at::kBFloat16, 21);
  OptimizerSection o;
  o.weight_decay = 0.1;
  AdamW fp32(names(), fp32_params, o);
  o.split_masters = true;
  AdamW split(names(), split_params, o);
  ASSERT_TRUE(split.split_masters());
  EXPECT_EQ(split.master().nbytes() * 2, fp32.master().nbytes());
  for (int s = 0; s < 40; ++s) {
    for (int micro = 0; micro < 2; ++micro) {
      at::manual_seed(300 + s * 2 + micro);
      c10::NoGradGuard no_grad;
      for (size_t i = 0; i < fp32_params.size(); ++i) {
        const at::Tensor g = (at::randn(fp32_params[i].sizes()) * 0.1).to(at::kBFloat16);
        set_grad(fp32_params[i], g);
        set_grad(split_params[i], g);
      }
      if (micro == 0) {
        fp32.accumulate_gradients();
        split.accumulate_gradients();
      }
    }
    fp32.grad_norm(0.5);
    split.grad_norm(0.5);
    fp32.step(1e-2);
    split.step(1e-2);
  }
  const auto a = fp32.state(), b = split.state();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_TRUE(at::equal(a[i].second.cpu().view(at::kInt), b[i].second.cpu().view(at::kInt))) << a[i].first;
  }
  for (size_t i = 0; i < fp32_params.size(); ++i)
    EXPECT_TRUE(at::equal(fp32_params[i].detach(), split_params[i].detach())) << names()[i];
  // Saved fp32 masters load into the split form (and back): the same weights and remainders.
  auto again_params = make_params(at::kBFloat16, 99);
  AdamW again(names(), again_params, o);
  again.load_state(a, fp32.steps_taken());
  EXPECT_TRUE(at::equal(again.master(), split.master()));
  for (size_t i = 0; i < again_params.size(); ++i)
    EXPECT_TRUE(at::equal(again_params[i].detach(), split_params[i].detach())) << names()[i];
}

TEST(TrainFlatAdamW, Fp32AccumulationSumsMicroBatchesInFp32) {
  auto params = make_params(at::kBFloat16);
  AdamW opt(names(), params, OptimizerSection{});
  // 3 micro-batches through autograd into the views, folded into fp32 between them.
  std::vector<at::Tensor> copies;
  for (const auto& p : params) copies.push_back(p.detach().to(at::kFloat).requires_grad_(true));
  for (double scale : {1.0, 0.25, 3.0}) {
    objective(params, scale).backward();
    opt.accumulate_gradients();
    EXPECT_EQ(opt.flat().gradients().gathered().count_nonzero().item<int64_t>(), 0);  // moved into the fp32 sums
  }
  const at::Tensor& acc = opt.accumulator();
  ASSERT_TRUE(acc.defined());
  EXPECT_EQ(acc.scalar_type(), at::kFloat);
  // Each micro-batch's bf16 gradient, summed in fp32.
  at::Tensor expected = at::zeros({opt.flat().layout().total()}, at::kFloat);
  for (size_t i = 0; i < params.size(); ++i) {
    at::Tensor sum = at::zeros(params[i].sizes(), at::kFloat);
    for (double scale : {1.0, 0.25, 3.0}) {
      const double c = scale * static_cast<double>(i + 1);
      sum += (params[i].detach().to(at::kFloat) * 2 * c).to(at::kBFloat16).to(at::kFloat);
    }
    opt.flat().segment(expected, i).copy_(sum);
  }
  EXPECT_TRUE(at::allclose(acc, expected, 1e-6, 1e-6));
  const double norm = opt.grad_norm(0.0).item<double>();
  EXPECT_NEAR(norm, expected.norm().item<double>(), 1e-5 * norm);
  opt.step(1e-3);
  EXPECT_EQ(acc.count_nonzero().item<int64_t>(), 0);
}

TEST(TrainFlatAdamW, ClipCoefficientIsAppliedInsideTheStep) {
  // grad_norm() + step() (the trainer's path) and clip_grad_norm() + step() (scaled gradients) agree.
  auto a_params = make_params(at::kFloat, 21), b_params = make_params(at::kFloat, 21);
  OptimizerSection o;
  o.weight_decay = 0.1;
  AdamW a(names(), a_params, o), b(names(), b_params, o);
  for (int s = 0; s < 3; ++s) {
    objective(a_params, 5.0).backward();
    objective(b_params, 5.0).backward();
    const double na = a.grad_norm(1.0).item<double>();
    const at::Tensor before = b.flat().gradients().gathered().clone();
    const double nb = b.clip_grad_norm(1.0).item<double>();
    EXPECT_EQ(na, nb);
    ASSERT_GT(na, 1.0);
    EXPECT_TRUE(at::allclose(b.flat().gradients().gathered(), before * (1.0 / (nb + 1e-6)), 1e-6, 1e-7));
    a.step(1e-2);
    b.step(1e-2);
  }
  EXPECT_TRUE(at::equal(a.flat().weights(), b.flat().weights()));
  EXPECT_TRUE(at::equal(a.exp_avg_sq(), b.exp_avg_sq()));
}

TEST(TrainFlatAdamW, CpuKernelsRejectMismatchedBuffers) {
  const at::Tensor w = at::zeros({16}), g = at::zeros({16}), m = at::zeros({16}), v = at::zeros({16});
  EXPECT_THROW(flat::adamw_step(w, at::Tensor(), m, at::zeros({8}), g, {}, {}, {}), std::invalid_argument);
  EXPECT_THROW(flat::adamw_step(w, at::zeros({16}), m, v, g, {}, {}, {}), std::invalid_argument);  // fp32 + master
  EXPECT_THROW(flat::adamw_step(w.to(at::kBFloat16), at::Tensor(), m, v, g.to(at::kBFloat16), {}, {}, {}),
               std::invalid_argument);  // bf16 moments expected without masters
  EXPECT_NO_THROW(flat::adamw_step(w, at::Tensor(), m, v, g, {}, {}, {}));
}

}  // namespace
}  // namespace fptrain::optim
