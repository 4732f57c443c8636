// Native chat template rendering against transformers' apply_chat_template on
// the same Jinja templates (tests/data/make_fixtures.py renders them live).
#include <gtest/gtest.h>

#include "data/chat_template.h"
#include "tests/data/test_util.h"

namespace fptrain::data {
namespace {

using testing::fixture;
using testing::read_json;

std::vector<Message> messages_of(const nlohmann::json& conv) {
  std::vector<Message> out;
  for (const auto& m : conv) out.push_back({m["role"], m["content"], false});
  return out;
}

TEST(ChatTemplate, RenderedTextEqualsTransformers) {
  const auto golden = read_json(fixture("chat_golden.json"));
  ASSERT_EQ(golden.size(), 4u);
  int checked = 0;
  for (const auto& entry : golden) {
    const ChatTemplateKind kind = common::parse_enum<ChatTemplateKind>(entry["template"].get<std::string>(), "template");
    for (const auto& c : entry["cases"]) {
      auto messages = messages_of(c["messages"]);
      apply_loss_mask(messages, ChatLossMask::kAssistant);
      const std::string text = join_pieces(render_chat(kind, messages));
      EXPECT_EQ(text, c["text"].get<std::string>()) << entry["template"];
      ++checked;
    }
  }
  EXPECT_EQ(checked, 20);
}

TEST(ChatTemplate, DetectsConventionFromJinja) {
  const auto golden = read_json(fixture("chat_golden.json"));
  for (const auto& entry : golden)
    EXPECT_EQ(common::enum_name(detect_chat_template(entry["jinja"].get<std::string>())), entry["template"]);
  EXPECT_EQ(detect_chat_template("{{ messages }}"), ChatTemplateKind::kNone);
}

TEST(ChatTemplate, ResolvesAutoFromTokenizerDirectory) {
  for (const char* name : {"llama3", "llama2", "mistral", "granite3"})
    EXPECT_EQ(common::enum_name(resolve_chat_template(ChatTemplateKind::kAuto, fixture(std::string("tok_") + name))),
              std::string(name));
  EXPECT_EQ(resolve_chat_template(ChatTemplateKind::kGranite3, fixture("tok_llama3")), ChatTemplateKind::kGranite3);
  EXPECT_EQ(resolve_chat_template(ChatTemplateKind::kAuto, ""), ChatTemplateKind::kNone);
}

TEST(ChatTemplate, InstTemplatesRejectNonAlternatingRoles) {
  std::vector<Message> bad = {{"user", "a", false}, {"user", "b", false}};
  for (auto kind : {ChatTemplateKind::kLlama2, ChatTemplateKind::kMistral}) {
    try {
      render_chat(kind, bad);
      FAIL() << "expected BadLine";
    } catch (const BadLine& e) {
      EXPECT_EQ(e.reason(), SkipReason::kInvalidValue);
      EXPECT_NE(std::string(e.what()).find("alternating"), std::string::npos);
    }
  }
}

TEST(ChatTemplate, PythonStripRemovesUnicodeWhitespace) {
  EXPECT_EQ(python_strip(" \t\r\n abc \xC2\xA0\xE2\x80\x89\xE3\x80\x80"), "abc");
  EXPECT_EQ(python_strip("\xE6\x9D\xB1 x \xE4\xBA\xAC"), "\xE6\x9D\xB1 x \xE4\xBA\xAC");
  EXPECT_EQ(python_strip("   "), "");
  EXPECT_EQ(python_strip("\xE2\x80\x8B" "a"), "\xE2\x80\x8B" "a");  // zero-width space is not whitespace
}

TEST(ChatTemplate, LossMaskOptionsSelectTurns) {
  std::vector<Message> m = {{"system", "s", false}, {"user", "u1", false}, {"assistant", "a1", false},
                            {"user", "u2", false},  {"assistant", "a2", false}};
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
