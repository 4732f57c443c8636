// The filter table, and the filters on numbers and conversions.
#include "jinja/filters.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "jinja/access.h"
#include "jinja/args.h"
#include "jinja/json.h"
#include "jinja/methods.h"
#include "jinja/objects.h"
#include "jinja/utf8.h"

namespace fptrain::jinja {

namespace {

Value do_abs(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("abs", args, {});
  if (v.is_integral()) {
    if (v.as_int() == INT64_MIN) runtime_error("integer overflow");
    return Value::integer(std::llabs(v.as_int()));
  }
  if (v.is_float()) return Value::number(std::fabs(v.as_float()));
  type_error("bad operand type for abs(): '" + type_name(v) + "'");
}

// Like x.name, but never falls back to x["name"].
Value do_attr(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("attr", args, {"name"}, 1);
  if (v.is_undefined()) v.raise_undefined();
  if (!a[0].is_str()) type_error("attribute name must be string");
  const std::string& name = a[0].text();
  if (!name.empty() && name[0] == '_') return Value::undefined("'" + name + "' is not a safe attribute");
  if (v.is_object()) {
    if (auto attr = v.object().attribute(name)) return *attr;
  } else if (method_kind(v, name) != MethodKind::kNone) {
    return get_attr(v, name);
  }
  return Value::undefined("'" + type_name(v) + " object' has no attribute '" + name + "'");
}

Value do_default(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("default", args, {"default_value", "boolean"});
  if (v.is_undefined() || (truthy(a.get(1, Value::boolean(false))) && !truthy(v))) return a.get(0, Value::string(""));
  return v;
}

// Python's float(str): surrounding whitespace, underscores between digits, inf / nan.
std::optional<double> parse_float(std::string_view text) {
  std::string s(text.substr(utf8::leading_space(text)));
  s.resize(s.size() - utf8::trailing_space(s));
  std::string clean;
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) clean += s[i++];
  std::string rest = utf8::lower(s.substr(i));
  if (rest == "inf" || rest == "infinity" || rest == "nan") return std::strtod((clean + rest).c_str(), nullptr);
  bool digits = false, prev_digit = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c >= '0' && c <= '9') {
      clean += c;
      digits = prev_digit = true;
    } else if (c == '_' && prev_digit && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '9') {
      prev_digit = false;
    } else if (c == '.' || c == 'e' || c == 'E' || ((c == '+' || c == '-') && !clean.empty() && (clean.back() | 0x20) == 'e')) {
      clean += c;
      prev_digit = false;
    } else {
      return std::nullopt;
    }
  }
  if (!digits) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(clean.c_str(), &end);
  if (end == nullptr || *end != '\0') return std::nullopt;
  return d;
}

// Python's int(str, base).
std::optional<int64_t> parse_int(std::string_view text, int base) {
  std::string s(text.substr(utf8::leading_space(text)));
  s.resize(s.size() - utf8::trailing_space(s));
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  auto has_prefix = [&](char p) { return i + 1 < s.size() && s[i] == '0' && (s[i + 1] | 0x20) == p; };
  const char prefix = base == 16 ? 'x' : base == 8 ? 'o' : base == 2 ? 'b' : 0;
  if (base == 0) {
    base = has_prefix('x') ? 16 : has_prefix('o') ? 8 : has_prefix('b') ? 2 : 10;
    if (base != 10) i += 2;
  } else if (prefix && has_prefix(prefix)) {
    i += 2;
  }
  bool any = false, prev_digit = i > 0 && i == (negative || s[0] == '+' ? 3u : 2u);
  unsigned long long value = 0;
  for (; i < s.size(); ++i) {
    const char c = static_cast<char>(s[i] | 0x20);
    int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'z') ? c - 'a' + 10 : -1;
    if (s[i] == '_' && prev_digit && i + 1 < s.size()) {
      prev_digit = false;
      continue;
    }
    if (d < 0 || d >= base) return std::nullopt;
    if (value > (static_cast<unsigned long long>(INT64_MAX) - d) / base) runtime_error("integer too large");
    value = value * base + d;
    any = prev_digit = true;
  }
  if (!any) return std::nullopt;
  return negative ? -static_cast<int64_t>(value) : static_cast<int64_t>(value);
}

Value do_int(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("int", args, {"default", "base"});
  const Value fallback = a.get(0, Value::integer(0));
  if (v.is_undefined()) v.raise_undefined();  // Undefined.__int__ raises
  if (v.is_integral()) return Value::integer(v.as_int());
  if (v.is_float()) {
    const double d = v.as_float();
    if (std::isnan(d)) return fallback;
    if (std::isinf(d) || std::fabs(d) >= 9.2e18) runtime_error("cannot convert float to integer");
    return Value::integer(static_cast<int64_t>(d));
  }
  if (v.is_str()) {
    const Value base = a.get(1, Value::integer(10));
    if (!base.is_integral()) type_error("'" + type_name(base) + "' object cannot be interpreted as an integer");
    if (auto i = parse_int(v.text(), static_cast<int>(base.as_int()))) return Value::integer(*i);
    if (auto d = parse_float(v.text())) {
      if (std::isfinite(*d) && std::fabs(*d) < 9.2e18) return Value::integer(static_cast<int64_t>(*d));
    }
  }
  return fallback;
}

Value do_float(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("float", args, {"default"});
  if (v.is_undefined()) v.raise_undefined();  // Undefined.__float__ raises
  if (v.is_number()) return Value::number(v.as_float());
  if (v.is_str())
    if (auto d = parse_float(v.text())) return Value::number(*d);
  return a.get(0, Value::number(0.0));
}

// Python's round(x, n): correctly rounded, ties to even, on the exact binary value.
double round_float(double x, int64_t n) {
  if (!std::isfinite(x)) return x;
  if (n >= 0) {
    if (n > 300) return x;
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(n), x);
    return std::strtod(buf, nullptr);
  }
  const double scale = std::pow(10.0, static_cast<double>(-n));
  return std::nearbyint(x / scale) * scale;
}

Value do_round(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("round", args, {"precision", "method"});
  const Value precision = a.get(0, Value::integer(0));
  const std::string method = a.has(1) && a[1].is_str() ? a[1].text() : "common";
  if (method != "common" && method != "ceil" && method != "floor")
    runtime_error("method must be common, ceil or floor");
  if (!precision.is_integral()) type_error("'" + type_name(precision) + "' object cannot be interpreted as an integer");
  const int64_t n = precision.as_int();
  if (!v.is_number()) type_error("type " + type_name(v) + " doesn't define __round__ method");
  if (method == "common") {
    if (v.is_float()) return Value::number(round_float(v.as_float(), n));
    if (n >= 0) return Value::integer(v.as_int());
    int64_t scale = 1;
    for (int64_t k = 0; k < -n && scale < INT64_MAX / 10; ++k) scale *= 10;
    const int64_t x = v.as_int();
    int64_t q = x / scale, r = x % scale;
    if (r < 0) {
      r += scale;
      --q;
    }
    if (2 * r > scale || (2 * r == scale && (q & 1))) ++q;
    return Value::integer(q * scale);
  }
  const double scale = std::pow(10.0, static_cast<double>(n));
  const double scaled = v.as_float() * scale;
  return Value::number((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=...).
Value do_tojson(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = truthy(a.get(0, Value::boolean(false)));
  o.sort_keys = truthy(a.get(3, Value::boolean(false)));
  if (a.has(1) && !a[1].is_none()) {
    if (a[1].is_str())
      o.indent = a[1].text();
    else if (a[1].is_integral())
      o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, std::min<int64_t>(a[1].as_int(), 1000))), ' ');
    else
      type_error("indent must be an int or a str, not " + type_name(a[1]));
  }
  if (a.has(2) && !a[2].is_none()) {
    const std::vector<Value> seps = iterate(a[2]);
    if (seps.size() != 2 || !seps[0].is_str() || !seps[1].is_str())
      runtime_error("separators must be a pair of strings");
    o.item_separator = seps[0].text();
    o.key_separator = seps[1].text();
  }
  return Value::string(to_json(v, o));
}

Value do_items(Interpreter&, const Value& v, CallArgs& args) {
  BoundArgs a("items", args, {});
  if (v.is_undefined()) return Value::iterator({});
  if (!v.is_dict()) runtime_error("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [key, value] : v.dict().items()) out.push_back(Value::tuple({key, value}));
  return Value::iterator(std::move(out));
}

FilterTable make_table() {
  FilterTable t{
      {"abs", do_abs},     {"attr", do_attr},   {"d", do_default},   {"default", do_default},
      {"float", do_float}, {"int", do_int},     {"round", do_round}, {"tojson", do_tojson},
      {"items", do_items},
  };
  add_text_filters(t);
  add_sequence_filters(t);
  return t;
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  static const FilterTable table = make_table();
  auto it = table.find(std::string(name));
  return it == table.end() ? nullptr : it->second;
}

bool is_unsupported_filter(std::string_view name) {
  static const char* const kLeftOut[] = {"filesizeformat", "groupby", "pprint",  "random", "striptags",
                                         "urlencode",      "urlize",  "wordwrap", "xmlattr"};
  for (const char* n : kLeftOut)
    if (name == n) return true;
  return false;
}

std::string unknown_filter_message(const std::string& name) {
  if (is_unsupported_filter(name)) return "the jinja2 filter '" + name + "' is not supported by this interpreter";
  return "no filter named '" + name + "'";
}

Value lookup_path(const Value& item, const Value& attribute) {
  if (attribute.is_none()) return item;
  if (!attribute.is_str()) return get_item(item, attribute);
  Value v = item;
  const std::string& path = attribute.text();
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    v = get_item(v, digits ? Value::integer(std::strtoll(part.c_str(), nullptr, 10)) : Value::string(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

}  // namespace fptrain::jinja
