// Runs a parsed template: statements write tagged text to an output buffer,
// expressions evaluate to values. Also the services filters, tests, methods
// and objects call back into (calling values, attribute access, filters by
// name). One Interpreter per render; nothing is shared between renders.
#pragma once

#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/ast.h"
#include "jinja/tagged_string.h"
#include "jinja/value.h"

namespace fptrain::jinja {

// Variables visible at one point. Loop iterations, macro calls and scoped
// blocks open a child scope; {% set %} writes to the innermost one, which is
// why a set inside a loop does not leak out (jinja2's rule; hence namespace()).
struct Scope {
  explicit Scope(std::shared_ptr<Scope> p) : parent(std::move(p)) {}
  const Value* find(std::string_view name) const;  // this scope, then its parents
  void set(const std::string& name, Value value);

  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;
};
using ScopePtr = std::shared_ptr<Scope>;

// Bounds that turn runaway recursion into an error instead of a stack overflow.
inline constexpr int kMaxCallDepth = 200;   // nested macro / caller / recursive-loop calls
inline constexpr int kMaxEvalDepth = 1500;  // nested evaluation steps in all (about 1 MB of stack)

class Interpreter {
 public:
  using Clock = std::function<std::tm()>;
  Interpreter(const Program& program, const Value& variables, Clock now);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Renders the whole template into `out`; `generation` gets the byte ranges
  // of {% generation %} blocks as transformers computes them.
  void run(TaggedString& out, std::vector<std::pair<size_t, size_t>>& generation);

  // ---- services
  Value call(const Value& callee, CallArgs& args);
  Value call_filter(const std::string& name, const Value& value, CallArgs& args);
  bool call_test(const std::string& name, const Value& value, CallArgs& args);
  Value call_macro(const MacroDef& def, const ScopePtr& closure, CallArgs& args);
  // A {% for ... recursive %} loop called again as loop(items): its body for `items`, one level deeper.
  Value recurse_loop(const ForStmt& loop, const ScopePtr& scope, const Value& items, int depth);
  std::tm now() const { return now_(); }
  // Mutable objects (namespaces, cyclers) can form reference cycles; they are cleared when the render ends.
  void track(const std::shared_ptr<Object>& object) { tracked_.push_back(object); }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_body(const Body& body, const ScopePtr& scope, TaggedString& out);
  Flow exec(const Stmt& stmt, const ScopePtr& scope, TaggedString& out);
  Flow exec_for(const ForStmt& s, const ScopePtr& scope, const Value& iterable, int depth, TaggedString& out);
  void exec_call_block(const CallBlockStmt& s, const ScopePtr& scope, TaggedString& out);
  void assign(const Target& target, const Value& value, const ScopePtr& scope);

  Value eval(const Expr& expr, const ScopePtr& scope);
  Value eval_inner(const Expr& expr, const ScopePtr& scope);
  CallArgs eval_args(const ArgsExpr& args, const ScopePtr& scope);
  Value eval_compare(const CompareExpr& e, const ScopePtr& scope);
  Value eval_slice(const Value& object, const SliceExpr& slice, const ScopePtr& scope);
  // A filter chain whose innermost operand is missing ({% filter %}, {% set x | f %}) applied to `input`.
  Value apply_filter_chain(const Expr& chain, const Value& input, const ScopePtr& scope);
  Value lookup(const std::string& name, const ScopePtr& scope) const;

  struct DepthGuard {
    DepthGuard(int& counter, int limit, const char* what);
    ~DepthGuard() { --counter; }
    DepthGuard(const DepthGuard&) = delete;
    DepthGuard& operator=(const DepthGuard&) = delete;
    int& counter;
  };

  const Program& program_;
  Clock now_;
  ScopePtr globals_;
  ScopePtr root_scope_;
  TaggedString* root_out_ = nullptr;  // the template's own output (generation ranges index it)
  std::vector<std::pair<size_t, size_t>>* generation_ = nullptr;
  std::vector<std::shared_ptr<Object>> tracked_;
  std::vector<ScopePtr> closures_;  // scopes captured by macros: cleared at the end to break cycles
  int eval_depth_ = 0;
  int call_depth_ = 0;
};

}  // namespace fptrain::jinja
