// distributed.release_unowned_gradients end to end: two CPU ranks of the fptrain
// program train the same bits with the release on (the default) and off —
// losses, grad norms and every checkpoint file — for each optimizer form the
// sharded step has, and the log and summary count what a rank holds after its
// reductions. (Resuming across the setting: resume_test.cpp.)
#include "tests/distributed/dist_test_util.h"

namespace fptrain::distributed {
namespace {

using namespace testing;

const std::vector<std::string> kRun = {"training.max_steps=4", "data.shuffle=true", "distributed.shard_optimizer=true",
                                       "batching.examples_per_micro_batch=4"};

std::vector<std::string> release(bool on, const std::vector<std::string>& form) {
  return with(with(kRun, form), {std::string("distributed.release_unowned_gradients=") + (on ? "true" : "false")});
}

void expect_same_files(const fs::path& a, const fs::path& b) {
  size_t compared = 0;
  for (const auto& e : fs::directory_iterator(a)) {
    if (e.path().extension() != ".safetensors") continue;
    const std::string bytes = read_file(e.path());
    EXPECT_FALSE(bytes.empty()) << e.path();
    EXPECT_TRUE(bytes == read_file(b / e.path().filename())) << e.path().filename() << " differs";
    ++compared;
  }
  EXPECT_GE(compared, 3u) << "the model or adapter and both ranks' training state";
}

class GradientReleaseTrainTest : public ::testing::TestWithParam<std::pair<std::string, std::vector<std::string>>> {};

TEST_P(GradientReleaseTrainTest, TwoRanksTrainTheSameBitsWithTheReleaseOnAndOff) {
  const auto& [name, form] = GetParam();
  WorkDir dir;
  const auto off = train_run(dir, "off", 2, "tokens.jsonl", "", release(false, form));
  const auto on = train_run(dir, "on", 2, "tokens.jsonl", "", release(true, form));
  ASSERT_EQ(off.records.size(), 4u) << off.outcome.describe();
  expect_same_steps(on.records, off.records, 0.0);
  expect_same_files(checkpoint_of(on.dir, 4), checkpoint_of(off.dir, 4));
  EXPECT_NE(on.outcome.outputs[0].find("(distributed.release_unowned_gradients: true, gradient storage lazy)"),
            std::string::npos)
      << on.outcome.outputs[0];
  // What a rank holds after its reductions: half the gradients with the release, all without.
  const Json son = Json::parse(read_file(on.dir / "summary.json"))["memory_per_rank"];
  const Json soff = Json::parse(read_file(off.dir / "summary.json"))["memory_per_rank"];
  EXPECT_EQ(son["gradients_bytes"].get<int64_t>() * 2, son["gradients_whole_bytes"].get<int64_t>());
  EXPECT_EQ(soff["gradients_bytes"], soff["gradients_whole_bytes"]);
  EXPECT_TRUE(dir.leftovers().empty());
}

INSTANTIATE_TEST_SUITE_P(
    Forms, GradientReleaseTrainTest,
    ::testing::Values(
        std::make_pair(std::string("fp32_clip"), std::vector<std::string>{}),
        std::make_pair(std::string("bf16_masters_accumulation2"),
                       std::vector<std::string>{"model.dtype=bfloat16", "batching.grad_accumulation=2"}),
        std::make_pair(std::string("bf16_split_masters"),
                       std::vector<std::string>{"model.dtype=bfloat16", "optimizer.master_weights=split"}),
        std::make_pair(std::string("bf16_no_masters_accumulation2"),
                       std::vector<std::string>{"model.dtype=bfloat16", "optimizer.master_weights=false",
                                                "batching.grad_accumulation=2"}),
        std::make_pair(std::string("bf16_fp32_sums_accumulation2"),
                       std::vector<std::string>{"model.dtype=bfloat16", "optimizer.fp32_grad_accumulation=true",
                                                "batching.grad_accumulation=2"}),
        std::make_pair(std::string("int8_moments"), std::vector<std::string>{"optimizer.state_dtype=int8"}),
        std::make_pair(std::string("offload_cpu_accumulation2"),
                       std::vector<std::string>{"optimizer.offload=cpu", "batching.grad_accumulation=2"}),
        std::make_pair(std::string("lora"),
                       std::vector<std::string>{"adapter.type=lora", "adapter.r=4", "adapter.target_modules=all-linear"})),
    [](const auto& info) { return info.param.first; });

}  // namespace
}  // namespace fptrain::distributed
