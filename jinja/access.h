// x.name and x[key] as jinja2's sandbox resolves them: attribute first then
// item for x.name (so dict.items is the method even when the dict has an
// "items" key), item first then attribute for x[key]; a miss is undefined,
// never an error, and attributes the sandbox forbids (list.append,
// underscores) are undefined values that raise SecurityError when used.
#pragma once

#include <optional>
#include <string>

#include "jinja/value.h"

namespace fptrain::jinja {

Value get_attr(const Value& object, const std::string& name);
Value get_item(const Value& object, const Value& key);
// object[start:stop:step] (parts not given are null). Unlike x[key], a failure is an error: jinja2
// compiles slices to plain Python subscripts.
Value get_slice(const Value& object, const Value* start, const Value* stop, const Value* step);

}  // namespace fptrain::jinja
