// Errors name the template, the line and the construct; runaway recursion and
// absurdly nested input are errors, never crashes.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "jinja/template.h"
#include "tests/jinja/jinja_test_util.h"

namespace fptrain::jinja {
namespace {

// The error a template gives (at compile or render time), or fails the test.
Error error_of(const std::string& source, const nlohmann::ordered_json& variables = nlohmann::ordered_json::object()) {
  try {
    Context ctx;
    ctx.variables = variables;
    Template(source, "chat_template").render(ctx);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << source;
  return Error(Error::Kind::kRuntime, "");
}

bool compiles(const std::string& source) {
  try {
    Template t(source, "t");
    return true;
  } catch (const Error&) {
    return false;
  }
}

TEST(JinjaErrors, UnknownTagNamesTemplateLineAndTag) {
  const Error e = error_of("line one\n\n{% foo %}\n");
  EXPECT_EQ(e.kind(), Error::Kind::kSyntax);
  EXPECT_STREQ(e.what(), "template 'chat_template' line 3: unknown tag 'foo'");
  EXPECT_EQ(e.template_name(), "chat_template");
  EXPECT_EQ(e.line(), 3);
  const Error in_block = error_of("line one\n{% if true %}\n{% foo %}\n{% endif %}");
  EXPECT_STREQ(in_block.what(),
               "template 'chat_template' line 3: unknown tag 'foo' (the 'if' block from line 2 expects 'elif' or "
               "'else' or 'endif')");
}

TEST(JinjaErrors, UnknownFilterAndTestAtCompileTime) {
  const Error f = error_of("\n\n{{ x | bogus }}");
  EXPECT_EQ(f.kind(), Error::Kind::kSyntax);
  EXPECT_STREQ(f.what(), "template 'chat_template' line 3: no filter named 'bogus'");
  const Error t = error_of("{% for x in y %}\n{{ x is frobbed }}{% endfor %}");
  EXPECT_STREQ(t.what(), "template 'chat_template' line 2: no test named 'frobbed'");
  // Inside an if, jinja2 only fails when the branch runs.
  EXPECT_TRUE(compiles("{% if false %}{{ x|bogus }}{% endif %}"));
  const Error r = error_of("{% if true %}\n{{ x|bogus }}{% endif %}");
  EXPECT_EQ(r.kind(), Error::Kind::kRuntime);
  EXPECT_EQ(r.line(), 2);
}

TEST(JinjaErrors, UnclosedAndMismatchedBlocks) {
  const Error e = error_of("a\n{% for m in messages %}\n{{ m }}\n");
  EXPECT_EQ(e.kind(), Error::Kind::kSyntax);
  EXPECT_NE(std::string(e.what()).find("'for' block from line 2 is not closed"), std::string::npos) << e.what();
  const Error m = error_of("{% for m in x %}\n{% endif %}");
  EXPECT_STREQ(m.what(),
               "template 'chat_template' line 2: unknown tag 'endif' (the 'for' block from line 1 expects 'endfor' or "
               "'else')");
  const Error n = error_of("{% if a %}{% for m in x %}\n{% endif %}{% endfor %}");
  EXPECT_STREQ(n.what(),
               "template 'chat_template' line 2: unexpected tag 'endif' (the 'for' block from line 1 expects 'endfor' "
               "or 'else')");
}

TEST(JinjaErrors, SyntaxErrorsPointAtTheirLine) {
  EXPECT_EQ(error_of("ok\n{{ 1 + }}").line(), 2);
  EXPECT_EQ(error_of("{{ 'a' }}\n\n{{ a ! b }}").line(), 3);
  EXPECT_EQ(error_of("{# a\ncomment #}\n{% break %}").line(), 3);
  const Error s = error_of("{% macro m(a=1, b) %}{% endmacro %}");
  EXPECT_NE(std::string(s.what()).find("non-default argument follows default argument"), std::string::npos);
  EXPECT_FALSE(compiles("{% include 'other.jinja' %}"));
  EXPECT_STREQ(error_of("{{ '\\N{BULLET}' }}").what(), "template 'chat_template' line 1: \\N{...} escapes are not supported");
  EXPECT_STREQ(error_of("{{ x|wordwrap }}").what(),
               "template 'chat_template' line 1: the jinja2 filter 'wordwrap' is not supported by this interpreter");
}

TEST(JinjaErrors, RaiseExceptionCarriesTheMessage) {
  const Error e = error_of("{% for m in messages %}\n{% if m.role == 'tool' %}{{ raise_exception('Unsupported role: ' ~ m.role) }}{% endif %}{% endfor %}",
                           {{"messages", {{{"role", "user"}}, {{"role", "tool"}}}}});
  EXPECT_EQ(e.kind(), Error::Kind::kRaised);
  EXPECT_EQ(e.message(), "Unsupported role: tool");
  EXPECT_EQ(e.line(), 2);
  EXPECT_STREQ(e.what(), "template 'chat_template' line 2: Unsupported role: tool");
}

TEST(JinjaErrors, RuntimeErrorsHaveKindsAndLines) {
  const Error t = error_of("a\nb\n{{ 'a' + 1 }}");
  EXPECT_EQ(t.kind(), Error::Kind::kType);
  EXPECT_EQ(t.line(), 3);
  EXPECT_NE(t.message().find("can only concatenate str"), std::string::npos);
  const Error u = error_of("{{ foo(1) }}");
  EXPECT_EQ(u.kind(), Error::Kind::kUndefined);
  EXPECT_EQ(u.message(), "'foo' is undefined");
  const Error a = error_of("{{ messages.x.y }}", {{"messages", nlohmann::ordered_json::object()}});
  EXPECT_EQ(a.kind(), Error::Kind::kUndefined);
  EXPECT_EQ(a.message(), "'dict object' has no attribute 'x'");
  const Error s = error_of("{{ xs.append(1) }}", {{"xs", {1}}});
  EXPECT_EQ(s.kind(), Error::Kind::kSecurity);
  const Error n = error_of("{% set ns = 1 %}{% set ns.a = 2 %}");
  EXPECT_EQ(n.message(), "cannot assign attribute on non-namespace object");
  const Error c = error_of("{% macro m(a) %}{% endmacro %}\n\n{{ m(1, 2) }}");
  EXPECT_EQ(c.line(), 3);
  EXPECT_EQ(c.message(), "macro 'm' takes not more than 1 argument(s)");
}

TEST(JinjaErrors, ContextMustBeAnObject) {
  Context ctx;
  ctx.variables = nlohmann::ordered_json::array();
  EXPECT_THROW(Template("x").render(ctx), Error);
}

TEST(JinjaErrors, MacroRecursionIsBounded) {
  const Error e = error_of("{% macro forever(n) %}{{ forever(n + 1) }}{% endmacro %}{{ forever(0) }}");
  EXPECT_EQ(e.kind(), Error::Kind::kRuntime);
  EXPECT_NE(e.message().find("maximum recursion depth exceeded"), std::string::npos) << e.what();
  // Legitimate recursion well inside the bound works.
  EXPECT_EQ(testing::render_text("{% macro count(n) %}{% if n > 0 %}{{ count(n - 1) }}{% endif %}{{ n }}{% endmacro %}{{ count(100)|length }}"),
            "193");
}

TEST(JinjaErrors, RecursiveLoopIsBounded) {
  const Error e = error_of("{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}");
  EXPECT_NE(e.message().find("maximum recursion depth exceeded"), std::string::npos) << e.what();
}

TEST(JinjaErrors, DeeplyNestedSourceIsAnError) {
  const size_t n = 100000;
  const std::vector<std::pair<std::string, std::string>> nestings = {{"(", ")"}, {"[", "]"}, {"{'a': ", "}"}, {"-", ""}, {"not ", ""}, {"f(", ")"}};
  for (const auto& [open, close] : nestings) {
    std::string src = "{{ ";
    for (size_t i = 0; i < n; ++i) src += open;
    src += "1";
    for (size_t i = 0; i < n; ++i) src += close;
    src += " }}";
    const Error e = error_of(src);
    EXPECT_EQ(e.kind(), Error::Kind::kSyntax) << open;
    EXPECT_NE(e.message().find("nested too deeply"), std::string::npos) << e.what();
  }
  std::string chain = "{{ x";
  for (size_t i = 0; i < n; ++i) chain += ".a";
  EXPECT_NE(error_of(chain + " }}").message().find("nested too deeply"), std::string::npos);
  std::string sum = "{{ 1";
  for (size_t i = 0; i < n; ++i) sum += " + 1";
  EXPECT_NE(error_of(sum + " }}").message().find("nested too deeply"), std::string::npos);
  std::string filters = "{{ x";
  for (size_t i = 0; i < n; ++i) filters += "|trim";
  EXPECT_NE(error_of(filters + " }}").message().find("nested too deeply"), std::string::npos);
  std::string ifs;
  for (size_t i = 0; i < n; ++i) ifs += "{% if true %}";
  EXPECT_NE(error_of(ifs).message().find("nested too deeply"), std::string::npos);
  // A flat concatenation of many terms is not nesting.
  std::string concat = "{{ 'a'";
  for (size_t i = 0; i < 10000; ++i) concat += " ~ 'a'";
  EXPECT_EQ(testing::render_text(concat + " }}").size(), 10001u);
}

TEST(JinjaErrors, DeeplyNestedValuesAreAnError) {
  // (nlohmann::json itself copies recursively, so the input stays at a depth it can handle.)
  Context deep_context;
  nlohmann::ordered_json* leaf = &deep_context.variables["x"];
  for (int i = 0; i < 5000; ++i) leaf = &(*leaf)["k"];
  *leaf = 1;
  EXPECT_THROW(Template("{{ x }}").render(deep_context), Error);
  const Error built = error_of("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}");
  EXPECT_NE(built.message().find("nested more than"), std::string::npos) << built.what();
  // Namespaces can refer to themselves: printing one is bounded, not infinite.
  const Error cycle = error_of("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}");
  EXPECT_NE(cycle.message().find("nested too deeply"), std::string::npos) << cycle.what();
  // A long chain of namespaces is fine to build, compare and free.
  EXPECT_EQ(testing::render_text("{% set ns = namespace(p=none) %}{% for i in range(50000) %}{% set ns.p = namespace(p=ns.p) %}{% endfor %}{{ ns.p == ns.p }}"),
            "True");
}

TEST(JinjaErrors, SizesAreBounded) {
  EXPECT_NE(error_of("{{ range(100001)|length }}").message().find("MAX_RANGE"), std::string::npos);
  EXPECT_NE(error_of("{{ ('x' * 1000000000000)|length }}").message().find("too large"), std::string::npos);
  EXPECT_NE(error_of("{{ 'x'|center(1000000000000) }}").message().find("too large"), std::string::npos);
  EXPECT_NE(error_of("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}")
                .message()
                .find("too large"),
            std::string::npos);
  EXPECT_NE(error_of("{{ '{99999999999999999999999}'.format() }}").message().find("Too many decimal digits"), std::string::npos);
  EXPECT_EQ(error_of("{{ 2 ** 64 }}").kind(), Error::Kind::kRuntime);  // Python would make a big int
}

}  // namespace
}  // namespace fptrain::jinja
