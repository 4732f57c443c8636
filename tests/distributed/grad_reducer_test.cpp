// GradReducer and the sharded AdamW with SEVERAL gradient buckets, ranks as
// threads over one HashStore. The fptrain program cannot reach this path on a
// CPU (distributed.bucket_mb is at least 1 MiB, the fixture model 0.5 MB), so
// it is driven here directly: per-parameter hooks launching buckets during
// the backward, reduce-scatter or all-reduce, the sharded step and its
// all-gathers, a rank with nothing to compute, and the sharded state.
#include "distributed/store_communicator.h"
#include "optim/adamw.h"
#include "optim/grad_reducer.h"
#include "tests/distributed/rank_threads.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

namespace fptrain::optim {
namespace {

using distributed::testing::cloned_state;
using distributed::testing::expect_no_errors;
using distributed::testing::model_weights;
using distributed::testing::on_ranks;

const std::vector<std::pair<std::string, std::vector<int64_t>>> kShapes = {
    {"embed", {40, 24}}, {"w1", {24, 48}}, {"b1", {48}}, {"w2", {48, 24}}, {"norm", {24}}, {"head", {24, 40}}};
constexpr int64_t kAlignment = 8;
constexpr int64_t kBucketElements = 500;  // 4 buckets: embed | w1 | b1 w2 | norm head

std::vector<std::string> names() {
  std::vector<std::string> out;
  for (const auto& [n, s] : kShapes) out.push_back(n);
  return out;
}

// The same initial parameters on every call (every rank starts alike).
std::vector<at::Tensor> initial_params() {
  auto gen = at::detail::createCPUGenerator(1);
  std::vector<at::Tensor> out;
  for (const auto& [n, shape] : kShapes) out.push_back((at::randn(shape, gen) * 0.3).requires_grad_(true));
  return out;
}

struct MicroBatch {
  at::Tensor ids, targets;  // int64 [k]
};

// A small network using every parameter; the summed token losses.
at::Tensor loss_sum(const std::vector<at::Tensor>& p, const MicroBatch& b) {
  const at::Tensor e = p[0].index_select(0, b.ids);
  const at::Tensor h = at::tanh(e.mm(p[1]) + p[2]);
  const at::Tensor logits = (h.mm(p[3]) * p[4]).mm(p[5]);
  return -logits.log_softmax(1).gather(1, b.targets.unsqueeze(1)).sum();
}

// batches[step][rank] = that rank's micro-batches of the step (possibly none).
using Plan = std::vector<std::vector<std::vector<MicroBatch>>>;

Plan make_plan(int steps, int world, int micro_batches, bool last_rank_idle_at_the_end) {
  auto gen = at::detail::createCPUGenerator(7);
  Plan plan(steps, std::vector<std::vector<MicroBatch>>(world));
  for (int s = 0; s < steps; ++s)
    for (int r = 0; r < world; ++r) {
      const bool idle = last_rank_idle_at_the_end && s == steps - 1 && r == world - 1;
      for (int j = 0; j < (idle ? 0 : micro_batches); ++j)
        plan[s][r].push_back({at::randint(0, 40, {5 + j + r}, gen), at::randint(0, 40, {5 + j + r}, gen)});
    }
  return plan;
}

double tokens_of_step(const std::vector<std::vector<MicroBatch>>& step) {
  double n = 0;
  for (const auto& rank : step)
    for (const auto& mb : rank) n += static_cast<double>(mb.ids.numel());
  return n;
}

struct Result {
  at::Tensor weights;  // the model's, [numel] in parameter order
  std::vector<float> norms;
  std::vector<std::pair<std::string, at::Tensor>> state;
  int64_t buckets = 0;
};

OptimizerSection optimizer(double clip, Moments moments = Moments::kFull) {
  OptimizerSection o;
  o.moments = moments;
  o.lr = 1e-2;
  o.weight_decay = 0.01;
  o.grad_clip = clip;
  return o;
}

// One process, no communicator: every rank's micro-batches of a step in rank order.
Result train_alone(const Plan& plan, double clip, Moments moments = Moments::kFull) {
  AdamW opt(names(), initial_params(), optimizer(clip, moments), kAlignment);
  Result res;
  for (const auto& step : plan) {
    const double denominator = tokens_of_step(step);
    for (const auto& rank : step)
      for (const auto& mb : rank) (loss_sum(opt.flat().params(), mb) / denominator).backward();
    res.norms.push_back(opt.grad_norm(clip).item<float>());
    opt.step(optimizer(clip).lr);
  }
  res.weights = model_weights(opt);
  res.state = cloned_state(opt);
  return res;
}

// `world` ranks as threads, the trainer's step: backward of each micro-batch,
// the reducer armed before the last one, finish(), norm, step.
std::vector<Result> train_ranks(const Plan& plan, int world, bool shard, double clip,
                                Moments moments = Moments::kFull) {
  std::vector<Result> results(world);
  auto store = c10::make_intrusive<c10d::HashStore>();
  const auto errors = on_ranks(store, world, [&](int r, distributed::StoreCommunicator& comm) {
    DataParallelSpec dp;
    dp.comm = &comm;
    dp.shard = shard;
    dp.bucket_elements = kBucketElements;
    AdamW opt(names(), initial_params(), optimizer(clip, moments), kAlignment, dp);
    GradReducer reducer(opt.flat(), comm, opt.sharded());
    Result& res = results[r];
    res.buckets = static_cast<int64_t>(opt.flat().layout().buckets().size());
    for (const auto& step : plan) {
      const double denominator = tokens_of_step(step);
      const auto& mine = step[r];
      for (size_t j = 0; j < mine.size(); ++j) {
        if (j + 1 == mine.size()) reducer.arm();
        (loss_sum(opt.flat().params(), mine[j]) / denominator).backward();
      }
      reducer.finish();
      res.norms.push_back(opt.grad_norm(clip).item<float>());
      opt.step(optimizer(clip).lr);
    }
    res.weights = model_weights(opt);
    res.state = cloned_state(opt);
  }, std::chrono::seconds(60));
  expect_no_errors(errors);
  return results;
}

// The state of every rank (pieces of a sharded one) restored into one process.
AdamW restore_alone(const std::vector<Result>& ranks, int64_t steps, Moments moments = Moments::kFull) {
  std::vector<std::pair<std::string, at::Tensor>> all;
  for (const auto& r : ranks) all.insert(all.end(), r.state.begin(), r.state.end());
  AdamW opt(names(), initial_params(), optimizer(0, moments), kAlignment);
  opt.load_state(all, steps, "the ranks' state");
  return opt;
}

class GradReducerTest : public ::testing::TestWithParam<std::tuple<int, bool>> {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

TEST_P(GradReducerTest, OneMicroBatchPerRankWithoutClippingEqualsOneProcessBitForBit) {
  // Sums in rank order equal autograd accumulating the ranks' micro-batches in
  // that order, and AdamW is elementwise: nothing may differ in any bit.
  const auto [world, shard] = GetParam();
  const Plan plan = make_plan(4, world, 1, false);
  const Result alone = train_alone(plan, 0.0);
  const auto ranks = train_ranks(plan, world, shard, 0.0);
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_TRUE(ranks[r].weights.defined());
    EXPECT_EQ(ranks[r].buckets, 4);
    EXPECT_TRUE(at::equal(ranks[r].weights, alone.weights))
        << "max diff " << (ranks[r].weights - alone.weights).abs().max().item<double>();
    for (size_t s = 0; s < alone.norms.size(); ++s) EXPECT_NEAR(ranks[r].norms[s], alone.norms[s], 1e-6 * alone.norms[s]);
    EXPECT_EQ(ranks[r].norms, ranks[0].norms);  // one norm for the group
  }
  // The optimizer state, sharded or not, restored into one process: the same moments.
  AdamW restored = restore_alone(shard ? ranks : std::vector<Result>{ranks[0]}, 4);
  std::map<std::string, at::Tensor> expected(alone.state.begin(), alone.state.end());
  for (const auto& [key, t] : restored.state()) {
    ASSERT_TRUE(expected.count(key)) << key;
    EXPECT_TRUE(at::equal(t, expected.at(key))) << key;
  }
}

TEST_P(GradReducerTest, AccumulationClippingAndAnIdleRankFollowOneProcess) {
  // Two micro-batches per rank (summed locally first: another order than one
  // process), clipping active, and the last rank without any work in the last
  // step (it reduces zeros and must still take part in every collective).
  const auto [world, shard] = GetParam();
  const Plan plan = make_plan(5, world, 2, true);
  const Result alone = train_alone(plan, 0.05);
  const auto ranks = train_ranks(plan, world, shard, 0.05);
  const at::Tensor start = at::cat([] {
    std::vector<at::Tensor> v;
    for (const auto& p : initial_params()) v.push_back(p.detach().reshape({-1}));
    return v;
  }());
  const double moved = (alone.weights - start).abs().max().item<double>();
  ASSERT_GT(moved, 0.0);
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_TRUE(ranks[r].weights.defined());
    EXPECT_TRUE(at::equal(ranks[r].weights, ranks[0].weights)) << "the ranks' models differ";
    const double diff = (ranks[r].weights - alone.weights).abs().max().item<double>();
    EXPECT_LE(diff, 1e-4 * moved) << "moved " << moved;
    for (size_t s = 0; s < alone.norms.size(); ++s) {
      EXPECT_NEAR(ranks[r].norms[s], alone.norms[s], 1e-5 * alone.norms[s]) << "step " << s + 1;
      EXPECT_GT(alone.norms[s], 0.05) << "clipping must be active in step " << s + 1;
    }
  }
}

// 8-bit moments (optimizer.state_dtype: int8): the layout's slices are whole blocks of 256, so a
// sharded rank quantises exactly the blocks one process does: every bit equal, and the shards'
// codes and absmax pieces restore into one process.
class GradReducer8bitTest : public GradReducerTest {};

TEST_P(GradReducer8bitTest, ShardedEightBitMomentsEqualOneProcessBitForBit) {
  const auto [world, shard] = GetParam();
  const Plan plan = make_plan(4, world, 1, false);
  const Result alone = train_alone(plan, 0.0, Moments::k8bit);
  const auto ranks = train_ranks(plan, world, shard, 0.0, Moments::k8bit);
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_TRUE(ranks[r].weights.defined());
    EXPECT_TRUE(at::equal(ranks[r].weights, alone.weights))
        << "max diff " << (ranks[r].weights - alone.weights).abs().max().item<double>();
  }
  AdamW restored = restore_alone(shard ? ranks : std::vector<Result>{ranks[0]}, 4, Moments::k8bit);
  std::map<std::string, at::Tensor> expected(alone.state.begin(), alone.state.end());
  size_t codes = 0;
  for (const auto& [key, t] : restored.state()) {
    ASSERT_TRUE(expected.count(key)) << key;
    EXPECT_TRUE(at::equal(t, expected.at(key))) << key;
    codes += key.rfind("exp_avg_codes.", 0) == 0;
  }
  EXPECT_EQ(codes, kShapes.size());
}

INSTANTIATE_TEST_SUITE_P(WorldsAndSharding, GradReducer8bitTest,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::Bool()), [](const auto& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_sharded" : "_replicated");
                         });

INSTANTIATE_TEST_SUITE_P(WorldsAndSharding, GradReducerTest,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::Bool()), [](const auto& info) {
                           return "world" + std::to_string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_sharded" : "_replicated");
                         });

}  // namespace
}  // namespace fptrain::optim
