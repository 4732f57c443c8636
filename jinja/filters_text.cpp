// Filters on strings. Most convert the value with str() first (jinja2's
// soft_str); indent and truncate do not, as in jinja2. The tags of the
// characters that are kept survive.
#include "jinja/args.h"
#include "jinja/filters.h"
#include "jinja/operators.h"
#include "jinja/printing.h"
#include "jinja/str_ops.h"
#include "jinja/string_format.h"
#include "jinja/utf8.h"

namespace fptrain::jinja {

namespace {

int64_t int_param(const BoundArgs& a, size_t i, int64_t fallback, const char* what) {
  if (!a.has(i)) return fallback;
  if (!a[i].is_integral()) type_error(std::string(what) + " must be an integer, not " + type_name(a[i]));
  return a[i].as_int();
}

Value keep_markup(const Value& original, TaggedString s) { return Value::string(std::move(s), original.is_markup()); }

Value do_trim(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("trim", args, {"chars"});
  std::optional<std::string> chars;
  if (a.has(0) && !a[0].is_none()) {
    if (!a[0].is_str()) type_error("strip arg must be None or str");
    chars = a[0].text();
  }
  return keep_markup(v, py_strip(to_str(v), chars, true, true));
}

Value do_upper(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("upper", args, {});
  const TaggedString s = to_str(v);
  return keep_markup(v, retag(s, utf8::upper(s.text())));
}

Value do_lower(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("lower", args, {});
  const TaggedString s = to_str(v);
  return keep_markup(v, retag(s, utf8::lower(s.text())));
}

Value do_capitalize(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("capitalize", args, {});
  const TaggedString s = to_str(v);
  return keep_markup(v, retag(s, py_capitalize(s.text())));
}

// jinja2's title: each run of word characters, and each run of "-", spaces,
// "(", "{", "[", "<", gets its first character upper-cased and the rest lowered.
Value do_title(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("title", args, {});
  const TaggedString s = to_str(v);
  const std::string& t = s.text();
  std::string out;
  bool in_sep = false, first = true;
  for (size_t i = 0; i < t.size();) {
    const char32_t c = utf8::decode(t, i);
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || utf8::is_space(c);
    if (first || sep != in_sep)
      utf8::append_upper(c, out);
    else
      utf8::append_lower(c, out);
    in_sep = sep;
    first = false;
  }
  return keep_markup(v, retag(s, std::move(out)));
}

Value do_string(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("string", args, {});
  if (v.is_str()) return v;
  return Value::string(to_str(v));
}

Value do_safe(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("safe", args, {});
  return Value::string(to_str(v), true);
}

Value do_escape(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("escape", args, {});
  if (v.is_markup()) return v;
  return Value::string(TaggedString(html_escape(to_str(v).text())), true);
}

Value do_forceescape(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("forceescape", args, {});
  return Value::string(TaggedString(html_escape(to_str(v).text())), true);
}

Value do_replace(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("replace", args, {"old", "new", "count"}, 2);
  const int64_t count = a.has(2) && !a[2].is_none() ? int_param(a, 2, -1, "count") : -1;
  return Value::string(py_replace(to_str(v), to_str(a[0]).text(), to_str(a[1]), count));
}

Value do_center(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("center", args, {"width"});
  return Value::string(py_pad(to_str(v), int_param(a, 0, 80, "width"), '^', " "));
}

Value do_indent(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("indent", args, {"width", "first", "blank"});
  TaggedString indention;
  if (a.has(0) && a[0].is_str()) {
    indention = a[0].str();
  } else {
    const int64_t width = std::max<int64_t>(0, int_param(a, 0, 4, "width"));
    check_size(static_cast<double>(width));
    indention = TaggedString(std::string(static_cast<size_t>(width), ' '));
  }
  const bool first = truthy(a.get(1, Value::boolean(false)));
  const bool blank = truthy(a.get(2, Value::boolean(false)));
  if (v.is_undefined()) v.raise_undefined();
  if (!v.is_str()) type_error("unsupported operand type(s) for +=: '" + type_name(v) + "' and 'str'");  // no str() here
  TaggedString s = v.str();
  s.append("\n");  // jinja2's quirk, so that splitlines keeps a last empty line
  const std::vector<TaggedString> lines = py_splitlines(s, false);
  TaggedString out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out.append("\n");
      if (blank || !lines[i].empty()) out.append(indention);
    }
    out.append(lines[i]);
  }
  if (first) {
    TaggedString with_first = indention;
    with_first.append(out);
    return Value::string(std::move(with_first));
  }
  return Value::string(std::move(out));
}

Value do_truncate(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("truncate", args, {"length", "killwords", "end", "leeway"});
  const int64_t length = int_param(a, 0, 255, "length");
  const bool killwords = truthy(a.get(1, Value::boolean(false)));
  const TaggedString end = to_str(a.get(2, Value::string("...")));
  const int64_t leeway = a.has(3) && !a[3].is_none() ? int_param(a, 3, 5, "leeway") : 5;
  const auto end_len = static_cast<int64_t>(utf8::length(end.text()));
  if (length < end_len) runtime_error("expected length >= " + std::to_string(end_len) + ", got " + std::to_string(length));
  if (leeway < 0) runtime_error("expected leeway >= 0, got " + std::to_string(leeway));
  // No str() first: a short enough value of any type comes back unchanged, an int has no len().
  if (jinja::length(v) <= length + leeway) return v;
  if (!v.is_str()) type_error("truncate needs a string, not " + type_name(v));
  const Value& s = v;
  TaggedString kept = py_slice_str(s.str_data(), std::nullopt, length - end_len, std::nullopt);
  if (!killwords) kept = py_rsplit(kept, std::string(" "), 1).front();
  kept.append(end);
  return Value::string(std::move(kept));
}

Value do_wordcount(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("wordcount", args, {});
  const std::string t = to_str(v).text();
  int64_t n = 0;
  bool in_word = false;
  for (size_t i = 0; i < t.size();) {
    const bool word = utf8::is_word(utf8::decode(t, i));
    if (word && !in_word) ++n;
    in_word = word;
  }
  return Value::integer(n);
}

Value do_format(Interpreter&, const Value& v, CallArgs& args) {
  if (!args.positional.empty() && !args.keyword.empty())
    runtime_error("can't handle positional and keyword arguments at the same time");
  Value params;
  if (!args.keyword.empty()) {
    DictData d;
    for (const auto& [k, val] : args.keyword) d.set(Value::string(k), val);
    params = Value::dict(std::move(d));
  } else {
    params = Value::tuple(args.positional);
  }
  return Value::string(TaggedString(percent_format(to_str(v).text(), params)), v.is_markup());
}

}  // namespace

void add_text_filters(FilterTable& t) {
  t["trim"] = do_trim;
  t["upper"] = do_upper;
  t["lower"] = do_lower;
  t["capitalize"] = do_capitalize;
  t["title"] = do_title;
  t["string"] = do_string;
  t["safe"] = do_safe;
  t["e"] = do_escape;
  t["escape"] = do_escape;
  t["forceescape"] = do_forceescape;
  t["replace"] = do_replace;
  t["center"] = do_center;
  t["indent"] = do_indent;
  t["truncate"] = do_truncate;
  t["wordcount"] = do_wordcount;
  t["format"] = do_format;
}

}  // namespace fptrain::jinja
