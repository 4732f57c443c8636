// Reading: line indexing, UTF-8 validation, format detection and override,
// and what each format turns into (ids and labels).
#include <gtest/gtest.h>

#include "data/epoch_order.h"
#include "data/example_parser.h"
#include "data/example_source.h"
#include "data/jsonl_file.h"
#include "data/utf8_check.h"
#include "tests/data/test_util.h"

namespace fptrain::data {
namespace {

using testing::ByteTokenizer;
using testing::TempDir;

constexpr int32_t B = ByteTokenizer::kByteOffset;
int32_t byte(char c) { return B + static_cast<unsigned char>(c); }

std::vector<int32_t> bytes(const std::string& s) {
  std::vector<int32_t> out;
  for (char c : s) out.push_back(byte(c));
  return out;
}

TEST(DataJsonlFile, IndexesNonBlankLinesWithLineNumbers) {
  TempDir dir;
  const auto path = dir.write("a.jsonl", "first\r\n\n  \t\n{\"x\": 1}\nlast");
  JsonlFile f(path);
  ASSERT_EQ(f.num_lines(), 3u);
  EXPECT_EQ(f.blank_lines(), 2);
  EXPECT_EQ(f.read_line(0), "first");
  EXPECT_EQ(f.line_number(0), 1);
  EXPECT_EQ(f.read_line(1), "{\"x\": 1}");
  EXPECT_EQ(f.line_number(1), 4);
  EXPECT_EQ(f.read_line(2), "last");
  EXPECT_EQ(f.line_number(2), 5);
}

TEST(DataJsonlFile, ReadsLinesLongerThanTheScanBuffer) {
  TempDir dir;
  const std::string big(3 << 20, 'x');
  const auto path = dir.write("big.jsonl", "a\n" + big + "\nb\n");
  JsonlFile f(path);
  ASSERT_EQ(f.num_lines(), 3u);
  EXPECT_EQ(f.read_line(1), big);
  EXPECT_EQ(f.read_line(2), "b");
  EXPECT_EQ(f.line_number(2), 3);
}

TEST(DataJsonlFile, MissingFileIsNamed) {
  try {
    JsonlFile f("/nonexistent/dir/data.jsonl");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/dir/data.jsonl"), std::string::npos);
  }
}

TEST(DataUtf8, FindsInvalidSequences) {
  EXPECT_EQ(find_invalid_utf8("h\xC3\xA9llo \xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\x98\x80 plain ascii text"),
            std::string_view::npos);
  EXPECT_EQ(find_invalid_utf8("\xC0\xAF"), 0u);              // overlong '/'
  EXPECT_EQ(find_invalid_utf8("ab\xED\xA0\x80"), 2u);        // UTF-16 surrogate
  EXPECT_EQ(find_invalid_utf8("\xF4\x90\x80\x80"), 0u);      // above U+10FFFF
  EXPECT_EQ(find_invalid_utf8("12345678\xE6\x9D"), 8u);      // truncated at the end
  EXPECT_EQ(find_invalid_utf8("abc\x80"), 3u);               // stray continuation byte
}

TEST(DataFormats, DetectedPerFileAndOverridable) {
  TempDir dir;
  const auto m = dir.write_lines("m.jsonl", {R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})"});
  const auto pc = dir.write_lines("pc.jsonl", {"not json", R"({"prompt": "q", "completion": "a", "text": "t"})"});
  const auto al = dir.write_lines("al.jsonl", {R"({"instruction": "i", "input": "", "output": "o"})"});
  const auto tx = dir.write_lines("tx.jsonl", {R"({"text": "hello"})"});
  const auto tk = dir.write_lines("tk.jsonl", {R"({"input_ids": [1, 2, 3]})"});
  auto o = testing::options_for({m, pc, al, tx, tk});
  o.chat_template = ChatTemplateKind::kLlama3;
  ByteTokenizer tok;
  ExampleSource src(o, &tok);
  EXPECT_EQ(src.format(0), ExampleFormat::kMessages);
  EXPECT_EQ(src.format(1), ExampleFormat::kPromptCompletion);
  EXPECT_EQ(src.format(2), ExampleFormat::kAlpaca);
  EXPECT_EQ(src.format(3), ExampleFormat::kText);
  EXPECT_EQ(src.format(4), ExampleFormat::kTokens);

  o.files[1].format = ExampleFormat::kText;  // override: the same file read as text
  ExampleSource src2(o, &tok);
  EXPECT_EQ(src2.format(1), ExampleFormat::kText);
  const auto ex = src2.process(ExampleRef::make(1, 1));
  EXPECT_EQ(ex.input_ids, (std::vector<int32_t>{0, byte('t'), 1}));
}

TEST(DataFormats, UndetectableFileIsAnErrorNamingIt) {
  TempDir dir;
  const auto f = dir.write_lines("odd.jsonl", {R"({"question": "q"})", "[1, 2]"});
  auto o = testing::options_for({f});
  ByteTokenizer tok;
  try {
    ExampleSource src(o, &tok);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("odd.jsonl"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot detect"), std::string::npos) << e.what();
  }
}

TEST(DataFormats, MessagesWithoutAChatTemplateIsAConfigError) {
  TempDir dir;
  const auto m = dir.write_lines("m.jsonl", {R"({"messages": [{"role": "user", "content": "q"}]})"});
  auto o = testing::options_for({m});
  o.chat_template = ChatTemplateKind::kAuto;  // no tokenizer_dir: nothing to detect from
  ByteTokenizer tok;
  EXPECT_THROW(ExampleSource(o, &tok), std::runtime_error);
}

class EncodedFormats : public ::testing::Test {
 protected:
  ProcessedExample one(const std::string& line, ChatTemplateKind tmpl = ChatTemplateKind::kNone,
                       ExampleFormat format = ExampleFormat::kAuto) {
    const auto f = dir_.write_lines("x" + std::to_string(n_++) + ".jsonl", {line});
    auto o = testing::options_for({f});
    o.files[0].format = format;
    o.chat_template = tmpl;
    ExampleSource src(o, &tok_);
    return src.process(ExampleRef::make(0, 0));
  }
  TempDir dir_;
  ByteTokenizer tok_;
  int n_ = 0;
};

TEST_F(EncodedFormats, TextIsFullySupervisedWithBosAndEos) {
  const auto ex = one(R"({"text": "hi"})");
  EXPECT_EQ(ex.status, ExampleStatus::kUsed);
  EXPECT_EQ(ex.input_ids, (std::vector<int32_t>{0, byte('h'), byte('i'), 1}));
  EXPECT_EQ(ex.labels, (std::vector<int32_t>{kIgnoreLabel, byte('h'), byte('i'), 1}));
  EXPECT_EQ(ex.supervised, 3);
}

TEST_F(EncodedFormats, PromptCompletionMasksThePrompt) {
  const auto ex = one(R"({"prompt": "Q:", "completion": "A"})");
  EXPECT_EQ(ex.input_ids, (std::vector<int32_t>{0, byte('Q'), byte(':'), byte('A'), 1}));
  EXPECT_EQ(ex.labels, (std::vector<int32_t>{kIgnoreLabel, kIgnoreLabel, kIgnoreLabel, byte('A'), 1}));
}

TEST_F(EncodedFormats, AlpacaWithoutTemplateUsesTheAlpacaPromptMasked) {
  const auto ex = one(R"({"instruction": "Add", "input": "1 2", "output": "3"})");
  const std::string prompt = alpaca_prompt("Add", "1 2");
  EXPECT_NE(prompt.find("### Input:\n1 2"), std::string::npos);
  std::vector<int32_t> ids = {0};
  for (int32_t t : bytes(prompt + "3")) ids.push_back(t);
  ids.push_back(1);
  EXPECT_EQ(ex.input_ids, ids);
  std::vector<int32_t> labels(prompt.size() + 1, kIgnoreLabel);
  labels.push_back(byte('3'));
  labels.push_back(1);
  EXPECT_EQ(ex.labels, labels);
  // Without input there is no input section.
  EXPECT_EQ(alpaca_prompt("Add", "").find("### Input"), std::string::npos);
}

TEST_F(EncodedFormats, AlpacaWithTemplateIsAUserAssistantConversation) {
  const auto ex = one(R"({"instruction": "Add", "input": "1 2", "output": "3"})", ChatTemplateKind::kLlama3);
  const std::string text = tok_.decode(ex.input_ids);
  // The template writes the tokenizer's own bos_token (this test tokenizer's is <s>).
  EXPECT_EQ(text, "<s><|start_header_id|>user<|end_header_id|>\n\nAdd\n\n1 2<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n3<|eot_id|>");
  std::vector<int32_t> supervised;
  for (int32_t l : ex.labels)
    if (l != kIgnoreLabel) supervised.push_back(l);
  EXPECT_EQ(tok_.decode(supervised), "3<|eot_id|>");
}

TEST_F(EncodedFormats, ConversationalPromptCompletionSupervisesTheCompletion) {
  const auto ex = one(R"({"prompt": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "e"}, )"
                      R"({"role": "user", "content": "q2"}], "completion": [{"role": "assistant", "content": "a"}]})",
                      ChatTemplateKind::kLlama3);
  std::vector<int32_t> supervised;
  for (int32_t l : ex.labels)
    if (l != kIgnoreLabel) supervised.push_back(l);
  EXPECT_EQ(tok_.decode(supervised), "a<|eot_id|>");
}

TEST_F(EncodedFormats, ShareGptConversationsAreMessages) {
  const auto sharegpt = one(R"({"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "q"}, )"
                            R"({"from": "gpt", "value": "a"}]})",
                            ChatTemplateKind::kLlama3);
  const auto messages = one(R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}, )"
                            R"({"role": "assistant", "content": "a"}]})",
                            ChatTemplateKind::kLlama3);
  EXPECT_EQ(sharegpt.status, ExampleStatus::kUsed);
  EXPECT_EQ(sharegpt.input_ids, messages.input_ids);
  EXPECT_EQ(sharegpt.labels, messages.labels);
  const auto bad = one(R"({"conversations": [{"from": "bot", "value": "q"}]})", ChatTemplateKind::kLlama3,
                       ExampleFormat::kMessages);
  EXPECT_EQ(bad.status, ExampleStatus::kSkipped);
  EXPECT_NE(bad.problem.find("conversations[0].from 'bot'"), std::string::npos) << bad.problem;
}

TEST_F(EncodedFormats, TokensKeepGivenLabelsOrSuperviseAll) {
  auto ex = one(R"({"input_ids": [5, 6, 7, 8], "labels": [5, -100, 7, 8]})");
  EXPECT_EQ(ex.input_ids, (std::vector<int32_t>{5, 6, 7, 8}));
  EXPECT_EQ(ex.labels, (std::vector<int32_t>{kIgnoreLabel, kIgnoreLabel, 7, 8}));
  ex = one(R"({"input_ids": [5, 6, 7]})");
  EXPECT_EQ(ex.labels, (std::vector<int32_t>{kIgnoreLabel, 6, 7}));
  ex = one(R"({"input_ids": [5, 6, 9999]})");
  EXPECT_EQ(ex.status, ExampleStatus::kSkipped);
  EXPECT_EQ(ex.reason, SkipReason::kInvalidValue);
  EXPECT_NE(ex.problem.find("vocabulary size"), std::string::npos);
}

TEST(EpochOrder, WeightsRepeatAndSubsampleFiles) {
  const auto order = make_epoch_order({10, 10}, {2.0, 0.5}, true, 7, 0);
  std::vector<int> count(2, 0);
  std::vector<int> per_line(10, 0);
  for (auto r : order) {
    ++count[r.file()];
    if (r.file() == 0) ++per_line[r.line()];
  }
  EXPECT_EQ(count[0], 20);
  EXPECT_EQ(count[1], 5);
  for (int c : per_line) EXPECT_EQ(c, 2);
  // Deterministic from the seed; another epoch is another permutation.
  const auto again = make_epoch_order({10, 10}, {2.0, 0.5}, true, 7, 0);
  const auto next = make_epoch_order({10, 10}, {2.0, 0.5}, true, 7, 1);
  auto packed = [](const std::vector<ExampleRef>& v) {
    std::vector<uint64_t> out;
    for (auto r : v) out.push_back(r.packed);
    return out;
  };
  EXPECT_EQ(packed(order), packed(again));
  EXPECT_NE(packed(order), packed(next));
  // Without shuffle: file order.
  const auto plain = make_epoch_order({3, 2}, {1.0, 1.0}, false, 7, 0);
  ASSERT_EQ(plain.size(), 5u);
  EXPECT_EQ(plain[0].file(), 0u);
  EXPECT_EQ(plain[3].file(), 1u);
  EXPECT_EQ(plain[4].line(), 1u);
}

}  // namespace
}  // namespace fptrain::data
