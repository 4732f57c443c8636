#include "jinja/interpreter.h"

#include "jinja/access.h"
#include "jinja/filters.h"
#include "jinja/globals.h"
#include "jinja/objects.h"
#include "jinja/operators.h"
#include "jinja/printing.h"
#include "jinja/tests.h"

namespace fptrain::jinja {

const Value* Scope::find(std::string_view name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent.get())
    for (const auto& kv : s->vars)
      if (kv.first == name) return &kv.second;
  return nullptr;
}

void Scope::set(const std::string& name, Value value) {
  for (auto& kv : vars) {
    if (kv.first == name) {
      kv.second = std::move(value);
      return;
    }
  }
  vars.emplace_back(name, std::move(value));
}

Interpreter::DepthGuard::DepthGuard(int& c, int limit, const char* what) : counter(c) {
  if (++counter > limit) {
    --counter;
    runtime_error(std::string("maximum recursion depth exceeded (") + what + " nested more than " +
                  std::to_string(limit) + " deep)");
  }
}

Interpreter::Interpreter(const Program& program, const Value& variables, Clock now)
    : program_(program), now_(std::move(now)), globals_(std::make_shared<Scope>(nullptr)) {
  add_globals(*globals_);
  root_scope_ = std::make_shared<Scope>(globals_);
  if (variables.is_dict())
    for (const auto& [key, value] : variables.dict().items()) root_scope_->set(to_str(key).text(), value);
}

Interpreter::~Interpreter() {
  // Macros hold the scope they were defined in, which holds them; namespaces can hold themselves.
  for (const ScopePtr& s : closures_) s->vars.clear();
  for (const auto& o : tracked_) o->clear();
}

void Interpreter::run(TaggedString& out, std::vector<std::pair<size_t, size_t>>& generation) {
  root_out_ = &out;
  generation_ = &generation;
  exec_body(program_.body, root_scope_, out);
}

// ---- statements ---------------------------------------------------------------

Interpreter::Flow Interpreter::exec_body(const Body& body, const ScopePtr& scope, TaggedString& out) {
  for (const StmtPtr& s : body) {
    const Flow flow = exec(*s, scope, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Stmt& stmt, const ScopePtr& scope, TaggedString& out) {
  DepthGuard guard(eval_depth_, kMaxEvalDepth, "statements and expressions");
  try {
    switch (stmt.kind) {
      case StmtKind::kText: out.append(static_cast<const TextStmt&>(stmt).text); return Flow::kNormal;
      case StmtKind::kOutput:
        append_str(out, eval(*static_cast<const OutputStmt&>(stmt).expr, scope));
        return Flow::kNormal;
      case StmtKind::kIf: {
        const auto& s = static_cast<const IfStmt&>(stmt);
        for (const auto& [test, body] : s.branches)
          if (truthy(eval(*test, scope))) return exec_body(body, scope, out);
        return exec_body(s.else_body, scope, out);
      }
      case StmtKind::kFor: {
        const auto& s = static_cast<const ForStmt&>(stmt);
        const Value iterable = eval(*s.iter, scope);
        if (!s.recursive) return exec_for(s, scope, iterable, 0, out);
        out.append(to_str(recurse_loop(s, scope, iterable, 0)));  // jinja2 buffers recursive loops
        return Flow::kNormal;
      }
      case StmtKind::kSet: {
        const auto& s = static_cast<const SetStmt&>(stmt);
        assign(s.target, eval(*s.value, scope), scope);
        return Flow::kNormal;
      }
      case StmtKind::kSetBlock: {
        const auto& s = static_cast<const SetBlockStmt&>(stmt);
        auto inner = std::make_shared<Scope>(scope);
        TaggedString captured;
        const Flow flow = exec_body(s.body, inner, captured);
        if (flow != Flow::kNormal) return flow;  // a break inside the block: nothing is assigned
        Value v = Value::string(std::move(captured));
        if (s.filter) v = apply_filter_chain(*s.filter, v, inner);
        assign(s.target, v, scope);
        return Flow::kNormal;
      }
      case StmtKind::kMacro: {
        const auto& s = static_cast<const MacroStmt&>(stmt);
        scope->set(s.def.name, Value::object(std::make_shared<MacroObject>(&s.def, scope)));
        closures_.push_back(scope);
        return Flow::kNormal;
      }
      case StmtKind::kCallBlock: exec_call_block(static_cast<const CallBlockStmt&>(stmt), scope, out); return Flow::kNormal;
      case StmtKind::kFilterBlock: {
        const auto& s = static_cast<const FilterBlockStmt&>(stmt);
        auto inner = std::make_shared<Scope>(scope);
        TaggedString captured;
        const Flow flow = exec_body(s.body, inner, captured);
        if (flow != Flow::kNormal) return flow;
        out.append(to_str(apply_filter_chain(*s.filter, Value::string(std::move(captured)), inner)));
        return Flow::kNormal;
      }
      case StmtKind::kGeneration: {
        // transformers records (length of the template's output so far, + length of the block).
        const auto& s = static_cast<const GenerationStmt&>(stmt);
        TaggedString captured;
        exec_body(s.body, std::make_shared<Scope>(scope), captured);
        const size_t start = root_out_->size();
        generation_->emplace_back(start, start + captured.size());
        out.append(captured);
        return Flow::kNormal;
      }
      case StmtKind::kBreak: return Flow::kBreak;
      case StmtKind::kContinue: return Flow::kContinue;
      case StmtKind::kWith: {
        const auto& s = static_cast<const WithStmt&>(stmt);
        auto inner = std::make_shared<Scope>(scope);
        for (const auto& [target, value] : s.assignments) assign(target, eval(*value, scope), inner);
        return exec_body(s.body, inner, out);
      }
    }
  } catch (Error& e) {
    e.locate(program_.name, stmt.line);
    throw;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec_for(const ForStmt& s, const ScopePtr& scope, const Value& iterable, int depth,
                                        TaggedString& out) {
  std::vector<Value> items = iterate(iterable);
  if (s.filter) {  // {% for x in xs if cond %}: the loop only sees the items that pass
    std::vector<Value> kept;
    for (const Value& item : items) {
      auto test_scope = std::make_shared<Scope>(scope);
      assign(s.target, item, test_scope);
      if (truthy(eval(*s.filter, test_scope))) kept.push_back(item);
    }
    items = std::move(kept);
  }
  auto loop = std::make_shared<LoopObject>(std::move(items), depth, s.recursive ? &s : nullptr, scope);
  const Value loop_value = Value::object(loop);
  // jinja2 runs the else branch unless some iteration ran to its end (break and continue skip that mark).
  bool completed_one = false;
  for (size_t i = 0; i < loop->items().size(); ++i) {
    loop->index0 = i;
    auto iteration = std::make_shared<Scope>(scope);
    assign(s.target, loop->items()[i], iteration);
    iteration->set("loop", loop_value);
    const Flow flow = exec_body(s.body, iteration, out);
    if (flow == Flow::kBreak) break;
    if (flow == Flow::kContinue) continue;
    completed_one = true;
  }
  if (!completed_one && !s.else_body.empty()) return exec_body(s.else_body, std::make_shared<Scope>(scope), out);
  return Flow::kNormal;
}

Value Interpreter::recurse_loop(const ForStmt& loop, const ScopePtr& scope, const Value& items, int depth) {
  DepthGuard guard(call_depth_, kMaxCallDepth, "recursive loop calls");
  TaggedString out;
  exec_for(loop, scope, items, depth, out);
  return Value::string(std::move(out));
}

void Interpreter::exec_call_block(const CallBlockStmt& s, const ScopePtr& scope, TaggedString& out) {
  const auto& call_expr = static_cast<const CallExpr&>(*s.call);
  const Value callee = eval(*call_expr.callee, scope);
  CallArgs args = eval_args(call_expr.args, scope);
  args.keyword.emplace_back("caller", Value::object(std::make_shared<MacroObject>(&s.caller, scope)));
  out.append(to_str(call(callee, args)));
}

void Interpreter::assign(const Target& target, const Value& value, const ScopePtr& scope) {
  switch (target.kind) {
    case Target::Kind::kName: scope->set(target.name, value); return;
    case Target::Kind::kTuple: {
      const std::vector<Value> items = iterate(value);
      const size_t n = target.items.size();
      if (items.size() < n)
        runtime_error("not enough values to unpack (expected " + std::to_string(n) + ", got " + std::to_string(items.size()) + ")");
      if (items.size() > n) runtime_error("too many values to unpack (expected " + std::to_string(n) + ")");
      for (size_t i = 0; i < n; ++i) assign(target.items[i], items[i], scope);
      return;
    }
    case Target::Kind::kNamespaceAttr: {
      const Value ns = lookup(target.name, scope);
      auto* obj = ns.is_object() ? dynamic_cast<Namespace*>(&ns.object()) : nullptr;
      if (obj == nullptr) runtime_error("cannot assign attribute on non-namespace object");
      obj->set(target.attr, value);
      return;
    }
  }
}

// ---- services -----------------------------------------------------------------

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) callee.raise_undefined();
  if (callee.is_object() && callee.object().callable()) return callee.object().call(*this, args);
  type_error("'" + type_name(callee) + "' object is not callable");
}

Value Interpreter::call_filter(const std::string& name, const Value& value, CallArgs& args) {
  const FilterFn fn = find_filter(name);
  if (fn == nullptr) runtime_error(unknown_filter_message(name));
  return fn(*this, value, args);
}

bool Interpreter::call_test(const std::string& name, const Value& value, CallArgs& args) {
  const TestFn fn = find_test(name);
  if (fn == nullptr) runtime_error("no test named '" + name + "'");
  return fn(*this, value, args);
}

Value Interpreter::call_macro(const MacroDef& def, const ScopePtr& closure, CallArgs& args) {
  DepthGuard guard(call_depth_, kMaxCallDepth, "macro calls");
  auto scope = std::make_shared<Scope>(closure);
  const size_t n = def.params.size();
  const size_t given = std::min(args.positional.size(), n);
  std::vector<bool> bound(n, false);
  for (size_t i = 0; i < given; ++i) {
    scope->set(def.params[i], args.positional[i]);
    bound[i] = true;
  }
  auto take_keyword = [&](const std::string& key, Value& out) {
    for (auto it = args.keyword.begin(); it != args.keyword.end(); ++it) {
      if (it->first != key) continue;
      out = std::move(it->second);
      args.keyword.erase(it);
      return true;
    }
    return false;
  };
  bool found_caller = given == n && std::find(def.params.begin(), def.params.end(), "caller") != def.params.end();
  for (size_t i = given; i < n; ++i) {
    Value v;
    if (take_keyword(def.params[i], v)) {
      scope->set(def.params[i], std::move(v));
      bound[i] = true;
    }
    if (def.params[i] == "caller") found_caller = true;
  }
  if (def.uses_caller && !found_caller) {
    Value caller;
    if (!take_keyword("caller", caller)) caller = Value::undefined("No caller defined");
    scope->set("caller", std::move(caller));
  }
  if (def.uses_kwargs) {
    DictData kw;
    for (auto& [k, v] : args.keyword) kw.set(Value::string(k), v);
    scope->set("kwargs", Value::dict(std::move(kw)));
  } else if (!args.keyword.empty()) {
    if (args.keyword.front().first == "caller")
      type_error("macro '" + def.name + "' was invoked with two values for the special caller argument. This is most likely a bug.");
    type_error("macro '" + def.name + "' takes no keyword argument '" + args.keyword.front().first + "'");
  }
  if (def.uses_varargs) {
    scope->set("varargs", Value::tuple(std::vector<Value>(args.positional.begin() + static_cast<std::ptrdiff_t>(given),
                                                          args.positional.end())));
  } else if (args.positional.size() > n) {
    type_error("macro '" + def.name + "' takes not more than " + std::to_string(n) + " argument(s)");
  }
  const size_t first_default = n - def.defaults.size();
  for (size_t i = 0; i < n; ++i) {
    if (bound[i]) continue;
    scope->set(def.params[i], i >= first_default ? eval(*def.defaults[i - first_default], scope)
                                                 : Value::undefined("parameter '" + def.params[i] + "' was not provided"));
  }
  TaggedString out;
  exec_body(def.body, scope, out);
  return Value::string(std::move(out));
}

}  // namespace fptrain::jinja
