// Proof of parity with transformers: fptrain trains on exactly the text the
// model expects. tests/data/chat_parity_fixtures.py renders ~1000
// conversations with apply_chat_template (transformers, live) for templates of
// every family - those mistral-common generates for Mistral's tokenizer
// versions, tests/jinja/chat_templates.py's, the ones we ship - each paired
// with tokenizers that know its control tokens. Here every conversation goes
// through the real path: its JSONL file, DataOptions pointing at the tokenizer
// folder holding the template (chat_template: auto, and the named option for
// the shipped ones), ExampleSource::process. Per conversation:
//   - a conversation the template refuses is a bad line (kInvalidValue), and
//     only those are;
//   - the rendered text and the token ids equal transformers';
//   - with {% generation %} blocks, labels != -100 equal the assistant mask
//     (return_assistant_tokens_mask) at every position but 0, which nothing
//     predicts;
//   - without, the supervised characters are what data/chat_template.h's
//     provenance rule promises, located independently by the fixture script
//     (each assistant content as the template placed it, plus its end-of-turn
//     special token, and the spaces before it where the tokenizer spells a
//     space as the next word's marker), and every token wholly inside /
//     outside them is supervised / not; for mistral-common's templates the
//     labels also equal transformers' assistant mask on a copy of the template
//     with {% generation %} around what it renders for a reply.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "data/example_encoder.h"
#include "data/example_parser.h"
#include "data/example_source.h"
#include "data/jsonl_file.h"
#include "data/packed_batch.h"
#include "data/utf8_check.h"
#include "tests/data/test_util.h"
#include "tokenizer/tokenizer.h"

namespace fptrain::data {
namespace {

using nlohmann::json;
using testing::fixture;

const json& golden() {
  static const json g = [] {
    json j = testing::read_json(fixture("chat_parity_golden.json"));
    // strftime_now's date, as the goldens were rendered (read when a template is built).
    ::setenv("FPTRAIN_CHAT_TEMPLATE_DATE", j["date"].get<std::string>().c_str(), 1);
    return j;
  }();
  return g;
}

// What a run compared, for the coverage checks.
struct Tally {
  int suites = 0, runs = 0, cases = 0, rejected = 0, masks = 0, provenance = 0, references = 0;
  int misplaced_cases = 0, misplaced_tokens = 0;  // blocks transformers misplaces, tokens whose mask differs
};

// Failures are reported with their context; after kMaxReported only counted.
class Reporter {
 public:
  static constexpr int kMaxReported = 25;
  ~Reporter() {
    if (count_ > kMaxReported) ADD_FAILURE() << count_ << " mismatches in all (" << kMaxReported << " shown)";
  }
  void fail(const std::string& where, const std::string& what) {
    if (++count_ <= kMaxReported) ADD_FAILURE() << where << ": " << what;
  }

 private:
  int count_ = 0;
};

std::string escaped(const std::string& s) { return json(s).dump(); }

// The supervised bytes as "run|run|" (readable in failures).
std::string runs(const std::string& text, const std::vector<char>& supervised) {
  std::string out;
  for (size_t b = 0; b < text.size(); ++b) {
    if (!supervised[b]) continue;
    size_t e = b;
    while (e < text.size() && supervised[e]) ++e;
    out += text.substr(b, e - b) + "|";
    b = e;
  }
  return escaped(out);
}

std::string ids_text(const std::vector<int32_t>& ids) {
  std::ostringstream s;
  for (size_t i = 0; i < ids.size(); ++i) s << (i ? "," : "") << ids[i];
  return s.str();
}

std::string ids_text(const json& ids) { return ids_text(ids.get<std::vector<int32_t>>()); }

// One suite's JSONL through ExampleSource with one tokenizer folder and template option.
void check_run(const json& suite, const std::string& tok_dir, ChatTemplateKind kind, Tally& tally, Reporter& report) {
  const auto dir = fixture(tok_dir);
  DataOptions o = testing::options_for({fixture(suite["jsonl"].get<std::string>())});
  o.files[0].format = ExampleFormat::kMessages;
  o.tokenizer_dir = dir;
  o.chat_template = kind;
  o.loss_mask = ChatLossMask::kAssistant;
  o.max_length = 1 << 20;
  const auto tok = tokenizer::load_tokenizer(dir);
  const ExampleSource source(o, tok.get());
  const std::string run_name = suite["suite"].get<std::string>() + " [" + tok_dir + ", chat_template: " +
                               common::enum_name(kind) + "]";
  const json& cases = suite["cases"];
  if (source.lines_per_file().at(0) != cases.size()) {
    report.fail(run_name, "the JSONL file has " + std::to_string(source.lines_per_file()[0]) + " lines, the golden " +
                              std::to_string(cases.size()) + " cases");
    return;
  }
  ++tally.runs;
  for (size_t i = 0; i < cases.size(); ++i) {
    const json& c = cases[i];
    const std::string where = run_name + " line " + std::to_string(i + 1) + " '" + c["name"].get<std::string>() + "'";
    const ProcessedExample ex = source.process(ExampleRef::make(0, i), /*keep_rejected=*/true);
    ++tally.cases;
    const bool bad_line = ex.status == ExampleStatus::kSkipped && ex.reason == SkipReason::kInvalidValue;
    if (c.contains("rejected")) {
      ++tally.rejected;
      if (!bad_line) report.fail(where, "transformers refuses it (" + c["rejected"].get<std::string>() +
                                            "), fptrain did not report a bad line");
      continue;
    }
    if (ex.status == ExampleStatus::kSkipped && ex.reason != SkipReason::kZeroSupervised) {
      report.fail(where, "a bad line for fptrain (" + ex.problem + "), transformers renders it");
      continue;
    }
    EXPECT_TRUE(ex.chat_template) << where;

    // The text, rendered by the encoder the source uses.
    const RawExample raw = parse_example(source.file(0).read_line(i), ExampleFormat::kMessages);
    const std::vector<TextPiece> pieces = source.encoder().render(raw);
    const std::string text = join_pieces(pieces);
    const std::string want_text = c["text"].get<std::string>();
    if (text != want_text) {
      report.fail(where, "rendered text differs:\n  fptrain      " + escaped(text) + "\n  transformers " +
                             escaped(want_text));
      continue;
    }

    // The ids: apply_chat_template(tokenize=True), i.e. the text with add_special_tokens=False.
    const json& want_ids = c["input_ids"];
    if (ex.input_ids != want_ids.get<std::vector<int32_t>>()) {
      report.fail(where, "ids differ:\n  fptrain      " + ids_text(ex.input_ids) + "\n  transformers " +
                             ids_text(want_ids) + "\n  text " + escaped(text));
      continue;
    }
    if (ex.labels.size() != ex.input_ids.size() || (!ex.labels.empty() && ex.labels[0] != kIgnoreLabel)) {
      report.fail(where, "labels: wrong length or position 0 supervised");
      continue;
    }
    const json& token_bytes = c["token_bytes"];

    if (c["generation"].get<bool>()) {
      // transformers' assistant mask; position 0 is never supervised in fptrain.
      ++tally.masks;
      const json& mask = c["assistant_masks"];
      // A block transformers misplaces (in a macro: the range it reports does not hold the
      // block's text) is misplaced by fptrain too, in bytes rather than characters, and its
      // boundaries cut words, where the encoder's boundary rule differs from char_to_token
      // (docs/chat-templates.md): only counted. Every other block must give the same mask.
      bool misplaced = false;
      for (const auto& g : c["generation_bytes"]) misplaced |= !g[2].get<bool>();
      if (misplaced) {
        ++tally.misplaced_cases;
        if (suite["template"] != "fam_macro_generation")
          report.fail(where, "transformers misplaces a generation block of a template without macros");
      }
      for (size_t t = 1; t < ex.labels.size(); ++t) {
        const bool ours = ex.labels[t] != kIgnoreLabel;
        if (ours == (mask[t].get<int>() != 0)) continue;
        if (misplaced) {
          ++tally.misplaced_tokens;
          continue;
        }
        const size_t a = token_bytes[t][0], b = token_bytes[t][1];
        report.fail(where, "token " + std::to_string(t) + " " + escaped(text.substr(a, b - a)) + " (bytes " +
                               std::to_string(a) + ".." + std::to_string(b) + ") is " +
                               (ours ? "supervised" : "not supervised") + " in fptrain, transformers' mask says " +
                               (ours ? "0" : "1") + "\n  text " + escaped(text));
        break;
      }
      continue;
    }

    // Provenance: the supervised characters, against the fixture's independent location of them.
    const json& spans = c["supervised_bytes"];
    if (spans.is_null()) continue;  // contents the marker cannot locate (a list of blocks)
    ++tally.provenance;
    std::vector<char> want(text.size(), 0), got(text.size(), 0);
    for (const auto& s : spans)
      for (size_t b = s[0]; b < s[1].get<size_t>(); ++b) want[b] = 1;
    size_t at = 0;
    for (const auto& p : pieces) {
      if (p.supervised) std::fill(got.begin() + at, got.begin() + at + p.text.size(), 1);
      at += p.text.size();
    }
    if (got != want) {
      report.fail(where, "supervised text differs:\n  fptrain  " + runs(text, got) + "\n  expected " +
                             runs(text, want) + "\n  text " + escaped(text));
      continue;
    }
    // Tokens wholly inside the supervised characters are supervised, wholly outside them not.
    for (size_t t = 1; t < ex.labels.size(); ++t) {
      const size_t a = token_bytes[t][0], b = token_bytes[t][1];
      if (a >= b) continue;
      const size_t inside = std::count(want.begin() + a, want.begin() + b, 1);
      const bool ours = ex.labels[t] != kIgnoreLabel;
      if ((inside == b - a && !ours) || (inside == 0 && ours)) {
        report.fail(where, "token " + std::to_string(t) + " " + escaped(text.substr(a, b - a)) + " is " +
                               (ours ? "" : "not ") + "supervised, its characters " + (ours ? "are not" : "are") +
                               "\n  text " + escaped(text));
        break;
      }
    }
    if (c.contains("reference_mask")) {
      // transformers' mask with the reply inside {% generation %}: equal token for token.
      ++tally.references;
      const json& mask = c["reference_mask"];
      for (size_t t = 1; t < ex.labels.size(); ++t) {
        const bool ours = ex.labels[t] != kIgnoreLabel;
        if (ours == (mask[t].get<int>() != 0)) continue;
        const size_t a = token_bytes[t][0], b = token_bytes[t][1];
        report.fail(where, "token " + std::to_string(t) + " " + escaped(text.substr(a, b - a)) + " is " +
                               (ours ? "" : "not ") + "supervised, transformers' mask with the reply as a "
                               "generation block says " + (ours ? "0" : "1") + "\n  text " + escaped(text));
        break;
      }
    }
  }
}

// Every suite `pick` selects, with each of its tokenizer folders; `named` also
// runs the shipped template by its option name.
Tally check_suites(const std::function<bool(const json&)>& pick, bool named) {
  Tally tally;
  Reporter report;
  for (const json& suite : golden()["suites"]) {
    if (!pick(suite)) continue;
    ++tally.suites;
    for (const json& d : suite["tokenizer_dirs"]) {
      const std::string dir = d.get<std::string>();
      if (named)
        check_run(suite, dir, common::parse_enum<ChatTemplateKind>(suite["named"].get<std::string>(), "named"), tally,
                  report);
      else
        check_run(suite, dir, ChatTemplateKind::kAuto, tally, report);
    }
  }
  std::printf("compared %d cases (%d suites, %d runs): %d refused (bad lines), %d assistant masks, %d provenance "
              "masks (%d also against a generation-block copy); %d masks with blocks transformers misplaces "
              "(macros), where %d tokens differ\n",
              tally.cases, tally.suites, tally.runs, tally.rejected, tally.masks, tally.provenance, tally.references,
              tally.misplaced_cases, tally.misplaced_tokens);
  return tally;
}

bool starts_with(const json& suite, const char* prefix) {
  return suite["template"].get<std::string>().rfind(prefix, 0) == 0;
}

TEST(ChatParity, MistralCommonTemplates) {
  if (golden()["mistral_common"].is_null())
    GTEST_SKIP() << "mistral-common is not installed (scripts/requirements.txt): no Mistral templates to compare";
  const Tally t = check_suites([](const json& s) { return starts_with(s, "mc_"); }, false);
  // v1, v2, v3 and v7 SentencePiece, v3, v7, v11, v13 and v15 Tekken; v1 and v3 also with
  // Mistral's own tokenizer.model files.
  EXPECT_EQ(t.suites, 11);
  EXPECT_GE(t.cases, 380);
  EXPECT_GE(t.rejected, 50);
  EXPECT_GE(t.provenance, 300);
  EXPECT_GE(t.references, 200);  // v1, v2, v3, v7 SentencePiece and v3, v7 Tekken
}

TEST(ChatParity, FamilyTemplates) {
  const Tally t = check_suites(
      [](const json& s) { return starts_with(s, "fam_") || starts_with(s, "named_"); }, false);
  EXPECT_EQ(t.suites, 23);  // 11 templates x 2 tokenizers, and default + tool_use
  EXPECT_GE(t.cases, 800);
  EXPECT_GE(t.rejected, 50);
  EXPECT_GE(t.masks, 150);
  EXPECT_GE(t.provenance, 300);
}

TEST(ChatParity, ShippedTemplatesAuto) {
  const Tally t = check_suites([](const json& s) { return !s["named"].is_null(); }, false);
  EXPECT_EQ(t.suites, 8);  // 4 templates x 2 tokenizers
  EXPECT_GE(t.masks, 200);
  EXPECT_GE(t.rejected, 30);
}

TEST(ChatParity, ShippedTemplatesByName) {
  const Tally t = check_suites([](const json& s) { return !s["named"].is_null(); }, true);
  EXPECT_EQ(t.suites, 8);
  EXPECT_GE(t.masks, 200);
}

TEST(ChatParity, SentencePieceModelFoldersMatchTokenizerJson) {
  // Every SentencePiece suite also runs from tokenizer.model + tokenizer_config.json.
  int suites = 0, with_model = 0;
  for (const json& suite : golden()["suites"]) {
    const std::string name = suite["suite"].get<std::string>();
    if (name.size() < 3 || name.compare(name.size() - 3, 3, "_sp") != 0) continue;
    ++suites;
    with_model += suite["tokenizer_dirs"].size() == 2;
  }
  EXPECT_GT(suites, 10);
  EXPECT_EQ(with_model, suites) << "transformers reads some tokenizer.model folders differently from their "
                                   "tokenizer.json (see chat_parity_fixtures.py)";
}

TEST(ChatParity, MistralIssueExamples) {
  // The issue's report: with mistral-common's templates, v3 puts the system message before the
  // LAST user turn and v1 writes "<s> [INST] ... [/INST]" with spaces. transformers does, and
  // so does fptrain (MistralCommonTemplates checks every case; these two by name).
  if (golden()["mistral_common"].is_null()) GTEST_SKIP() << "mistral-common is not installed";
  auto check = [](const std::string& suite_name, const std::string& case_name, const std::string& want) {
    for (const json& suite : golden()["suites"]) {
      if (suite["suite"] != suite_name) continue;
      const json& cases = suite["cases"];
      for (size_t i = 0; i < cases.size(); ++i) {
        if (cases[i]["name"] != case_name) continue;
        EXPECT_EQ(cases[i]["text"], want) << "transformers";
        const auto dir = fixture(suite["tokenizer_dirs"][0].get<std::string>());
        const auto tok = tokenizer::load_tokenizer(dir);
        const auto tmpl = ChatTemplate::resolve(ChatTemplateKind::kAuto, dir, tok.get());
        JsonlFile file(fixture(suite["jsonl"].get<std::string>()));
        RawExample ex = parse_example(file.read_line(i), ExampleFormat::kMessages);
        apply_loss_mask(ex.messages, ChatLossMask::kAssistant);
        EXPECT_EQ(join_pieces(tmpl->render(ex, false)), want) << "fptrain";
        return;
      }
    }
    ADD_FAILURE() << "no case " << suite_name << " / " << case_name;
  };
  check("mc_v3_spm_sp", "multiturn",
        "<s>[INST] Capital of France?[/INST] Paris</s>[INST] Of Italy?[/INST] Rome</s>[INST] Of Spain?[/INST] "
        "Madrid</s>[INST] Answer in one word.\n\nThanks[/INST]");
  check("mc_v1_spm_sp", "system", "<s> [INST] You are a pirate.\n\nHi [/INST] Arr!</s> [INST] Bye [/INST]");
}

TEST(ChatParity, AMistralReplyTrainsItsWordMarker) {
  // Mistral's v3 tokenizer.model spells the space the template writes after [/INST] as the
  // reply's first "\u2581"; before CJK text it is a token of its own, which the model must learn
  // to emit (mistral-common encodes a reply as SentencePiece(content) + eos): supervised, as
  // in transformers' mask with the reply as a generation block (the golden's reference_mask).
  if (golden()["mistral_common"].is_null()) GTEST_SKIP() << "mistral-common is not installed";
  const json* suite = nullptr;
  for (const json& s : golden()["suites"])
    if (s["suite"] == "mc_v3_spm_real_v3") suite = &s;
  ASSERT_NE(suite, nullptr);
  const json& cases = (*suite)["cases"];
  size_t line = 0;
  while (line < cases.size() && cases[line]["name"] != "cjk_reply") ++line;
  ASSERT_LT(line, cases.size());
  const json& want = cases[line];
  ASSERT_TRUE(want.contains("reference_mask"));

  const auto dir = fixture((*suite)["tokenizer_dirs"][0].get<std::string>());
  const auto tok = tokenizer::load_tokenizer(dir);
  ExampleEncoder encoder(tok.get(), ChatTemplate::resolve(ChatTemplateKind::kAuto, dir, tok.get()),
                         ChatLossMask::kAssistant);
  JsonlFile file(fixture((*suite)["jsonl"].get<std::string>()));
  const EncodedExample e = encoder.encode(parse_example(file.read_line(line), ExampleFormat::kMessages));
  ASSERT_EQ(e.input_ids, want["input_ids"].get<std::vector<int32_t>>());
  const json& mask = want["reference_mask"];
  size_t first = e.labels.size();
  for (size_t t = 1; t < e.labels.size(); ++t) {
    EXPECT_EQ(e.labels[t] != kIgnoreLabel, mask[t].get<int>() != 0) << "token " << t;
    if (e.labels[t] != kIgnoreLabel && first == e.labels.size()) first = t;
  }
  // The first trained token is the word marker alone, right after [/INST].
  ASSERT_LT(first, e.labels.size());
  EXPECT_EQ(e.input_ids[first], *tok->token_to_id("\xE2\x96\x81"));
  EXPECT_EQ(e.input_ids[first - 1], *tok->token_to_id("[/INST]"));
}

TEST(ChatParity, AMisplacedGenerationRangeNeverCutsACharacter) {
  // A {% generation %} block in a macro gets transformers' misplaced range, which fptrain
  // computes in bytes: here it ends 5 bytes into "東京東京", inside a character. The pieces
  // must stay whole characters (widened as transformers' character ranges are), or the
  // tokenizer rejects the text and the data pipeline stops.
  const auto dir = fixture("chat_parity/tok_fam_macro_generation_bl");
  const auto tok = tokenizer::load_tokenizer(dir);
  const auto tmpl = ChatTemplate::resolve(ChatTemplateKind::kAuto, dir, tok.get());
  ASSERT_TRUE(tmpl);
  RawExample ex = parse_example(R"({"messages": [{"role": "user", "content": "hi"},
                                                 {"role": "assistant", "content": "東京東京"}]})",
                                ExampleFormat::kMessages);
  apply_loss_mask(ex.messages, ChatLossMask::kAssistant);
  const std::vector<TextPiece> pieces = tmpl->render(ex, false);
  EXPECT_EQ(join_pieces(pieces), "<user>hi<assistant>東京東京</s>");
  std::string supervised;
  for (const auto& p : pieces) {
    EXPECT_EQ(find_invalid_utf8(p.text), std::string_view::npos) << "a piece of " << p.text.size() << " bytes";
    if (p.supervised) supervised += p.text;
  }
  // The range: bytes [8, 24) ("<assistant>東" and 2 bytes of 京), widened to 京's end. (transformers'
  // range is in characters, [8, 16): "<assistan"; see docs/chat-templates.md.)
  EXPECT_EQ(supervised, "<assistant>東京");
  const ExampleEncoder encoder(tok.get(), tmpl, ChatLossMask::kAssistant);
  EXPECT_NO_THROW(encoder.encode(ex));
}

TEST(ChatParity, TheDateVariableFixesStrftimeNow) {
  // FPTRAIN_CHAT_TEMPLATE_DATE (read when a template is built) is strftime_now's date at midnight.
  const char* before = std::getenv("FPTRAIN_CHAT_TEMPLATE_DATE");
  const std::string saved = before ? before : "";
  const std::map<std::string, std::string> source = {{"default", "{{ strftime_now('%A %d %b %Y %H:%M') }}"}};
  RawExample ex;
  ex.format = ExampleFormat::kMessages;
  ex.messages = {{"user", "hi", false, {}}};
  ::setenv("FPTRAIN_CHAT_TEMPLATE_DATE", "2024-02-29", 1);
  EXPECT_EQ(join_pieces(ChatTemplate(source, "date", nullptr).render(ex, false)), "Thursday 29 Feb 2024 00:00");
  for (const char* bad : {"2023-02-29", "2024-13-01", "29/02/2024", "2024-02-29x"}) {
    ::setenv("FPTRAIN_CHAT_TEMPLATE_DATE", bad, 1);
    try {
      ChatTemplate(source, "date", nullptr);
      ADD_FAILURE() << bad << ": expected an error";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("FPTRAIN_CHAT_TEMPLATE_DATE"), std::string::npos) << e.what();
    }
  }
  if (before)
    ::setenv("FPTRAIN_CHAT_TEMPLATE_DATE", saved.c_str(), 1);
  else
    ::unsetenv("FPTRAIN_CHAT_TEMPLATE_DATE");
}

}  // namespace
}  // namespace fptrain::data
