#include "jinja/operators.h"

#include <algorithm>
#include <cmath>

#include "jinja/printing.h"
#include "jinja/string_format.h"

namespace fptrain::jinja {

namespace {

const char* op_symbol(BinOp op) {
  switch (op) {
    case BinOp::kAdd: return "+";
    case BinOp::kSub: return "-";
    case BinOp::kMul: return "*";
    case BinOp::kDiv: return "/";
    case BinOp::kFloorDiv: return "//";
    case BinOp::kMod: return "%";
    case BinOp::kPow: return "**";
  }
  return "?";
}

[[noreturn]] void unsupported(BinOp op, const Value& a, const Value& b) {
  if (op == BinOp::kAdd && a.is_str())
    type_error("can only concatenate str (not \"" + type_name(b) + "\") to str");
  if (op == BinOp::kAdd && a.is_list() && a.seq_kind() == SeqKind::kList)
    type_error("can only concatenate list (not \"" + type_name(b) + "\") to list");
  type_error(std::string("unsupported operand type(s) for ") + op_symbol(op) + ": '" + type_name(a) + "' and '" +
             type_name(b) + "'");
}

[[noreturn]] void overflow() { runtime_error("integer overflow (values beyond 64 bits are not supported)"); }

int64_t int_floordiv(int64_t a, int64_t b) {
  if (b == 0) fail(Error::Kind::kRuntime, "integer division or modulo by zero");
  if (a == INT64_MIN && b == -1) overflow();
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t int_mod(int64_t a, int64_t b) {
  if (b == 0) fail(Error::Kind::kRuntime, "integer division or modulo by zero");
  if (b == -1) return 0;
  int64_t m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

// CPython's float_divmod.
void float_divmod(double a, double b, double& div, double& mod) {
  if (b == 0) fail(Error::Kind::kRuntime, "float divmod()");
  mod = std::fmod(a, b);
  div = (a - mod) / b;
  if (mod != 0) {
    if ((b < 0) != (mod < 0)) {
      mod += b;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, b);
  }
  if (div != 0) {
    const double floordiv = std::floor(div);
    div = (div - floordiv > 0.5) ? floordiv + 1.0 : floordiv;
  } else {
    div = std::copysign(0.0, a / b);
  }
}

Value int_pow(int64_t base, int64_t exp) {
  if (exp < 0) {
    if (base == 0) fail(Error::Kind::kRuntime, "0.0 cannot be raised to a negative power");
    return Value::number(std::pow(static_cast<double>(base), static_cast<double>(exp)));
  }
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1)
      if (__builtin_mul_overflow(result, base, &result)) overflow();
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) overflow();
  }
  return Value::integer(result);
}

Value repeat(const Value& seq, int64_t n) {
  const double count = static_cast<double>(std::max<int64_t>(n, 0));
  if (seq.is_str()) {
    check_size(count * static_cast<double>(seq.str().size()));
    TaggedString out;
    for (int64_t i = 0; i < n; ++i) out.append(seq.str());
    return Value::string(std::move(out));
  }
  check_size(count * static_cast<double>(seq.items().size()) * 16);
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.items().begin(), seq.items().end());
  return Value::list(std::move(out), seq.seq_kind());
}

bool is_sequence(const Value& v) {
  return v.is_str() || (v.is_list() && (v.seq_kind() == SeqKind::kList || v.seq_kind() == SeqKind::kTuple));
}

// Markup + str escapes the plain side (markupsafe), whichever side it is on.
Value markup_add(const Value& a, const Value& b) {
  auto escaped = [](const Value& v) {
    return v.is_markup() ? v.str() : TaggedString(html_escape(to_str(v).text()));
  };
  TaggedString out = escaped(a);
  out.append(escaped(b));
  return Value::string(std::move(out), true);
}

}  // namespace

Value binary_op(BinOp op, const Value& a, const Value& b) {
  if (a.is_undefined()) a.raise_undefined();
  if (b.is_undefined()) b.raise_undefined();
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) {
      const int64_t x = a.as_int(), y = b.as_int();
      int64_t r = 0;
      switch (op) {
        case BinOp::kAdd:
          if (__builtin_add_overflow(x, y, &r)) overflow();
          return Value::integer(r);
        case BinOp::kSub:
          if (__builtin_sub_overflow(x, y, &r)) overflow();
          return Value::integer(r);
        case BinOp::kMul:
          if (__builtin_mul_overflow(x, y, &r)) overflow();
          return Value::integer(r);
        case BinOp::kDiv:
          if (y == 0) fail(Error::Kind::kRuntime, "division by zero");
          return Value::number(static_cast<double>(x) / static_cast<double>(y));
        case BinOp::kFloorDiv: return Value::integer(int_floordiv(x, y));
        case BinOp::kMod: return Value::integer(int_mod(x, y));
        case BinOp::kPow: return int_pow(x, y);
      }
    }
    const double x = a.as_float(), y = b.as_float();
    double div = 0, mod = 0;
    switch (op) {
      case BinOp::kAdd: return Value::number(x + y);
      case BinOp::kSub: return Value::number(x - y);
      case BinOp::kMul: return Value::number(x * y);
      case BinOp::kDiv:
        if (y == 0) fail(Error::Kind::kRuntime, "float division by zero");
        return Value::number(x / y);
      case BinOp::kFloorDiv:
        if (y == 0) fail(Error::Kind::kRuntime, "float floor division by zero");
        float_divmod(x, y, div, mod);
        return Value::number(div);
      case BinOp::kMod:
        if (y == 0) fail(Error::Kind::kRuntime, "float modulo");
        float_divmod(x, y, div, mod);
        return Value::number(mod);
      case BinOp::kPow:
        if (x == 0 && y < 0) fail(Error::Kind::kRuntime, "0.0 cannot be raised to a negative power");
        if (x < 0 && y != std::floor(y)) runtime_error("complex results are not supported");
        return Value::number(std::pow(x, y));
    }
  }
  switch (op) {
    case BinOp::kAdd:
      if (a.is_str() && b.is_str()) {
        if (a.is_markup() || b.is_markup()) return markup_add(a, b);
        TaggedString out = a.str();
        out.append(b.str());
        return Value::string(std::move(out));
      }
      if (a.is_list() && b.is_list() && a.seq_kind() == b.seq_kind() &&
          (a.seq_kind() == SeqKind::kList || a.seq_kind() == SeqKind::kTuple)) {
        std::vector<Value> out = a.items();
        out.insert(out.end(), b.items().begin(), b.items().end());
        return Value::list(std::move(out), a.seq_kind());
      }
      break;
    case BinOp::kMul:
      if (is_sequence(a) && b.is_integral()) return repeat(a, b.as_int());
      if (a.is_integral() && is_sequence(b)) return repeat(b, a.as_int());
      break;
    case BinOp::kMod:
      if (a.is_str()) return Value::string(TaggedString(percent_format(a.text(), b)), a.is_markup());
      break;
    default: break;
  }
  unsupported(op, a, b);
}

Value negate(const Value& v) {
  if (v.is_undefined()) v.raise_undefined();
  if (v.is_integral()) {
    if (v.as_int() == INT64_MIN) overflow();
    return Value::integer(-v.as_int());
  }
  if (v.is_float()) return Value::number(-v.as_float());
  type_error("bad operand type for unary -: '" + type_name(v) + "'");
}

Value positive(const Value& v) {
  if (v.is_undefined()) v.raise_undefined();
  if (v.is_integral()) return Value::integer(v.as_int());
  if (v.is_float()) return v;
  type_error("bad operand type for unary +: '" + type_name(v) + "'");
}

namespace {

thread_local int t_compare_depth = 0;

struct CompareDepth {
  CompareDepth() {
    if (++t_compare_depth > kMaxValueDepth) {
      --t_compare_depth;
      runtime_error("values nested too deeply to compare");
    }
  }
  ~CompareDepth() { --t_compare_depth; }
  CompareDepth(const CompareDepth&) = delete;
  CompareDepth& operator=(const CompareDepth&) = delete;
};

}  // namespace

bool py_equal(const Value& a, const Value& b) {
  CompareDepth depth;
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() == b.as_int();
    return a.as_float() == b.as_float();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Type::kUndefined:
    case Type::kNone: return true;
    case Type::kStr: return a.text() == b.text();
    case Type::kList: {
      if (a.seq_kind() != b.seq_kind() || a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!py_equal(a.items()[i], b.items()[i])) return false;
      return true;
    }
    case Type::kDict: {
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [key, value] : a.dict().items()) {
        const Value* other = b.dict().find(key);
        if (other == nullptr || !py_equal(value, *other)) return false;
      }
      return true;
    }
    default: return a.ref() == b.ref();
  }
}

bool py_less(const Value& a, const Value& b) {
  CompareDepth depth;
  if (a.is_undefined()) a.raise_undefined();
  if (b.is_undefined()) b.raise_undefined();
  if (a.is_number() && b.is_number()) {
    if (a.is_integral() && b.is_integral()) return a.as_int() < b.as_int();
    return a.as_float() < b.as_float();
  }
  if (a.is_str() && b.is_str()) return a.text() < b.text();  // UTF-8 byte order is code point order
  if (a.is_list() && b.is_list() && a.seq_kind() == b.seq_kind() &&
      (a.seq_kind() == SeqKind::kList || a.seq_kind() == SeqKind::kTuple)) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (!py_equal(x[i], y[i])) return py_less(x[i], y[i]);
    return x.size() < y.size();
  }
  type_error("'<' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

bool compare(CmpOp op, const Value& a, const Value& b) {
  switch (op) {
    case CmpOp::kEq: return py_equal(a, b);
    case CmpOp::kNe: return !py_equal(a, b);
    case CmpOp::kLt: return py_less(a, b);
    case CmpOp::kGt: return py_less(b, a);
    case CmpOp::kLe: return py_less(a, b) || py_equal(a, b);
    case CmpOp::kGe: return py_less(b, a) || py_equal(a, b);
    case CmpOp::kIn: return contains(b, a);
    case CmpOp::kNotIn: return !contains(b, a);
  }
  return false;
}

bool contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Type::kUndefined: return false;
    case Type::kStr:
      if (!item.is_str())
        type_error("'in <string>' requires string as left operand, not " + type_name(item));
      return container.text().find(item.text()) != std::string::npos;
    case Type::kList:
      for (const Value& v : container.items())
        if (py_equal(v, item)) return true;
      return false;
    case Type::kDict:
      if (item.is_undefined()) return false;
      return container.dict().find(item) != nullptr;
    case Type::kIterator: {
      IteratorData& it = container.iter();
      while (it.pos < it.items.size())
        if (py_equal(it.items[it.pos++], item)) return true;
      return false;
    }
    default: break;
  }
  type_error("argument of type '" + type_name(container) + "' is not iterable");
}

}  // namespace fptrain::jinja
