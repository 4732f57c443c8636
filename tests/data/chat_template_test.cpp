// Chat templates through our Jinja interpreter against transformers'
// apply_chat_template on the same templates and tokenizers
// (tests/data/make_fixtures.py renders them live): the shipped conventions,
// the tokenizer's own template under `auto`, the roles a template refuses,
// and which turns the loss mask selects.
#include <gtest/gtest.h>

#include "data/chat_template.h"
#include "tests/data/test_util.h"
#include "tokenizer/tokenizer.h"

namespace fptrain::data {
namespace {

using testing::fixture;
using testing::read_json;

RawExample conversation(const nlohmann::json& conv) {
  RawExample ex;
  ex.format = ExampleFormat::kMessages;
  for (const auto& m : conv) ex.messages.push_back({m["role"], m["content"], false, {}});
  apply_loss_mask(ex.messages, ChatLossMask::kAssistant);
  return ex;
}

TEST(ChatTemplate, ShippedTemplatesRenderAsTransformers) {
  const auto golden = read_json(fixture("chat_golden.json"));
  ASSERT_EQ(golden.size(), 4u);
  int checked = 0;
  for (const auto& entry : golden) {
    const auto kind = common::parse_enum<ChatTemplateKind>(entry["template"].get<std::string>(), "template");
    const auto tok = tokenizer::load_tokenizer(fixture(entry["tokenizer_dir"].get<std::string>()));
    const auto tmpl = ChatTemplate::resolve(kind, "", tok.get());
    ASSERT_TRUE(tmpl);
    for (const auto& c : entry["cases"]) {
      EXPECT_EQ(join_pieces(tmpl->render(conversation(c["messages"]), false)), c["text"].get<std::string>())
          << entry["template"];
      ++checked;
    }
  }
  EXPECT_EQ(checked, 20);
}

TEST(ChatTemplate, AutoRendersTheTokenizersOwnTemplate) {
  const auto golden = read_json(fixture("chat_golden.json"));
  for (const auto& entry : golden) {
    const auto dir = fixture(entry["tokenizer_dir"].get<std::string>());
    const auto tok = tokenizer::load_tokenizer(dir);
    const auto tmpl = ChatTemplate::resolve(ChatTemplateKind::kAuto, dir, tok.get());
    ASSERT_TRUE(tmpl) << dir;
    EXPECT_EQ(read_chat_template(dir), entry["jinja"].get<std::string>());
    for (const auto& c : entry["cases"])
      EXPECT_EQ(join_pieces(tmpl->render(conversation(c["messages"]), false)), c["text"].get<std::string>());
  }
  EXPECT_EQ(ChatTemplate::resolve(ChatTemplateKind::kAuto, "", nullptr), nullptr);
  EXPECT_EQ(ChatTemplate::resolve(ChatTemplateKind::kNone, fixture("tok_llama3"), nullptr), nullptr);
}

TEST(ChatTemplate, ARefusedConversationIsABadLine) {
  testing::ByteTokenizer tok;
  RawExample ex;
  ex.format = ExampleFormat::kMessages;
  ex.messages = {{"user", "a", false, {}}, {"user", "b", false, {}}};
  for (auto kind : {ChatTemplateKind::kLlama2, ChatTemplateKind::kMistral}) {
    try {
      ChatTemplate::resolve(kind, "", &tok)->render(ex, false);
      FAIL() << "expected BadLine";
    } catch (const BadLine& e) {
      EXPECT_EQ(e.reason(), SkipReason::kInvalidValue);
      EXPECT_NE(std::string(e.what()).find("must alternate"), std::string::npos) << e.what();
    }
  }
}

TEST(ChatTemplate, UnknownSyntaxNamesTheTemplateAndLine) {
  try {
    ChatTemplate({{"default", "{{ bos_token }}\n{% frobnicate %}"}}, "my_template", nullptr);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("my_template"), std::string::npos) << what;
    EXPECT_NE(what.find("line 2"), std::string::npos) << what;
    EXPECT_NE(what.find("frobnicate"), std::string::npos) << what;
  }
}

TEST(ChatTemplate, ProvenanceSupervisesContentAndTheEndOfTurnToken) {
  // No {% generation %}: the assistant's characters plus the special token after them.
  testing::ByteTokenizer tok({"<s>", "</s>", "<|im_start|>", "<|im_end|>"});
  const std::string chatml =
      "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] | trim + '<|im_end|>\\n' }}"
      "{% endfor %}";
  ChatTemplate tmpl({{"default", chatml}}, "chatml", &tok);
  RawExample ex;
  ex.format = ExampleFormat::kMessages;
  ex.messages = {{"user", "hi", false, {}}, {"assistant", " yo ", true, {}}, {"user", "q", false, {}},
                 {"assistant", "a", false, {}}};
  std::string supervised;
  for (const auto& p : tmpl.render(ex, false))
    if (p.supervised) supervised += p.text + "|";
  EXPECT_EQ(supervised, "yo|<|im_end|>|");
}

TEST(ChatTemplate, LossMaskOptionsSelectTurns) {
  std::vector<Message> m = {{"system", "s", false, {}}, {"user", "u1", false, {}}, {"assistant", "a1", false, {}},
                            {"user", "u2", false, {}},  {"assistant", "a2", false, {}}};
  apply_loss_mask(m, ChatLossMask::kAssistant);
  EXPECT_EQ((std::vector<bool>{m[0].supervised, m[1].supervised, m[2].supervised, m[3].supervised, m[4].supervised}),
            (std::vector<bool>{false, false, true, false, true}));
  apply_loss_mask(m, ChatLossMask::kLastAssistant);
  EXPECT_EQ((std::vector<bool>{m[2].supervised, m[4].supervised}), (std::vector<bool>{false, true}));
  apply_loss_mask(m, ChatLossMask::kAll);
  for (const auto& x : m) EXPECT_TRUE(x.supervised);
}

}  // namespace
}  // namespace fptrain::data
