// Expression evaluation (the other half of interpreter.cpp).
#include "jinja/access.h"
#include "jinja/interpreter.h"
#include "jinja/operators.h"
#include "jinja/printing.h"

namespace fptrain::jinja {

Value Interpreter::eval(const Expr& expr, const ScopePtr& scope) {
  DepthGuard guard(eval_depth_, kMaxEvalDepth, "statements and expressions");
  try {
    return eval_inner(expr, scope);
  } catch (Error& e) {
    e.locate(program_.name, expr.line);
    throw;
  }
}

Value Interpreter::lookup(const std::string& name, const ScopePtr& scope) const {
  if (const Value* v = scope->find(name)) return *v;
  return Value::undefined("'" + name + "' is undefined");
}

CallArgs Interpreter::eval_args(const ArgsExpr& args, const ScopePtr& scope) {
  CallArgs out;
  for (const ExprPtr& e : args.positional) out.positional.push_back(eval(*e, scope));
  if (args.star)
    for (Value& v : iterate(eval(*args.star, scope))) out.positional.push_back(std::move(v));
  for (const auto& [key, e] : args.keyword) out.keyword.emplace_back(key, eval(*e, scope));
  if (args.star_star) {
    const Value kw = eval(*args.star_star, scope);
    if (!kw.is_dict()) type_error("argument after ** must be a mapping, not " + type_name(kw));
    for (const auto& [k, v] : kw.dict().items()) {
      if (!k.is_str()) type_error("keywords must be strings");
      out.keyword.emplace_back(k.text(), v);
    }
  }
  return out;
}

Value Interpreter::eval_compare(const CompareExpr& e, const ScopePtr& scope) {
  Value left = eval(*e.first, scope);
  for (const auto& [op, expr] : e.rest) {
    Value right = eval(*expr, scope);
    if (!compare(op, left, right)) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

namespace {

// Literals jinja2's optimizer folds at compile time.
bool is_constant(const Expr* e) {
  if (e == nullptr || e->kind == ExprKind::kConst) return true;
  if (e->kind == ExprKind::kList || e->kind == ExprKind::kTuple) {
    for (const ExprPtr& item : static_cast<const SeqExpr*>(e)->items)
      if (!is_constant(item.get())) return false;
    return true;
  }
  if (e->kind == ExprKind::kDict) {
    for (const auto& [k, v] : static_cast<const DictExpr*>(e)->items)
      if (!is_constant(k.get()) || !is_constant(v.get())) return false;
    return true;
  }
  return false;
}

}  // namespace

Value Interpreter::eval_slice(const Value& object, const SliceExpr& slice, const ScopePtr& scope) {
  Value parts[3];
  const Expr* exprs[3] = {slice.start.get(), slice.stop.get(), slice.step.get()};
  const Value* ptrs[3] = {nullptr, nullptr, nullptr};
  for (int k = 0; k < 3; ++k) {
    if (exprs[k] == nullptr) continue;
    parts[k] = eval(*exprs[k], scope);
    ptrs[k] = &parts[k];
  }
  return get_slice(object, ptrs[0], ptrs[1], ptrs[2]);
}

Value Interpreter::apply_filter_chain(const Expr& chain, const Value& input, const ScopePtr& scope) {
  const auto& f = static_cast<const FilterExpr&>(chain);
  try {
    const Value v = f.operand ? apply_filter_chain(*f.operand, input, scope) : input;
    CallArgs args = eval_args(f.args, scope);
    return call_filter(f.name, v, args);
  } catch (Error& e) {
    e.locate(program_.name, f.line);
    throw;
  }
}

Value Interpreter::eval_inner(const Expr& expr, const ScopePtr& scope) {
  switch (expr.kind) {
    case ExprKind::kConst: return static_cast<const ConstExpr&>(expr).value;
    case ExprKind::kName: return lookup(static_cast<const NameExpr&>(expr).name, scope);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      for (const ExprPtr& item : static_cast<const SeqExpr&>(expr).items) items.push_back(eval(*item, scope));
      return Value::list(std::move(items), expr.kind == ExprKind::kList ? SeqKind::kList : SeqKind::kTuple);
    }
    case ExprKind::kDict: {
      DictData d;
      for (const auto& [k, v] : static_cast<const DictExpr&>(expr).items) {
        Value key = eval(*k, scope);
        d.set(std::move(key), eval(*v, scope));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::kGetAttr: {
      const auto& e = static_cast<const GetAttrExpr&>(expr);
      return get_attr(eval(*e.object, scope), e.name);
    }
    case ExprKind::kGetItem: {
      const auto& e = static_cast<const GetItemExpr&>(expr);
      const Value object = eval(*e.object, scope);
      if (e.key->kind == ExprKind::kSlice) {
        const auto& slice = static_cast<const SliceExpr&>(*e.key);
        if (!is_constant(e.object.get()) || !is_constant(slice.start.get()) || !is_constant(slice.stop.get()) ||
            !is_constant(slice.step.get()))
          return eval_slice(object, slice, scope);
        // jinja2 folds an all-literal slice at compile time through its lenient getitem,
        // so there a failed slice is undefined instead of an error.
        try {
          return eval_slice(object, slice, scope);
        } catch (const Error& err) {
          if (err.kind() != Error::Kind::kType) throw;
          return Value::undefined("the constant slice failed");
        }
      }
      return get_item(object, eval(*e.key, scope));
    }
    case ExprKind::kCall: {
      const auto& e = static_cast<const CallExpr&>(expr);
      const Value callee = eval(*e.callee, scope);
      CallArgs args = eval_args(e.args, scope);
      return call(callee, args);
    }
    case ExprKind::kFilter: {
      const auto& e = static_cast<const FilterExpr&>(expr);
      const Value v = eval(*e.operand, scope);
      CallArgs args = eval_args(e.args, scope);
      return call_filter(e.name, v, args);
    }
    case ExprKind::kTest: {
      const auto& e = static_cast<const TestExpr&>(expr);
      const Value v = eval(*e.operand, scope);
      CallArgs args = eval_args(e.args, scope);
      return Value::boolean(call_test(e.name, v, args));
    }
    case ExprKind::kNeg: return negate(eval(*static_cast<const UnaryExpr&>(expr).operand, scope));
    case ExprKind::kPos: return positive(eval(*static_cast<const UnaryExpr&>(expr).operand, scope));
    case ExprKind::kNot: return Value::boolean(!truthy(eval(*static_cast<const UnaryExpr&>(expr).operand, scope)));
    case ExprKind::kBinary: {
      const auto& e = static_cast<const BinaryExpr&>(expr);
      const Value left = eval(*e.left, scope);
      return binary_op(e.op, left, eval(*e.right, scope));
    }
    case ExprKind::kAnd:
    case ExprKind::kOr: {  // Python's: the deciding operand itself, not a bool
      const auto& e = static_cast<const BinaryExpr&>(expr);
      Value left = eval(*e.left, scope);
      if (truthy(left) == (expr.kind == ExprKind::kOr)) return left;
      return eval(*e.right, scope);
    }
    case ExprKind::kConcat: {
      TaggedString out;
      for (const ExprPtr& item : static_cast<const ConcatExpr&>(expr).items) append_str(out, eval(*item, scope));
      return Value::string(std::move(out));
    }
    case ExprKind::kCompare: return eval_compare(static_cast<const CompareExpr&>(expr), scope);
    case ExprKind::kCondExpr: {
      const auto& e = static_cast<const CondExpr&>(expr);
      if (truthy(eval(*e.test, scope))) return eval(*e.then, scope);
      if (e.otherwise) return eval(*e.otherwise, scope);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    }
    case ExprKind::kSlice: break;
  }
  runtime_error("a slice is only valid inside []");
}

}  // namespace fptrain::jinja
