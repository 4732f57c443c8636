// `fptrain data --show`: the inspector yields what training trains on (same
// ids and labels as the pipeline, line by line), its spans decode the example
// without breaking characters, and the printed text marks supervised spans
// with [[ ]] (escaped when the text has brackets) unless colour is asked for.
#include <gtest/gtest.h>
#include <unistd.h>

#include <sstream>

#include "data/example_inspector.h"
#include "data/inspect_report.h"
#include "data/packed_batch.h"
#include "tests/data/test_util.h"
#include "tokenizer/tokenizer.h"

namespace fptrain::data {
namespace {

using testing::TempDir;
using testing::fixture;

// One file per format (formats are per file): two chat examples, then text
// with a bad line and an overlong example, then pre-tokenized examples.
struct Corpus {
  std::vector<std::filesystem::path> files;
};

Corpus corpus(const TempDir& dir) {
  const std::string chat1 = R"({"messages": [{"role": "system", "content": "Be brief."}, )"
                            R"({"role": "user", "content": "What is [[2]]+2?"}, )"
                            R"({"role": "assistant", "content": "4 [ok]"}]})";
  const std::string chat2 = R"({"messages": [{"role": "user", "content": "Hi"}, )"
                            R"({"role": "assistant", "content": "Hello!"}, )"
                            R"({"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Bye."}]})";
  const std::string text1 = R"({"text": "plain text"})";
  const std::string overlong = nlohmann::json{{"text", std::string(300, 'x')}}.dump();
  const std::string tokens = R"({"input_ids": [100, 101, 102, 103], "labels": [-100, -100, 102, 103]})";
  const std::string no_supervision = R"({"input_ids": [100, 101], "labels": [-100, -100]})";
  return {{dir.write_lines("chat.jsonl", {chat1, "", chat2}),
           dir.write_lines("text.jsonl", {text1, "{not json", overlong}),
           dir.write_lines("tokens.jsonl", {tokens, no_supervision})}};
}

DataOptions corpus_options(const Corpus& c) {
  DataOptions o = testing::options_for(c.files);
  o.chat_template = ChatTemplateKind::kLlama3;
  o.max_length = 200;
  return o;
}

std::string joined(const std::vector<TokenSpan>& spans) {
  std::string s;
  for (const auto& sp : spans) s += sp.text;
  return s;
}

// Spans cover the ids in order, alternate, and agree with the labels.
void expect_spans_agree(const InspectedExample& ex, const tokenizer::Tokenizer& tok) {
  int64_t next = 0;
  for (size_t s = 0; s < ex.spans.size(); ++s) {
    const TokenSpan& sp = ex.spans[s];
    EXPECT_EQ(sp.first_token, next) << ex.file << ":" << ex.line;
    if (s > 0) EXPECT_NE(sp.supervised, ex.spans[s - 1].supervised);
    for (int64_t t = sp.first_token; t < sp.first_token + sp.num_tokens; ++t)
      EXPECT_EQ(ex.labels[t] != kIgnoreLabel, sp.supervised) << ex.file << ":" << ex.line << " token " << t;
    next += sp.num_tokens;
  }
  EXPECT_EQ(next, ex.tokens());
  EXPECT_EQ(joined(ex.spans), tok.decode(ex.input_ids)) << ex.file << ":" << ex.line;
}

TEST(ExampleInspector, EveryKindOfLineInFileOrder) {
  TempDir dir;
  const Corpus c = corpus(dir);
  const auto tok = testing::byte_tokenizer();
  const ExampleInspector inspector(corpus_options(c), tok);
  ASSERT_EQ(inspector.size(), 7u);  // the blank line is not an example
  const auto all = inspector.inspect(0, 100);
  ASSERT_EQ(all.size(), 7u);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i].index, i);

  const InspectedExample& chat = all[0];
  EXPECT_EQ(chat.file, c.files[0].string());
  EXPECT_EQ(chat.line, 1);
  EXPECT_EQ(chat.format, ExampleFormat::kMessages);
  EXPECT_EQ(chat.chat_template, "llama3");
  EXPECT_EQ(chat.status, ExampleStatus::kUsed);
  ASSERT_EQ(chat.spans.size(), 2u);
  EXPECT_FALSE(chat.spans[0].supervised);
  EXPECT_TRUE(chat.spans[1].supervised);
  EXPECT_EQ(chat.spans[1].text, "4 [ok]<|eot_id|>");
  EXPECT_EQ(chat.spans[0].text.rfind("<s>", 0), 0u) << chat.spans[0].text;
  EXPECT_EQ(chat.supervised, chat.spans[1].num_tokens);
  EXPECT_EQ(all[1].line, 3);  // after the blank line
  EXPECT_EQ(all[1].spans.size(), 4u);  // two assistant turns

  const InspectedExample& text = all[2];
  EXPECT_EQ(text.format, ExampleFormat::kText);
  EXPECT_EQ(text.chat_template, "none");
  ASSERT_EQ(text.spans.size(), 2u);
  EXPECT_EQ(text.spans[0].text, "<s>");  // BOS: the first token is never a target
  EXPECT_EQ(text.spans[1].text, "plain text</s>");

  const InspectedExample& bad = all[3];
  EXPECT_EQ(bad.line, 2);
  EXPECT_EQ(bad.status, ExampleStatus::kSkipped);
  EXPECT_EQ(bad.reason, SkipReason::kMalformedJson);
  EXPECT_FALSE(bad.problem.empty());
  EXPECT_TRUE(bad.stops_training);  // bad_lines: error
  EXPECT_TRUE(bad.input_ids.empty());
  EXPECT_TRUE(bad.spans.empty());

  const InspectedExample& overlong = all[4];
  EXPECT_EQ(overlong.status, ExampleStatus::kTruncated);
  EXPECT_EQ(overlong.tokens(), 200);
  EXPECT_EQ(overlong.original_length, 302);  // BOS + 300 + EOS

  const InspectedExample& tokens = all[5];
  EXPECT_EQ(tokens.format, ExampleFormat::kTokens);
  EXPECT_EQ(tokens.chat_template, "none");
  EXPECT_EQ(tokens.input_ids, (std::vector<int32_t>{100, 101, 102, 103}));
  EXPECT_EQ(tokens.labels, (std::vector<int32_t>{kIgnoreLabel, kIgnoreLabel, 102, 103}));
  EXPECT_EQ(tokens.supervised, 2);

  // Zero supervised: not trained, but its tokens are kept for inspection.
  const InspectedExample& zero = all[6];
  EXPECT_EQ(zero.status, ExampleStatus::kSkipped);
  EXPECT_EQ(zero.reason, SkipReason::kZeroSupervised);
  EXPECT_FALSE(zero.stops_training);
  EXPECT_FALSE(zero.trained());
  EXPECT_EQ(zero.input_ids, (std::vector<int32_t>{100, 101}));

  for (const auto& ex : all)
    if (!ex.input_ids.empty()) expect_spans_agree(ex, *tok);

  // --skip: the same examples from a later start.
  const auto later = inspector.inspect(5, 10);
  ASSERT_EQ(later.size(), 2u);
  EXPECT_EQ(later[0].index, 5u);
  EXPECT_EQ(later[0].input_ids, tokens.input_ids);
  EXPECT_TRUE(inspector.inspect(7, 3).empty());
}

TEST(ExampleInspector, TrainedExamplesEqualWhatThePipelineTrainsOn) {
  TempDir dir;
  const Corpus c = corpus(dir);
  DataOptions o = corpus_options(c);
  o.bad_lines = BadLinePolicy::kSkip;
  o.batching = BatchMode::kFlatten;
  o.examples_per_micro_batch = 1;
  const auto tok = testing::byte_tokenizer();
  const auto inspected = ExampleInspector(o, tok).inspect(0, 100);
  std::vector<const InspectedExample*> trained;
  for (const auto& ex : inspected)
    if (ex.trained()) trained.push_back(&ex);
  ASSERT_EQ(trained.size(), 5u);

  DataPipeline pipeline(o, tok);
  const auto batches = testing::all_micro_batches(testing::drain(pipeline));
  ASSERT_EQ(batches.size(), trained.size());
  for (size_t i = 0; i < batches.size(); ++i) {
    EXPECT_EQ(batches[i].input_ids, trained[i]->input_ids) << trained[i]->file << ":" << trained[i]->line;
    EXPECT_EQ(batches[i].labels, trained[i]->labels) << trained[i]->file << ":" << trained[i]->line;
    EXPECT_EQ(batches[i].num_supervised, trained[i]->supervised);
  }
}

TEST(ExampleInspector, DroppedExamplesKeepTheirTokens) {
  TempDir dir;
  const Corpus c = corpus(dir);
  DataOptions o = corpus_options(c);
  o.overlong = OverlongPolicy::kDrop;
  const auto ex = ExampleInspector(o, testing::byte_tokenizer()).inspect(4);
  EXPECT_EQ(ex.status, ExampleStatus::kDropped);
  EXPECT_FALSE(ex.trained());
  EXPECT_EQ(ex.tokens(), 302);
  EXPECT_EQ(ex.supervised, 301);
  EXPECT_NE(ex.problem.find("max_length 200"), std::string::npos) << ex.problem;
}

TEST(ExampleInspector, NoFilesIsAConfigurationError) {
  EXPECT_THROW(ExampleInspector(DataOptions{}, testing::byte_tokenizer()), std::invalid_argument);
}

// Real tokenizers: byte-level BPE (Llama 3) splits characters into byte
// tokens, Metaspace (Llama 2) strips the leading space of a decode. Spans are
// decoded on the whole prefix, so together they are the decoded example and
// no character is broken.
TEST(ExampleInspector, RealTokenizerSpansKeepCharactersWhole) {
  TempDir dir;
  const std::string chat = R"({"messages": [{"role": "user", "content": "Où est Tōkyō? 東京"}, )"
                           R"({"role": "assistant", "content": "東京 est au Japon 😀."}, )"
                           R"({"role": "user", "content": "Merci"}, {"role": "assistant", "content": " de rien"}]})";
  const auto file = dir.write_lines("chat.jsonl", {chat});
  for (const char* name : {"tok_llama3", "tok_llama2"}) {
    DataOptions o = testing::options_for({file});
    o.tokenizer_dir = fixture(name);  // chat_template: auto
    std::shared_ptr<const tokenizer::Tokenizer> tok = tokenizer::load_tokenizer(o.tokenizer_dir);
    const auto ex = ExampleInspector(o, tok).inspect(0);
    ASSERT_EQ(ex.status, ExampleStatus::kUsed) << name << ": " << ex.problem;
    expect_spans_agree(ex, *tok);
    ASSERT_EQ(ex.spans.size(), 4u) << name;
    for (const auto& sp : ex.spans) EXPECT_EQ(sp.text.find("\xEF\xBF\xBD"), std::string::npos) << name << ": " << sp.text;
    EXPECT_NE(ex.spans[1].text.find("東京 est au Japon 😀."), std::string::npos) << name << ": " << ex.spans[1].text;
    // Table pieces keep the space a word token starts with (Metaspace drops it at the start of a decode).
    bool found = false;
    for (size_t t = 1; t < ex.input_ids.size(); ++t) {
      const std::string piece = token_piece(*tok, ex.input_ids, t);
      found |= piece.size() > 1 && piece[0] == ' ' && piece[1] != ' ';
    }
    EXPECT_TRUE(found) << name;
  }
}

TEST(InspectReport, MarkersEscapeBracketsOfTheText) {
  auto span = [](std::string text, bool sup) {
    TokenSpan s;
    s.text = std::move(text);
    s.supervised = sup;
    return s;
  };
  EXPECT_EQ(marked_text({span("ask ", false), span("answer", true)}, false), "ask [[answer]]");
  // Text brackets touching the same bracket (in the text or a marker) get a backslash.
  EXPECT_EQ(marked_text({span("a [[b]] [c]", false), span("[x]", true), span("]", false)}, false),
            "a \\[\\[b\\]\\] [c][[\\[x\\]]]\\]");
  EXPECT_EQ(marked_text({span("[", false), span("y", true)}, false), "\\[[[y]]");
  // Control characters are escaped (a terminal never sees an ESC from the data); newlines and tabs kept.
  EXPECT_EQ(marked_text({span("a\r\n\tb\x1b[0m", false)}, false), "a\\r\n\tb\\x1b[0m");
  EXPECT_EQ(printable("x\n\xff", true), "x\\n\\xff");
  // Colour: no markers, ANSI green around the supervised span.
  EXPECT_EQ(marked_text({span("q ", false), span("[[a]]", true)}, true), "q \x1b[1;32m[[a]]\x1b[0m");
}

TEST(InspectReport, MarkersWhenNotATerminalColourOnlyWhenAsked) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  EXPECT_FALSE(use_color(ColorMode::kAuto, fds[1]));  // a pipe is not a terminal
  EXPECT_TRUE(use_color(ColorMode::kAlways, fds[1]));
  EXPECT_FALSE(use_color(ColorMode::kNever, fds[1]));
  ::close(fds[0]);
  ::close(fds[1]);

  TempDir dir;
  const Corpus c = corpus(dir);
  const auto tok = testing::byte_tokenizer();
  const ExampleInspector inspector(corpus_options(c), tok);
  const auto shown = inspector.inspect(0, 7);
  InspectPrintOptions po;
  po.max_tokens_shown = 5;
  std::ostringstream plain;
  print_inspection(plain, shown, inspector.size(), "train", tok.get(), po);
  const std::string p = plain.str();
  EXPECT_EQ(p.find('\x1b'), std::string::npos);
  for (const char* s : {"examples 1-7 of 7", "chat.jsonl:1", "format messages, chat template llama3",
                        "[[4 [ok]<|eot_id|>]]", "What is \\[\\[2\\]\\]+2?", "skipped (malformed_json",
                        "training stops at this line", "truncated: 200 tokens", "102 of 302 tokens cut",
                        "skipped (zero_supervised", "pos", "label", "\"<s>\"",
                        "tokens not shown (3 to ", "format tokens, chat template none"})
    EXPECT_NE(p.find(s), std::string::npos) << s << "\n" << p;
  // Rows: position, id, label (- for -100), piece.
  EXPECT_NE(p.find("     0        0        -  \"<s>\""), std::string::npos) << p;
  EXPECT_NE(p.find("     3      103      103  \"W\""), std::string::npos) << p;  // byte 'W' + 16
  // A long example shows its first and last rows: the last is the supervised end of turn.
  EXPECT_NE(p.find("        5        5  \"<|eot_id|>\"\n\n=== example 2"), std::string::npos) << p;

  po.color = true;
  std::ostringstream coloured;
  print_inspection(coloured, shown, inspector.size(), "train", tok.get(), po);
  EXPECT_NE(coloured.str().find("\x1b[1;32m4 [ok]<|eot_id|>\x1b[0m"), std::string::npos) << coloured.str();
  EXPECT_EQ(coloured.str().find("[[4"), std::string::npos);
}

TEST(InspectReport, JsonHasEveryField) {
  TempDir dir;
  const Corpus c = corpus(dir);
  const auto tok = testing::byte_tokenizer();
  const ExampleInspector inspector(corpus_options(c), tok);
  const auto j = inspection_json(inspector.inspect(0, 7), inspector.size(), "train");
  EXPECT_EQ(j["split"], "train");
  EXPECT_EQ(j["total"], 7);
  ASSERT_EQ(j["examples"].size(), 7u);
  const auto& chat = j["examples"][0];
  for (const char* k : {"index", "file", "line", "format", "chat_template", "status", "reason", "problem",
                        "stops_training", "trained", "tokens", "supervised", "original_length", "truncated",
                        "input_ids", "labels", "text", "spans"})
    EXPECT_TRUE(chat.contains(k)) << k;
  EXPECT_EQ(chat["format"], "messages");
  EXPECT_EQ(chat["chat_template"], "llama3");
  EXPECT_EQ(chat["status"], "used");
  EXPECT_TRUE(chat["reason"].is_null());
  EXPECT_EQ(chat["input_ids"].size(), chat["tokens"].get<size_t>());
  EXPECT_EQ(chat["labels"].size(), chat["tokens"].get<size_t>());
  EXPECT_EQ(chat["spans"][1]["text"], "4 [ok]<|eot_id|>");
  EXPECT_EQ(chat["spans"][1]["supervised"], true);
  EXPECT_EQ(chat["labels"][0], kIgnoreLabel);
  const auto& bad = j["examples"][3];
  EXPECT_EQ(bad["status"], "skipped");
  EXPECT_EQ(bad["reason"], "malformed_json");
  EXPECT_EQ(bad["stops_training"], true);
  EXPECT_EQ(j["examples"][4]["truncated"], true);
  // Invalid UTF-8 in a decoded piece must not make the dump throw.
  InspectedExample odd;
  odd.spans.push_back({"\xff", true, 0, 1});
  EXPECT_NO_THROW(inspected_example_json(odd).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace
}  // namespace fptrain::data
