// optimizer.offload: cpu with data parallelism (CPU ranks over the TCP store): each rank
// offloads its shard (or, replicated, the whole state) and trains bit for bit as without
// offload: losses, gradient norms and every rank's checkpoint file; with two buckets the
// all-gathers start as the forward waits for each; a sharded run resumes across settings;
// with optimizer.offload_update: device each rank streams its shard's 8-bit state through the
// "device" (whole blocks per slice) and trains as without offload.
#include "tests/distributed/dist_test_util.h"

namespace fptrain::distributed {
namespace {

using namespace testing;

const std::string kTokens = "tokens.jsonl";

// The model and the optimizer state: one file per rank when sharded, else rank 0's alone.
void expect_same_files(const fs::path& a, const fs::path& b, int step, bool sharded = true) {
  const std::vector<std::string> files =
      sharded ? std::vector<std::string>{"model.safetensors", "training_state.rank0.safetensors",
                                         "training_state.rank1.safetensors"}
              : std::vector<std::string>{"model.safetensors", "training_state.safetensors"};
  for (const std::string& file : files) {
    const std::string bytes = read_file(checkpoint_of(a, step) / file);
    EXPECT_FALSE(bytes.empty()) << a << ": " << file;
    EXPECT_TRUE(bytes == read_file(checkpoint_of(b, step) / file)) << b << ": " << file << " differs";
  }
}

// Sharded split masters with accumulation, and replicated 8-bit moments.
TEST(DataParallelOffload, TwoRanksOffloadedTrainAsOnTheDevice) {
  WorkDir dir;
  const std::vector<std::string> base = {"training.max_steps=5", "data.shuffle=true", "model.dtype=bfloat16",
                                         "batching.examples_per_micro_batch=2", "batching.grad_accumulation=2"};
  const std::vector<std::vector<std::string>> forms = {
      {"distributed.shard_optimizer=true", "optimizer.master_weights=split"},
      {"distributed.shard_optimizer=false", "optimizer.state_dtype=int8"}};
  int n = 0;
  for (const auto& form : forms) {
    const std::string tag = std::to_string(n++);
    const auto none = train_run(dir, "none" + tag, 2, kTokens, "", with(base, form));
    const auto cpu = train_run(dir, "cpu" + tag, 2, kTokens, "", with(with(base, form), {"optimizer.offload=cpu"}));
    ASSERT_EQ(none.records.size(), 5u) << none.outcome.describe();
    expect_same_steps(cpu.records, none.records, 0.0);
    expect_same_files(none.dir, cpu.dir, 5, /*sharded=*/n == 1);
  }
}

// An fp32 model of two 1 MiB buckets, sharded: each bucket's all-gather starts when the
// forward first needs it; stopped offloaded at step 3 and resumed on the device.
TEST(DataParallelOffload, TwoBucketsShardedAndResumedAcrossSettings) {
  WorkDir dir;
  const std::vector<std::string> base = {"training.max_steps=6", "data.shuffle=true", "distributed.bucket_mb=1",
                                         "distributed.shard_optimizer=true", "batching.examples_per_micro_batch=2",
                                         "model.path=" + fixture("llama64").string()};
  const auto none = train_run(dir, "none", 2, kTokens, "", base);
  const auto cpu = train_run(dir, "cpu", 2, kTokens, "", with(base, {"optimizer.offload=cpu"}));
  ASSERT_EQ(none.records.size(), 6u) << none.outcome.describe();
  expect_same_steps(cpu.records, none.records, 0.0);
  expect_same_files(none.dir, cpu.dir, 6);
  train_run(dir, "mixed", 2, kTokens, "", with(base, {"optimizer.offload=cpu", "training.stop_at_step=3"}));
  const auto mixed = train_run(dir, "mixed", 2, kTokens, "", base);
  expect_same_steps(mixed.records, none.records, 0.0);
  expect_same_files(none.dir, mixed.dir, 6);
}

// Sharded split masters and 8-bit moments in two buckets, the update streamed through the
// device: each rank's slices are whole 256-blocks and its all-gathers start as the forward
// waits, as for the host update; stopped at step 3 and resumed with the host update.
TEST(DataParallelOffload, TheDeviceUpdateShardedTrainsAsOnTheDevice) {
  WorkDir dir;
  const std::vector<std::string> base = {"training.max_steps=6", "data.shuffle=true", "distributed.bucket_mb=1",
                                         "distributed.shard_optimizer=true", "batching.examples_per_micro_batch=2",
                                         "model.dtype=bfloat16", "optimizer.master_weights=split",
                                         "optimizer.state_dtype=int8"};
  const std::vector<std::string> device = {"optimizer.offload=cpu", "optimizer.offload_update=device"};
  const auto none = train_run(dir, "none", 2, kTokens, "", base);
  const auto streamed = train_run(dir, "device", 2, kTokens, "", with(base, device));
  ASSERT_EQ(none.records.size(), 6u) << none.outcome.describe();
  expect_same_steps(streamed.records, none.records, 0.0);
  expect_same_files(none.dir, streamed.dir, 6);
  train_run(dir, "mixed", 2, kTokens, "", with(with(base, device), {"training.stop_at_step=3"}));
  const auto mixed = train_run(dir, "mixed", 2, kTokens, "", with(base, {"optimizer.offload=cpu"}));
  expect_same_steps(mixed.records, none.records, 0.0);
  expect_same_files(none.dir, mixed.dir, 6);
}

// The epoch's last step has one micro-batch: rank 1 runs no forward, so it starts the
// offloaded all-gathers before its reductions, in the order rank 0's forward starts them.
TEST(DataParallelOffload, AnIdleRankKeepsTheCollectivesInOrder) {
  WorkDir dir;
  const std::vector<std::string> base = {"training.max_steps=0", "training.epochs=1", "distributed.bucket_mb=1",
                                         "batching.balance_ranks=false",
                                         "batching.examples_per_micro_batch=7", "distributed.shard_optimizer=true",
                                         "model.path=" + fixture("llama64").string()};
  const auto none = train_run(dir, "none", 2, kTokens, "", base);
  const auto cpu = train_run(dir, "cpu", 2, kTokens, "", with(base, {"optimizer.offload=cpu"}));
  ASSERT_EQ(none.records.size(), 18u) << none.outcome.describe();
  EXPECT_EQ(none.records.back()["examples"], 2);
  expect_same_steps(cpu.records, none.records, 0.0);
  expect_same_files(none.dir, cpu.dir, 18);
}

}  // namespace
}  // namespace fptrain::distributed
