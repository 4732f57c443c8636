// The Python methods of str, dict, list and tuple that templates call, e.g.
// message.content.strip(), text.split('\n'), tool.get('name'), d.items().
// Methods that would mutate a list or dict exist (so `x.append` is found) but
// are unsafe: the sandbox turns them into a SecurityError when used.
#pragma once

#include <string>
#include <string_view>

#include "jinja/value.h"

namespace fptrain::jinja {

enum class MethodKind { kNone, kSafe, kUnsafe };

MethodKind method_kind(const Value& self, std::string_view name);
Value call_method(Interpreter& interp, const Value& self, const std::string& name, CallArgs& args);

}  // namespace fptrain::jinja
