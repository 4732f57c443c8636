// The step profile: the profiler records a window of steps on the CPU and
// saves its trace and window, which benchmarks/train/profile_report.py turns
// into profile.json and profile.md (ops inside named scopes, their backward
// included); a run with logging.profile_steps does so — or says why there is no
// window, and goes on either way. The classification of kernel and op names is
// tested in tests/trainer/profile_report_test.py.
#include "trainer/step_profiler.h"

#include "tests/trainer/trainer_test_util.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>

namespace fptrain::trainer {
namespace {

using namespace testing;

nlohmann::json read_json(const fs::path& p) {
  const std::string text = read_file(p);
  EXPECT_FALSE(text.empty()) << p;
  return text.empty() ? nlohmann::json() : nlohmann::json::parse(text);
}

// The report of the trace and window in `dir`, by the script.
nlohmann::json report(const fs::path& dir) {
  EXPECT_TRUE(fs::exists(dir / "profile_trace.json"));
  EXPECT_TRUE(fs::exists(dir / "profile_window.json"));
  const CommandResult r = run_command(quote(FPTRAIN_PYTHON) + " " +
                                      quote(std::string(FPTRAIN_SOURCE_DIR) + "/benchmarks/train/profile_report.py") +
                                      " " + quote(dir.string()));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step profile, steps"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(dir / "profile.md"));
  return read_json(dir / "profile.json");
}

void expect_profile_keys(const nlohmann::json& j) {
  for (const char* k : {"device", "date", "torch", "mode", "activity", "warmup_steps", "profiled_steps", "first_step",
                        "last_step", "per_step", "categories", "top_kernels", "other_elementwise_by_op", "steps"})
    EXPECT_TRUE(j.contains(k)) << k;
  for (const char* k : {"wall_ms", "busy_ms", "idle_ms", "busy_percent", "idle_percent", "kernels", "host_sync_ms"})
    EXPECT_TRUE(j["per_step"].contains(k)) << k;
  for (const char* c : {"gemm", "attention", "norm", "rope", "activation", "loss", "other_elementwise", "optimizer",
                        "clipping", "nccl", "memcpy", "memset", "other"}) {
    ASSERT_TRUE(j["categories"].contains(c)) << c;
    for (const char* k : {"ms", "percent", "count"}) EXPECT_TRUE(j["categories"][c].contains(k)) << c << "." << k;
  }
  EXPECT_LE(j["top_kernels"].size(), 15u);
  EXPECT_GT(j["per_step"]["wall_ms"].get<double>(), 0.0);
  EXPECT_LE(j["per_step"]["busy_ms"].get<double>(), j["per_step"]["wall_ms"].get<double>() + 1e-3);
}

// The profiler by itself on the CPU: a warm-up step, then two profiled steps of
// a GEMM, an RMSNorm-like block in a named scope and a product in another. The
// backward of the scoped product counts as its scope's: through the forward op
// that made its autograd node (the name MulBackward0 says nothing).
TEST(TrainStepProfile, RecordsAWindowOfCpuSteps) {
  TempDir dir;
  DeviceInfo device;
  device.name = "CPU (test)";
  const at::Tensor w = at::randn({64, 64}).requires_grad_(true);
  const at::Tensor scale = at::full({64}, 0.5);
  {
    StepProfiler profiler(/*steps=*/2, /*warmup=*/1, dir.path(), device);
    for (int64_t step = 0; step < 4; ++step) {
      profiler.begin_step(step);
      const at::Tensor h = at::mm(at::randn({32, 64}), w);
      at::Tensor normed, out;
      {
        RECORD_USER_SCOPE("fptrain::rms_norm");
        normed = h * at::rsqrt(h.pow(2).mean(-1, true) + 1e-6);
      }
      {
        RECORD_USER_SCOPE("fptrain::rope");
        out = normed * scale;
      }
      out.sum().backward();
      w.mutable_grad().zero_();
      profiler.end_step(step + 1);
    }
    profiler.finish();
  }
  const auto j = report(dir.path());
  expect_profile_keys(j);
  EXPECT_EQ(j["mode"], "cpu");
  EXPECT_EQ(j["profiled_steps"].get<int64_t>(), 2);
  EXPECT_EQ(j["first_step"].get<int64_t>(), 2);
  EXPECT_EQ(j["last_step"].get<int64_t>(), 3);
  ASSERT_EQ(j["steps"].size(), 2u);
  const auto count = [&](const char* c) { return j["categories"][c]["count"].get<double>(); };
  EXPECT_GE(count("gemm"), 3.0);  // mm; in the backward its node, the node's evaluation and the mm for w
  EXPECT_GT(count("norm"), 6.0);  // pow, mean, add, rsqrt, mul, mul and their backward
  // aten::mul in the forward; the node's evaluation, MulBackward0 and its aten::mul in the backward.
  EXPECT_GE(count("rope"), 4.0);
  EXPECT_GT(j["categories"]["norm"]["ms"].get<double>(), 0.0);
}

TEST(TrainStepProfile, OffDoesNothing) {
  TempDir dir;
  StepProfiler profiler(/*steps=*/0, /*warmup=*/0, dir.path(), DeviceInfo{});
  for (int64_t s = 0; s < 2; ++s) {
    profiler.begin_step(s);
    profiler.end_step(s + 1);
  }
  profiler.finish();
  EXPECT_FALSE(fs::exists(dir / "profile_trace.json"));
}

TEST(TrainStepProfile, RunWritesTheProfile) {
  TempDir dir;
  const fs::path run = dir / "run";
  const std::string cfg = dir.write(
      "c.yaml", base_config(run, "tokens.jsonl",
                            "batching:\n  examples_per_micro_batch: 2\n  grad_accumulation: 2\n"
                            "training:\n  max_steps: 5\nlogging:\n  log_interval: 2\n"));
  const CommandResult r =
      run_fptrain({"train", cfg, "--set", "logging.profile_steps=2", "--set", "logging.profile_warmup=1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step profile, steps 2-3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("profile_report.py"), std::string::npos) << r.output;
  const auto j = report(run);
  expect_profile_keys(j);
  EXPECT_EQ(j["profiled_steps"].get<int64_t>(), 2);
  EXPECT_EQ(j["first_step"].get<int64_t>(), 2);
  EXPECT_EQ(j["last_step"].get<int64_t>(), 3);
  EXPECT_EQ(j["warmup_steps"].get<int64_t>(), 1);
  EXPECT_FALSE(j.contains("note"));
  EXPECT_GT(j["categories"]["gemm"]["ms"].get<double>(), 0.0);
  EXPECT_GT(j["categories"]["optimizer"]["count"].get<double>(), 0.0);  // the fptrain::optimizer_step scope
  EXPECT_GT(j["categories"]["loss"]["count"].get<double>(), 0.0);
  EXPECT_EQ(train_records(run).size(), 3u);  // the run went on as usual: steps 2, 4, 5
  EXPECT_NE(read_file(run / "config.yaml").find("profile_steps: 2"), std::string::npos);
}

TEST(TrainStepProfile, ARunShorterThanTheWindowReportsWhatItHasOrWhyNot) {
  TempDir dir;
  const std::string extra = "batching:\n  examples_per_micro_batch: 2\ntraining:\n  max_steps: 3\n";
  // Cut short: 2 of 4 steps, with a note.
  const std::string cfg = dir.write("a.yaml", base_config(dir / "a", "tokens.jsonl", extra));
  CommandResult r =
      run_fptrain({"train", cfg, "--set", "logging.profile_steps=4", "--set", "logging.profile_warmup=1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = report(dir / "a");
  EXPECT_EQ(j["profiled_steps"].get<int64_t>(), 2);
  EXPECT_NE(j.value("note", "").find("2 of the 4 steps"), std::string::npos) << j.dump();
  // No window at all: said, and the run succeeds.
  const std::string cfg2 = dir.write("b.yaml", base_config(dir / "b", "tokens.jsonl", extra));
  r = run_fptrain({"train", cfg2, "--set", "logging.profile_steps=2"});  // warm-up 5 > 3 steps
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("step profile: none taken"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir / "b" / "profile_trace.json"));
}

}  // namespace
}  // namespace fptrain::trainer
