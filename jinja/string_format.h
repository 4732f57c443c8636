// Python's string formatting: the printf-style "%" operator (and the format
// filter), format(value, spec) as str.format applies it per field, and
// markupsafe's HTML escaping.
#pragma once

#include <string>
#include <string_view>

#include "jinja/value.h"

namespace fptrain::jinja {

// fmt % args: args is a tuple of values, a dict for %(name)s, or one value.
std::string percent_format(std::string_view fmt, const Value& args);
// format(value, spec), e.g. spec ">10", ".2f", "05d", "+,".
std::string format_value(const Value& value, std::string_view spec);
// markupsafe.escape: & < > " ' as entities.
std::string html_escape(std::string_view s);

}  // namespace fptrain::jinja
