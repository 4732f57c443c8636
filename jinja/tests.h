// Jinja tests (x is name(args)): defined, none, string, mapping, eq, in, ...
#pragma once

#include <string_view>

#include "jinja/value.h"

namespace fptrain::jinja {

using TestFn = bool (*)(Interpreter& interp, const Value& value, CallArgs& args);

// nullptr when there is no such test.
TestFn find_test(std::string_view name);

}  // namespace fptrain::jinja
