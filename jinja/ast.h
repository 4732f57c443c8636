// The syntax tree the parser builds and the interpreter walks. Nodes are
// plain structs with a kind tag (no virtual dispatch beyond destruction);
// every node keeps its source line for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/value.h"

namespace fptrain::jinja {

// ---- expressions --------------------------------------------------------------

enum class ExprKind {
  kConst, kName, kList, kTuple, kDict, kGetAttr, kGetItem, kSlice, kCall, kFilter, kTest,
  kNeg, kPos, kNot, kBinary, kAnd, kOr, kConcat, kCompare, kCondExpr,
};

struct Expr {
  Expr(ExprKind k, int l) : kind(k), line(l) {}
  virtual ~Expr() = default;
  ExprKind kind;
  int line;
  int depth = 1;  // height of the subtree; the parser bounds it
};
using ExprPtr = std::unique_ptr<Expr>;

struct ConstExpr : Expr {
  ConstExpr(Value v, int l) : Expr(ExprKind::kConst, l), value(std::move(v)) {}
  Value value;
};

struct NameExpr : Expr {
  NameExpr(std::string n, int l) : Expr(ExprKind::kName, l), name(std::move(n)) {}
  std::string name;
};

struct SeqExpr : Expr {  // kList or kTuple
  using Expr::Expr;
  std::vector<ExprPtr> items;
};

struct DictExpr : Expr {
  explicit DictExpr(int l) : Expr(ExprKind::kDict, l) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};

struct GetAttrExpr : Expr {  // x.name
  GetAttrExpr(ExprPtr o, std::string n, int l)
      : Expr(ExprKind::kGetAttr, l), object(std::move(o)), name(std::move(n)) {}
  ExprPtr object;
  std::string name;
};

struct GetItemExpr : Expr {  // x[key], x.0
  GetItemExpr(ExprPtr o, ExprPtr k, int l) : Expr(ExprKind::kGetItem, l), object(std::move(o)), key(std::move(k)) {}
  ExprPtr object, key;
};

struct SliceExpr : Expr {  // the key of x[a:b:c]; any part may be null
  explicit SliceExpr(int l) : Expr(ExprKind::kSlice, l) {}
  ExprPtr start, stop, step;
};

struct ArgsExpr {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  ExprPtr star, star_star;  // *args, **kwargs
};

struct CallExpr : Expr {
  CallExpr(ExprPtr c, int l) : Expr(ExprKind::kCall, l), callee(std::move(c)) {}
  ExprPtr callee;
  ArgsExpr args;
};

struct FilterExpr : Expr {  // operand|name(args); operand is null inside {% filter %} and {% set x | f %}
  FilterExpr(ExprPtr o, std::string n, int l) : Expr(ExprKind::kFilter, l), operand(std::move(o)), name(std::move(n)) {}
  ExprPtr operand;
  std::string name;
  ArgsExpr args;
};

struct TestExpr : Expr {  // operand is name(args)
  TestExpr(ExprPtr o, std::string n, int l) : Expr(ExprKind::kTest, l), operand(std::move(o)), name(std::move(n)) {}
  ExprPtr operand;
  std::string name;
  ArgsExpr args;
};

struct UnaryExpr : Expr {  // kNeg, kPos, kNot
  UnaryExpr(ExprKind k, ExprPtr o, int l) : Expr(k, l), operand(std::move(o)) {}
  ExprPtr operand;
};

enum class BinOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };

struct BinaryExpr : Expr {  // kBinary (with op), kAnd, kOr
  BinaryExpr(ExprKind k, BinOp o, ExprPtr a, ExprPtr b, int l)
      : Expr(k, l), op(o), left(std::move(a)), right(std::move(b)) {}
  BinOp op;
  ExprPtr left, right;
};

struct ConcatExpr : Expr {  // a ~ b ~ c
  explicit ConcatExpr(int l) : Expr(ExprKind::kConcat, l) {}
  std::vector<ExprPtr> items;
};

enum class CmpOp { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct CompareExpr : Expr {  // a < b <= c, chained as in Python
  CompareExpr(ExprPtr f, int l) : Expr(ExprKind::kCompare, l), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<CmpOp, ExprPtr>> rest;
};

struct CondExpr : Expr {  // then if test else otherwise; otherwise may be null
  explicit CondExpr(int l) : Expr(ExprKind::kCondExpr, l) {}
  ExprPtr test, then, otherwise;
};

// ---- statements ---------------------------------------------------------------

// Where {% set %} and {% for %} store: a name, a tuple to unpack, or ns.attr.
struct Target {
  enum class Kind { kName, kTuple, kNamespaceAttr } kind = Kind::kName;
  std::string name;  // kName, and the namespace variable of kNamespaceAttr
  std::string attr;  // kNamespaceAttr
  std::vector<Target> items;  // kTuple
  int line = 0;
};

enum class StmtKind {
  kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kCallBlock, kFilterBlock, kGeneration,
  kBreak, kContinue, kWith,
};

struct Stmt {
  Stmt(StmtKind k, int l) : kind(k), line(l) {}
  virtual ~Stmt() = default;
  StmtKind kind;
  int line;
};
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct TextStmt : Stmt {
  TextStmt(std::string t, int l) : Stmt(StmtKind::kText, l), text(std::move(t)) {}
  std::string text;
};

struct OutputStmt : Stmt {  // {{ expr }} and {% print expr %}
  OutputStmt(ExprPtr e, int l) : Stmt(StmtKind::kOutput, l), expr(std::move(e)) {}
  ExprPtr expr;
};

struct IfStmt : Stmt {
  explicit IfStmt(int l) : Stmt(StmtKind::kIf, l) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, elif...
  Body else_body;
};

struct ForStmt : Stmt {
  explicit ForStmt(int l) : Stmt(StmtKind::kFor, l) {}
  Target target;
  ExprPtr iter, filter;  // filter: {% for x in xs if cond %}
  bool recursive = false;
  Body body, else_body;
};

struct SetStmt : Stmt {
  explicit SetStmt(int l) : Stmt(StmtKind::kSet, l) {}
  Target target;
  ExprPtr value;
};

struct SetBlockStmt : Stmt {  // {% set x | filter %}body{% endset %}
  explicit SetBlockStmt(int l) : Stmt(StmtKind::kSetBlock, l) {}
  Target target;
  ExprPtr filter;  // a FilterExpr chain whose innermost operand is null, or null
  Body body;
};

// A macro, or the body of a call block (the `caller`), or of {% generation %}.
struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last defaults.size() params
  Body body;
  // Whether the body mentions caller / varargs / kwargs, which decides what the macro accepts.
  bool uses_caller = false, uses_varargs = false, uses_kwargs = false;
  int line = 0;
};

struct MacroStmt : Stmt {
  explicit MacroStmt(int l) : Stmt(StmtKind::kMacro, l) {}
  MacroDef def;
};

struct CallBlockStmt : Stmt {  // {% call(args) macro(...) %}caller body{% endcall %}
  explicit CallBlockStmt(int l) : Stmt(StmtKind::kCallBlock, l) {}
  MacroDef caller;
  ExprPtr call;  // a CallExpr
};

struct FilterBlockStmt : Stmt {
  explicit FilterBlockStmt(int l) : Stmt(StmtKind::kFilterBlock, l) {}
  ExprPtr filter;  // as SetBlockStmt::filter
  Body body;
};

struct GenerationStmt : Stmt {  // transformers' {% generation %}: an assistant span
  explicit GenerationStmt(int l) : Stmt(StmtKind::kGeneration, l) {}
  Body body;
};

struct WithStmt : Stmt {
  explicit WithStmt(int l) : Stmt(StmtKind::kWith, l) {}
  std::vector<std::pair<Target, ExprPtr>> assignments;
  Body body;
};

// A parsed template.
struct Program {
  std::string name;
  Body body;
};

}  // namespace fptrain::jinja
