// Jinja filters (x|name(args)) as jinja2 3.1 defines them, with tojson as
// transformers overrides it (json.dumps with ensure_ascii=False and its
// indent / separators / sort_keys). Filters that keep or cut text keep the
// tags of what they keep (trim, replace, join, indent, default, string...).
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>

#include "jinja/value.h"

namespace fptrain::jinja {

using FilterFn = Value (*)(Interpreter& interp, const Value& value, CallArgs& args);
using FilterTable = std::unordered_map<std::string, FilterFn>;

// nullptr when there is no such filter.
FilterFn find_filter(std::string_view name);
// jinja2 filters this interpreter leaves out (wordwrap, groupby, pprint, random, ...).
bool is_unsupported_filter(std::string_view name);
// The error for a filter name that find_filter does not know.
std::string unknown_filter_message(const std::string& name);

// Helpers the filter files share.
void add_text_filters(FilterTable& table);
void add_sequence_filters(FilterTable& table);
// jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0 (item lookup first).
Value lookup_path(const Value& item, const Value& attribute);

}  // namespace fptrain::jinja
