// distributed.release_unowned_gradients on two GPUs (skipped with fewer): NCCL's
// reduce-scatter into a separate shard sums as the in-place one, so the fptrain
// program trains the same bits with the release on and off; and in process (two
// ranks as threads, one GPU each, NCCL), the CUDA allocator holds (1 - 1/N) of
// the gradient bytes less after the reductions, and the step's peak drops as much.
#include "tests/distributed/dist_test_util.h"

#include "distributed/group.h"
#include "optim/adamw.h"
#include "optim/grad_reducer.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>

#include <thread>

namespace fptrain::distributed::testing {
namespace {

bool two_gpus() { return at::hasCUDA() && at::cuda::device_count() >= 2; }

std::vector<std::string> release_run(bool on, const std::vector<std::string>& form) {
  return with(form, {"device=cuda", "model.attention=reference", "training.max_steps=6",
                     "batching.examples_per_micro_batch=4", "distributed.shard_optimizer=true",
                     "distributed.bucket_mb=1", "distributed.transfers=nccl",
                     std::string("distributed.release_unowned_gradients=") + (on ? "true" : "false")});
}

TEST(NcclGradientRelease, TwoGpusTrainTheSameBitsWithTheReleaseOnAndOff) {
  if (!two_gpus()) GTEST_SKIP() << "needs two GPUs";
  const std::vector<std::pair<std::string, std::vector<std::string>>> forms = {
      {"fp32", {"model.dtype=float32"}},
      {"bf16-ga2", {"model.dtype=bfloat16", "batching.grad_accumulation=2"}},
      {"bf16-split-int8", {"model.dtype=bfloat16", "optimizer.master_weights=split", "optimizer.state_dtype=int8"}},
      {"bf16-offload-ga2", {"model.dtype=bfloat16", "optimizer.offload=cpu", "batching.grad_accumulation=2"}},
  };
  WorkDir dir;
  for (const auto& [name, form] : forms) {
    SCOPED_TRACE(name);
    const auto off = train_run(dir, name + "-off", 2, "tokens.jsonl", "", release_run(false, form));
    const auto on = train_run(dir, name + "-on", 2, "tokens.jsonl", "", release_run(true, form));
    ASSERT_EQ(off.records.size(), 6u) << off.outcome.describe();
    EXPECT_NE(on.outcome.outputs[0].find("release_unowned_gradients: true, gradient storage lazy"), std::string::npos)
        << on.outcome.outputs[0];
    expect_same_steps(on.records, off.records, 0.0);
    for (const char* file : {"model.safetensors", "training_state.rank0.safetensors", "training_state.rank1.safetensors"})
      EXPECT_TRUE(read_file(checkpoint_of(on.dir, 6) / file) == read_file(checkpoint_of(off.dir, 6) / file)) << file;
  }
}

// ---- in process: the allocator's bytes after the reductions ----

const std::vector<std::pair<std::string, std::vector<int64_t>>> kShapes = {
    {"embed", {512, 256}}, {"w1", {256, 1024}}, {"b1", {1024}}, {"w2", {1024, 256}}, {"head", {256, 512}}};

int64_t allocated(int device, bool peak) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device);
  const auto& s = stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  return peak ? s.peak : s.current;
}

struct Measured {
  int64_t after_reductions = 0, step_peak_above = 0, whole = 0;
  at::Tensor weights;
};

// One rank on GPU `rank`: 3 steps of 2 micro-batches of a small bf16 network; the
// allocator's bytes after the last step's reductions, and the step's peak above them.
Measured train_rank(Group& group, bool release) {
  const int device = group.rank();
  const at::TensorOptions on_gpu = at::TensorOptions().device(at::kCUDA, device);
  std::vector<std::string> names;
  std::vector<at::Tensor> params;
  auto gen = at::detail::createCPUGenerator(1);
  for (const auto& [n, shape] : kShapes) {
    names.push_back(n);
    params.push_back((at::randn(shape, gen) * 0.05).to(on_gpu.dtype(at::kBFloat16)).requires_grad_(true));
  }
  optim::DataParallelSpec dp;
  dp.comm = &group.comm();
  dp.shard = true;
  dp.bucket_elements = 200000;  // 3 buckets
  optim::OptimizerSection o;
  o.lr = 1e-3;
  o.grad_clip = 1.0;
  optim::AdamW opt(names, params, o, optim::FlatLayout::kDefaultAlignment, dp);
  optim::GradReducer reducer(opt.flat(), group.comm(), true, release);
  EXPECT_EQ(reducer.releases(), release);
  Measured m;
  m.whole = opt.flat().gradients().bytes();
  auto data = at::detail::createCPUGenerator(3 + device);
  for (int step = 0; step < 3; ++step) {
    opt.wait_for_all_weights();
    for (int j = 0; j < 2; ++j) {
      if (j == 1) reducer.arm();
      const at::Tensor ids = at::randint(0, 512, {64}, data).to(on_gpu);
      const auto& p = opt.flat().params();
      const at::Tensor h = at::gelu(p[0].index_select(0, ids).mm(p[1]) + p[2]);
      (h.mm(p[3]).mm(p[4]).to(at::kFloat).square().mean() / 4).backward();
    }
    reducer.finish();
    c10::cuda::device_synchronize();
    at::empty({1}, on_gpu);  // the allocator processes freed blocks' pending events on an allocation
    m.after_reductions = allocated(device, false);
    c10::cuda::CUDACachingAllocator::resetPeakStats(device);
    opt.grad_norm(o.grad_clip);
    opt.step(o.lr);
    opt.wait_for_all_weights();
    c10::cuda::device_synchronize();
    m.step_peak_above = allocated(device, true) - m.after_reductions;
  }
  m.weights = opt.flat().weights().cpu();
  return m;
}

std::vector<Measured> train_two_ranks(bool release) {
  const int port = free_port();
  std::vector<Measured> out(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(r));
        LaunchEnv env;
        env.rank = env.local_rank = r;
        env.world_size = env.local_world_size = 2;
        env.master_addr = "127.0.0.1";
        env.master_port = static_cast<uint16_t>(port);
        GroupOptions o;
        o.nccl = true;
        o.device_index = r;
        o.transfers = "nccl";
        o.timeout = std::chrono::seconds(120);
        auto group = Group::join(env, o);
        out[r] = train_rank(*group, release);
        group->finish();  // leave together: rank 0 hosts the store
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  return out;
}

TEST(NcclGradientRelease, AllocatedBytesAfterTheReductionsDropByTheUnownedGradients) {
  if (!two_gpus()) GTEST_SKIP() << "needs two GPUs";
  const auto kept = train_two_ranks(false);
  const auto released = train_two_ranks(true);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    ASSERT_TRUE(kept[r].weights.defined() && released[r].weights.defined());
    EXPECT_TRUE(at::equal(released[r].weights, kept[r].weights)) << "the release changed the training";
    const int64_t expected = kept[r].whole / 2;  // (1 - 1/N) of the gradient bytes
    const int64_t drop = kept[r].after_reductions - released[r].after_reductions;
    std::printf("rank %d: gradients %lld bytes; after the reductions %lld -> %lld (drop %lld, expected %lld); step "
                "peak above them %lld -> %lld\n",
                r, static_cast<long long>(kept[r].whole), static_cast<long long>(kept[r].after_reductions),
                static_cast<long long>(released[r].after_reductions), static_cast<long long>(drop),
                static_cast<long long>(expected), static_cast<long long>(kept[r].step_peak_above),
                static_cast<long long>(released[r].step_peak_above));
    // The allocator rounds each block to 512 bytes: a few buckets and shards.
    EXPECT_NEAR(static_cast<double>(drop), static_cast<double>(expected), 8 * 512.0);
    EXPECT_LE(released[r].step_peak_above, kept[r].step_peak_above + 8 * 512);
  }
}

}  // namespace
}  // namespace fptrain::distributed::testing
