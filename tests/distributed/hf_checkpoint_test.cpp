// The checkpoint a group writes is a Hugging Face model folder: transformers
// loads the 2-rank checkpoint (every weight present, none unexpected) and its
// logits equal those of the 1-rank checkpoint of the same training.
#include "tests/distributed/dist_test_util.h"

namespace fptrain::distributed {
namespace {

using namespace testing;

// Runs tests/distributed/<script> ARGS with the project's Python under a time
// limit; returns the last line of its output that is a JSON object.
Json run_python(const WorkDir& dir, const std::string& script, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {FPTRAIN_PYTHON, (fs::path(FPTRAIN_SOURCE_DIR) / "tests/distributed" / script).string()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::unique_ptr<Process>> procs;
  procs.push_back(std::make_unique<Process>(argv, Env{}, dir / (script + ".log")));
  const Outcome o = run_processes(procs, std::chrono::seconds(300));
  EXPECT_TRUE(o.all_succeeded()) << script << ":\n" << o.describe();
  Json last;
  std::istringstream in(o.outputs[0]);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') {
      auto j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (!j.is_discarded()) last = j;
    }
  EXPECT_FALSE(last.is_null()) << script << " printed no JSON:\n" << o.outputs[0];
  return last;
}

TEST(DataParallelCheckpoint, TransformersLoadsTheTwoRankCheckpointWithTheOneRankLogits) {
  WorkDir dir;
  const std::vector<std::string> sets = {"training.max_steps=10", "data.shuffle=true"};
  const auto one = train_run(dir, "one", 1, "tokens.jsonl", "", with(sets, {"batching.examples_per_micro_batch=8"}));
  const auto two = train_run(dir, "two", 2, "tokens.jsonl", "", with(sets, {"batching.examples_per_micro_batch=4"}));
  const fs::path c1 = checkpoint_of(one.dir, 10), c2 = checkpoint_of(two.dir, 10);
  ASSERT_TRUE(fs::exists(c2 / "training_state.rank1.safetensors")) << "expected a sharded 2-rank checkpoint";
  const Json r = run_python(dir, "hf_compare_logits.py", {c2.string(), c1.string(), "--baseline", fixture("llama").string()});
  ASSERT_TRUE(r.contains("max_abs_diff")) << r.dump();
  EXPECT_EQ(r["vocab_size"], 320);
  EXPECT_GT(r["max_abs_logit"].get<double>(), 0.1);
  EXPECT_LE(r["max_abs_diff"].get<double>(), 1e-5) << r.dump();
  // Training moved the logits far more than the two runs differ.
  EXPECT_GT(r["baseline_max_abs_diff"].get<double>(), 1e-3) << r.dump();
}

}  // namespace
}  // namespace fptrain::distributed
