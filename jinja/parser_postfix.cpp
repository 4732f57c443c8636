// What follows an operand: .attr, [key], [a:b:c], (args), |filter(args) and
// `is test args`.
#include "jinja/parser_impl.h"

namespace fptrain::jinja {

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(".") || is_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op("|")) {
      node = parse_filter(std::move(node), false);
    } else if (is_name("is")) {
      node = parse_test(std::move(node));
    } else if (is_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr Parser::parse_call(ExprPtr callee) {
  auto c = std::make_unique<CallExpr>(std::move(callee), cur().line);
  parse_call_args(c->args);
  add_depth(*c, c->callee.get());
  add_depth(*c, c->args);
  return c;
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
  const Token& tok = next();
  const int line = tok.line;
  if (tok.value == ".") {
    const Token& attr = next();
    ExprPtr out;
    if (attr.type == TokenType::kName) {
      out = std::make_unique<GetAttrExpr>(std::move(node), attr.value, line);
      add_depth(*out, static_cast<GetAttrExpr&>(*out).object.get());
      return out;
    }
    if (attr.type != TokenType::kInteger) fail("expected name or number", attr.line);
    auto g = std::make_unique<GetItemExpr>(std::move(node),
                                           std::make_unique<ConstExpr>(Value::integer(attr.int_value), attr.line), line);
    add_depth(*g, g->object.get());
    return g;
  }
  std::vector<ExprPtr> args;
  while (!is_op("]")) {
    if (!args.empty()) expect_op(",");
    args.push_back(parse_subscribed());
  }
  expect_op("]");
  ExprPtr key;
  if (args.size() == 1) {
    key = std::move(args[0]);
  } else {
    auto t = std::make_unique<SeqExpr>(ExprKind::kTuple, line);
    for (const ExprPtr& a : args) add_depth(*t, a.get());
    t->items = std::move(args);
    key = std::move(t);
  }
  auto g = std::make_unique<GetItemExpr>(std::move(node), std::move(key), line);
  add_depth(*g, g->object.get());
  add_depth(*g, g->key.get());
  return g;
}

ExprPtr Parser::parse_subscribed() {
  auto s = std::make_unique<SliceExpr>(cur().line);
  if (!skip_op(":")) {
    ExprPtr start = parse_expression();
    if (!skip_op(":")) return start;
    s->start = std::move(start);
  }
  if (!is_op(":") && !is_op("]") && !is_op(",")) s->stop = parse_expression();
  if (skip_op(":") && !is_op("]") && !is_op(",")) s->step = parse_expression();
  add_depth(*s, s->start.get());
  add_depth(*s, s->stop.get());
  add_depth(*s, s->step.get());
  return s;
}

void Parser::parse_call_args(ArgsExpr& args) {
  const int line = expect_op("(").line;
  auto ensure = [&](bool ok) {
    if (!ok) fail("invalid syntax for function call expression", line);
  };
  bool require_comma = false;
  while (!is_op(")")) {
    if (require_comma) {
      expect_op(",");
      if (is_op(")")) break;  // trailing comma
    }
    if (skip_op("*")) {
      ensure(!args.star && !args.star_star);
      args.star = parse_expression();
    } else if (skip_op("**")) {
      ensure(!args.star_star);
      args.star_star = parse_expression();
    } else if (is(TokenType::kName) && look().type == TokenType::kOperator && look().value == "=") {
      ensure(!args.star_star);
      std::string key = next().value;
      next();
      args.keyword.emplace_back(std::move(key), parse_expression());
    } else {
      ensure(!args.star && !args.star_star && args.keyword.empty());
      args.positional.push_back(parse_expression());
    }
    require_comma = true;
  }
  expect_op(")");
}

ExprPtr Parser::parse_filter(ExprPtr node, bool start_inline) {
  while (is_op("|") || start_inline) {
    if (!start_inline) next();
    start_inline = false;
    const Token& tok = expect(TokenType::kName, "a filter name");
    std::string name = tok.value;
    const int line = tok.line;
    while (skip_op(".")) name += "." + expect(TokenType::kName, "a filter name").value;
    auto f = std::make_unique<FilterExpr>(std::move(node), std::move(name), line);
    if (is_op("(")) parse_call_args(f->args);
    add_depth(*f, f->operand.get());
    add_depth(*f, f->args);
    node = std::move(f);
  }
  return node;
}

ExprPtr Parser::parse_test(ExprPtr node) {
  const int line = next().line;  // "is"
  const bool negated = skip_name("not");
  std::string name = expect(TokenType::kName, "a test name").value;
  while (skip_op(".")) name += "." + expect(TokenType::kName, "a test name").value;
  auto t = std::make_unique<TestExpr>(std::move(node), std::move(name), line);
  const Token& c = cur();
  const bool arg_start = c.type == TokenType::kName || c.type == TokenType::kString || c.type == TokenType::kInteger ||
                         c.type == TokenType::kFloat || is_op("[") || is_op("{");
  if (is_op("(")) {
    parse_call_args(t->args);
  } else if (arg_start && !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail("You cannot chain multiple tests with is");
    t->args.positional.push_back(parse_postfix(parse_primary()));
  }
  add_depth(*t, t->operand.get());
  add_depth(*t, t->args);
  if (!negated) return t;
  auto n = std::make_unique<UnaryExpr>(ExprKind::kNot, std::move(t), line);
  add_depth(*n, n->operand.get());
  return n;
}

}  // namespace fptrain::jinja
