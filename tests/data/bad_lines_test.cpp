// Bad lines: `error` stops naming file, line and problem; `skip` counts them by
// reason and keeps their first line numbers; every example is accounted for.
#include <gtest/gtest.h>

#include "tests/data/test_util.h"

namespace fptrain::data {
namespace {

using testing::TempDir;

using testing::pipeline_error;

struct BadCase {
  std::string line;
  std::string problem;
};

TEST(BadLines, ErrorPolicyNamesFileLineAndProblem) {
  const std::string good = R"({"prompt": "q", "completion": "a"})";
  const std::vector<BadCase> cases = {
      {R"({"prompt": "q", "completion": )", "malformed JSON"},
      {R"({"prompt": "q"})", "missing field 'completion'"},
      {R"({"prompt": "q", "completion": 3})", "field 'completion' must be a string, got number"},
      {"{\"prompt\": \"q\xFF\", \"completion\": \"a\"}", "invalid UTF-8 at byte 13"},
      {R"([1, 2])", "line must be a JSON object"},
  };
  for (const auto& c : cases) {
    TempDir dir;
    const auto f = dir.write_lines("train.jsonl", {good, good, c.line, good});
    auto o = testing::options_for({f});
    o.files[0].format = ExampleFormat::kPromptCompletion;
    const std::string what = pipeline_error(o);
    EXPECT_NE(what.find(f.string() + ":3: "), std::string::npos) << what;
    EXPECT_NE(what.find(c.problem), std::string::npos) << what;
    EXPECT_NE(what.find("bad_lines: skip"), std::string::npos) << what;
  }
}

TEST(BadLines, MessagesProblemsNameTheMessage) {
  TempDir dir;
  const auto f = dir.write_lines(
      "chat.jsonl", {R"({"messages": [{"role": "user", "content": "q"}, {"role": "bot", "content": "a"}]})"});
  auto o = testing::options_for({f});
  o.chat_template = ChatTemplateKind::kLlama3;
  const std::string what = pipeline_error(o);
  EXPECT_NE(what.find(f.string() + ":1: messages[1].role 'bot' is not one of"), std::string::npos) << what;

  const auto g = dir.write_lines("chat2.jsonl", {R"({"messages": [{"role": "user", "content": 5}]})"});
  o = testing::options_for({g});
  o.chat_template = ChatTemplateKind::kLlama3;
  const std::string what2 = pipeline_error(o);
  EXPECT_NE(what2.find("messages[0].content must be a string, got number"), std::string::npos) << what2;
}

TEST(BadLines, SkipPolicyCountsByReasonAndAccountsForEverything) {
  TempDir dir;
  const std::string good = R"({"prompt": "q", "completion": "a"})";
  const auto f = dir.write_lines("train.jsonl", {
                                                    good,                                         // 1
                                                    "{oops",                                      // 2 malformed
                                                    R"({"prompt": "q"})",                         // 3 missing
                                                    good,                                         // 4
                                                    R"({"prompt": 1, "completion": "a"})",        // 5 wrong type
                                                    "{\"prompt\": \"\xC3\", \"completion\": \"a\"}",  // 6 utf-8
                                                    "{oops again",                                // 7 malformed
                                                    good,                                         // 8
                                                });
  auto o = testing::options_for({f});
  o.bad_lines = BadLinePolicy::kSkip;
  o.examples_per_micro_batch = 2;
  DataPipeline p(o, testing::byte_tokenizer());
  const auto steps = testing::drain(p);
  ASSERT_FALSE(steps.empty());
  const DataStats& s = steps.back().cursor.stats;
  EXPECT_EQ(s.seen, 8);
  EXPECT_EQ(s.used, 3);
  EXPECT_EQ(s.skipped[int(SkipReason::kMalformedJson)], 2);
  EXPECT_EQ(s.skipped[int(SkipReason::kMissingField)], 1);
  EXPECT_EQ(s.skipped[int(SkipReason::kWrongType)], 1);
  EXPECT_EQ(s.skipped[int(SkipReason::kInvalidUtf8)], 1);
  EXPECT_EQ(s.seen, s.used + s.truncated + s.dropped + s.skipped_total());
  EXPECT_EQ(s.first_skipped[int(SkipReason::kMalformedJson)],
            (std::vector<std::string>{f.string() + ":2", f.string() + ":7"}));
  int64_t examples = 0;
  for (const auto& st : steps) examples += st.global_examples;
  EXPECT_EQ(examples, s.trained());
}

TEST(BadLines, FirstLinesAreCappedPerReason) {
  TempDir dir;
  std::vector<std::string> lines;
  for (int i = 0; i < 12; ++i) lines.push_back("{bad");
  lines.push_back(R"({"text": "ok"})");
  const auto f = dir.write_lines("t.jsonl", lines);
  auto o = testing::options_for({f});
  o.files[0].format = ExampleFormat::kText;
  o.bad_lines = BadLinePolicy::kSkip;
  DataPipeline p(o, testing::byte_tokenizer());
  const auto steps = testing::drain(p);
  const DataStats& s = steps.back().cursor.stats;
  EXPECT_EQ(s.skipped[int(SkipReason::kMalformedJson)], 12);
  EXPECT_EQ(s.first_skipped[int(SkipReason::kMalformedJson)].size(), DataStats::kFirstLinesKept);
}

}  // namespace
}  // namespace fptrain::data
