// AdamW bookkeeping: fp32 master weights next to bf16 model weights, pure
// low-precision mode, global-norm clipping as torch computes it, and a state
// round trip that continues bit-identically.
#include "optim/adamw.h"

#include <gtest/gtest.h>

#include <cmath>

namespace fptrain::optim {
namespace {

std::vector<at::Tensor> make_params(at::ScalarType dtype) {
  at::manual_seed(3);
  return {at::randn({4, 5}).to(dtype).requires_grad_(true), at::randn({7}).to(dtype).requires_grad_(true)};
}

void set_grads(std::vector<at::Tensor>& params, double scale) {
  at::manual_seed(11);
  for (auto& p : params) p.mutable_grad() = (at::randn(p.sizes()) * scale).to(p.scalar_type());
}

TEST(TrainAdamW, MasterWeightsKeepFp32AndRoundIntoTheModel) {
  auto params = make_params(at::kBFloat16);
  OptimizerSection o;
  o.lr = 1e-2;
  o.weight_decay = 0.1;
  AdamW opt({"a", "b"}, params, o);
  EXPECT_TRUE(opt.has_master_weights());
  for (int i = 0; i < 3; ++i) {
    set_grads(params, 1.0);
    opt.clip_grad_norm(0.0);
    opt.step(1e-2);
  }
  for (const auto& [name, t] : opt.state()) EXPECT_EQ(t.scalar_type(), at::kFloat) << name;
  const auto state = opt.state();
  EXPECT_TRUE(at::equal(state[0].second.to(at::kBFloat16), params[0].detach()));
  // The master moved by less than bf16 resolution in places: it is not the rounded copy.
  EXPECT_FALSE(at::equal(state[0].second, params[0].detach().to(at::kFloat)));
  EXPECT_FALSE(params[0].grad().defined());
}

TEST(TrainAdamW, MasterWeightsAccumulateMicroBatchGradientsInFp32) {
  auto params = make_params(at::kBFloat16);
  OptimizerSection o;
  AdamW opt({"a", "b"}, params, o);
  // 64 micro-batches of a gradient that bf16 cannot add up exactly.
  const at::Tensor g = at::full({7}, 1.0 + 1.0 / 128, at::kBFloat16);
  for (int i = 0; i < 64; ++i) {
    params[1].mutable_grad() = g.clone();
    opt.accumulate_gradients();
    EXPECT_FALSE(params[1].grad().defined());
  }
  const double norm = opt.clip_grad_norm(0.0).item<double>();
  EXPECT_NEAR(norm, 64 * (1.0 + 1.0 / 128) * std::sqrt(7.0), 1e-4);
}

TEST(TrainAdamW, PureModelDtypeWithoutMasters) {
  auto params = make_params(at::kBFloat16);
  OptimizerSection o;
  o.master_weights = false;
  AdamW opt({"a", "b"}, params, o);
  EXPECT_FALSE(opt.has_master_weights());
  set_grads(params, 1.0);
  const at::Tensor before = params[1].detach().clone();
  opt.step(1e-2);
  for (const auto& [name, t] : opt.state()) EXPECT_EQ(t.scalar_type(), at::kBFloat16) << name;
  EXPECT_FALSE(at::equal(before, params[1].detach()));
}

TEST(TrainAdamW, ClipGradNormMatchesTheDefinition) {
  auto params = make_params(at::kFloat);
  AdamW opt({"a", "b"}, params, OptimizerSection{});
  set_grads(params, 3.0);
  const double expected =
      std::sqrt(params[0].grad().pow(2).sum().item<double>() + params[1].grad().pow(2).sum().item<double>());
  const at::Tensor g0 = params[0].grad().clone();
  const double norm = opt.clip_grad_norm(1.0).item<double>();
  EXPECT_NEAR(norm, expected, 1e-5 * expected);
  ASSERT_GT(norm, 1.0);
  // The model's gradients themselves are scaled by 1 / (norm + 1e-6), like clip_grad_norm_.
  EXPECT_TRUE(at::allclose(params[0].grad(), g0 * (1.0 / (norm + 1e-6)), 1e-6, 1e-7));
}

TEST(TrainAdamW, StateRoundTripContinuesBitIdentically) {
  OptimizerSection o;
  o.weight_decay = 0.05;
  auto a_params = make_params(at::kFloat);
  AdamW a({"a", "b"}, a_params, o);
  for (int i = 0; i < 2; ++i) {
    set_grads(a_params, 1.0);
    a.step(1e-2);
  }
  std::vector<std::pair<std::string, at::Tensor>> saved;
  for (const auto& [k, t] : a.state()) saved.emplace_back(k, t.clone());

  auto b_params = make_params(at::kFloat);  // different starting values, overwritten by the state
  AdamW b({"a", "b"}, b_params, o);
  b.load_state(saved, a.steps_taken());
  set_grads(a_params, 1.0);
  a.step(1e-2);
  set_grads(b_params, 1.0);
  b.step(1e-2);
  EXPECT_TRUE(at::equal(a_params[0].detach(), b_params[0].detach()));
  EXPECT_TRUE(at::equal(a_params[1].detach(), b_params[1].detach()));
  EXPECT_EQ(b.steps_taken(), 3);
}

TEST(TrainAdamW, LoadStateRejectsMismatchedShapes) {
  auto params = make_params(at::kFloat);
  AdamW opt({"a", "b"}, params, OptimizerSection{});
  auto state = opt.state();
  state[0].second = at::zeros({3});
  try {
    opt.load_state(state, 1);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("weight.a"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fptrain::optim
