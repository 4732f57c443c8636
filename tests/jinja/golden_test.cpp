// Every case make_fixtures.py rendered with Python's jinja2 (as transformers
// configures it) must render identically here: same text, same generation
// ranges, or an error in the same phase (compile or render).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "jinja/template.h"
#include "tests/jinja/jinja_test_util.h"

namespace fptrain::jinja {
namespace {

using testing::golden_cases;
using testing::visible;

void collect_strings(const nlohmann::ordered_json& j, std::vector<std::string>& out) {
  if (j.is_string()) out.push_back(j.get<std::string>());
  if (j.is_structured())
    for (const auto& item : j) collect_strings(item, out);
}

// Chat cases tag each message's content with the message index: every run of
// bytes with tag t must be made of pieces of the strings in message t's content.
std::string check_tags(const nlohmann::ordered_json& context, const RenderOutput& out) {
  const auto& messages = context["messages"];
  size_t i = 0;
  while (i < out.text.size()) {
    const int32_t tag = out.tags[i];
    size_t j = i;
    while (j < out.text.size() && out.tags[j] == tag) ++j;
    if (tag >= 0) {
      std::vector<std::string> sources;
      if (tag < static_cast<int32_t>(messages.size())) collect_strings(messages[tag]["content"], sources);
      std::string run = out.text.substr(i, j - i);
      while (!run.empty()) {  // greedily cut the run into substrings of the sources
        size_t best = 0;
        for (const std::string& src : sources) {
          size_t len = std::min(run.size(), src.size());
          while (len > best && src.find(run.substr(0, len)) == std::string::npos) --len;
          best = std::max(best, len);
        }
        if (best == 0) return "bytes " + visible(run) + " tagged " + std::to_string(tag) + " are not from that message";
        run.erase(0, best);
      }
    }
    i = j;
  }
  return "";
}

std::string run_case(const nlohmann::ordered_json& c) {
  const std::string expect = c["expect"];
  std::optional<Template> tpl;
  try {
    tpl.emplace(c["template"].get<std::string>(), "case");
  } catch (const Error& e) {
    if (expect == "compile_error") return "";
    return std::string("unexpected compile error: ") + e.what();
  }
  if (expect == "compile_error") return "compiled, but jinja2 fails to compile it: " + c["message"].get<std::string>();
  Context ctx;
  ctx.variables = c["context"];
  ctx.now = testing::fixed_now;
  const bool chat = c["group"] == "chat";
  if (chat)
    for (size_t i = 0; i < c["context"]["messages"].size(); ++i) ctx.tag("/messages/" + std::to_string(i) + "/content", static_cast<int32_t>(i));
  RenderOutput out;
  try {
    out = tpl->render(ctx);
  } catch (const Error& e) {
    if (expect == "render_error") return "";
    return std::string("unexpected render error: ") + e.what();
  }
  if (expect == "render_error") return "rendered " + visible(out.text) + ", but jinja2 fails: " + c["message"].get<std::string>();
  const std::string want = c["text"];
  if (out.text != want) {
    size_t at = 0;
    while (at < want.size() && at < out.text.size() && want[at] == out.text[at]) ++at;
    return "text differs at byte " + std::to_string(at) + "\n  expected: " + visible(want) + "\n  actual:   " + visible(out.text);
  }
  if (out.tags.size() != out.text.size()) return "one tag per byte expected";
  nlohmann::json ranges = nlohmann::json::array();
  for (const auto& [b, e] : out.generation) ranges.push_back({b, e});
  if (ranges != nlohmann::json(c["generation"]))
    return "generation ranges differ: expected " + nlohmann::json(c["generation"]).dump() + ", actual " + ranges.dump();
  if (chat) return check_tags(c["context"], out);
  return "";
}

void check_group(const std::string& group) {
  int checked = 0, failed = 0;
  for (const auto& c : golden_cases()["cases"]) {
    if (c["group"] != group) continue;
    ++checked;
    const std::string problem = run_case(c);
    if (problem.empty()) continue;
    ADD_FAILURE() << group << " case " << c["name"].get<std::string>() << ": " << problem
                  << "\n  template: " << visible(c["template"]) << "\n  context: " << c["context"].dump().substr(0, 2000);
    if (++failed >= 25) {
      ADD_FAILURE() << "stopping after 25 failures in group " << group;
      return;
    }
  }
  EXPECT_GT(checked, 0) << "no cases in group " << group;
}

// chat_context builds exactly the variables transformers gives the template.
TEST(JinjaGolden, ChatContextMatchesTransformers) {
  int checked = 0;
  for (const auto& c : golden_cases()["cases"]) {
    if (!c.contains("chat_input")) continue;
    const auto& in = c["chat_input"];
    const Context ctx = chat_context(in["messages"], in["add_generation_prompt"], in["tools"], in["documents"], in["extra"]);
    EXPECT_EQ(ctx.variables, c["context"]) << c["name"].get<std::string>() << "\n  ours: " << ctx.variables.dump()
                                           << "\n  transformers: " << c["context"].dump();
    EXPECT_EQ(ctx.tags.size(), in["messages"].size());
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST(JinjaGolden, Features) { check_group("feature"); }
TEST(JinjaGolden, WhitespaceControl) { check_group("whitespace"); }
TEST(JinjaGolden, RandomTemplates) { check_group("random"); }
TEST(JinjaGolden, ChatTemplates) { check_group("chat"); }

}  // namespace
}  // namespace fptrain::jinja
