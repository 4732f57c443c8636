// Releasing the gradient buckets a rank does not own (GradReducer's
// release_unowned, ZeRO-2) changes no bit: ranks as threads over one HashStore,
// several buckets (which the fptrain program cannot reach on a CPU), every
// optimizer form the step has — fp32 and bf16 models, fp32 / split / no masters,
// 8-bit moments, fp32 sums, the offloaded step — with accumulation, clipping and
// a rank idle in the last step, trained with the release on and off: the same
// norms, weights and optimizer state. After the reductions a releasing rank
// holds its shards only. Beyond its limit of released buckets still being read,
// the host waits for the oldest.
#include "distributed/store_communicator.h"
#include "optim/adamw.h"
#include "optim/grad_reducer.h"
#include "tests/distributed/rank_threads.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <memory>

namespace fptrain::optim {
namespace {

using distributed::testing::cloned_state;
using distributed::testing::expect_no_errors;
using distributed::testing::model_weights;
using distributed::testing::on_ranks;

const std::vector<std::pair<std::string, std::vector<int64_t>>> kShapes = {
    {"embed", {40, 24}}, {"w1", {24, 48}}, {"b1", {48}}, {"w2", {48, 24}}, {"norm", {24}}, {"head", {24, 40}}};
constexpr int64_t kAlignment = 8;
constexpr int64_t kBucketElements = 500;  // several buckets (4 at alignment 8)
constexpr int kWorld = 2;
constexpr int kSteps = 4;

struct Form {
  std::string name;
  at::ScalarType dtype = at::kFloat;
  OptimizerSection options;
  int micro_batches = 1;
  bool fp32_sums = false;
};

std::vector<at::Tensor> initial_params(at::ScalarType dtype) {
  auto gen = at::detail::createCPUGenerator(1);
  std::vector<at::Tensor> out;
  for (const auto& [n, shape] : kShapes) out.push_back((at::randn(shape, gen) * 0.3).to(dtype).requires_grad_(true));
  return out;
}

struct MicroBatch {
  at::Tensor ids, targets;
};

// batches[step][rank]: the last rank has nothing in the last step.
std::vector<std::vector<std::vector<MicroBatch>>> make_plan(int micro_batches) {
  auto gen = at::detail::createCPUGenerator(7);
  std::vector<std::vector<std::vector<MicroBatch>>> plan(kSteps, std::vector<std::vector<MicroBatch>>(kWorld));
  for (int s = 0; s < kSteps; ++s)
    for (int r = 0; r < kWorld; ++r)
      for (int j = 0; j < (s == kSteps - 1 && r == kWorld - 1 ? 0 : micro_batches); ++j)
        plan[s][r].push_back({at::randint(0, 40, {5 + j + r}, gen), at::randint(0, 40, {5 + j + r}, gen)});
  return plan;
}

at::Tensor loss_sum(const std::vector<at::Tensor>& p, const MicroBatch& b) {
  const at::Tensor e = p[0].index_select(0, b.ids);
  const at::Tensor h = at::tanh(e.mm(p[1]) + p[2]);
  const at::Tensor logits = (h.mm(p[3]) * p[4]).mm(p[5]);
  return -logits.to(at::kFloat).log_softmax(1).gather(1, b.targets.unsqueeze(1)).sum();
}

struct Result {
  std::vector<float> norms;
  at::Tensor weights;
  std::vector<std::pair<std::string, at::Tensor>> state;
  std::vector<int64_t> held_after_reductions;  // FlatGradients::allocated_bytes() after finish()
  int64_t whole_bytes = 0, buckets = 0;
  bool releases = false;
};

// The test model's optimizer on `comm`'s rank, sharded, in buckets of kBucketElements.
std::unique_ptr<AdamW> sharded_adamw(const Form& form, distributed::Communicator& comm) {
  std::vector<std::string> names;
  for (const auto& [n, s] : kShapes) names.push_back(n);
  DataParallelSpec dp;
  dp.comm = &comm;
  dp.shard = true;
  dp.bucket_elements = kBucketElements;
  return std::make_unique<AdamW>(names, initial_params(form.dtype), form.options, kAlignment, dp);
}

// One rank's training: the trainer's order of calls (trainer/trainer.cpp's train_step).
Result train_rank(const Form& form, const std::vector<std::vector<std::vector<MicroBatch>>>& plan,
                  distributed::Communicator& comm, bool release) {
  const std::unique_ptr<AdamW> adamw = sharded_adamw(form, comm);
  AdamW& opt = *adamw;
  GradReducer reducer(opt.flat(), comm, opt.sharded(), release);
  Result res;
  res.releases = reducer.releases();
  res.whole_bytes = opt.flat().gradients().bytes();
  res.buckets = static_cast<int64_t>(opt.flat().layout().buckets().size());
  for (const auto& step : plan) {
    double tokens = 0;
    for (const auto& rank : step)
      for (const auto& mb : rank) tokens += static_cast<double>(mb.ids.numel());
    opt.wait_for_all_weights();
    const auto& mine = step[comm.rank()];
    const bool sums = form.fp32_sums && opt.has_master_weights() && form.micro_batches > 1;
    auto before_last = [&] {
      if (sums) opt.reduce_accumulated();
      reducer.arm();
    };
    if (mine.empty()) before_last();
    for (size_t j = 0; j < mine.size(); ++j) {
      if (j + 1 == mine.size()) before_last();
      (loss_sum(opt.flat().params(), mine[j]) / tokens).backward();
      if (j + 1 < mine.size() && sums) opt.accumulate_gradients();
    }
    reducer.finish();
    res.held_after_reductions.push_back(opt.flat().gradients().allocated_bytes());
    res.norms.push_back(opt.grad_norm(form.options.grad_clip).item<float>());
    opt.step(form.options.lr);
  }
  opt.wait_for_all_weights();
  res.weights = model_weights(opt);
  res.state = cloned_state(opt);
  return res;
}

std::vector<Result> train_ranks(const Form& form, bool release) {
  const auto plan = make_plan(form.micro_batches);
  std::vector<Result> results(kWorld);
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_no_errors(on_ranks(store, kWorld, [&](int r, distributed::StoreCommunicator& comm) {
    results[r] = train_rank(form, plan, comm, release);
  }, std::chrono::seconds(60)));
  return results;
}

OptimizerSection options(double clip) {
  OptimizerSection o;
  o.lr = 1e-2;
  o.weight_decay = 0.01;
  o.grad_clip = clip;
  return o;
}

std::vector<Form> forms() {
  std::vector<Form> out;
  out.push_back({"fp32_clip", at::kFloat, options(0.05)});
  out.push_back({"fp32_accumulation2_noclip", at::kFloat, options(0.0), 2});
  out.push_back({"bf16_masters_accumulation2_clip", at::kBFloat16, options(0.05), 2});
  Form split{"bf16_split_masters_clip", at::kBFloat16, options(0.05)};
  split.options.split_masters = true;
  out.push_back(split);
  Form none{"bf16_no_masters_accumulation2", at::kBFloat16, options(0.05), 2};
  none.options.master_weights = false;
  out.push_back(none);
  Form eight{"bf16_int8_moments_clip", at::kBFloat16, options(0.05)};
  eight.options.moments = Moments::k8bit;
  out.push_back(eight);
  Form sums{"bf16_fp32_sums_accumulation2_clip", at::kBFloat16, options(0.05), 2, true};
  sums.options.fp32_grad_accumulation = true;
  out.push_back(sums);
  Form offload{"bf16_offload_cpu_accumulation2_clip", at::kBFloat16, options(0.05), 2};
  offload.options.offload = Offload::kCpu;
  out.push_back(offload);
  Form offload_sums{"bf16_offload_cpu_fp32_sums_clip", at::kBFloat16, options(0.05), 2, true};
  offload_sums.options.offload = Offload::kCpu;
  offload_sums.options.fp32_grad_accumulation = true;
  out.push_back(offload_sums);
  return out;
}

class GradientReleaseTest : public ::testing::TestWithParam<Form> {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

TEST_P(GradientReleaseTest, ReleasingTheUnownedBucketsChangesNoBit) {
  const Form& form = GetParam();
  const auto kept = train_ranks(form, false);
  const auto released = train_ranks(form, true);
  for (int r = 0; r < kWorld; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_TRUE(kept[r].weights.defined() && released[r].weights.defined());
    EXPECT_GE(released[r].buckets, 3);
    EXPECT_FALSE(kept[r].releases);
    EXPECT_TRUE(released[r].releases);
    EXPECT_EQ(released[r].norms, kept[r].norms);
    EXPECT_TRUE(at::equal(released[r].weights, kept[r].weights))
        << "max diff " << (released[r].weights - kept[r].weights).abs().max().item<double>();
    ASSERT_EQ(released[r].state.size(), kept[r].state.size());
    for (size_t i = 0; i < kept[r].state.size(); ++i) {
      EXPECT_EQ(released[r].state[i].first, kept[r].state[i].first);
      EXPECT_TRUE(at::equal(released[r].state[i].second, kept[r].state[i].second)) << kept[r].state[i].first;
    }
    // After the reductions: every bucket whole, or this rank's slice of each (1/N).
    for (int64_t held : kept[r].held_after_reductions) EXPECT_EQ(held, kept[r].whole_bytes);
    for (int64_t held : released[r].held_after_reductions) EXPECT_EQ(held, released[r].whole_bytes / kWorld);
  }
  EXPECT_TRUE(at::equal(released[0].weights, released[1].weights)) << "the ranks' models differ";
}

INSTANTIATE_TEST_SUITE_P(Forms, GradientReleaseTest, ::testing::ValuesIn(forms()),
                         [](const auto& info) { return info.param.name; });

// Without sharding there is nothing to release: the reducer all-reduces whole buckets.
TEST(GradientRelease, AppliesOnlyToShardedLazyGradients) {
  std::vector<std::string> says(kWorld);
  auto store = c10::make_intrusive<c10d::HashStore>();
  expect_no_errors(on_ranks(store, kWorld, [&](int r, distributed::StoreCommunicator& comm) {
    std::vector<std::string> names;
    for (const auto& [n, s] : kShapes) names.push_back(n);
    DataParallelSpec dp;
    dp.comm = &comm;
    dp.bucket_elements = kBucketElements;
    OptimizerSection o = options(0.0);
    AdamW replicated(names, initial_params(at::kFloat), o, kAlignment, dp);
    dp.shard = true;
    o.gradient_storage = GradStorage::kResident;
    AdamW resident(names, initial_params(at::kFloat), o, kAlignment, dp);
    says[r] = std::string(GradReducer(replicated.flat(), comm, false, true).releases() ? "r" : "-") +
              (GradReducer(resident.flat(), comm, true, true).releases() ? "r" : "-");
  }, std::chrono::seconds(60)));
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(says[r], "--") << "rank " << r;
}

// A store communicator whose reduce-scatters say, as the copy engines' pushed ones do,
// that they recorded their reads of `full`; waiting for those reads is logged.
class RecordingReads : public distributed::Communicator {
 public:
  RecordingReads(distributed::Communicator& inner, std::vector<std::string>& log) : inner_(inner), log_(log) {}
  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  std::string kind() const override { return inner_.kind(); }
  distributed::Pending all_reduce_sum(at::Tensor t) override { return inner_.all_reduce_sum(t); }
  distributed::Pending all_reduce_max(at::Tensor t) override { return inner_.all_reduce_max(t); }
  distributed::Pending all_gather(at::Tensor s, at::Tensor f) override { return inner_.all_gather(s, f); }
  distributed::Pending broadcast(at::Tensor t, int root) override { return inner_.broadcast(t, root); }
  distributed::Pending reduce_scatter_sum(at::Tensor full, at::Tensor out) override {
    const int launch = launches_++;
    log_.push_back("launch " + std::to_string(launch));
    return inner_.reduce_scatter_sum(full, out).input_recorded(
        [this, launch] { log_.push_back("wait " + std::to_string(launch)); });
  }

 private:
  distributed::Communicator& inner_;
  std::vector<std::string>& log_;
  int launches_ = 0;
};

// Beyond `released_in_flight` released buckets whose reads were recorded, the host
// waits for the oldest one's before it goes on (with 0, never): the caching
// allocator then reuses their memory instead of reserving more.
TEST(GradientRelease, HostWaitsForTheOldestRecordedReadsBeyondTheLimit) {
  const Form form{"fp32", at::kFloat, options(0.0)};
  const auto plan = make_plan(1);
  for (int64_t limit : {0, 1, 2}) {
    std::vector<std::vector<std::string>> logs(kWorld);
    auto store = c10::make_intrusive<c10d::HashStore>();
    expect_no_errors(on_ranks(store, kWorld, [&](int r, distributed::StoreCommunicator& store_comm) {
      RecordingReads comm(store_comm, logs[r]);
      const std::unique_ptr<AdamW> adamw = sharded_adamw(form, comm);
      AdamW& opt = *adamw;
      GradReducer reducer(opt.flat(), comm, opt.sharded(), /*release_unowned=*/true, limit);
      const int buckets = static_cast<int>(opt.flat().layout().buckets().size());
      ASSERT_GE(buckets, 3);
      reducer.arm();
      (loss_sum(opt.flat().params(), plan[0][r][0]) / 10.0).backward();
      reducer.finish();
      std::vector<std::string> expected;
      for (int launch = 0; launch < buckets; ++launch) {
        expected.push_back("launch " + std::to_string(launch));
        if (limit > 0 && launch >= limit) expected.push_back("wait " + std::to_string(launch - limit));
      }
      EXPECT_EQ(logs[r], expected) << "rank " << r << ", limit " << limit;
    }, std::chrono::seconds(60)));
  }
}

}  // namespace
}  // namespace fptrain::optim
