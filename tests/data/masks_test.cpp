// Loss masks per format and chat option, end-of-turn supervision, the pad id
// rule, overlong policies and zero-supervised examples.
#include <gtest/gtest.h>

#include "data/epoch_plan.h"
#include "data/example_encoder.h"
#include "data/pad_id.h"
#include "tests/data/test_util.h"

namespace fptrain::data {
namespace {

using testing::ByteTokenizer;
using testing::TempDir;

const std::vector<Message> kChat = {{"system", "sys", false},
                                    {"user", "u1", false},
                                    {"assistant", "a1", false},
                                    {"user", "u2", false},
                                    {"assistant", "a2", false}};

// The supervised tokens decoded, one string per contiguous run.
std::vector<std::string> supervised_runs(const EncodedExample& e, const tokenizer::Tokenizer& tok) {
  std::vector<std::string> runs;
  std::vector<int32_t> cur;
  for (size_t t = 0; t <= e.labels.size(); ++t) {
    if (t < e.labels.size() && e.labels[t] != kIgnoreLabel) {
      EXPECT_EQ(e.labels[t], e.input_ids[t]);
      cur.push_back(e.labels[t]);
    } else if (!cur.empty()) {
      runs.push_back(tok.decode(cur));
      cur.clear();
    }
  }
  return runs;
}

EncodedExample encode_chat(ChatTemplateKind kind, ChatLossMask mask, const tokenizer::Tokenizer& tok) {
  ExampleEncoder enc(&tok, ChatTemplate::resolve(kind, "", &tok), mask);
  EXPECT_TRUE(enc.turn_by_turn());
  RawExample ex;
  ex.format = ExampleFormat::kMessages;
  ex.messages = kChat;
  auto e = enc.encode(ex);
  // Turn-by-turn tokenization equals tokenizing the whole rendered text.
  EXPECT_EQ(e.input_ids, tok.encode(join_pieces(enc.render(ex)), false));
  return e;
}

TEST(ChatMasks, AssistantTurnsWithTheirEndOfTurn) {
  ByteTokenizer tok;
  using V = std::vector<std::string>;
  EXPECT_EQ(supervised_runs(encode_chat(ChatTemplateKind::kLlama3, ChatLossMask::kAssistant, tok), tok),
            (V{"a1<|eot_id|>", "a2<|eot_id|>"}));
  EXPECT_EQ(supervised_runs(encode_chat(ChatTemplateKind::kGranite3, ChatLossMask::kAssistant, tok), tok),
            (V{"a1<|end_of_text|>", "a2<|end_of_text|>"}));
  EXPECT_EQ(supervised_runs(encode_chat(ChatTemplateKind::kLlama2, ChatLossMask::kAssistant, tok), tok),
            (V{" a1 </s>", " a2 </s>"}));
  EXPECT_EQ(supervised_runs(encode_chat(ChatTemplateKind::kMistral, ChatLossMask::kAssistant, tok), tok),
            (V{" a1</s>", " a2</s>"}));
}

TEST(ChatMasks, LastAssistantTurnOnly) {
  ByteTokenizer tok;
  EXPECT_EQ(supervised_runs(encode_chat(ChatTemplateKind::kLlama3, ChatLossMask::kLastAssistant, tok), tok),
            (std::vector<std::string>{"a2<|eot_id|>"}));
  EXPECT_EQ(supervised_runs(encode_chat(ChatTemplateKind::kLlama2, ChatLossMask::kLastAssistant, tok), tok),
            (std::vector<std::string>{" a2 </s>"}));
}

TEST(ChatMasks, AllTokensExceptTheFirst) {
  ByteTokenizer tok;
  for (auto kind : {ChatTemplateKind::kLlama3, ChatTemplateKind::kGranite3, ChatTemplateKind::kLlama2}) {
    const auto e = encode_chat(kind, ChatLossMask::kAll, tok);
    ASSERT_GT(e.labels.size(), 2u);
    EXPECT_EQ(e.labels[0], kIgnoreLabel);
    for (size_t t = 1; t < e.labels.size(); ++t) EXPECT_EQ(e.labels[t], e.input_ids[t]);
  }
}

TEST(ChatMasks, MissingTemplateTokensAreAConfigError) {
  ByteTokenizer tok({"<s>", "</s>"});
  EXPECT_THROW(ChatTemplate::resolve(ChatTemplateKind::kLlama3, "", &tok), std::runtime_error);
}

TEST(DataPadId, NeverEos) {
  ByteTokenizer tok;  // <pad> is id 9, EOS </s> id 1
  EXPECT_EQ(choose_pad_id(&tok, std::nullopt), 9);
  tok.pad_ = 1;  // a tokenizer whose pad is EOS: not used
  EXPECT_EQ(choose_pad_id(&tok, std::nullopt), 9);
  tok.pad_ = 4;
  EXPECT_EQ(choose_pad_id(&tok, std::nullopt), 4);
  EXPECT_EQ(choose_pad_id(&tok, 7), 7);
  EXPECT_THROW(choose_pad_id(&tok, 1), std::invalid_argument);
  ByteTokenizer bare({"</s>", "<s>"}, "<s>", "</s>");  // EOS 0, BOS 1, no pad token
  EXPECT_EQ(choose_pad_id(&bare, std::nullopt), 2);
}

class DataLengths : public ::testing::Test {
 protected:
  DataStats run(DataOptions o) {
    DataPipeline p(std::move(o), testing::byte_tokenizer());
    auto steps = testing::drain(p);
    for (const auto& s : steps)
      for (const auto& mb : s.micro_batches)
        for (size_t i = 0; i + 1 < mb.cu_seqlens.size(); ++i)
          lengths_.push_back(mb.cu_seqlens[i + 1] - mb.cu_seqlens[i]);
    if (steps.empty()) throw std::runtime_error("no step");
    return steps.back().cursor.stats;
  }
  TempDir dir_;
  std::vector<int64_t> lengths_;
};

TEST_F(DataLengths, TruncateKeepsTheFirstMaxLengthTokens) {
  const auto f = dir_.write_lines("t.jsonl", {R"({"text": "0123456789"})", R"({"text": "ab"})"});
  auto o = testing::options_for({f});
  o.max_length = 8;
  const DataStats s = run(o);
  EXPECT_EQ(s.used, 1);
  EXPECT_EQ(s.truncated, 1);
  EXPECT_EQ(s.truncated_tokens, 12 - 8);
  EXPECT_EQ(lengths_, (std::vector<int64_t>{8, 4}));
}

TEST_F(DataLengths, DropRemovesAndCountsThem) {
  const auto f = dir_.write_lines("t.jsonl", {R"({"text": "0123456789"})", R"({"text": "ab"})"});
  auto o = testing::options_for({f});
  o.max_length = 8;
  o.overlong = OverlongPolicy::kDrop;
  const DataStats s = run(o);
  EXPECT_EQ(s.used, 1);
  EXPECT_EQ(s.dropped, 1);
  EXPECT_EQ(s.first_dropped, (std::vector<std::string>{f.string() + ":1"}));
  EXPECT_EQ(lengths_, (std::vector<int64_t>{4}));
}

TEST_F(DataLengths, ZeroSupervisedExamplesAreSkippedAndCounted) {
  const auto f = dir_.write_lines(
      "c.jsonl", {R"({"messages": [{"role": "user", "content": "only a question"}]})",
                  R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})",
                  R"({"messages": [{"role": "user", "content": "a very long question indeed"}, {"role": "assistant", "content": "a"}]})"});
  auto o = testing::options_for({f});
  o.chat_template = ChatTemplateKind::kLlama3;
  o.max_length = 30;  // the second example has 26 tokens; the third is cut before its answer
  const DataStats s = run(o);
  EXPECT_EQ(s.used, 1);
  EXPECT_EQ(s.skipped[int(SkipReason::kZeroSupervised)], 2);
  EXPECT_EQ(s.first_skipped[int(SkipReason::kZeroSupervised)],
            (std::vector<std::string>{f.string() + ":1", f.string() + ":3"}));
}

TEST_F(DataLengths, TooManyZeroSupervisedExamplesIsAnError) {
  const auto f = dir_.write_lines(
      "c.jsonl", {R"({"messages": [{"role": "user", "content": "q"}]})",
                  R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})"});
  auto o = testing::options_for({f});
  o.chat_template = ChatTemplateKind::kLlama3;
  o.max_zero_supervised_fraction = 0.25;
  try {
    run(o);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("max_zero_supervised_fraction"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(f.string() + ":1"), std::string::npos) << e.what();
  }
}

// The check `fptrain train` meets first (counting the steps of the run): the
// message names the file and line of the example and the key to change.
TEST_F(DataLengths, TooManyZeroSupervisedNamesTheLinesAndTheKey) {
  std::vector<std::string> lines(11, R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})");
  lines[6] = R"({"messages": [{"role": "user", "content": "a question and no answer"}]})";
  const auto f = dir_.write_lines("c.jsonl", lines);
  auto o = testing::options_for({f});
  o.chat_template = ChatTemplateKind::kLlama3;
  o.max_zero_supervised_fraction = 0.01;
  o.examples_per_micro_batch = 1;
  try {
    const int64_t steps = count_steps(o, testing::byte_tokenizer());
    FAIL() << "expected an error, got " << steps << " steps";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("1 of 11 examples"), std::string::npos) << what;
    EXPECT_NE(what.find("(" + f.string() + ":7)"), std::string::npos) << what;
    EXPECT_NE(what.find("data.max_zero_supervised_fraction: 0.10"), std::string::npos) << what;
  }
  o.max_zero_supervised_fraction = 0.1;
  EXPECT_EQ(count_steps(o, testing::byte_tokenizer()), 10);
}

}  // namespace
}  // namespace fptrain::data
