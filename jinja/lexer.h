// Source text -> tokens, reproducing jinja2's lexer as transformers configures
// it: trim_blocks (a newline after a block or comment tag is dropped),
// lstrip_blocks (spaces before a block or comment tag at the start of a line
// are dropped), "-" and "+" whitespace control on tags, {% raw %}, and one
// trailing newline of the source dropped (keep_trailing_newline=False).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fptrain::jinja {

enum class TokenType {
  kData,           // template text (value)
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,           // identifier (value)
  kString,         // string literal, escapes decoded (value)
  kInteger,        // int_value
  kFloat,          // float_value
  kOperator,       // value: "+", "//", "(", "==", ...
  kEof,
};

struct Token {
  TokenType type;
  std::string value;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
};

// Throws Error(kSyntax), located in `template_name`.
std::vector<Token> tokenize(std::string_view source, const std::string& template_name);

// "end of template", "'foo'", "'+'": how error messages name a token.
std::string describe(const Token& token);

}  // namespace fptrain::jinja
