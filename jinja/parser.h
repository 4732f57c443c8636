// Tokens -> syntax tree, following jinja2's grammar and operator precedence
// (filters and tests bind tighter than any operator, unary minus binds
// tighter than **, comparisons chain). The statements are those of jinja2
// plus transformers' {% generation %} and the loopcontrols {% break %} /
// {% continue %}. After parsing, the checks jinja2's compiler makes run too:
// unknown filters and tests (outside if-conditions, where jinja2 defers them
// to render time), break/continue outside a loop.
#pragma once

#include <string>
#include <string_view>

#include "jinja/ast.h"

namespace fptrain::jinja {

// Throws Error(kSyntax) naming the template and line.
Program parse(std::string_view source, const std::string& template_name);

}  // namespace fptrain::jinja
