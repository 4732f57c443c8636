// The body of a string literal in a template, decoded as jinja2 does it: with
// Python's unicode-escape codec (\n, \t, \\, \', \xhh, \uhhhh, \Uhhhhhhhh, octal;
// unknown escapes such as \d stay as written; \N{NAME} is not supported).
#pragma once

#include <string>
#include <string_view>

namespace fptrain::jinja {

// `problem` is set (and the result incomplete) for a malformed escape.
std::string decode_string_literal(std::string_view body, std::string& problem);

}  // namespace fptrain::jinja
