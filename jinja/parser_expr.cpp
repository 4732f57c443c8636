// Expressions, by precedence from loosest to tightest:
//   a if c else b  <  or  <  and  <  not  <  comparisons, in  <  + -  <  ~  <  * / // %  <  **
//   <  unary - +  <  postfix (.x [k] call)  <  filters |f and tests `is t`
// (a filter applies to the whole unary operand: -1|abs is (-1)|abs).
#include "jinja/parser_impl.h"

namespace fptrain::jinja {

namespace {

bool is_compare_op(const Token& t) {
  if (t.type != TokenType::kOperator) return false;
  const std::string& v = t.value;
  return v == "==" || v == "!=" || v == "<" || v == "<=" || v == ">" || v == ">=";
}

CmpOp compare_op(const std::string& v) {
  if (v == "==") return CmpOp::kEq;
  if (v == "!=") return CmpOp::kNe;
  if (v == "<") return CmpOp::kLt;
  if (v == "<=") return CmpOp::kLe;
  if (v == ">") return CmpOp::kGt;
  return CmpOp::kGe;
}

}  // namespace

void Parser::add_depth(Expr& node, const Expr* child) const {
  if (child == nullptr) return;
  node.depth = std::max(node.depth, child->depth + 1);
  if (node.depth > kMaxExprDepth)
    fail("expression nested too deeply (limit " + std::to_string(kMaxExprDepth) + ")", node.line);
}

void Parser::add_depth(Expr& node, const ArgsExpr& args) const {
  for (const ExprPtr& a : args.positional) add_depth(node, a.get());
  for (const auto& kw : args.keyword) add_depth(node, kw.second.get());
  add_depth(node, args.star.get());
  add_depth(node, args.star_star.get());
}

bool Parser::is_tuple_end(const char* extra_end) const {
  if (is(TokenType::kVariableEnd) || is(TokenType::kBlockEnd) || is_op(")")) return true;
  return extra_end != nullptr && is_name(extra_end);
}

ExprPtr Parser::parse_tuple(bool simplified, bool with_condexpr, const char* extra_end, bool explicit_parens,
                            bool with_namespace) {
  const int line = cur().line;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_op(",");
    if (is_tuple_end(extra_end)) break;
    items.push_back(simplified ? parse_primary(with_namespace) : parse_expression(with_condexpr));
    if (!is_op(",")) break;
    is_tuple = true;
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) fail("expected an expression, got " + describe(cur()));
  }
  auto t = std::make_unique<SeqExpr>(ExprKind::kTuple, line);
  for (const ExprPtr& item : items) add_depth(*t, item.get());
  t->items = std::move(items);
  return t;
}

ExprPtr Parser::parse_expression(bool with_condexpr) {
  Nest nest(*this, nesting_, kMaxExprDepth, "expression");
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr Parser::parse_condexpr() {
  int line = cur().line;
  ExprPtr e = parse_or();
  while (skip_name("if")) {
    auto c = std::make_unique<CondExpr>(line);
    c->test = parse_or();
    if (skip_name("else")) c->otherwise = parse_condexpr();
    c->then = std::move(e);
    add_depth(*c, c->test.get());
    add_depth(*c, c->then.get());
    add_depth(*c, c->otherwise.get());
    e = std::move(c);
    line = cur().line;
  }
  return e;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name("or")) {
    const int line = next().line;
    ExprPtr right = parse_and();
    auto b = std::make_unique<BinaryExpr>(ExprKind::kOr, BinOp::kAdd, std::move(left), std::move(right), line);
    add_depth(*b, b->left.get());
    add_depth(*b, b->right.get());
    left = std::move(b);
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name("and")) {
    const int line = next().line;
    ExprPtr right = parse_not();
    auto b = std::make_unique<BinaryExpr>(ExprKind::kAnd, BinOp::kAdd, std::move(left), std::move(right), line);
    add_depth(*b, b->left.get());
    add_depth(*b, b->right.get());
    left = std::move(b);
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (!is_name("not")) return parse_compare();
  Nest nest(*this, nesting_, kMaxExprDepth, "expression");
  const int line = next().line;
  auto n = std::make_unique<UnaryExpr>(ExprKind::kNot, parse_not(), line);
  add_depth(*n, n->operand.get());
  return n;
}

ExprPtr Parser::parse_compare() {
  const int line = cur().line;
  ExprPtr first = parse_math1();
  std::unique_ptr<CompareExpr> cmp;
  while (true) {
    CmpOp op;
    if (is_compare_op(cur())) {
      op = compare_op(next().value);
    } else if (skip_name("in")) {
      op = CmpOp::kIn;
    } else if (is_name("not") && look().type == TokenType::kName && look().value == "in") {
      next();
      next();
      op = CmpOp::kNotIn;
    } else {
      break;
    }
    if (!cmp) {
      cmp = std::make_unique<CompareExpr>(std::move(first), line);
      add_depth(*cmp, cmp->first.get());
    }
    cmp->rest.emplace_back(op, parse_math1());
    add_depth(*cmp, cmp->rest.back().second.get());
  }
  if (!cmp) return first;
  return cmp;
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    const Token& t = next();
    const BinOp op = t.value == "+" ? BinOp::kAdd : BinOp::kSub;
    auto b = std::make_unique<BinaryExpr>(ExprKind::kBinary, op, std::move(left), parse_concat(), t.line);
    add_depth(*b, b->left.get());
    add_depth(*b, b->right.get());
    left = std::move(b);
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  const int line = cur().line;
  ExprPtr first = parse_math2();
  if (!is_op("~")) return first;
  auto c = std::make_unique<ConcatExpr>(line);
  add_depth(*c, first.get());
  c->items.push_back(std::move(first));
  while (skip_op("~")) {
    c->items.push_back(parse_math2());
    add_depth(*c, c->items.back().get());
  }
  return c;
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& t = next();
    const BinOp op = t.value == "*" ? BinOp::kMul : t.value == "/" ? BinOp::kDiv : t.value == "//" ? BinOp::kFloorDiv : BinOp::kMod;
    auto b = std::make_unique<BinaryExpr>(ExprKind::kBinary, op, std::move(left), parse_pow(), t.line);
    add_depth(*b, b->left.get());
    add_depth(*b, b->right.get());
    left = std::move(b);
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary();
  while (is_op("**")) {
    const int line = next().line;
    auto b = std::make_unique<BinaryExpr>(ExprKind::kBinary, BinOp::kPow, std::move(left), parse_unary(), line);
    add_depth(*b, b->left.get());
    add_depth(*b, b->right.get());
    left = std::move(b);
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  Nest nest(*this, nesting_, kMaxExprDepth, "expression");
  const int line = cur().line;
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    const ExprKind kind = next().value == "-" ? ExprKind::kNeg : ExprKind::kPos;
    node = std::make_unique<UnaryExpr>(kind, parse_unary(false), line);
    add_depth(*node, static_cast<UnaryExpr&>(*node).operand.get());
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr Parser::parse_primary(bool with_namespace) {
  const Token& tok = cur();
  const int line = tok.line;
  switch (tok.type) {
    case TokenType::kName: {
      const std::string name = next().value;
      if (name == "true" || name == "True") return std::make_unique<ConstExpr>(Value::boolean(true), line);
      if (name == "false" || name == "False") return std::make_unique<ConstExpr>(Value::boolean(false), line);
      if (name == "none" || name == "None") return std::make_unique<ConstExpr>(Value::none(), line);
      if (with_namespace && skip_op(".")) {
        std::string attr = expect(TokenType::kName, "an attribute name").value;
        auto g = std::make_unique<GetAttrExpr>(std::make_unique<NameExpr>(name, line), std::move(attr), line);
        g->depth = 2;
        return g;
      }
      return std::make_unique<NameExpr>(name, line);
    }
    case TokenType::kString: {
      std::string s = next().value;
      while (is(TokenType::kString)) s += next().value;  // adjacent literals join, as in Python
      return std::make_unique<ConstExpr>(Value::string(std::move(s)), line);
    }
    case TokenType::kInteger: return std::make_unique<ConstExpr>(Value::integer(next().int_value), line);
    case TokenType::kFloat: return std::make_unique<ConstExpr>(Value::number(next().float_value), line);
    case TokenType::kOperator:
      if (tok.value == "(") {
        next();
        ExprPtr e = parse_tuple(false, true, nullptr, true);
        expect_op(")");
        return e;
      }
      if (tok.value == "[") return parse_list();
      if (tok.value == "{") return parse_dict();
      break;
    default: break;
  }
  fail("unexpected " + describe(tok));
}

ExprPtr Parser::parse_list() {
  auto l = std::make_unique<SeqExpr>(ExprKind::kList, expect_op("[").line);
  while (!is_op("]")) {
    if (!l->items.empty()) expect_op(",");
    if (is_op("]")) break;
    l->items.push_back(parse_expression());
    add_depth(*l, l->items.back().get());
  }
  expect_op("]");
  return l;
}

ExprPtr Parser::parse_dict() {
  auto d = std::make_unique<DictExpr>(expect_op("{").line);
  while (!is_op("}")) {
    if (!d->items.empty()) expect_op(",");
    if (is_op("}")) break;
    ExprPtr key = parse_expression();
    expect_op(":");
    ExprPtr value = parse_expression();
    add_depth(*d, key.get());
    add_depth(*d, value.get());
    d->items.emplace_back(std::move(key), std::move(value));
  }
  expect_op("}");
  return d;
}

}  // namespace fptrain::jinja
