// Hostile input files: JSONL lines nested far deeper than any real example
// (which once overflowed the stack), huge values quoted in messages, and a
// tokenizer_config.json that is deep or mistyped. Each gives a bad line or a
// clear error, never a crash, and messages stay short.
#include <gtest/gtest.h>

#include "data/chat_template.h"
#include "data/example_parser.h"
#include "tests/data/test_util.h"

namespace fptrain::data {
namespace {

using testing::TempDir;

// A JSON value nested `depth` arrays deep inside an object field.
std::string deep_line(size_t depth) {
  return R"({"prompt": "q", "completion": )" + std::string(depth, '[') + std::string(depth, ']') + "}";
}

using testing::pipeline_error;

TEST(HostileInput, DeeplyNestedLineIsAMalformedBadLine) {
  try {
    parse_example(deep_line(100000), ExampleFormat::kPromptCompletion);
    FAIL() << "expected a BadLine";
  } catch (const BadLine& e) {
    EXPECT_EQ(e.reason(), SkipReason::kMalformedJson);
    EXPECT_NE(std::string(e.what()).find("nested deeper than"), std::string::npos) << e.what();
  }
  // Format detection skips such a line instead of crashing.
  EXPECT_EQ(format_of_keys(deep_line(100000)), ExampleFormat::kAuto);
  // Real nesting depths still parse.
  EXPECT_NO_THROW(parse_example(R"({"prompt": "q", "completion": "a", "meta": [[[[{"x": [1]}]]]]})",
                                ExampleFormat::kPromptCompletion));
}

TEST(HostileInput, DeeplyNestedLineUnderBothPolicies) {
  TempDir dir;
  const std::string good = R"({"prompt": "q", "completion": "a"})";
  const auto f = dir.write_lines("train.jsonl", {good, deep_line(100000), good});
  auto o = testing::options_for({f});
  o.files[0].format = ExampleFormat::kPromptCompletion;
  const std::string what = pipeline_error(o);
  EXPECT_NE(what.find(f.string() + ":2: "), std::string::npos) << what.substr(0, 500);
  EXPECT_NE(what.find("nested deeper than"), std::string::npos) << what.substr(0, 500);
  EXPECT_LT(what.size(), 1000u);

  o.bad_lines = BadLinePolicy::kSkip;
  o.examples_per_micro_batch = 1;
  DataPipeline p(o, testing::byte_tokenizer());
  const auto steps = testing::drain(p);
  ASSERT_FALSE(steps.empty());
  const DataStats& s = steps.back().cursor.stats;
  EXPECT_EQ(s.used, 2);
  EXPECT_EQ(s.skipped[int(SkipReason::kMalformedJson)], 1);
  EXPECT_EQ(s.first_skipped[int(SkipReason::kMalformedJson)], (std::vector<std::string>{f.string() + ":2"}));
}

TEST(HostileInput, LongValuesInMessagesAreCut) {
  const std::string huge(200000, 'x');
  const std::vector<std::string> lines = {
      R"({"messages": [{"role": ")" + huge + R"(", "content": "a"}]})",    // an unknown role
      R"({"messages": [{"from": ")" + huge + R"(", "value": "a"}]})",      // an unknown ShareGPT role
      R"({"messages": [{"role": "user", "content": ")" + huge,             // a string never closed
  };
  for (const auto& line : lines) {
    try {
      parse_example(line, ExampleFormat::kMessages);
      ADD_FAILURE() << "expected a BadLine";
    } catch (const BadLine& e) {
      EXPECT_LT(std::string(e.what()).size(), 600u) << std::string(e.what()).substr(0, 600);
      EXPECT_NE(std::string(e.what()).find("xxxxxxxx"), std::string::npos) << e.what();  // the start is shown
    }
  }
}

// Found by the jsonl_line fuzzer: a number beyond double's range made the parser
// throw out_of_range (not parse_error), which escaped and terminated the program.
TEST(HostileInput, NumberOverflowIsAMalformedBadLine) {
  for (const char* line : {R"({"text": 1e999})", R"({"input_ids": [-1104444444400e0000000000164152820656757655337]})"}) {
    try {
      parse_example(line, ExampleFormat::kText);
      ADD_FAILURE() << "expected a BadLine for " << line;
    } catch (const BadLine& e) {
      EXPECT_EQ(e.reason(), SkipReason::kMalformedJson) << e.what();
      EXPECT_NE(std::string(e.what()).find("number overflow"), std::string::npos) << e.what();
    }
  }
}

TEST(HostileInput, HugeIdsAreOutOfRangeNotWrapped) {
  // 2^64 - 100 must not wrap to the ignore index -100.
  for (const char* line : {R"({"input_ids": [1, 18446744073709551516]})",
                           R"({"input_ids": [1, 2], "labels": [1, 18446744073709551516]})"}) {
    try {
      parse_example(line, ExampleFormat::kTokens);
      ADD_FAILURE() << "expected a BadLine for " << line;
    } catch (const BadLine& e) {
      EXPECT_EQ(e.reason(), SkipReason::kInvalidValue) << e.what();
      EXPECT_NE(std::string(e.what()).find("18446744073709551516"), std::string::npos) << e.what();
    }
  }
}

std::string chat_template_error(const TempDir& dir) {
  try {
    read_chat_template(dir.path());
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(HostileInput, TokenizerConfigForTheChatTemplate) {
  TempDir dir;
  dir.write("tokenizer_config.json", "{\"chat_template\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
  std::string e = chat_template_error(dir);
  EXPECT_NE(e.find("tokenizer_config.json"), std::string::npos) << e.substr(0, 500);
  EXPECT_NE(e.find("nested deeper than"), std::string::npos) << e.substr(0, 500);

  dir.write("tokenizer_config.json", R"({"chat_template": [{"name": "default", "template": 7}]})");
  e = chat_template_error(dir);
  EXPECT_NE(e.find("tokenizer_config.json: chat_template[0].template: expected a string"), std::string::npos) << e;

  dir.write("tokenizer_config.json", R"({"chat_template": [{"name": 1}, {"name": "default", "template": "T"}]})");
  EXPECT_EQ(read_chat_template(dir.path()), std::optional<std::string>("T"));

  dir.write("tokenizer_config.json", "{\"chat_template\": \"" + std::string(100000, 'x'));
  e = chat_template_error(dir);
  EXPECT_NE(e.find("invalid JSON"), std::string::npos) << e.substr(0, 500);
  EXPECT_LT(e.size(), 1000u);
}

}  // namespace
}  // namespace fptrain::data
