#include "jinja/printing.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "jinja/utf8.h"

namespace fptrain::jinja {

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // The shortest digits that round-trip, as Python's repr uses them.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), std::fabs(d), std::chars_format::scientific);
  const std::string sci(buf, res.ptr);
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  if (digits.size() > 1) digits.erase(1, 1);  // drop the '.'
  const int exp = std::stoi(sci.substr(e + 1));
  std::string out = d < 0 ? "-" : "";
  if (exp >= -4 && exp < 16) {  // positional, always with a fractional part
    if (exp >= 0) {
      std::string int_part = digits.substr(0, std::min<size_t>(digits.size(), exp + 1));
      int_part.append(static_cast<size_t>(exp + 1) - int_part.size(), '0');
      const std::string frac = digits.size() > static_cast<size_t>(exp + 1) ? digits.substr(exp + 1) : "0";
      out += int_part + "." + frac;
    } else {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += exp_buf;
  }
  return out;
}

std::string string_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const char32_t c = utf8::decode(s, i);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!utf8::is_printable(c)) {
      char buf[16];
      if (c < 0x100)
        std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      else if (c < 0x10000)
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      else
        std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out.append(s.substr(start, i - start));
    }
  }
  out += quote;
  return out;
}

namespace {

// Depth of the repr() being built on this thread. A thread_local rather than a
// parameter so that objects (a namespace printing its attributes) take part.
thread_local int t_repr_depth = 0;

struct DepthGuard {
  DepthGuard() {
    if (++t_repr_depth > kMaxValueDepth) {
      --t_repr_depth;
      runtime_error("value nested too deeply to print");
    }
  }
  ~DepthGuard() { --t_repr_depth; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;
};

void append_repr(const Value& v, std::string& out);

void append_items(const std::vector<Value>& items, std::string& out) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    append_repr(items[i], out);
  }
}

void append_repr(const Value& v, std::string& out) {
  DepthGuard guard;
  switch (v.type()) {
    case Type::kUndefined: out += "Undefined"; return;
    case Type::kStr:
      if (v.is_markup()) {
        out += "Markup(" + string_repr(v.text()) + ")";
      } else {
        out += string_repr(v.text());
      }
      return;
    case Type::kList:
      switch (v.seq_kind()) {
        case SeqKind::kList:
          out += '[';
          append_items(v.items(), out);
          out += ']';
          return;
        case SeqKind::kTuple:
          out += '(';
          append_items(v.items(), out);
          if (v.items().size() == 1) out += ',';
          out += ')';
          return;
        default:
          out += type_name(v) + "([";
          append_items(v.items(), out);
          out += "])";
          return;
      }
    case Type::kDict: {
      out += '{';
      bool first = true;
      for (const auto& [key, value] : v.dict().items()) {
        if (!first) out += ", ";
        first = false;
        append_repr(key, out);
        out += ": ";
        append_repr(value, out);
      }
      out += '}';
      return;
    }
    default: out += to_str(v).text(); return;
  }
}

}  // namespace

TaggedString to_str(const Value& v) {
  switch (v.type()) {
    case Type::kUndefined: return TaggedString();
    case Type::kNone: return TaggedString("None");
    case Type::kBool: return TaggedString(v.as_bool() ? "True" : "False");
    case Type::kInt: return TaggedString(std::to_string(v.as_int()));
    case Type::kFloat: return TaggedString(float_repr(v.as_float()));
    case Type::kStr: return v.str();
    case Type::kIterator: return TaggedString("<generator object>");
    case Type::kObject: return TaggedString(v.object().repr());
    case Type::kList:
    case Type::kDict: break;
  }
  std::string out;
  append_repr(v, out);
  return TaggedString(std::move(out));
}

void append_str(TaggedString& out, const Value& v) {
  if (v.is_str())
    out.append(v.str());
  else
    out.append(to_str(v));
}

std::string repr(const Value& v) {
  std::string out;
  append_repr(v, out);
  return out;
}

}  // namespace fptrain::jinja
