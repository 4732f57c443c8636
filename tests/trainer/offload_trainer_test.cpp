// optimizer.offload: cpu in the trainer, on the CPU (host and device the same memory, the
// copies host copies): the same losses, gradient norms and checkpoint bytes as offload none
// (split masters with grad accumulation and clipping; 8-bit moments with fp32 sums; an fp32
// model in two buckets, each waited for by the forward's stage hook), a run resumed across
// the two settings is the same run, and the set-up log puts the state in host memory. With
// optimizer.offload_update: device (the state streamed through the "device") the same, and
// a run resumes across the two update places.
#include "tests/trainer/trainer_test_util.h"

namespace fptrain::trainer {
namespace {

using namespace testing;

const std::string kExtra =
    "batching:\n  examples_per_micro_batch: 2\n  grad_accumulation: 2\n"
    "optimizer:\n  lr: 2.0e-3\n  grad_clip: 0.5\n  weight_decay: 0.1\n"
    "training:\n  max_steps: 6\n"
    "logging:\n  log_interval: 1\n";

CommandResult train_with(const TempDir& dir, const std::string& name, const std::string& model,
                         const std::vector<std::string>& sets) {
  std::string config = base_config(dir / name, "tokens.jsonl", kExtra);
  const std::string llama = fixture("llama").string();
  config.replace(config.find(llama), llama.size(), fixture(model).string());
  std::vector<std::string> args = {"train", dir.write(name + ".yaml", config)};
  for (const auto& s : sets) {
    args.push_back("--set");
    args.push_back(s);
  }
  CommandResult r = run_fptrain(args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r;
}

void expect_same_run(const TempDir& dir, const std::string& a, const std::string& b, int steps) {
  const auto x = train_records(dir / a), y = train_records(dir / b);
  ASSERT_EQ(x.size(), static_cast<size_t>(steps)) << a;
  ASSERT_EQ(y.size(), static_cast<size_t>(steps)) << b;
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(x[i]["loss"].get<double>(), y[i]["loss"].get<double>()) << b << " step " << i + 1;
    EXPECT_EQ(x[i]["grad_norm"].get<double>(), y[i]["grad_norm"].get<double>()) << b << " step " << i + 1;
  }
  const fs::path last = "checkpoints/step-0000000" + std::to_string(steps);
  for (const char* file : {"model.safetensors", "training_state.safetensors"}) {
    const std::string bytes = read_file(dir / a / last / file);
    EXPECT_FALSE(bytes.empty()) << a << ": " << file;
    EXPECT_TRUE(bytes == read_file(dir / b / last / file)) << b << ": " << file << " differs";
  }
}

TEST(TrainOffload, SplitMastersTrainAsWithoutOffloadAndResumeAcrossIt) {
  TempDir dir;
  const std::vector<std::string> split = {"model.dtype=bfloat16", "optimizer.master_weights=split"};
  auto with = [&](std::vector<std::string> sets, const std::vector<std::string>& more) {
    sets.insert(sets.end(), more.begin(), more.end());
    return sets;
  };
  train_with(dir, "none", "llama", split);
  const CommandResult cpu = train_with(dir, "cpu", "llama", with(split, {"optimizer.offload=cpu"}));
  EXPECT_NE(cpu.output.find("optimizer state on the device; optimizer.offload: cpu keeps"), std::string::npos)
      << cpu.output;
  expect_same_run(dir, "none", "cpu", 6);
  // Offloaded until step 3, then on the device; and the other way round.
  train_with(dir, "cpu_then_none", "llama", with(split, {"optimizer.offload=cpu", "training.stop_at_step=3"}));
  train_with(dir, "cpu_then_none", "llama", split);
  expect_same_run(dir, "none", "cpu_then_none", 6);
  train_with(dir, "none_then_cpu", "llama", with(split, {"training.stop_at_step=3"}));
  train_with(dir, "none_then_cpu", "llama", with(split, {"optimizer.offload=cpu"}));
  expect_same_run(dir, "none", "none_then_cpu", 6);
}

TEST(TrainOffload, EightBitMomentsWithFp32SumsTrainAsWithoutOffload) {
  TempDir dir;
  const std::vector<std::string> sets = {"model.dtype=bfloat16", "optimizer.master_weights=split",
                                         "optimizer.state_dtype=int8", "optimizer.fp32_grad_accumulation=true"};
  train_with(dir, "none", "llama", sets);
  std::vector<std::string> cpu = sets;
  cpu.push_back("optimizer.offload=cpu");
  train_with(dir, "cpu", "llama", cpu);
  expect_same_run(dir, "none", "cpu", 6);
}

TEST(TrainOffload, TheDeviceUpdateTrainsAsWithoutOffloadAndResumesAcrossHost) {
  TempDir dir;
  const std::vector<std::string> sets = {"model.dtype=bfloat16", "optimizer.master_weights=split",
                                         "optimizer.state_dtype=int8", "optimizer.offload=cpu"};
  auto with = [&](const std::vector<std::string>& more) {
    std::vector<std::string> out = sets;
    out.insert(out.end(), more.begin(), more.end());
    return out;
  };
  train_with(dir, "none", "llama", {"model.dtype=bfloat16", "optimizer.master_weights=split",
                                    "optimizer.state_dtype=int8"});
  // offload_update auto: with 8-bit moments, the device's update.
  const CommandResult device = train_with(dir, "device", "llama", with({}));
  EXPECT_NE(device.output.find("and updates it on the device (optimizer.offload_update: device): "),
            std::string::npos)
      << device.output;
  EXPECT_NE(device.output.find(" of device staging (two slots)"), std::string::npos) << device.output;
  expect_same_run(dir, "none", "device", 6);
  // The host update until step 3, then the device's; and the other way round.
  train_with(dir, "host_then_device", "llama", with({"optimizer.offload_update=host", "training.stop_at_step=3"}));
  train_with(dir, "host_then_device", "llama", with({"optimizer.offload_update=device"}));
  expect_same_run(dir, "none", "host_then_device", 6);
  train_with(dir, "device_then_host", "llama", with({"optimizer.offload_update=device", "training.stop_at_step=3"}));
  train_with(dir, "device_then_host", "llama", with({"optimizer.offload_update=host"}));
  expect_same_run(dir, "none", "device_then_host", 6);
}

// An fp32 model of 1.5 MB in 1 MiB buckets, which one process also closes between backward ops
// once half full (after each layer's up projection): three host updates, the forward waiting
// for each; lazy (the default) and resident gradients.
TEST(TrainOffload, AnFp32ModelInThreeBucketsTrainsAsWithoutOffload) {
  TempDir dir;
  const std::vector<std::string> sets = {"distributed.bucket_mb=1"};
  train_with(dir, "none", "llama64", sets);
  const CommandResult cpu = train_with(dir, "cpu", "llama64", {"distributed.bucket_mb=1", "optimizer.offload=cpu"});
  EXPECT_NE(cpu.output.find("and updates it in 3 bucket(s) on "), std::string::npos) << cpu.output;
  EXPECT_NE(cpu.output.find(" host thread(s) (optimizer.offload_update: host)"), std::string::npos) << cpu.output;
  expect_same_run(dir, "none", "cpu", 6);
  // A resident gradient buffer: the worker zeroes each bucket once its copy left.
  train_with(dir, "resident", "llama64",
             {"distributed.bucket_mb=1", "optimizer.offload=cpu", "optimizer.gradient_storage=resident"});
  expect_same_run(dir, "none", "resident", 6);
}

}  // namespace
}  // namespace fptrain::trainer
