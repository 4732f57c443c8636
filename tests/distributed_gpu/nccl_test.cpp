// Data parallelism through NCCL on two GPUs (skipped with fewer): the same
// equalities and failure behaviour that tests/distributed proves on CPU
// processes over the store, now on the NCCL path (ProcessGroupNCCL, the
// gradient reducer's hooks on the autograd device thread, the all-gathers
// waited for stage by stage).
#include "tests/distributed/dist_test_util.h"

#include "models/safetensors.h"

#include <ATen/cuda/CUDAContext.h>

#include <thread>

namespace fptrain::distributed::testing {
namespace {

constexpr const char* kData = "tokens.jsonl";

bool two_gpus() { return at::hasCUDA() && at::cuda::device_count() >= 2; }

// The tiny fixture model on the GPU, fp32 (the reference attention runs any head size).
std::vector<std::string> on_gpu(std::vector<std::string> sets) {
  return with(std::move(sets), {"device=cuda", "model.dtype=float32", "model.attention=reference"});
}

TEST(NcclDataParallel, TwoGpusOfFourEqualOneGpuOfEightInFp32) {
  if (!two_gpus()) GTEST_SKIP() << "needs two GPUs";
  WorkDir dir;
  const auto one = train_run(dir, "one", 1, kData, "",
                             on_gpu({"training.max_steps=10", "batching.examples_per_micro_batch=8"}));
  for (const char* shard : {"true", "false"}) {
    const auto two = train_run(dir, std::string("two-") + shard, 2, kData, "",
                               on_gpu({"training.max_steps=10", "batching.examples_per_micro_batch=4",
                                       std::string("distributed.shard_optimizer=") + shard,
                                       "distributed.bucket_mb=1"}));
    ASSERT_EQ(one.records.size(), 10u);
    EXPECT_NE(two.outcome.outputs[0].find("(nccl)"), std::string::npos) << two.outcome.outputs[0];
    expect_same_steps(two.records, one.records, 1e-5);
    // cuBLAS picks its fp32 GEMM kernels (and their summation order) by shape,
    // and one GPU of 8 examples has other shapes than two of 4: measured on two
    // H200s (2026-11-23) relative L2 1.1e-5, per element 1.6e-3 of the largest
    // move, where the CPU runs stay within 1e-5 / 1e-3.
    expect_weights_close(checkpoint_of(two.dir, 10), checkpoint_of(one.dir, 10), 5e-5, 1e-2);
  }
}

// LoRA and QLoRA over NCCL: the adapters' gradients are all the ranks reduce (the frozen base,
// 4-bit in QLoRA, has none); 2 GPUs of 4 examples equal 1 GPU of 8, adapters included.
TEST(NcclDataParallel, TwoGpusTrainingAdaptersEqualOneGpu) {
  if (!two_gpus()) GTEST_SKIP() << "needs two GPUs";
  WorkDir dir;
  for (const char* type : {"lora", "qlora"}) {
    SCOPED_TRACE(type);
    const std::vector<std::string> adapter = {std::string("adapter.type=") + type, "adapter.r=4",
                                              "adapter.target_modules=all-linear", "training.max_steps=10"};
    const auto one = train_run(dir, std::string("one-") + type, 1, kData, "",
                               on_gpu(with(adapter, {"batching.examples_per_micro_batch=8"})));
    const auto two = train_run(dir, std::string("two-") + type, 2, kData, "",
                               on_gpu(with(adapter, {"batching.examples_per_micro_batch=4"})));
    ASSERT_EQ(one.records.size(), 10u) << one.outcome.describe();
    EXPECT_NE(two.outcome.outputs[0].find("(nccl)"), std::string::npos) << two.outcome.outputs[0];
    expect_same_steps(two.records, one.records, 1e-5);
    const auto got = models::read_safetensors(checkpoint_of(two.dir, 10) / "adapter_model.safetensors");
    const auto want = models::read_safetensors(checkpoint_of(one.dir, 10) / "adapter_model.safetensors");
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (const auto& [name, t] : want)
      worst = std::max(worst, ((got.at(name) - t).norm() / t.norm()).item<double>());
    std::printf("%s, 2 GPUs vs 1: adapters' largest relative L2 difference %.3g\n", type, worst);
    EXPECT_LT(worst, 5e-5);  // cuBLAS's fp32 kernels by shape, as above
  }
}

// optimizer.fp32_grad_accumulation on two GPUs: each rank's fp32 sums are
// reduced over NCCL in fp32 before the last micro-batch's bf16 gradients (the
// reduction overlaps its backward), sharded or not; one GPU summing the same
// four micro-batches in fp32 differs only by the last micro-batch's bf16
// reduction (and cuBLAS's shapes): measured on two H200s (2026-11-26) at most
// 8.6e-5 relative on the loss, sharded and not.
TEST(NcclDataParallel, Fp32SumsOfTwoGpusFollowOneGpuSummingInFp32) {
  if (!two_gpus()) GTEST_SKIP() << "needs two GPUs";
  WorkDir dir;
  const std::vector<std::string> bf16 = {"training.max_steps=10", "device=cuda", "model.attention=reference",
                                         "model.dtype=bfloat16", "optimizer.fp32_grad_accumulation=true",
                                         "batching.balance_ranks=false", "batching.examples_per_micro_batch=4"};
  const auto one = train_run(dir, "one", 1, kData, "", with(bf16, {"batching.grad_accumulation=4"}));
  ASSERT_EQ(one.records.size(), 10u) << one.outcome.describe();
  for (const char* shard : {"true", "false"}) {
    SCOPED_TRACE(std::string("shard_optimizer=") + shard);
    const auto two = train_run(dir, std::string("two-") + shard, 2, kData, "",
                               with(bf16, {"batching.grad_accumulation=2", "distributed.bucket_mb=1",
                                           std::string("distributed.shard_optimizer=") + shard}));
    EXPECT_NE(two.outcome.outputs[0].find("(nccl)"), std::string::npos) << two.outcome.outputs[0];
    double worst = 0;
    for (size_t i = 0; i < one.records.size() && i < two.records.size(); ++i)
      worst = std::max(worst, rel(two.records[i]["loss"].get<double>(), one.records[i]["loss"].get<double>()));
    std::printf("fp32 sums, 2 GPUs (shard %s) vs 1: max relative loss difference %.3g\n", shard, worst);
    expect_same_steps(two.records, one.records, 1e-2);
  }
}

// Copy-engine transfers move the same bytes and, on two ranks, sum the same
// two numbers with one rounding as NCCL does: the runs are equal bit for bit,
// in bf16 (the trainer's dtype) and fp32, at two bucket sizes, with lazy
// gradients (auto: each slice pushed into its owner's receive window, the
// unowned slices freed) and resident ones (each rank reads its slices from the
// peers' registered buffer). The fixture model (0.5 MB) fits one bucket at
// either size, so the two window slots are reused step after step; many buckets
// in flight are exercised by the 7B benchmark (benchmarks/distributed).
TEST(NcclDataParallel, CopyEngineTransfersEqualNcclBitForBit) {
  if (!two_gpus()) GTEST_SKIP() << "needs two GPUs";
  WorkDir dir;
  const std::vector<std::pair<std::string, std::vector<std::string>>> forms = {
      {"nccl", {"distributed.transfers=nccl"}},
      {"pushed", {"distributed.transfers=copy_engine"}},
      {"read", {"distributed.transfers=copy_engine", "optimizer.gradient_storage=resident"}},
  };
  for (const char* dtype : {"bfloat16", "float32"}) {
    for (const char* bucket : {"1", "64"}) {
      const std::string tag = std::string(dtype) + "-" + bucket;
      std::vector<TrainRun> runs;
      for (const auto& [name, sets] : forms)
        runs.push_back(train_run(dir, tag + "-" + name, 2, kData, "",
                                 with(sets, {"training.max_steps=6", "batching.examples_per_micro_batch=4",
                                             "batching.grad_accumulation=2", "device=cuda", "model.attention=reference",
                                             std::string("model.dtype=") + dtype,
                                             std::string("distributed.bucket_mb=") + bucket})));
      ASSERT_EQ(runs[0].records.size(), 6u) << runs[0].outcome.describe();
      EXPECT_EQ(runs[0].outcome.outputs[0].find("by copy engines"), std::string::npos);
      EXPECT_NE(runs[1].outcome.outputs[0].find("pushed by copy engines"), std::string::npos)
          << runs[1].outcome.outputs[0];
      EXPECT_NE(runs[1].outcome.outputs[0].find("release_unowned_gradients: true, gradient storage lazy"),
                std::string::npos) << runs[1].outcome.outputs[0];
      EXPECT_NE(runs[2].outcome.outputs[0].find("by copy engines"), std::string::npos) << runs[2].outcome.outputs[0];
      EXPECT_EQ(runs[2].outcome.outputs[0].find("pushed by copy engines"), std::string::npos);
      for (size_t i = 1; i < runs.size(); ++i) {
        SCOPED_TRACE(tag + " " + forms[i].first);
        expect_same_steps(runs[i].records, runs[0].records, 0.0);
        expect_weights_close(checkpoint_of(runs[i].dir, 6), checkpoint_of(runs[0].dir, 6), 0.0, 0.0);
      }
    }
  }
}

TEST(NcclDataParallel, AKilledRankMakesTheOtherExitNamingIt) {
  if (!two_gpus()) GTEST_SKIP() << "needs two GPUs";
  constexpr int kTimeout = 10;
  WorkDir dir;
  const fs::path run = dir / "run";
  const fs::path cfg = dir.write("c.yaml", dp_config(run, kData));
  const auto args = train_args(cfg, on_gpu({"training.max_steps=1000000", "batching.examples_per_micro_batch=4",
                                            "distributed.timeout=" + std::to_string(kTimeout)}));
  auto procs = start_ranks(dir, "run", {args, args});
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < deadline && train_records(run).empty() && procs[0]->running() && procs[1]->running())
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_FALSE(train_records(run).empty()) << procs[0]->output();
  ASSERT_EQ(::kill(procs[1]->pid(), SIGKILL), 0);
  const auto killed = Clock::now();
  const bool ended = procs[0]->wait_for(std::chrono::seconds(kTimeout + 30));
  const std::string out = procs[0]->output();
  if (!ended) {
    for (auto& p : procs) p->kill_hard();
    FAIL() << "rank 0 still ran " << seconds_since(killed) << " s after rank 1 was killed\n" << out;
  }
  EXPECT_NE(procs[0]->exit_code(), 0) << out;
  EXPECT_TRUE(some_error_matches(out, R"(rank 1\b)")) << out;
}

}  // namespace
}  // namespace fptrain::distributed::testing
