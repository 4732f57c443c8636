// The memory trace on CUDA: a tiny model's run records step 3 (every layer
// recomputed, so the backward's recomputation shows too); the trace's peak is the
// allocator's requested-bytes peak of that step exactly and at most its
// allocated-bytes peak (block sizes are rounded up), and the step's allocations
// carry the forward's, the backward's, the recomputation's and the optimizer's
// labels; the buffers alive after the backward are named.
#include "tests/trainer/trainer_test_util.h"

#include <ATen/Context.h>

namespace fptrain::trainer {
namespace {

using namespace testing;

bool has_group(const nlohmann::json& groups, const std::string& prefix) {
  for (const auto& g : groups)
    if (g["group"].get<std::string>().rfind(prefix, 0) == 0) return true;
  return false;
}

TEST(MemoryTraceGpu, PeakEqualsTheAllocatorsAndPhasesAreTagged) {
  ASSERT_TRUE(at::hasCUDA());
  TempDir dir;
  const std::string cfg = dir.write(
      "gpu.yaml", "model:\n  path: " + fixture("llama64").string() +
                      "\n  dtype: bfloat16\n  activation_checkpointing: every_layer\ndevice: cuda\noutput_dir: " +
                      (dir / "run").string() + "\ndata:\n  train: " + fixture("tokens.jsonl").string() +
                      "\n  max_length: 256\n  shuffle: false\nbatching:\n  examples_per_micro_batch: 4\n"
                      "optimizer:\n  lr: 1.0e-3\ntraining:\n  max_steps: 4\nlogging:\n  log_interval: 1\n"
                      "  memory_trace_step: 3\n");
  const CommandResult r = run_fptrain({"train", cfg});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(fs::exists(dir / "run" / "memory_trace.md")) << r.output;
  const nlohmann::json j = nlohmann::json::parse(read_file(dir / "run" / "memory_trace.json"));
  EXPECT_EQ(j["step"], 3);
  EXPECT_EQ(j["at"], "peak");
  EXPECT_FALSE(j["history_full"].get<bool>());
  EXPECT_EQ(j["unmatched_frees"], 0);
  const int64_t peak = j["bytes"];
  EXPECT_EQ(peak, j["allocator"]["requested_peak_bytes"].get<int64_t>());
  EXPECT_LE(peak, j["allocator"]["allocated_peak_bytes"].get<int64_t>());
  int64_t sum = 0;
  for (const auto& g : j["by_group"]) sum += g["bytes"].get<int64_t>();
  EXPECT_EQ(sum, peak);
  for (const char* phase : {"forward L", "backward L", "recompute L", "optimizer", "forward head/loss"})
    EXPECT_TRUE(has_group(j["allocated_in_step"], phase)) << phase << "\n" << j["allocated_in_step"].dump(1);
  EXPECT_TRUE(has_group(j["by_group"], "weights")) << j["by_group"].dump(1);
  EXPECT_TRUE(has_group(j["by_group"], "master weights") || has_group(j["by_group"], "moments"));
  EXPECT_LE(j["top"].size(), 20u);
}

}  // namespace
}  // namespace fptrain::trainer
