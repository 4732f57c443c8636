// The data report agrees with what the pipeline really produces, mode by mode;
// generated datasets read in every format.
#include <gtest/gtest.h>

#include <random>
#include <sstream>

#include "data/data_report.h"
#include "data/epoch_plan.h"
#include "tests/data/test_util.h"

namespace fptrain::data {
namespace {

using testing::TempDir;

TEST(DataReport, MatchesThePipelineInEveryMode) {
  TempDir dir;
  std::mt19937 rng(17);
  std::vector<std::string> text, pc;
  for (int i = 0; i < 230; ++i) {
    const std::string t(3 + rng() % 300, 'a' + i % 26);
    if (i % 4 == 0)
      pc.push_back(nlohmann::json{{"prompt", t}, {"completion", "done"}}.dump());
    else
      text.push_back(nlohmann::json{{"text", t}}.dump());
  }
  text.push_back("{not json");
  const auto files = std::vector<std::filesystem::path>{dir.write_lines("t.jsonl", text), dir.write_lines("p.jsonl", pc)};
  auto o = testing::options_for(files);
  o.files[1].weight = 1.5;
  o.shuffle = true;
  o.max_length = 256;
  o.examples_per_micro_batch = 3;
  o.max_tokens = 700;
  o.shuffle_window = 64;
  o.world_size = 2;
  o.micro_batches_per_step = 2;
  o.row_tokens = 100;  // fixed rows: one planner serves the report and the stream here too
  o.rows_per_micro_batch = 2;
  const DataReport rep = make_data_report(o, testing::byte_tokenizer());
  EXPECT_TRUE(rep.bad_lines_would_stop);
  EXPECT_EQ(rep.stats.skipped[int(SkipReason::kMalformedJson)], 1);
  EXPECT_GT(rep.stats.truncated, 0);
  ASSERT_EQ(rep.batching.size(), 4u);

  o.bad_lines = BadLinePolicy::kSkip;
  for (const auto& b : rep.batching) {
    auto mo = o;
    mo.batching = b.mode;
    DataPipeline p(mo, testing::byte_tokenizer());
    const auto steps = testing::drain(p);
    int64_t mbs = 0, tokens = 0, padding = 0;
    for (const auto& s : steps) {
      mbs += s.global_micro_batches;
      tokens += s.global_tokens;
      padding += s.global_padding;
    }
    EXPECT_EQ(static_cast<int64_t>(steps.size()), b.steps) << common::enum_name(b.mode);
    EXPECT_EQ(mbs, b.micro_batches) << common::enum_name(b.mode);
    EXPECT_EQ(tokens, b.tokens) << common::enum_name(b.mode);
    EXPECT_EQ(padding, b.padding) << common::enum_name(b.mode);
    EXPECT_EQ(steps.back().cursor.stats.to_json(), rep.stats.to_json());
    double worst = 0;
    for (size_t i = 0; i + 1 < steps.size(); ++i) worst = std::max(worst, steps[i].rank_imbalance);
    EXPECT_NEAR(worst, b.rank_imbalance_max, 1e-12) << common::enum_name(b.mode);
  }
  EXPECT_GT(rep.batching[1].padding_fraction, 0.2);  // pad mode pays for length spread
  EXPECT_EQ(rep.batching[0].padding, 0);
  EXPECT_GT(rep.batching[2].fill_rate, 0.9);

  std::ostringstream out;
  print_data_report(out, rep);
  for (const char* s : {"flatten", "pad", "pack", "skipped malformed_json: 1", "t.jsonl:173", "p50", "with bad_lines: error"})
    EXPECT_NE(out.str().find(s), std::string::npos) << s << "\n" << out.str();
  EXPECT_EQ(data_report_json(rep)["stats"]["seen"], rep.stats.seen);
}

TEST(CountSteps, EqualsTheStepsThePipelineYields) {
  TempDir dir;
  std::mt19937 rng(23);
  std::vector<std::string> a, b;
  for (int i = 0; i < 170; ++i) a.push_back(nlohmann::json{{"text", std::string(1 + rng() % 400, 'x')}}.dump());
  for (int i = 0; i < 61; ++i)
    b.push_back(nlohmann::json{{"prompt", std::string(1 + rng() % 300, 'p')}, {"completion", "c"}}.dump());
  b.push_back("{broken");
  auto o = testing::options_for({dir.write_lines("a.jsonl", a), dir.write_lines("b.jsonl", b)});
  o.files[1].weight = 0.7;
  o.bad_lines = BadLinePolicy::kSkip;
  o.shuffle = true;
  o.epochs = 3;
  o.max_length = 256;
  o.examples_per_micro_batch = 5;
  o.max_tokens = 512;
  o.shuffle_window = 37;
  o.world_size = 2;
  o.micro_batches_per_step = 3;
  o.row_tokens = 128;
  o.rows_per_micro_batch = 2;
  for (BatchMode mode : {BatchMode::kFlatten, BatchMode::kPad, BatchMode::kPack, BatchMode::kFixed}) {
    o.batching = mode;
    DataPipeline p(o, testing::byte_tokenizer());
    const auto steps = testing::drain(p);
    EXPECT_EQ(count_steps(o, testing::byte_tokenizer()), static_cast<int64_t>(steps.size())) << common::enum_name(mode);
  }
  o.bad_lines = BadLinePolicy::kError;
  EXPECT_THROW(count_steps(o, testing::byte_tokenizer()), std::runtime_error);
}

TEST(GeneratedData, EveryFormatReadsWithoutLoss) {
  for (const char* name : {"gen_flan_messages.jsonl", "gen_flan_prompt_completion.jsonl", "gen_orcamath_alpaca.jsonl",
                           "gen_orcamath_text.jsonl"}) {
    auto o = testing::options_for({testing::fixture(name)});
    o.chat_template = ChatTemplateKind::kLlama3;
    o.max_length = 1 << 20;
    const DataReport rep = make_data_report(o, testing::byte_tokenizer());
    EXPECT_EQ(rep.stats.used, rep.stats.seen) << name;
    EXPECT_GT(rep.stats.seen, 0) << name;
    EXPECT_GT(rep.supervised_fraction, 0.05) << name;
  }
}

}  // namespace
}  // namespace fptrain::data
