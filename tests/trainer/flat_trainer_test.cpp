// The trainer with the flat-buffer optimizer: optimizer.fp32_grad_accumulation
// changes how a bf16 model's micro-batches are summed, and both ways follow fp32;
// optimizer.master_weights: split trains bit for bit as fp32 masters, resumes included;
// optimizer.state_dtype: int8 trains and resumes bit for bit; training.deterministic.
#include "tests/trainer/trainer_test_util.h"
#include "trainer/config.h"
#include "trainer/trainer.h"

#include <ATen/Context.h>

#include <cmath>

namespace fptrain::trainer {
namespace {

using namespace testing;

// `fptrain train` of a bf16 model in dir/name with the config's `extra` sections and `--set`s;
// expects it to succeed, or to fail when !ok.
CommandResult train_bf16(const TempDir& dir, const std::string& name, const std::string& extra,
                         const std::vector<std::string>& sets, bool ok) {
  const std::string cfg = dir.write(name + ".yaml", base_config(dir / name, "tokens.jsonl", extra));
  std::vector<std::string> args = {"train", cfg, "--set", "model.dtype=bfloat16"};
  for (const auto& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  CommandResult r = run_fptrain(args);
  EXPECT_EQ(r.exit_code == 0, ok) << r.output;
  return r;
}

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

// Split masters (the bf16 weight and a 16-bit remainder) against fp32 masters: the same losses,
// checkpoints of the same bytes (the masters are saved as fp32), and a run stopped under one form
// and resumed under the other is the same run.
TEST(TrainFlatOptimizer, SplitMastersTrainAsFp32MastersBitForBit) {
  TempDir dir;
  const std::string extra =
      "batching:\n  examples_per_micro_batch: 2\n  grad_accumulation: 2\n"
      "optimizer:\n  lr: 2.0e-3\n  grad_clip: 1.0\n  weight_decay: 0.1\n"
      "training:\n  max_steps: 8\n"
      "logging:\n  log_interval: 1\n";
  auto run = [&](const std::string& name, const std::vector<std::string>& sets, bool ok = true) {
    return train_bf16(dir, name, extra, sets, ok);
  };
  run("fp32", {"optimizer.master_weights=true"});
  const CommandResult split = run("split", {"optimizer.master_weights=split"});
  EXPECT_NE(split.output.find("split: the bf16 weights and 16-bit remainders"), std::string::npos) << split.output;
  run("mixed", {"optimizer.master_weights=split", "training.stop_at_step=4"});
  run("mixed", {"optimizer.master_weights=true"});  // resumes at step 4 with fp32 masters
  const auto fp32 = train_records(dir / "fp32");
  ASSERT_EQ(fp32.size(), 8u);
  for (const std::string& name : {"split", "mixed"}) {
    const auto other = train_records(dir / name);
    ASSERT_EQ(other.size(), 8u) << name;
    for (size_t i = 0; i < 8; ++i) {
      EXPECT_EQ(other[i]["loss"].get<double>(), fp32[i]["loss"].get<double>()) << name << " step " << i + 1;
      EXPECT_EQ(other[i]["grad_norm"].get<double>(), fp32[i]["grad_norm"].get<double>()) << name << " step " << i + 1;
    }
    for (const char* file : {"model.safetensors", "training_state.safetensors"})
      EXPECT_TRUE(read_file(dir / name / "checkpoints/step-00000008" / file) ==
                  read_file(dir / "fp32/checkpoints/step-00000008" / file))
          << name << ": " << file;
  }
  const CommandResult bad = run("bad", {"optimizer.master_weights=sometimes"}, /*ok=*/false);
  EXPECT_NE(bad.output.find("expected true, false or split"), std::string::npos) << bad.output;
}

// training.deterministic: the same steps (on the CPU every backward is repeatable anyway), the
// log says so, and ATen's process-wide flag is put back when the run ends (an in-process run
// must not change the next one's attention backward).
TEST(TrainFlatOptimizer, DeterministicRunsTheSameStepsAndRestoresTheFlag) {
  TempDir dir;
  const std::string extra = "training:\n  max_steps: 3\nlogging:\n  log_interval: 1\n";
  const std::string plain_cfg = dir.write("plain.yaml", base_config(dir / "plain", "tokens.jsonl", extra));
  ASSERT_EQ(run_fptrain({"train", plain_cfg}).exit_code, 0);
  const CommandResult det = run_fptrain({"train", plain_cfg, "--set", "training.deterministic=true", "--set",
                                         "output_dir=" + (dir / "det").string()});
  ASSERT_EQ(det.exit_code, 0) << det.output;
  EXPECT_NE(det.output.find("training.deterministic: attention backward without atomics"), std::string::npos)
      << det.output;
  const auto a = train_records(dir / "plain"), b = train_records(dir / "det");
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(a[i]["loss"].get<double>(), b[i]["loss"].get<double>()) << i;

  const bool before = at::globalContext().deterministicAlgorithms();
  TrainConfig config = load_config(dir / "plain.yaml", {"training.deterministic=true", "training.max_steps=1",
                                                        "output_dir=" + (dir / "inproc").string()});
  (void)train(config);
  EXPECT_EQ(at::globalContext().deterministicAlgorithms(), before);
}

// 8-bit moments with split masters: a run stopped at step 4 and resumed is the same run (the
// checkpoint holds the codes and absmax), and the log says what the state is.
TEST(TrainFlatOptimizer, EightBitMomentsResumeBitForBit) {
  TempDir dir;
  const std::string extra =
      "batching:\n  examples_per_micro_batch: 2\n  grad_accumulation: 2\n"
      "optimizer:\n  lr: 2.0e-3\n  grad_clip: 1.0\n  weight_decay: 0.1\n  master_weights: split\n  state_dtype: int8\n"
      "training:\n  max_steps: 8\n"
      "logging:\n  log_interval: 1\n";
  auto run = [&](const std::string& name, const std::vector<std::string>& sets, bool ok = true) {
    return train_bf16(dir, name, extra, sets, ok);
  };
  const CommandResult whole = run("whole", {});
  EXPECT_NE(whole.output.find("8-bit moments (bitsandbytes' AdamW8bit)"), std::string::npos) << whole.output;
  EXPECT_NE(whole.output.find("8-bit moments with their absmax"), std::string::npos) << whole.output;
  run("resumed", {"training.stop_at_step=4"});
  run("resumed", {});
  const auto a = train_records(dir / "whole"), b = train_records(dir / "resumed");
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(b[i]["loss"].get<double>(), a[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(b[i]["grad_norm"].get<double>(), a[i]["grad_norm"].get<double>()) << "step " << i + 1;
  }
  EXPECT_LT(a[7]["loss"].get<double>(), a[0]["loss"].get<double>());
  for (const char* file : {"model.safetensors", "training_state.safetensors"})
    EXPECT_TRUE(read_file(dir / "resumed/checkpoints/step-00000008" / file) ==
                read_file(dir / "whole/checkpoints/step-00000008" / file))
        << file;
  const std::string state = read_file(dir / "whole/checkpoints/step-00000008/training_state.safetensors");
  EXPECT_NE(state.find("optimizer.exp_avg_codes."), std::string::npos);
  EXPECT_NE(state.find("optimizer.exp_avg_sq_absmax."), std::string::npos);
  // A run may switch: full moments until step 4, then 8-bit ones quantised from them.
  run("switched", {"optimizer.state_dtype=auto", "training.stop_at_step=4"});
  const CommandResult switched = run("switched", {});
  EXPECT_NE(switched.output.find("the checkpoint's moments were quantised to 8 bits"), std::string::npos)
      << switched.output;
  EXPECT_EQ(train_records(dir / "switched").size(), 8u);
  const CommandResult bad = run("bad", {"optimizer.state_dtype=int4"}, /*ok=*/false);
  EXPECT_NE(bad.output.find("optimizer.state_dtype: 'int4' is not one of auto | int8"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace fptrain::trainer
