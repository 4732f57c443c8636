#include "jinja/checks.h"

#include <set>

#include "jinja/filters.h"
#include "jinja/tests.h"

namespace fptrain::jinja {

namespace {

// ---- unknown filters and tests ------------------------------------------------

class NameCheck {
 public:
  explicit NameCheck(const std::string& name) : name_(name) {}

  // `soft`: inside an if (test or branch) or a conditional expression, where
  // jinja2 only fails when the filter actually runs. Loops, macros and other
  // scoped bodies start a fresh, strict frame.
  void body(const Body& b, bool soft) {
    for (const StmtPtr& s : b) stmt(*s, soft);
  }

 private:
  void stmt(const Stmt& s, bool soft) {
    switch (s.kind) {
      case StmtKind::kOutput: return expr(static_cast<const OutputStmt&>(s).expr.get(), soft);
      case StmtKind::kIf: {
        const auto& i = static_cast<const IfStmt&>(s);
        for (const auto& [test, branch] : i.branches) {
          expr(test.get(), true);
          body(branch, true);
        }
        return body(i.else_body, true);
      }
      case StmtKind::kFor: {
        const auto& f = static_cast<const ForStmt&>(s);
        expr(f.iter.get(), soft);
        expr(f.filter.get(), false);
        body(f.body, false);
        return body(f.else_body, false);
      }
      case StmtKind::kSet: return expr(static_cast<const SetStmt&>(s).value.get(), soft);
      case StmtKind::kSetBlock: {
        const auto& sb = static_cast<const SetBlockStmt&>(s);
        expr(sb.filter.get(), false);
        return body(sb.body, false);
      }
      case StmtKind::kMacro: return macro(static_cast<const MacroStmt&>(s).def);
      case StmtKind::kCallBlock: {
        const auto& c = static_cast<const CallBlockStmt&>(s);
        expr(c.call.get(), soft);
        return macro(c.caller);
      }
      case StmtKind::kFilterBlock: {
        const auto& fb = static_cast<const FilterBlockStmt&>(s);
        expr(fb.filter.get(), false);
        return body(fb.body, false);
      }
      case StmtKind::kGeneration: return body(static_cast<const GenerationStmt&>(s).body, false);
      case StmtKind::kWith: {
        const auto& w = static_cast<const WithStmt&>(s);
        for (const auto& a : w.assignments) expr(a.second.get(), soft);
        return body(w.body, false);
      }
      default: return;
    }
  }

  void macro(const MacroDef& def) {
    for (const ExprPtr& d : def.defaults) expr(d.get(), false);
    body(def.body, false);
  }

  void args(const ArgsExpr& a, bool soft) {
    for (const ExprPtr& e : a.positional) expr(e.get(), soft);
    for (const auto& kw : a.keyword) expr(kw.second.get(), soft);
    expr(a.star.get(), soft);
    expr(a.star_star.get(), soft);
  }

  void expr(const Expr* e, bool soft) {
    if (e == nullptr) return;
    switch (e->kind) {
      case ExprKind::kList:
      case ExprKind::kTuple:
        for (const ExprPtr& item : static_cast<const SeqExpr*>(e)->items) expr(item.get(), soft);
        return;
      case ExprKind::kDict:
        for (const auto& [k, v] : static_cast<const DictExpr*>(e)->items) {
          expr(k.get(), soft);
          expr(v.get(), soft);
        }
        return;
      case ExprKind::kGetAttr: return expr(static_cast<const GetAttrExpr*>(e)->object.get(), soft);
      case ExprKind::kGetItem: {
        const auto* g = static_cast<const GetItemExpr*>(e);
        expr(g->object.get(), soft);
        return expr(g->key.get(), soft);
      }
      case ExprKind::kSlice: {
        const auto* s = static_cast<const SliceExpr*>(e);
        expr(s->start.get(), soft);
        expr(s->stop.get(), soft);
        return expr(s->step.get(), soft);
      }
      case ExprKind::kCall: {
        const auto* c = static_cast<const CallExpr*>(e);
        expr(c->callee.get(), soft);
        return args(c->args, soft);
      }
      case ExprKind::kFilter: {
        const auto* f = static_cast<const FilterExpr*>(e);
        if (!soft && find_filter(f->name) == nullptr) fail(unknown_filter_message(f->name), f->line);
        expr(f->operand.get(), soft);
        return args(f->args, soft);
      }
      case ExprKind::kTest: {
        const auto* t = static_cast<const TestExpr*>(e);
        if (!soft && find_test(t->name) == nullptr) fail("no test named '" + t->name + "'", t->line);
        expr(t->operand.get(), soft);
        return args(t->args, soft);
      }
      case ExprKind::kNeg:
      case ExprKind::kPos:
      case ExprKind::kNot: return expr(static_cast<const UnaryExpr*>(e)->operand.get(), soft);
      case ExprKind::kBinary:
      case ExprKind::kAnd:
      case ExprKind::kOr: {
        const auto* b = static_cast<const BinaryExpr*>(e);
        expr(b->left.get(), soft);
        return expr(b->right.get(), soft);
      }
      case ExprKind::kConcat:
        for (const ExprPtr& item : static_cast<const ConcatExpr*>(e)->items) expr(item.get(), soft);
        return;
      case ExprKind::kCompare: {
        const auto* c = static_cast<const CompareExpr*>(e);
        expr(c->first.get(), soft);
        for (const auto& r : c->rest) expr(r.second.get(), soft);
        return;
      }
      case ExprKind::kCondExpr: {
        const auto* c = static_cast<const CondExpr*>(e);
        expr(c->then.get(), true);
        expr(c->test.get(), true);
        return expr(c->otherwise.get(), true);
      }
      default: return;
    }
  }

  [[noreturn]] void fail(const std::string& message, int line) const {
    Error e(Error::Kind::kSyntax, message);
    e.locate(name_, line);
    throw e;
  }

  const std::string& name_;
};

// ---- caller / varargs / kwargs ------------------------------------------------

// jinja2's find_undeclared: walks the body in order; a name read before it is
// assigned counts as used, a name assigned first no longer does.
class SpecialNames {
 public:
  std::set<std::string> watched{"caller", "varargs", "kwargs"};
  std::set<std::string> used;

  void body(Body& b) {
    for (StmtPtr& s : b) stmt(*s);
  }

 private:
  void load(const std::string& name) {
    if (watched.count(name)) used.insert(name);
  }
  void store(const Target& t) {
    if (t.kind == Target::Kind::kTuple) {
      for (const Target& item : t.items) store(item);
    } else if (t.kind == Target::Kind::kName) {
      if (!used.count(t.name)) watched.erase(t.name);
    } else {
      load(t.name);
    }
  }

  void stmt(Stmt& s) {
    switch (s.kind) {
      case StmtKind::kOutput: return expr(static_cast<OutputStmt&>(s).expr.get());
      case StmtKind::kIf:
        for (auto& [test, branch] : static_cast<IfStmt&>(s).branches) {
          expr(test.get());
          body(branch);
        }
        return body(static_cast<IfStmt&>(s).else_body);
      case StmtKind::kFor: {
        auto& f = static_cast<ForStmt&>(s);
        store(f.target);
        expr(f.iter.get());
        body(f.body);
        body(f.else_body);
        return expr(f.filter.get());
      }
      case StmtKind::kSet:
        store(static_cast<SetStmt&>(s).target);
        return expr(static_cast<SetStmt&>(s).value.get());
      case StmtKind::kSetBlock: {
        auto& sb = static_cast<SetBlockStmt&>(s);
        store(sb.target);
        expr(sb.filter.get());
        return body(sb.body);
      }
      case StmtKind::kMacro: return macro(static_cast<MacroStmt&>(s).def);
      case StmtKind::kCallBlock:
        expr(static_cast<CallBlockStmt&>(s).call.get());
        return macro(static_cast<CallBlockStmt&>(s).caller);
      case StmtKind::kFilterBlock:
        expr(static_cast<FilterBlockStmt&>(s).filter.get());
        return body(static_cast<FilterBlockStmt&>(s).body);
      case StmtKind::kGeneration: return body(static_cast<GenerationStmt&>(s).body);
      case StmtKind::kWith:
        for (auto& a : static_cast<WithStmt&>(s).assignments) {
          store(a.first);
          expr(a.second.get());
        }
        return body(static_cast<WithStmt&>(s).body);
      default: return;
    }
  }

  // A nested macro: its own flags, and its parameters count as assignments here.
  void macro(MacroDef& def) {
    for (const std::string& p : def.params)
      if (!used.count(p)) watched.erase(p);
    for (ExprPtr& d : def.defaults) expr(d.get());
    body(def.body);
  }

  void args(ArgsExpr& a) {
    for (ExprPtr& e : a.positional) expr(e.get());
    for (auto& kw : a.keyword) expr(kw.second.get());
    expr(a.star.get());
    expr(a.star_star.get());
  }

  void expr(Expr* e) {
    if (e == nullptr) return;
    switch (e->kind) {
      case ExprKind::kName: return load(static_cast<NameExpr*>(e)->name);
      case ExprKind::kList:
      case ExprKind::kTuple:
        for (ExprPtr& item : static_cast<SeqExpr*>(e)->items) expr(item.get());
        return;
      case ExprKind::kDict:
        for (auto& [k, v] : static_cast<DictExpr*>(e)->items) {
          expr(k.get());
          expr(v.get());
        }
        return;
      case ExprKind::kGetAttr: return expr(static_cast<GetAttrExpr*>(e)->object.get());
      case ExprKind::kGetItem:
        expr(static_cast<GetItemExpr*>(e)->object.get());
        return expr(static_cast<GetItemExpr*>(e)->key.get());
      case ExprKind::kSlice: {
        auto* s = static_cast<SliceExpr*>(e);
        expr(s->start.get());
        expr(s->stop.get());
        return expr(s->step.get());
      }
      case ExprKind::kCall:
        expr(static_cast<CallExpr*>(e)->callee.get());
        return args(static_cast<CallExpr*>(e)->args);
      case ExprKind::kFilter:
        expr(static_cast<FilterExpr*>(e)->operand.get());
        return args(static_cast<FilterExpr*>(e)->args);
      case ExprKind::kTest:
        expr(static_cast<TestExpr*>(e)->operand.get());
        return args(static_cast<TestExpr*>(e)->args);
      case ExprKind::kNeg:
      case ExprKind::kPos:
      case ExprKind::kNot: return expr(static_cast<UnaryExpr*>(e)->operand.get());
      case ExprKind::kBinary:
      case ExprKind::kAnd:
      case ExprKind::kOr:
        expr(static_cast<BinaryExpr*>(e)->left.get());
        return expr(static_cast<BinaryExpr*>(e)->right.get());
      case ExprKind::kConcat:
        for (ExprPtr& item : static_cast<ConcatExpr*>(e)->items) expr(item.get());
        return;
      case ExprKind::kCompare:
        expr(static_cast<CompareExpr*>(e)->first.get());
        for (auto& r : static_cast<CompareExpr*>(e)->rest) expr(r.second.get());
        return;
      case ExprKind::kCondExpr: {
        auto* c = static_cast<CondExpr*>(e);
        expr(c->test.get());
        expr(c->then.get());
        return expr(c->otherwise.get());
      }
      default: return;
    }
  }

 public:
  static void analyze(MacroDef& def) {
    SpecialNames scan;
    scan.body(def.body);
    def.uses_caller = scan.used.count("caller") > 0;
    def.uses_varargs = scan.used.count("varargs") > 0;
    def.uses_kwargs = scan.used.count("kwargs") > 0;
  }
};

// Every macro-like definition in the template gets its flags.
void analyze_macros(Body& body);

void analyze_stmt(Stmt& s) {
  switch (s.kind) {
    case StmtKind::kIf:
      for (auto& branch : static_cast<IfStmt&>(s).branches) analyze_macros(branch.second);
      return analyze_macros(static_cast<IfStmt&>(s).else_body);
    case StmtKind::kFor:
      analyze_macros(static_cast<ForStmt&>(s).body);
      return analyze_macros(static_cast<ForStmt&>(s).else_body);
    case StmtKind::kSetBlock: return analyze_macros(static_cast<SetBlockStmt&>(s).body);
    case StmtKind::kMacro: {
      MacroDef& def = static_cast<MacroStmt&>(s).def;
      SpecialNames::analyze(def);
      return analyze_macros(def.body);
    }
    case StmtKind::kCallBlock: {
      MacroDef& def = static_cast<CallBlockStmt&>(s).caller;
      SpecialNames::analyze(def);
      return analyze_macros(def.body);
    }
    case StmtKind::kFilterBlock: return analyze_macros(static_cast<FilterBlockStmt&>(s).body);
    case StmtKind::kGeneration: return analyze_macros(static_cast<GenerationStmt&>(s).body);
    case StmtKind::kWith: return analyze_macros(static_cast<WithStmt&>(s).body);
    default: return;
  }
}

void analyze_macros(Body& body) {
  for (StmtPtr& s : body) analyze_stmt(*s);
}

}  // namespace

void check_program(Program& program) {
  NameCheck(program.name).body(program.body, false);
  analyze_macros(program.body);
}

}  // namespace fptrain::jinja
