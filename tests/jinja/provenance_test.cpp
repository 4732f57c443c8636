// Provenance: every output byte carries the tag of the input string it was
// copied from (here: the index of the message), or -1 for template text and
// computed values. Tags are shown as one character per byte: '.' for -1.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "jinja/template.h"
#include "tests/jinja/jinja_test_util.h"

namespace fptrain::jinja {
namespace {

Context chat_context() {
  Context ctx;
  ctx.variables["messages"] = nlohmann::ordered_json::parse(R"([
    {"role": "user", "content": "  Hello world  "},
    {"role": "assistant", "content": "Fine, thanks."},
    {"role": "user", "content": "héllo\nsecond line"}
  ])");
  ctx.variables["other"] = "untagged";
  for (int i = 0; i < 3; ++i) ctx.tag("/messages/" + std::to_string(i) + "/content", i);
  return ctx;
}

std::string tag_string(const RenderOutput& out) {
  std::string s;
  for (int32_t t : out.tags) s += t < 0 ? '.' : static_cast<char>('0' + t);
  return s;
}

struct Rendered {
  std::string text, tags;
};

Rendered render(const std::string& source, const Context& ctx = chat_context()) {
  const RenderOutput out = Template(source, "provenance").render(ctx);
  EXPECT_EQ(out.tags.size(), out.text.size());
  return {out.text, tag_string(out)};
}

#define EXPECT_RENDER(source, text_, tags_) \
  do {                                      \
    const Rendered r = render(source);      \
    EXPECT_EQ(r.text, text_) << source;     \
    EXPECT_EQ(r.tags, tags_) << source;     \
  } while (0)

TEST(JinjaProvenance, LiteralsAndComputedTextHaveNoTag) {
  EXPECT_RENDER("A{{ 1 + 1 }}{{ 'lit' }}{{ other }}", "A2lituntagged", std::string(13, '.'));
}

TEST(JinjaProvenance, PrintingAndAccess) {
  EXPECT_RENDER("{{ messages[1].content }}", "Fine, thanks.", std::string(13, '1'));
  EXPECT_RENDER("{{ messages[1]['content'] }}|{{ messages.1.content }}", "Fine, thanks.|Fine, thanks.",
                std::string(13, '1') + "." + std::string(13, '1'));
  EXPECT_RENDER("{% for m in messages %}{{ m.role[0] }}{{ m.content[0] }}{% endfor %}", "u aFuh", ".0.1.2");
}

TEST(JinjaProvenance, TrimAndStripKeepTheKeptCharacters) {
  EXPECT_RENDER("[{{ messages[0].content|trim }}]", "[Hello world]", "." + std::string(11, '0') + ".");
  EXPECT_RENDER("[{{ messages[0].content.strip() }}]", "[Hello world]", "." + std::string(11, '0') + ".");
  EXPECT_RENDER("[{{ messages[0].content.lstrip() }}]", "[Hello world  ]", "." + std::string(13, '0') + ".");
  EXPECT_RENDER("[{{ messages[0].content.rstrip() }}]", "[  Hello world]", "." + std::string(13, '0') + ".");
  EXPECT_RENDER("{{ messages[1].content.strip('F.') }}", "ine, thanks", std::string(11, '1'));
}

TEST(JinjaProvenance, Concatenation) {
  EXPECT_RENDER("{{ '<' ~ messages[1].content ~ '>' }}", "<Fine, thanks.>", "." + std::string(13, '1') + ".");
  EXPECT_RENDER("{{ '<' + messages[1].content + messages[0].content|trim }}", "<Fine, thanks.Hello world",
                "." + std::string(13, '1') + std::string(11, '0'));
}

TEST(JinjaProvenance, Slicing) {
  EXPECT_RENDER("{{ messages[1].content[0:4] }}|{{ messages[1].content[-3:] }}", "Fine|ks.", "1111.111");
  EXPECT_RENDER("{{ messages[1].content[::4] }}", "F,a.", "1111");
  // Code points, not bytes: "héllo" slices by character and keeps both bytes of "é".
  EXPECT_RENDER("{{ messages[2].content[:2] }}", "hé", "222");
  EXPECT_RENDER("{{ messages[2].content|reverse|first }}", "e", "2");
}

TEST(JinjaProvenance, ReplaceKeepsUnchangedParts) {
  EXPECT_RENDER("{{ messages[1].content|replace('thanks', 'ok') }}", "Fine, ok.", "111111..1");
  EXPECT_RENDER("{{ messages[1].content.replace('Fine', other) }}", "untagged, thanks.", std::string(8, '.') + std::string(9, '1'));
}

TEST(JinjaProvenance, SplitAndJoin) {
  EXPECT_RENDER("{{ [messages[1].content, messages[0].content|trim]|join(' | ') }}", "Fine, thanks. | Hello world",
                std::string(13, '1') + "..." + std::string(11, '0'));
  EXPECT_RENDER("{{ messages[1].content.split(' ')|join('_') }}", "Fine,_thanks.", "11111.1111111");
  EXPECT_RENDER("{{ messages[2].content.splitlines()|last }}", "second line", std::string(11, '2'));
}

TEST(JinjaProvenance, Indent) {
  // The line breaks indent puts back are its own (untagged); the lines keep their tags.
  EXPECT_RENDER("{{ messages[2].content|indent(2, true) }}", "  héllo\n  second line",
                "..222222..." + std::string(11, '2'));
}

TEST(JinjaProvenance, DefaultStringAndConditional) {
  EXPECT_RENDER("{{ missing|default(messages[1].content) }}", "Fine, thanks.", std::string(13, '1'));
  EXPECT_RENDER("{{ messages[1].content|string }}", "Fine, thanks.", std::string(13, '1'));
  EXPECT_RENDER("{{ messages[1].content if true else 'x' }}", "Fine, thanks.", std::string(13, '1'));
  EXPECT_RENDER("{{ messages[1].content|d('x', true) }}", "Fine, thanks.", std::string(13, '1'));
}

TEST(JinjaProvenance, CapturesMacrosAndCallers) {
  EXPECT_RENDER("{% set x %}[{{ messages[1].content }}]{% endset %}{{ x }}", "[Fine, thanks.]", "." + std::string(13, '1') + ".");
  EXPECT_RENDER("{% macro w(t) %}<{{ t }}>{% endmacro %}{{ w(messages[1].content) }}", "<Fine, thanks.>",
                "." + std::string(13, '1') + ".");
  EXPECT_RENDER("{% macro box() %}({{ caller() }}){% endmacro %}{% call box() %}{{ messages[1].content }}{% endcall %}",
                "(Fine, thanks.)", "." + std::string(13, '1') + ".");
  EXPECT_RENDER("{% set ns = namespace(c='') %}{% set ns.c = messages[1].content %}{{ ns.c }}", "Fine, thanks.",
                std::string(13, '1'));
  EXPECT_RENDER("{% filter trim %}  {{ messages[1].content }}  {% endfilter %}", "Fine, thanks.", std::string(13, '1'));
}

TEST(JinjaProvenance, LoopsOverCharacters) {
  EXPECT_RENDER("{% for ch in messages[1].content[:4] %}{{ ch }}-{% endfor %}", "F-i-n-e-", "1.1.1.1.");
}

TEST(JinjaProvenance, SameLengthCaseChangesKeepTagsOtherTransformsDrop) {
  EXPECT_RENDER("{{ messages[1].content|upper }}", "FINE, THANKS.", std::string(13, '1'));
  EXPECT_RENDER("{{ messages[1].content|tojson }}", "\"Fine, thanks.\"", std::string(15, '.'));
  EXPECT_RENDER("{{ '%s!'|format(messages[1].content) }}", "Fine, thanks.!", std::string(14, '.'));
}

TEST(JinjaProvenance, PointersTagWholeSubtreesDeepestWins) {
  Context ctx = chat_context();
  ctx.tags.clear();
  ctx.tag("/messages/1", 1);
  ctx.tag("/messages/1/content", 7);
  ctx.tag("/weird~1key", 5);
  ctx.variables["weird/key"] = "w";
  const RenderOutput out = Template("{{ messages[1].role }}:{{ messages[1].content }}{{ messages[0].role }}{{ vars['weird/key'] }}")
                               .render([&] {
                                 Context c = ctx;
                                 c.variables["vars"] = {{"weird/key", "w"}};
                                 c.tag("/vars/weird~1key", 5);
                                 return c;
                               }());
  EXPECT_EQ(out.text, "assistant:Fine, thanks.userw");
  EXPECT_EQ(tag_string(out), std::string(9, '1') + "." + std::string(13, '7') + "....5");
}

// A realistic template: every message's content lands in the output with its
// index, the template's own markup does not, and the generation ranges cover
// exactly the assistant turns.
TEST(JinjaProvenance, ChatTemplateMessagesAndGeneration) {
  const std::string llama3 =
      "{{- bos_token }}{%- for message in messages %}"
      "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
      "{%- if message['role'] == 'assistant' %}"
      "{% generation %}{{- message['content'] | trim + '<|eot_id|>' }}{% endgeneration %}"
      "{%- else %}{{- message['content'] | trim + '<|eot_id|>' }}{%- endif %}{%- endfor %}";
  Context ctx = chat_context();
  ctx.variables["bos_token"] = "<|begin_of_text|>";
  const RenderOutput out = Template(llama3, "chat_template").render(ctx);
  const std::vector<std::string> contents = {"Hello world", "Fine, thanks.", "héllo\nsecond line"};
  size_t from = 0;
  for (int32_t i = 0; i < 3; ++i) {
    const size_t at = out.text.find(contents[i], from);
    ASSERT_NE(at, std::string::npos) << i;
    for (size_t b = at; b < at + contents[i].size(); ++b) EXPECT_EQ(out.tags[b], i) << "byte " << b;
    from = at + contents[i].size();
  }
  size_t tagged = 0;
  for (int32_t t : out.tags) tagged += t >= 0 ? 1 : 0;
  EXPECT_EQ(tagged, contents[0].size() + contents[1].size() + contents[2].size());
  ASSERT_EQ(out.generation.size(), 1u);
  EXPECT_EQ(out.text.substr(out.generation[0].first, out.generation[0].second - out.generation[0].first),
            "Fine, thanks.<|eot_id|>");
}

TEST(JinjaProvenance, GenerationRangesAreBytes) {
  Context ctx;
  const RenderOutput out = Template("é{% generation %}ü{{ 'x' }}{% endgeneration %}.{% generation %}{% endgeneration %}").render(ctx);
  EXPECT_EQ(out.text, "éüx.");
  ASSERT_EQ(out.generation.size(), 2u);
  EXPECT_EQ(out.generation[0], std::make_pair(size_t{2}, size_t{5}));
  EXPECT_EQ(out.generation[1], std::make_pair(size_t{6}, size_t{6}));
}

// transformers computes a generation block's start as the length of the
// template's output so far; inside a macro or {% set %} that is not where the
// block's text finally lands. We report what transformers reports.
TEST(JinjaProvenance, GenerationInsideMacroReportsLikeTransformers) {
  Context ctx;
  const RenderOutput out =
      Template("ab{% macro g() %}{% generation %}XY{% endgeneration %}{% endmacro %}{% set s = 'cd' ~ g() %}{{ s }}").render(ctx);
  EXPECT_EQ(out.text, "abcdXY");
  ASSERT_EQ(out.generation.size(), 1u);
  EXPECT_EQ(out.generation[0], std::make_pair(size_t{2}, size_t{4}));
}

TEST(JinjaProvenance, ConcurrentRendersOfOneTemplate) {
  const Template t("{% for m in messages %}[{{ m.content|trim|upper }}]{% endfor %}{{ strftime_now('%Y') }}");
  Context ctx = chat_context();
  ctx.now = testing::fixed_now_for_unit_tests;
  const RenderOutput expected = t.render(ctx);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int i = 0; i < 200; ++i) {
        const RenderOutput out = t.render(ctx);
        ok[k] += out.text == expected.text && out.tags == expected.tags;
      }
    });
  for (auto& th : threads) th.join();
  for (int k = 0; k < 4; ++k) EXPECT_EQ(ok[k], 200);
  EXPECT_EQ(expected.text.substr(expected.text.size() - 4), "2024");
}

}  // namespace
}  // namespace fptrain::jinja
