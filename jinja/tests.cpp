#include "jinja/tests.h"

#include <string>
#include <unordered_map>

#include "jinja/args.h"
#include "jinja/filters.h"
#include "jinja/objects.h"
#include "jinja/operators.h"
#include "jinja/printing.h"
#include "jinja/str_ops.h"

namespace fptrain::jinja {

namespace {

const Value& one_arg(const char* name, const CallArgs& args) {
  if (args.positional.size() + args.keyword.size() != 1)
    type_error(std::string(name) + "() takes exactly one argument");
  return args.positional.empty() ? args.keyword[0].second : args.positional[0];
}

void no_args(const char* name, const CallArgs& args) {
  if (!args.positional.empty() || !args.keyword.empty()) type_error(std::string(name) + "() takes no arguments");
}

bool t_defined(Interpreter&, const Value& v, CallArgs& a) { return no_args("defined", a), !v.is_undefined(); }
bool t_undefined(Interpreter&, const Value& v, CallArgs& a) { return no_args("undefined", a), v.is_undefined(); }
bool t_none(Interpreter&, const Value& v, CallArgs& a) { return no_args("none", a), v.is_none(); }
bool t_boolean(Interpreter&, const Value& v, CallArgs& a) { return no_args("boolean", a), v.is_bool(); }
bool t_true(Interpreter&, const Value& v, CallArgs& a) { return no_args("true", a), v.is_bool() && v.as_bool(); }
bool t_false(Interpreter&, const Value& v, CallArgs& a) { return no_args("false", a), v.is_bool() && !v.as_bool(); }
bool t_integer(Interpreter&, const Value& v, CallArgs& a) { return no_args("integer", a), v.is_int(); }
bool t_float(Interpreter&, const Value& v, CallArgs& a) { return no_args("float", a), v.is_float(); }
bool t_number(Interpreter&, const Value& v, CallArgs& a) { return no_args("number", a), v.is_number(); }
bool t_string(Interpreter&, const Value& v, CallArgs& a) { return no_args("string", a), v.is_str(); }
bool t_mapping(Interpreter&, const Value& v, CallArgs& a) { return no_args("mapping", a), v.is_dict(); }
bool t_escaped(Interpreter&, const Value& v, CallArgs& a) { return no_args("escaped", a), v.is_markup(); }
bool t_lower(Interpreter&, const Value& v, CallArgs& a) { return no_args("lower", a), py_islower(to_str(v).text()); }
bool t_upper(Interpreter&, const Value& v, CallArgs& a) { return no_args("upper", a), py_isupper(to_str(v).text()); }

bool t_callable(Interpreter&, const Value& v, CallArgs& a) {
  no_args("callable", a);
  return v.is_undefined() || (v.is_object() && v.object().callable());
}

// Python's iter(x) succeeds (Undefined and the loop object are iterable).
bool t_iterable(Interpreter&, const Value& v, CallArgs& a) {
  no_args("iterable", a);
  if (v.is_object()) return dynamic_cast<const LoopObject*>(&v.object()) != nullptr;
  return v.is_undefined() || v.is_str() || v.is_list() || v.is_dict() || v.is_iterator();
}

// len(x) works and x has __getitem__: str, list, tuple, dict, Undefined; not dict views.
bool t_sequence(Interpreter&, const Value& v, CallArgs& a) {
  no_args("sequence", a);
  return v.is_undefined() || v.is_str() || v.is_dict() || (v.is_list() && v.seq_kind() <= SeqKind::kTuple);
}

bool t_odd(Interpreter&, const Value& v, CallArgs& a) {
  no_args("odd", a);
  return py_equal(binary_op(BinOp::kMod, v, Value::integer(2)), Value::integer(1));
}

bool t_even(Interpreter&, const Value& v, CallArgs& a) {
  no_args("even", a);
  return py_equal(binary_op(BinOp::kMod, v, Value::integer(2)), Value::integer(0));
}

bool t_divisibleby(Interpreter&, const Value& v, CallArgs& a) {
  return py_equal(binary_op(BinOp::kMod, v, one_arg("divisibleby", a)), Value::integer(0));
}

bool t_in(Interpreter&, const Value& v, CallArgs& a) { return contains(one_arg("in", a), v); }

// Python's `is`: singletons and small ints by value (CPython caches them), the
// rest by identity. Equal string constants count as identical (CPython interns them).
bool t_sameas(Interpreter&, const Value& v, CallArgs& a) {
  const Value& other = one_arg("sameas", a);
  if (v.type() != other.type()) return false;
  switch (v.type()) {
    case Type::kUndefined: return false;
    case Type::kNone: return true;
    case Type::kBool: return v.as_bool() == other.as_bool();
    case Type::kInt: return v.as_int() == other.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    case Type::kFloat: return false;
    case Type::kStr: return v.ref() == other.ref() || v.text() == other.text();
    default: return v.ref() == other.ref();
  }
}

bool t_filter(Interpreter&, const Value& v, CallArgs& a) {
  no_args("filter", a);
  return v.is_str() && find_filter(v.text()) != nullptr;
}

bool t_test(Interpreter&, const Value& v, CallArgs& a) {
  no_args("test", a);
  return v.is_str() && find_test(v.text()) != nullptr;
}

template <CmpOp op>
bool t_compare(Interpreter&, const Value& v, CallArgs& a) {
  return compare(op, v, one_arg("compare", a));
}

const std::unordered_map<std::string, TestFn>& table() {
  static const std::unordered_map<std::string, TestFn> t{
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"integer", t_integer},
      {"float", t_float},
      {"number", t_number},
      {"string", t_string},
      {"mapping", t_mapping},
      {"escaped", t_escaped},
      {"lower", t_lower},
      {"upper", t_upper},
      {"callable", t_callable},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"odd", t_odd},
      {"even", t_even},
      {"divisibleby", t_divisibleby},
      {"in", t_in},
      {"sameas", t_sameas},
      {"filter", t_filter},
      {"test", t_test},
      {"==", t_compare<CmpOp::kEq>},
      {"eq", t_compare<CmpOp::kEq>},
      {"equalto", t_compare<CmpOp::kEq>},
      {"!=", t_compare<CmpOp::kNe>},
      {"ne", t_compare<CmpOp::kNe>},
      {">", t_compare<CmpOp::kGt>},
      {"gt", t_compare<CmpOp::kGt>},
      {"greaterthan", t_compare<CmpOp::kGt>},
      {">=", t_compare<CmpOp::kGe>},
      {"ge", t_compare<CmpOp::kGe>},
      {"<", t_compare<CmpOp::kLt>},
      {"lt", t_compare<CmpOp::kLt>},
      {"lessthan", t_compare<CmpOp::kLt>},
      {"<=", t_compare<CmpOp::kLe>},
      {"le", t_compare<CmpOp::kLe>},
  };
  return t;
}

}  // namespace

TestFn find_test(std::string_view name) {
  auto it = table().find(std::string(name));
  return it == table().end() ? nullptr : it->second;
}

}  // namespace fptrain::jinja
