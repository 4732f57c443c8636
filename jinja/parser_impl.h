// The parser's internals, shared by parser.cpp (statements) and
// parser_expr.cpp (expressions). Not part of the library's interface.
#pragma once

#include <string>
#include <vector>

#include "jinja/ast.h"
#include "jinja/lexer.h"

namespace fptrain::jinja {

// Bounds on nesting, so that deep input is an error rather than a stack overflow.
inline constexpr int kMaxExprDepth = 200;  // depth of an expression tree
inline constexpr int kMaxStmtDepth = 200;  // statements nested in statements

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& name) : toks_(std::move(tokens)), name_(name) {}
  Body parse_template();

 private:
  // ---- tokens
  const Token& cur() const { return toks_[i_]; }
  const Token& look() const { return toks_[std::min(i_ + 1, toks_.size() - 1)]; }
  const Token& next();
  bool is(TokenType t) const { return cur().type == t; }
  bool is_op(const char* op) const { return cur().type == TokenType::kOperator && cur().value == op; }
  bool is_name(const char* n) const { return cur().type == TokenType::kName && cur().value == n; }
  bool skip_op(const char* op);
  bool skip_name(const char* n);
  const Token& expect(TokenType t, const char* what);
  const Token& expect_op(const char* op);
  void expect_name(const char* n);
  [[noreturn]] void fail(const std::string& message, int line = 0) const;

  // ---- statements (parser.cpp)
  Body subparse(const std::vector<std::string>& end_tags);
  Body parse_statements(const std::vector<std::string>& end_tags, bool drop_needle);
  void parse_statement(Body& body);
  StmtPtr parse_for();
  StmtPtr parse_if();
  StmtPtr parse_set();
  StmtPtr parse_macro();
  StmtPtr parse_call_block();
  StmtPtr parse_filter_block();
  StmtPtr parse_with();
  StmtPtr parse_generation();
  void parse_signature(MacroDef& def);
  Body parse_scoped_body(const std::vector<std::string>& end_tags);  // a macro-like body: no enclosing loop
  Target parse_assign_target(bool with_tuple, bool with_namespace, const char* extra_end = nullptr);
  Target target_from(const Expr& e) const;
  [[noreturn]] void fail_unknown_tag(const std::string& tag, int line) const;
  [[noreturn]] void fail_eof(const std::vector<std::string>& end_tags) const;

  // ---- expressions (parser_expr.cpp)
  ExprPtr parse_tuple(bool simplified, bool with_condexpr, const char* extra_end, bool explicit_parens,
                      bool with_namespace = false);
  ExprPtr parse_expression(bool with_condexpr = true);
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter = true);
  ExprPtr parse_primary(bool with_namespace = false);
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_call(ExprPtr callee);  // at "(": the call of `callee` with its arguments
  ExprPtr parse_subscribed();
  void parse_call_args(ArgsExpr& args);
  ExprPtr parse_filter(ExprPtr node, bool start_inline);
  ExprPtr parse_test(ExprPtr node);
  bool is_tuple_end(const char* extra_end) const;
  // Records the depth of a new node over its children; fails past kMaxExprDepth.
  void add_depth(Expr& node, const Expr* child) const;
  void add_depth(Expr& node, const ArgsExpr& args) const;
  struct Nest {  // RAII: one level of parser recursion
    Nest(const Parser& p, int& counter, int limit, const char* what);
    ~Nest() { --counter; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;
    int& counter;
  };

  std::vector<Token> toks_;
  size_t i_ = 0;
  const std::string& name_;
  int nesting_ = 0;  // recursion of the expression parser (parentheses add no nodes)
  int stmt_depth_ = 0;
  int loop_depth_ = 0;  // for bodies around the current statement (break/continue need one)
  struct OpenTag {
    std::string tag;
    int line;
  };
  std::vector<OpenTag> open_tags_;                     // for "unclosed block" messages
  std::vector<std::vector<std::string>> end_stack_;   // end tags each open body waits for
};

}  // namespace fptrain::jinja
