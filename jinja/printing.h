// Python's str() and repr() of values, which is what {{ x }} prints and how
// lists and dicts look inside text: [1, 'a'], {'k': None}, 1e-05, True.
#pragma once

#include <string>
#include <string_view>

#include "jinja/tagged_string.h"
#include "jinja/value.h"

namespace fptrain::jinja {

TaggedString to_str(const Value& v);  // str(x); a string keeps its tags
void append_str(TaggedString& out, const Value& v);  // out += str(x), without copying strings
std::string repr(const Value& v);
std::string float_repr(double d);            // repr(float): 1.0, 0.1, 1e-05, inf
std::string string_repr(std::string_view s);  // repr(str): Python's choice of quotes and escapes

}  // namespace fptrain::jinja
