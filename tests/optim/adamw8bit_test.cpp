// AdamW with 8-bit moments (optimizer.state_dtype: int8) on the CPU: a run resumed from its state
// continues bit for bit, split masters train as fp32 masters do, full and 8-bit checkpoints
// load into either form, and the layout puts every block inside one parameter.
#include "optim/adamw.h"
#include "optim/blockwise8.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <map>

namespace fptrain::optim {
namespace {

using blockwise8::kBlock;

// Shapes with ragged ends (not multiples of 256), so that blocks end in padding.
const std::vector<std::pair<std::string, std::vector<int64_t>>> kShapes = {
    {"embed", {40, 24}}, {"w1", {24, 48}}, {"b1", {48}}, {"w2", {48, 24}}, {"norm", {24}}, {"head", {24, 40}}};

std::vector<std::string> names() {
  std::vector<std::string> out;
  for (const auto& [n, s] : kShapes) out.push_back(n);
  return out;
}

std::vector<at::Tensor> params_like(at::ScalarType dtype, uint64_t seed = 1) {
  auto gen = at::detail::createCPUGenerator(seed);
  std::vector<at::Tensor> out;
  for (const auto& [n, shape] : kShapes) out.push_back((at::randn(shape, gen) * 0.3).to(dtype).requires_grad_(true));
  return out;
}

// A small network using every parameter: the summed token losses of a batch drawn from `seed`.
at::Tensor loss(const std::vector<at::Tensor>& p, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  const at::Tensor ids = at::randint(0, 40, {6}, gen), targets = at::randint(0, 40, {6}, gen);
  const at::Tensor e = p[0].index_select(0, ids);
  const at::Tensor h = at::tanh(e.mm(p[1]) + p[2]);
  const at::Tensor logits = (h.mm(p[3]) * p[4]).mm(p[5]);
  return -logits.to(at::kFloat).log_softmax(1).gather(1, targets.unsqueeze(1)).sum();
}

OptimizerSection section(Moments moments, bool split = false) {
  OptimizerSection o;
  o.lr = 1e-2;
  o.weight_decay = 0.01;
  o.grad_clip = 0.5;
  o.moments = moments;
  o.split_masters = split;
  return o;
}

// Steps [from, to) of the run: two micro-batches each, clipping, a changing learning rate.
void train(AdamW& opt, int from, int to) {
  for (int s = from; s < to; ++s) {
    for (int j = 0; j < 2; ++j) loss(opt.flat().params(), 100 * s + j).backward();
    opt.grad_norm(0.5);
    opt.step(1e-2 * (1.0 + 0.1 * s));
  }
}

std::vector<std::pair<std::string, at::Tensor>> cloned(const std::vector<std::pair<std::string, at::Tensor>>& s) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [k, t] : s) out.emplace_back(k, t.clone());
  return out;
}

at::Tensor model_weights(const AdamW& opt) {
  std::vector<at::Tensor> parts;
  for (const auto& p : opt.flat().params()) parts.push_back(p.detach().reshape({-1}).to(at::kFloat));
  return at::cat(parts);
}

void expect_same_state(const AdamW& a, const AdamW& b) {
  std::map<std::string, at::Tensor> want;
  for (const auto& [k, t] : a.state()) want[k] = t;
  const auto got = b.state();
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [k, t] : got) {
    ASSERT_TRUE(want.count(k)) << k;
    EXPECT_TRUE(at::equal(t, want.at(k))) << k;
  }
}

class AdamW8bit : public ::testing::Test {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

TEST_F(AdamW8bit, ResumedRunContinuesBitForBit) {
  for (const bool split : {false, true}) {
    SCOPED_TRACE(split ? "split masters" : "fp32 masters");
    AdamW whole(names(), params_like(at::kBFloat16), section(Moments::k8bit, split));
    ASSERT_TRUE(whole.moments_8bit());
    train(whole, 0, 3);
    const auto saved = cloned(whole.state());
    // The resumed run starts from the checkpoint's model (its bf16 weights) and the state.
    std::vector<at::Tensor> weights;
    for (const auto& p : whole.flat().params()) weights.push_back(p.detach().clone().requires_grad_(true));
    train(whole, 3, 6);
    AdamW resumed(names(), weights, section(Moments::k8bit, split));
    resumed.load_state(saved, 3);
    train(resumed, 3, 6);
    EXPECT_TRUE(at::equal(model_weights(resumed), model_weights(whole)));
    expect_same_state(whole, resumed);
    for (const auto& [k, t] : saved)  // the checkpoint holds codes and absmax themselves
      if (k.rfind("exp_avg", 0) == 0)
        EXPECT_TRUE(t.scalar_type() == (k.find("_absmax.") != std::string::npos ? at::kFloat : at::kByte)) << k;
  }
}

TEST_F(AdamW8bit, SplitMastersTrainAsFp32MastersDo) {
  AdamW fp32(names(), params_like(at::kBFloat16), section(Moments::k8bit, false));
  AdamW split(names(), params_like(at::kBFloat16), section(Moments::k8bit, true));
  ASSERT_TRUE(split.split_masters());
  train(fp32, 0, 4);
  train(split, 0, 4);
  EXPECT_TRUE(at::equal(model_weights(split), model_weights(fp32)));
  expect_same_state(fp32, split);
}

TEST_F(AdamW8bit, FullAndEightBitCheckpointsLoadIntoEither) {
  AdamW full(names(), params_like(at::kBFloat16), section(Moments::kFull));
  train(full, 0, 3);
  AdamW eight(names(), params_like(at::kBFloat16), section(Moments::k8bit));
  eight.load_state(full.state(), 3);
  std::map<std::string, at::Tensor> eight_state;
  for (const auto& [k, t] : eight.state()) eight_state[k] = t;
  for (const auto& [k, t] : full.state()) {
    const bool first = k.rfind("exp_avg.", 0) == 0, second = k.rfind("exp_avg_sq.", 0) == 0;
    if (!first && !second) continue;
    const std::string name = k.substr(k.find('.') + 1), kind = first ? "exp_avg" : "exp_avg_sq";
    const auto [codes, absmax] = blockwise8::quantize(t.reshape({-1}), first);
    EXPECT_TRUE(at::equal(eight_state.at(kind + "_codes." + name).reshape({-1}), codes)) << k;
    EXPECT_TRUE(at::equal(eight_state.at(kind + "_absmax." + name), absmax)) << k;
  }
  // And back: the full moments are the 8-bit ones dequantised.
  AdamW back(names(), params_like(at::kBFloat16), section(Moments::kFull));
  back.load_state(eight.state(), 3);
  for (const auto& [k, t] : back.state()) {
    const bool first = k.rfind("exp_avg.", 0) == 0, second = k.rfind("exp_avg_sq.", 0) == 0;
    if (!first && !second) continue;
    const std::string name = k.substr(k.find('.') + 1), kind = first ? "exp_avg" : "exp_avg_sq";
    const at::Tensor want = blockwise8::dequantize(eight_state.at(kind + "_codes." + name).reshape({-1}),
                                                   eight_state.at(kind + "_absmax." + name), first);
    EXPECT_TRUE(at::equal(t.reshape({-1}), want)) << k;
  }
  EXPECT_TRUE(at::equal(model_weights(back), model_weights(full)));
}

TEST_F(AdamW8bit, BlocksNeverStraddleParameters) {
  AdamW opt(names(), params_like(at::kFloat), section(Moments::k8bit), /*alignment=*/8);
  const FlatLayout& l = opt.flat().layout();
  EXPECT_EQ(l.alignment() % kBlock, 0);
  for (const FlatSegment& s : l.segments()) EXPECT_EQ(s.offset % kBlock, 0) << s.name;
  EXPECT_EQ(opt.exp_avg().scalar_type(), at::kByte);
  EXPECT_EQ(opt.exp_avg_absmax().numel(), l.total() / kBlock);
  // Without master weights (fp32 here) the weights are updated in place with 8-bit moments.
  train(opt, 0, 2);
  EXPECT_FALSE(opt.has_master_weights());
  EXPECT_GT(opt.exp_avg_absmax().max().item<float>(), 0.0f);
  EXPECT_EQ(opt.moment_bytes(), 2 * l.total() + 2 * 4 * l.total() / kBlock);
}

}  // namespace
}  // namespace fptrain::optim
