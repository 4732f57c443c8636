// The trainer with the flat-buffer optimizer: optimizer.fp32_grad_accumulation
// changes how a bf16 model's micro-batches are summed, and both ways follow fp32.
#include "tests/trainer/trainer_test_util.h"

#include <cmath>

namespace fptrain::trainer {
namespace {

using namespace testing;

TEST(TrainFlatOptimizer, Fp32GradAccumulationSumsInFp32AndBothFollowFp32) {
  TempDir dir;
  const std::string extra =
      "batching:\n  examples_per_micro_batch: 2\n  grad_accumulation: 4\n"
      "optimizer:\n  lr: 2.0e-3\n  grad_clip: 1.0\n"
      "training:\n  max_steps: 6\n"
      "logging:\n  log_interval: 1\n";
  auto run = [&](const std::string& name, const std::vector<std::string>& sets) {
    const std::string cfg = dir.write(name + ".yaml", base_config(dir / name, "tokens.jsonl", extra));
    std::vector<std::string> args = {"train", cfg};
    for (const auto& s : sets) {
      args.push_back("--set");
      args.push_back(s);
    }
    const CommandResult r = run_fptrain(args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return train_records(dir / name);
  };
  const auto fp32 = run("fp32", {});
  const auto bf16 = run("bf16", {"model.dtype=bfloat16"});
  const auto sums = run("sums", {"model.dtype=bfloat16", "optimizer.fp32_grad_accumulation=true"});
  ASSERT_EQ(fp32.size(), 6u);
  ASSERT_EQ(bf16.size(), 6u);
  ASSERT_EQ(sums.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const double ref = fp32[i]["loss"].get<double>();
    EXPECT_LE(std::fabs(bf16[i]["loss"].get<double>() - ref) / ref, 2e-2) << "step " << i + 1;
    EXPECT_LE(std::fabs(sums[i]["loss"].get<double>() - ref) / ref, 2e-2) << "step " << i + 1;
  }
  // The option is in effect: the two bf16 runs round differently.
  const auto a = read_file(dir / "bf16/checkpoints/step-00000006/training_state.safetensors");
  const auto b = read_file(dir / "sums/checkpoints/step-00000006/training_state.safetensors");
  ASSERT_FALSE(a.empty());
  EXPECT_FALSE(a == b);
}

}  // namespace
}  // namespace fptrain::trainer
