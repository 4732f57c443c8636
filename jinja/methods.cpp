#include "jinja/methods.h"

#include <algorithm>
#include <array>

#include "jinja/access.h"
#include "jinja/args.h"
#include "jinja/operators.h"
#include "jinja/printing.h"
#include "jinja/str_ops.h"
#include "jinja/string_format.h"
#include "jinja/utf8.h"

namespace fptrain::jinja {

namespace {

// Python's method names, so lookups find exactly what Python's getattr finds.
constexpr std::array<std::string_view, 47> kStrMethods = {
    "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format",
    "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower",
    "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "maketrans",
    "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit",
    "rstrip", "split", "splitlines", "startswith", "strip", "swapcase", "title", "translate", "upper", "zfill"};
constexpr std::array<std::string_view, 6> kDictSafe = {"copy", "fromkeys", "get", "items", "keys", "values"};
constexpr std::array<std::string_view, 5> kDictUnsafe = {"clear", "pop", "popitem", "setdefault", "update"};
constexpr std::array<std::string_view, 3> kListSafe = {"copy", "count", "index"};
constexpr std::array<std::string_view, 8> kListUnsafe = {"append", "clear", "extend", "insert",
                                                         "pop",    "remove", "reverse", "sort"};

template <size_t N>
bool in(const std::array<std::string_view, N>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::optional<std::string> opt_str(const BoundArgs& a, size_t i, const std::string& fn) {
  if (!a.has(i) || a[i].is_none()) return std::nullopt;
  if (!a[i].is_str()) type_error(fn + " arg must be None or str");
  return a[i].text();
}

std::optional<int64_t> opt_int(const BoundArgs& a, size_t i) {
  if (!a.has(i) || a[i].is_none()) return std::nullopt;
  if (!a[i].is_integral()) type_error("slice indices must be integers or None or have an __index__ method");
  return a[i].as_int();
}

int64_t int_arg(const BoundArgs& a, size_t i, int64_t fallback) {
  if (!a.has(i)) return fallback;
  if (!a[i].is_integral()) type_error("'" + type_name(a[i]) + "' object cannot be interpreted as an integer");
  return a[i].as_int();
}

const Value& str_arg(const BoundArgs& a, size_t i, const std::string& fn) {
  if (!a[i].is_str()) type_error(fn + "() argument must be str, not " + type_name(a[i]));
  return a[i];
}

Value strings(std::vector<TaggedString> parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (TaggedString& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::list(std::move(out));
}

bool all_chars(std::string_view s, bool (*pred)(char32_t)) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size();)
    if (!pred(utf8::decode(s, i))) return false;
  return true;
}

// startswith / endswith with a str or a tuple of str.
bool affix_match(const Value& self, const BoundArgs& a, bool prefix, const std::string& fn) {
  const TaggedString part = py_slice_str(self.str_data(), opt_int(a, 1), opt_int(a, 2), std::nullopt);
  std::vector<Value> options;
  if (a[0].is_list() && a[0].seq_kind() == SeqKind::kTuple)
    options = a[0].items();
  else
    options.push_back(a[0]);
  for (const Value& o : options) {
    if (!o.is_str()) type_error(fn + " first arg must be str or a tuple of str, not " + type_name(o));
    const std::string& t = part.text();
    const std::string& x = o.text();
    if (x.size() <= t.size() && (prefix ? t.compare(0, x.size(), x) == 0 : t.compare(t.size() - x.size(), x.size(), x) == 0))
      return true;
  }
  return false;
}

// str.format: {} {0} {name} fields with .attr / [key] chains, !r / !s and a format spec.
std::string dot_format(std::string_view fmt, const CallArgs& args, int depth = 0) {
  if (depth > 2) runtime_error("Max string recursion exceeded");
  std::string out;
  int auto_index = 0;
  bool manual = false;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      runtime_error("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    // The field runs to the matching '}' (nested braces belong to the spec).
    size_t j = i + 1;
    int nesting = 1;
    for (; j < fmt.size(); ++j) {
      if (fmt[j] == '{') ++nesting;
      if (fmt[j] == '}' && --nesting == 0) break;
    }
    if (j >= fmt.size()) runtime_error("expected '}' before end of string");
    std::string_view field = fmt.substr(i + 1, j - i - 1);
    i = j;
    std::string spec;
    const size_t colon = field.find(':');
    if (colon != std::string_view::npos) {
      spec = dot_format(field.substr(colon + 1), args, depth + 1);
      field = field.substr(0, colon);
    }
    char conversion = 0;
    const size_t bang = field.find('!');
    if (bang != std::string_view::npos) {
      if (bang + 2 != field.size()) runtime_error("expected ':' after conversion specifier");
      conversion = field[bang + 1];
      field = field.substr(0, bang);
    }
    const size_t head_end = std::min(field.find('.'), field.find('['));
    const std::string head(field.substr(0, head_end));
    Value v;
    if (head.empty() || std::all_of(head.begin(), head.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      size_t index;
      if (head.empty()) {
        if (manual) runtime_error("cannot switch from manual field specification to automatic field numbering");
        index = static_cast<size_t>(auto_index++);
      } else {
        if (auto_index > 0) runtime_error("cannot switch from automatic field numbering to manual field specification");
        manual = true;
        if (head.size() > 9) runtime_error("Too many decimal digits in format string");
        index = std::stoul(head);
      }
      if (index >= args.positional.size())
        runtime_error("Replacement index " + std::to_string(index) + " out of range for positional args tuple");
      v = args.positional[index];
    } else {
      auto it = std::find_if(args.keyword.begin(), args.keyword.end(), [&](const auto& kw) { return kw.first == head; });
      if (it == args.keyword.end()) runtime_error("KeyError: '" + head + "'");
      v = it->second;
    }
    for (size_t k = head_end; k < field.size();) {
      if (field[k] == '.') {
        const size_t end = std::min(field.find('.', k + 1), field.find('[', k + 1));
        v = get_attr(v, std::string(field.substr(k + 1, end - k - 1)));
        k = end;
      } else {
        const size_t close = field.find(']', k);
        if (close == std::string_view::npos) runtime_error("Missing ']' in format string");
        const std::string key(field.substr(k + 1, close - k - 1));
        const bool numeric = !key.empty() && key.size() <= 18 &&
                             std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
        v = get_item(v, numeric ? Value::integer(std::stoll(key)) : Value::string(key));
        k = close + 1;
      }
    }
    if (conversion == 'r' || conversion == 'a')
      v = Value::string(repr(v));
    else if (conversion == 's')
      v = Value::string(to_str(v));
    else if (conversion != 0)
      runtime_error(std::string("Unknown conversion specifier ") + conversion);
    out += format_value(v, spec);
  }
  return out;
}

Value str_method(const Value& self, const std::string& name, CallArgs& args) {
  const TaggedString& s = self.str();
  const std::string& t = s.text();
  const char* fn = name.c_str();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    BoundArgs a(fn, args, {"chars"});
    return Value::string(py_strip(s, opt_str(a, 0, name), name != "rstrip", name != "lstrip"));
  }
  if (name == "startswith" || name == "endswith") {
    BoundArgs a(fn, args, {"prefix", "start", "end"}, 1);
    return Value::boolean(affix_match(self, a, name == "startswith", name));
  }
  if (name == "split" || name == "rsplit") {
    BoundArgs a(fn, args, {"sep", "maxsplit"});
    const auto sep = opt_str(a, 0, name);
    const int64_t maxsplit = int_arg(a, 1, -1);
    return strings(name == "split" ? py_split(s, sep, maxsplit) : py_rsplit(s, sep, maxsplit));
  }
  if (name == "splitlines") {
    BoundArgs a(fn, args, {"keepends"});
    return strings(py_splitlines(s, truthy(a.get(0, Value::boolean(false)))));
  }
  if (name == "upper" || name == "lower" || name == "casefold" || name == "title" || name == "capitalize" ||
      name == "swapcase") {
    BoundArgs a(fn, args, {});
    std::string out = name == "upper"      ? utf8::upper(t)
                      : name == "title"    ? py_title(t)
                      : name == "capitalize" ? py_capitalize(t)
                      : name == "swapcase" ? py_swapcase(t)
                                           : utf8::lower(t);
    return Value::string(retag(s, std::move(out)));
  }
  if (name == "replace") {
    BoundArgs a(fn, args, {"old", "new", "count"}, 2);
    return Value::string(py_replace(s, str_arg(a, 0, name).text(), str_arg(a, 1, name).str(), int_arg(a, 2, -1)));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    BoundArgs a(fn, args, {"sub", "start", "end"}, 1);
    const std::string& sub = str_arg(a, 0, name).text();
    if (name == "count") return Value::integer(py_count(self.str_data(), sub, opt_int(a, 1), opt_int(a, 2)));
    const bool reverse = name == "rfind" || name == "rindex";
    const int64_t at = py_find(self.str_data(), sub, opt_int(a, 1), opt_int(a, 2), reverse);
    if (at < 0 && (name == "index" || name == "rindex")) runtime_error("substring not found");
    return Value::integer(at);
  }
  if (name == "join") {
    BoundArgs a(fn, args, {"iterable"}, 1);
    std::vector<TaggedString> parts;
    for (const Value& item : iterate(a[0])) {
      if (!item.is_str())
        type_error("sequence item " + std::to_string(parts.size()) + ": expected str instance, " + type_name(item) + " found");
      parts.push_back(item.str());
    }
    return Value::string(py_join(s, parts));
  }
  if (name == "format") return Value::string(dot_format(t, args));
  if (name == "center" || name == "ljust" || name == "rjust") {
    BoundArgs a(fn, args, {"width", "fillchar"}, 1);
    std::string fill = " ";
    if (a.has(1)) {
      if (!a[1].is_str() || utf8::length(a[1].text()) != 1) type_error("The fill character must be exactly one character long");
      fill = a[1].text();
    }
    return Value::string(py_pad(s, int_arg(a, 0, 0), name == "center" ? '^' : name == "ljust" ? '<' : '>', fill));
  }
  if (name == "zfill") {
    BoundArgs a(fn, args, {"width"}, 1);
    const int64_t width = int_arg(a, 0, 0);
    const bool sign = !t.empty() && (t[0] == '+' || t[0] == '-');
    TaggedString body = py_pad(s.substr(sign ? 1 : 0), width - (sign ? 1 : 0), '>', "0");
    TaggedString out = s.substr(0, sign ? 1 : 0);
    out.append(body);
    return Value::string(std::move(out));
  }
  if (name == "partition" || name == "rpartition") {
    BoundArgs a(fn, args, {"sep"}, 1);
    const std::string& sep = str_arg(a, 0, name).text();
    if (sep.empty()) runtime_error("empty separator");
    const size_t pos = name == "partition" ? t.find(sep) : t.rfind(sep);
    if (pos == std::string::npos) {
      std::vector<Value> parts{Value::string(s), Value::string(""), Value::string("")};
      if (name == "rpartition") std::reverse(parts.begin(), parts.end());
      return Value::tuple(std::move(parts));
    }
    return Value::tuple({Value::string(s.substr(0, pos)), Value::string(s.substr(pos, sep.size())),
                         Value::string(s.substr(pos + sep.size()))});
  }
  if (name == "removeprefix" || name == "removesuffix") {
    BoundArgs a(fn, args, {"affix"}, 1);
    const std::string& x = str_arg(a, 0, name).text();
    if (x.size() > t.size()) return self;
    if (name == "removeprefix") return t.compare(0, x.size(), x) == 0 ? Value::string(s.substr(x.size())) : self;
    return t.compare(t.size() - x.size(), x.size(), x) == 0 ? Value::string(s.substr(0, t.size() - x.size())) : self;
  }
  if (name == "expandtabs") {
    BoundArgs a(fn, args, {"tabsize"});
    const int64_t tab = int_arg(a, 0, 8);
    std::string out;
    int64_t column = 0;
    for (size_t i = 0; i < t.size();) {
      const size_t start = i;
      const char32_t c = utf8::decode(t, i);
      if (c == '\t') {
        if (tab > 0) {
          const int64_t n = tab - column % tab;
          check_size(static_cast<double>(out.size()) + static_cast<double>(n));
          out.append(static_cast<size_t>(n), ' ');
          column += n;
        }
      } else {
        out.append(t, start, i - start);
        column = (c == '\n' || c == '\r') ? 0 : column + 1;
      }
    }
    return Value::string(std::move(out));
  }
  BoundArgs none(fn, args, {});
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") return Value::boolean(all_chars(t, utf8::is_digit));
  if (name == "isalpha") return Value::boolean(all_chars(t, utf8::is_alpha));
  if (name == "isalnum") return Value::boolean(all_chars(t, utf8::is_alnum));
  if (name == "isspace") return Value::boolean(all_chars(t, utf8::is_space));
  if (name == "isascii") return Value::boolean(self.str_data().ascii);
  if (name == "islower") return Value::boolean(py_islower(t));
  if (name == "isupper") return Value::boolean(py_isupper(t));
  if (name == "istitle") return Value::boolean(!t.empty() && py_title(t) == t && (py_isupper(t) || !py_islower(t)));
  runtime_error("str." + name + "() is not supported");
}

Value dict_method(const Value& self, const std::string& name, CallArgs& args) {
  const char* fn = name.c_str();
  if (name == "items" || name == "keys" || name == "values") {
    BoundArgs a(fn, args, {});
    std::vector<Value> out;
    for (const auto& [k, v] : self.dict().items())
      out.push_back(name == "items" ? Value::tuple({k, v}) : name == "keys" ? k : v);
    return Value::list(std::move(out), name == "items" ? SeqKind::kDictItems : name == "keys" ? SeqKind::kDictKeys
                                                                                             : SeqKind::kDictValues);
  }
  if (name == "get") {
    BoundArgs a(fn, args, {"key", "default"}, 1);
    no_keywords(fn, args);
    if (const Value* v = self.dict().find(a[0])) return *v;
    return a.get(1, Value::none());
  }
  if (name == "copy") {
    BoundArgs a(fn, args, {});
    return self;  // dicts are immutable here: sharing is a copy
  }
  BoundArgs a(fn, args, {"iterable", "value"}, 1);  // fromkeys
  DictData d;
  for (const Value& k : iterate(a[0])) d.set(k, a.get(1, Value::none()));
  return Value::dict(std::move(d));
}

Value sequence_method(const Value& self, const std::string& name, CallArgs& args) {
  const char* fn = name.c_str();
  const auto& items = self.items();
  if (name == "count") {
    BoundArgs a(fn, args, {"value"}, 1);
    return Value::integer(std::count_if(items.begin(), items.end(), [&](const Value& v) { return py_equal(v, a[0]); }));
  }
  if (name == "index") {
    BoundArgs a(fn, args, {"value", "start", "stop"}, 1);
    int64_t first = 0;
    const int64_t n = slice_indices(static_cast<int64_t>(items.size()), opt_int(a, 1), opt_int(a, 2), 1, first);
    for (int64_t i = first; i < first + n; ++i)
      if (py_equal(items[static_cast<size_t>(i)], a[0])) return Value::integer(i);
    runtime_error(repr(a[0]) + " is not in " + type_name(self));
  }
  BoundArgs a(fn, args, {});  // copy
  return Value::list(items, SeqKind::kList);
}

}  // namespace

MethodKind method_kind(const Value& self, std::string_view name) {
  switch (self.type()) {
    case Type::kStr: return in(kStrMethods, name) ? MethodKind::kSafe : MethodKind::kNone;
    case Type::kDict:
      if (in(kDictSafe, name)) return MethodKind::kSafe;
      return in(kDictUnsafe, name) ? MethodKind::kUnsafe : MethodKind::kNone;
    case Type::kList:
      if (self.seq_kind() == SeqKind::kList) {
        if (in(kListSafe, name)) return MethodKind::kSafe;
        return in(kListUnsafe, name) ? MethodKind::kUnsafe : MethodKind::kNone;
      }
      if (self.seq_kind() == SeqKind::kTuple && (name == "count" || name == "index")) return MethodKind::kSafe;
      return MethodKind::kNone;
    default: return MethodKind::kNone;
  }
}

Value call_method(Interpreter&, const Value& self, const std::string& name, CallArgs& args) {
  if (self.is_str()) return str_method(self, name, args);
  if (self.is_dict()) return dict_method(self, name, args);
  if (self.is_list()) return sequence_method(self, name, args);
  type_error("'" + type_name(self) + "' object has no attribute '" + name + "'");
}

}  // namespace fptrain::jinja
