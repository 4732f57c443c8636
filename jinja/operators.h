// Python's operators on values: arithmetic with int/float promotion and
// Python's floor division and modulo signs, str/list concatenation and
// repetition, "%" string formatting, rich comparisons and `in`.
// Undefined operands raise, as jinja2's default Undefined does.
#pragma once

#include "jinja/ast.h"
#include "jinja/value.h"

namespace fptrain::jinja {

Value binary_op(BinOp op, const Value& a, const Value& b);
Value negate(const Value& v);
Value positive(const Value& v);

bool py_equal(const Value& a, const Value& b);
// a < b; throws TypeError for values Python does not order.
bool py_less(const Value& a, const Value& b);
bool compare(CmpOp op, const Value& a, const Value& b);
// item in container.
bool contains(const Value& container, const Value& item);

}  // namespace fptrain::jinja
