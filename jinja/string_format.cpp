#include "jinja/string_format.h"

#include <cmath>
#include <cstdio>
#include <optional>

#include "jinja/printing.h"
#include "jinja/utf8.h"

namespace fptrain::jinja {

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

[[noreturn]] void value_error(const std::string& message) { runtime_error(message); }

std::string digits_in_base(uint64_t v, int base, bool upper) {
  if (v == 0) return "0";
  const char* chars = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  std::string out;
  while (v) {
    out.insert(out.begin(), chars[v % base]);
    v /= base;
  }
  return out;
}

uint64_t magnitude(int64_t v) { return v < 0 ? uint64_t(0) - static_cast<uint64_t>(v) : static_cast<uint64_t>(v); }

// Inserts `sep` every three digits of an integer digit string.
std::string group_digits(const std::string& digits, char sep) {
  std::string out;
  const size_t n = digits.size();
  for (size_t i = 0; i < n; ++i) {
    if (i > 0 && (n - i) % 3 == 0) out += sep;
    out += digits[i];
  }
  return out;
}

// printf's rendering of a double with the given conversion ('e', 'f', 'g' ...).
std::string c_float(double d, char type, int precision, bool alternate) {
  char spec[16];
  std::snprintf(spec, sizeof(spec), alternate ? "%%#.%d%c" : "%%.%d%c", precision, type);
  char buf[512];
  const int n = std::snprintf(buf, sizeof(buf), spec, d);
  if (n < 0) return "";
  if (static_cast<size_t>(n) < sizeof(buf)) return std::string(buf, n);
  std::string big(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(big.data(), big.size(), spec, d);
  big.resize(n);
  return big;
}

std::string pad(const std::string& body, size_t width, char align, char fill) {
  const size_t len = utf8::length(body);
  if (len >= width) return body;
  const size_t total = width - len;
  std::string fill_text;
  utf8::encode(static_cast<unsigned char>(fill), fill_text);
  auto repeat = [&](size_t n) {
    std::string s;
    for (size_t i = 0; i < n; ++i) s += fill_text;
    return s;
  };
  if (align == '<') return body + repeat(total);
  if (align == '^') return repeat(total / 2) + body + repeat(total - total / 2);
  return repeat(total) + body;
}

// ---- "%" ----------------------------------------------------------------------

struct PercentSpec {
  bool left = false, plus = false, space = false, alternate = false, zero = false;
  int width = -1, precision = -1;
};

std::string apply_int_format(int64_t v, char type, const PercentSpec& s) {
  const int base = type == 'o' ? 8 : (type == 'x' || type == 'X') ? 16 : 10;
  std::string digits = digits_in_base(magnitude(v), base, type == 'X');
  if (s.precision > 0 && static_cast<int>(digits.size()) < s.precision)
    digits.insert(0, static_cast<size_t>(s.precision) - digits.size(), '0');
  std::string prefix = v < 0 ? "-" : s.plus ? "+" : s.space ? " " : "";
  if (s.alternate && base == 8) prefix += "0o";
  if (s.alternate && base == 16) prefix += type == 'X' ? "0X" : "0x";
  const size_t len = prefix.size() + digits.size();
  if (s.width > 0 && len < static_cast<size_t>(s.width)) {
    const size_t n = static_cast<size_t>(s.width) - len;
    if (s.left) return prefix + digits + std::string(n, ' ');
    if (s.zero) return prefix + std::string(n, '0') + digits;
    return std::string(n, ' ') + prefix + digits;
  }
  return prefix + digits;
}

std::string apply_float_format(double d, char type, const PercentSpec& s) {
  std::string body = c_float(std::fabs(d), type, s.precision < 0 ? 6 : s.precision, s.alternate);
  const bool neg = std::signbit(d) && !std::isnan(d);
  const std::string sign = neg ? "-" : s.plus ? "+" : s.space ? " " : "";
  const size_t len = sign.size() + body.size();
  if (s.width > 0 && len < static_cast<size_t>(s.width)) {
    const size_t n = static_cast<size_t>(s.width) - len;
    if (s.left) return sign + body + std::string(n, ' ');
    if (s.zero && std::isfinite(d)) return sign + std::string(n, '0') + body;
    return std::string(n, ' ') + sign + body;
  }
  return sign + body;
}

std::string percent_one(const Value& v, char type, const PercentSpec& s) {
  switch (type) {
    case 's':
    case 'r':
    case 'a': {
      std::string text = type == 's' ? to_str(v).text() : repr(v);
      if (s.precision >= 0) {
        const auto offs = utf8::offsets(text);
        if (static_cast<size_t>(s.precision) < offs.size() - 1) text.resize(offs[s.precision]);
      }
      return s.width > 0 ? pad(text, static_cast<size_t>(s.width), s.left ? '<' : '>', ' ') : text;
    }
    case 'd':
    case 'i':
    case 'u':
      if (v.is_integral()) return apply_int_format(v.as_int(), 'd', s);
      if (v.is_float()) {
        if (!std::isfinite(v.as_float())) runtime_error("cannot convert float to integer");
        return apply_int_format(static_cast<int64_t>(v.as_float()), 'd', s);
      }
      type_error(std::string("%") + type + " format: a real number is required, not " + type_name(v));
    case 'o':
    case 'x':
    case 'X':
      if (v.is_integral()) return apply_int_format(v.as_int(), type, s);
      type_error(std::string("%") + type + " format: an integer is required, not " + type_name(v));
    case 'e':
    case 'E':
    case 'f':
    case 'F':
    case 'g':
    case 'G':
      if (v.is_number()) return apply_float_format(v.as_float(), type, s);
      type_error("must be real number, not " + type_name(v));
    case 'c':
      if (v.is_integral()) {
        std::string out;
        utf8::encode(static_cast<char32_t>(v.as_int()), out);
        return out;
      }
      if (v.is_str() && utf8::length(v.text()) == 1) return v.text();
      type_error("%c requires int or char");
    default: break;
  }
  value_error(std::string("unsupported format character '") + type + "'");
}

}  // namespace

std::string percent_format(std::string_view fmt, const Value& args) {
  const bool is_tuple = args.is_list() && args.seq_kind() == SeqKind::kTuple;
  const bool is_mapping = args.is_dict();
  std::vector<Value> positional;
  if (is_tuple)
    positional = args.items();
  else
    positional.push_back(args);
  size_t next_arg = 0;
  auto take = [&]() -> const Value& {
    if (next_arg >= positional.size()) type_error("not enough arguments for format string");
    return positional[next_arg++];
  };
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) value_error("incomplete format");
    const Value* mapped = nullptr;
    if (fmt[i] == '(') {
      const size_t close = fmt.find(')', i);
      if (close == std::string_view::npos) value_error("incomplete format key");
      if (!is_mapping) type_error("format requires a mapping");
      mapped = args.dict().find(std::string_view(fmt.substr(i + 1, close - i - 1)));
      if (mapped == nullptr) fail(Error::Kind::kRuntime, "KeyError: '" + std::string(fmt.substr(i + 1, close - i - 1)) + "'");
      i = close + 1;
    }
    PercentSpec s;
    for (; i < fmt.size(); ++i) {
      const char c = fmt[i];
      if (c == '-') s.left = true;
      else if (c == '+') s.plus = true;
      else if (c == ' ') s.space = true;
      else if (c == '#') s.alternate = true;
      else if (c == '0') s.zero = true;
      else break;
    }
    auto number = [&](int& target) {
      if (i < fmt.size() && fmt[i] == '*') {
        const Value& w = take();
        if (!w.is_integral()) type_error("* wants int");
        target = static_cast<int>(std::max<int64_t>(-100000, std::min<int64_t>(w.as_int(), 100000)));
        ++i;
        return;
      }
      if (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') {
        target = 0;
        while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') target = std::min(target * 10 + (fmt[i++] - '0'), 100000);
      }
    };
    number(s.width);
    if (s.width < 0 && s.width != -1) {
      s.left = true;
      s.width = -s.width;
    }
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      s.precision = 0;
      number(s.precision);
    }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) value_error("incomplete format");
    const char type = fmt[i];
    if (type == '%') {
      out += '%';
      continue;
    }
    out += percent_one(mapped ? *mapped : take(), type, s);
  }
  // Python skips this check for anything subscriptable but a tuple or str (dicts, lists).
  const bool mapping_like = is_mapping || (args.is_list() && !is_tuple);
  if (!mapping_like && next_arg < positional.size())
    type_error("not all arguments converted during string formatting");
  return out;
}

// ---- format(value, spec) ------------------------------------------------------

namespace {

struct FormatSpec {
  char fill = ' ';
  char align = 0;
  char sign = '-';
  bool alternate = false;
  size_t width = 0;
  char grouping = 0;
  int precision = -1;
  char type = 0;
};

FormatSpec parse_spec(std::string_view spec) {
  FormatSpec s;
  size_t i = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (spec.size() >= 2 && is_align(spec[1])) {
    s.fill = spec[0];
    s.align = spec[1];
    i = 2;
  } else if (!spec.empty() && is_align(spec[0])) {
    s.align = spec[0];
    i = 1;
  }
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) s.sign = spec[i++];
  if (i < spec.size() && spec[i] == 'z') ++i;
  if (i < spec.size() && spec[i] == '#') {
    s.alternate = true;
    ++i;
  }
  if (i < spec.size() && spec[i] == '0') {
    if (!s.align) {
      s.fill = '0';
      s.align = '=';
    }
    ++i;
  }
  while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9') s.width = std::min<size_t>(s.width * 10 + (spec[i++] - '0'), 100000);
  if (i < spec.size() && (spec[i] == ',' || spec[i] == '_')) s.grouping = spec[i++];
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    s.precision = 0;
    if (i >= spec.size() || spec[i] < '0' || spec[i] > '9') value_error("Format specifier missing precision");
    while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9') s.precision = std::min(s.precision * 10 + (spec[i++] - '0'), 10000);
  }
  if (i < spec.size()) s.type = spec[i++];
  if (i < spec.size()) value_error("Invalid format specifier '" + std::string(spec) + "'");
  return s;
}

// Applies sign, '=' padding and alignment to a number's digits.
std::string finish_number(bool negative, std::string body, const FormatSpec& s, const std::string& prefix = "") {
  std::string sign = negative ? "-" : s.sign == '+' ? "+" : s.sign == ' ' ? " " : "";
  sign += prefix;
  if (s.align == '=') {
    const size_t len = sign.size() + body.size();
    if (len < s.width) body.insert(0, s.width - len, s.fill);
    return sign + body;
  }
  return pad(sign + body, s.width, s.align ? s.align : '>', s.fill);
}

std::string format_int(int64_t v, FormatSpec s) {
  const char t = s.type ? s.type : 'd';
  if (s.precision >= 0) value_error("Precision not allowed in integer format specifier");
  if (t == 'c') {
    std::string out;
    utf8::encode(static_cast<char32_t>(v), out);
    return pad(out, s.width, s.align ? s.align : '<', s.fill);
  }
  const int base = t == 'b' ? 2 : t == 'o' ? 8 : (t == 'x' || t == 'X') ? 16 : 10;
  if (t != 'd' && t != 'n' && base == 10) value_error(std::string("Unknown format code '") + t + "' for object of type 'int'");
  std::string digits = digits_in_base(magnitude(v), base, t == 'X');
  if (s.grouping) digits = group_digits(digits, s.grouping);
  std::string prefix;
  if (s.alternate) prefix = base == 2 ? "0b" : base == 8 ? "0o" : base == 16 ? (t == 'X' ? "0X" : "0x") : "";
  return finish_number(v < 0, digits, s, prefix);
}

std::string format_float(double d, FormatSpec s) {
  char t = s.type;
  const bool neg = std::signbit(d) && !std::isnan(d);
  double a = std::fabs(d);
  std::string body;
  if (t == 0 && s.precision < 0) {
    body = float_repr(a);
  } else if (t == 0 || t == 'n') {
    body = c_float(a, 'g', s.precision < 0 ? 6 : std::max(s.precision, 1), s.alternate);
    if (std::isfinite(a) && body.find_first_of(".e") == std::string::npos) body += ".0";
  } else if (t == '%') {
    body = c_float(a * 100, 'f', s.precision < 0 ? 6 : s.precision, s.alternate) + "%";
  } else if (t == 'e' || t == 'E' || t == 'f' || t == 'F' || t == 'g' || t == 'G') {
    body = c_float(a, t, s.precision < 0 ? 6 : s.precision, s.alternate);
  } else {
    value_error(std::string("Unknown format code '") + t + "' for object of type 'float'");
  }
  if (s.grouping && std::isfinite(a)) {
    const size_t end = body.find_first_of(".e%");
    body = group_digits(body.substr(0, end), s.grouping) + (end == std::string::npos ? "" : body.substr(end));
  }
  return finish_number(neg, body, s);
}

}  // namespace

std::string format_value(const Value& value, std::string_view spec) {
  if (spec.empty()) return to_str(value).text();
  FormatSpec s = parse_spec(spec);
  if (value.is_integral()) {  // bool too: only an empty spec prints True / False
    if (s.type == 'e' || s.type == 'E' || s.type == 'f' || s.type == 'F' || s.type == 'g' || s.type == 'G' ||
        s.type == '%')
      return format_float(static_cast<double>(value.as_int()), s);
    return format_int(value.as_int(), s);
  }
  if (value.is_float()) return format_float(value.as_float(), s);
  if (value.is_str()) {
    if (s.type != 0 && s.type != 's') value_error(std::string("Unknown format code '") + s.type + "' for object of type 'str'");
    if (s.align == '=') value_error("'=' alignment not allowed in string format specifier");
    std::string text = to_str(value).text();
    if (s.precision >= 0) {
      const auto offs = utf8::offsets(text);
      if (static_cast<size_t>(s.precision) < offs.size() - 1) text.resize(offs[s.precision]);
    }
    return pad(text, s.width, s.align ? s.align : '<', s.fill);
  }
  type_error("unsupported format string passed to " + type_name(value) + ".__format__");
}

}  // namespace fptrain::jinja
