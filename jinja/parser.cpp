// Statements: the template body, tags and their bodies.
#include <algorithm>

#include "jinja/checks.h"
#include "jinja/parser.h"
#include "jinja/parser_impl.h"

namespace fptrain::jinja {

namespace {

std::string quoted_list(const std::vector<std::string>& tags) {
  std::string out;
  for (size_t i = 0; i < tags.size(); ++i) out += (i ? " or '" : "'") + tags[i] + "'";
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

bool assigns_loop(const Target& t) {
  if (t.kind == Target::Kind::kName) return t.name == "loop";
  return std::any_of(t.items.begin(), t.items.end(), assigns_loop);
}

}  // namespace

Parser::Nest::Nest(const Parser& p, int& c, int limit, const char* what) : counter(c) {
  if (++counter > limit) {
    --counter;
    p.fail(std::string(what) + " nested too deeply (limit " + std::to_string(limit) + ")");
  }
}

const Token& Parser::next() {
  const Token& t = toks_[i_];
  if (i_ + 1 < toks_.size()) ++i_;
  return t;
}

bool Parser::skip_op(const char* op) {
  if (!is_op(op)) return false;
  next();
  return true;
}

bool Parser::skip_name(const char* n) {
  if (!is_name(n)) return false;
  next();
  return true;
}

const Token& Parser::expect(TokenType t, const char* what) {
  if (cur().type != t) fail(std::string("expected ") + what + ", got " + describe(cur()));
  return next();
}

const Token& Parser::expect_op(const char* op) {
  if (!is_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
  return next();
}

void Parser::expect_name(const char* n) {
  if (!is_name(n)) fail(std::string("expected '") + n + "', got " + describe(cur()));
  next();
}

void Parser::fail(const std::string& message, int line) const {
  Error e(Error::Kind::kSyntax, message);
  e.locate(name_, line > 0 ? line : cur().line);
  throw e;
}

void Parser::fail_unknown_tag(const std::string& tag, int line) const {
  bool expected_elsewhere = false;  // an end tag of an outer block: a nesting mistake
  for (const auto& ends : end_stack_) expected_elsewhere = expected_elsewhere || contains(ends, tag);
  std::string msg = (expected_elsewhere ? "unexpected tag '" : "unknown tag '") + tag + "'";
  if (!open_tags_.empty() && !end_stack_.empty())
    msg += " (the '" + open_tags_.back().tag + "' block from line " + std::to_string(open_tags_.back().line) +
           " expects " + quoted_list(end_stack_.back()) + ")";
  fail(msg, line);
}

void Parser::fail_eof(const std::vector<std::string>& end_tags) const {
  std::string msg = "unexpected end of template";
  if (!open_tags_.empty())
    msg += ": the '" + open_tags_.back().tag + "' block from line " + std::to_string(open_tags_.back().line) +
           " is not closed (expected " + quoted_list(end_tags) + ")";
  fail(msg);
}

Body Parser::parse_template() { return subparse({}); }

Body Parser::subparse(const std::vector<std::string>& end_tags) {
  if (!end_tags.empty()) end_stack_.push_back(end_tags);
  Body body;
  while (!is(TokenType::kEof)) {
    const int line = cur().line;
    if (is(TokenType::kData)) {
      body.push_back(std::make_unique<TextStmt>(next().value, line));
    } else if (is(TokenType::kVariableBegin)) {
      next();
      ExprPtr e = parse_tuple(false, true, nullptr, false);
      expect(TokenType::kVariableEnd, "end of print statement");
      body.push_back(std::make_unique<OutputStmt>(std::move(e), line));
    } else if (is(TokenType::kBlockBegin)) {
      next();
      if (!end_tags.empty() && is(TokenType::kName) && contains(end_tags, cur().value)) {
        end_stack_.pop_back();
        return body;
      }
      parse_statement(body);
      expect(TokenType::kBlockEnd, "end of statement block");
    } else {
      fail("unexpected " + describe(cur()));
    }
  }
  if (!end_tags.empty()) end_stack_.pop_back();
  return body;
}

Body Parser::parse_statements(const std::vector<std::string>& end_tags, bool drop_needle) {
  skip_op(":");
  expect(TokenType::kBlockEnd, "end of statement block");
  Body body = subparse(end_tags);
  if (is(TokenType::kEof)) fail_eof(end_tags);
  if (drop_needle) next();
  return body;
}

Body Parser::parse_scoped_body(const std::vector<std::string>& end_tags) {
  const int saved = loop_depth_;
  loop_depth_ = 0;  // a macro body is a function of its own: no loop to break out of
  Body body = parse_statements(end_tags, true);
  loop_depth_ = saved;
  return body;
}

void Parser::parse_statement(Body& body) {
  if (!is(TokenType::kName)) fail("tag name expected");
  Nest nest(*this, stmt_depth_, kMaxStmtDepth, "statements");
  const std::string tag = cur().value;
  const int line = cur().line;
  open_tags_.push_back({tag, line});
  if (tag == "for") {
    body.push_back(parse_for());
  } else if (tag == "if") {
    body.push_back(parse_if());
  } else if (tag == "set") {
    body.push_back(parse_set());
  } else if (tag == "macro") {
    body.push_back(parse_macro());
  } else if (tag == "call") {
    body.push_back(parse_call_block());
  } else if (tag == "filter") {
    body.push_back(parse_filter_block());
  } else if (tag == "with") {
    body.push_back(parse_with());
  } else if (tag == "generation") {
    body.push_back(parse_generation());
  } else if (tag == "print") {
    next();
    bool first = true;
    while (!is(TokenType::kBlockEnd)) {
      if (!first) expect_op(",");
      first = false;
      body.push_back(std::make_unique<OutputStmt>(parse_expression(), line));
    }
  } else if (tag == "break" || tag == "continue") {
    next();
    if (loop_depth_ == 0) fail("'" + tag + "' outside loop", line);
    body.push_back(std::make_unique<Stmt>(tag == "break" ? StmtKind::kBreak : StmtKind::kContinue, line));
  } else if (tag == "block" || tag == "extends" || tag == "include" || tag == "import" || tag == "from" ||
             tag == "autoescape") {
    fail("tag '" + tag + "' is not supported", line);
  } else {
    open_tags_.pop_back();
    fail_unknown_tag(tag, line);
  }
  open_tags_.pop_back();
}

StmtPtr Parser::parse_for() {
  auto s = std::make_unique<ForStmt>(next().line);
  s->target = parse_assign_target(true, false, "in");
  if (assigns_loop(s->target)) fail("can't assign to special loop variable in for-loop target", s->line);
  expect_name("in");
  s->iter = parse_tuple(false, false, "recursive", false);
  if (skip_name("if")) s->filter = parse_expression();
  s->recursive = skip_name("recursive");
  const int saved = loop_depth_;
  if (s->recursive) loop_depth_ = 0;  // jinja2 makes a recursive loop a function of its own
  ++loop_depth_;
  s->body = parse_statements({"endfor", "else"}, false);
  --loop_depth_;
  if (next().value != "endfor") s->else_body = parse_statements({"endfor"}, true);
  loop_depth_ = saved;
  return s;
}

StmtPtr Parser::parse_if() {
  auto s = std::make_unique<IfStmt>(next().line);
  while (true) {
    ExprPtr test = parse_tuple(false, false, nullptr, false);
    Body body = parse_statements({"elif", "else", "endif"}, false);
    s->branches.emplace_back(std::move(test), std::move(body));
    const std::string tok = next().value;
    if (tok == "elif") continue;
    if (tok == "else") s->else_body = parse_statements({"endif"}, true);
    break;
  }
  return s;
}

StmtPtr Parser::parse_set() {
  const int line = next().line;
  Target target = parse_assign_target(true, true);
  if (skip_op("=")) {
    auto s = std::make_unique<SetStmt>(line);
    s->target = std::move(target);
    s->value = parse_tuple(false, true, nullptr, false);
    return s;
  }
  auto s = std::make_unique<SetBlockStmt>(line);
  s->target = std::move(target);
  s->filter = parse_filter(nullptr, false);
  s->body = parse_statements({"endset"}, true);
  return s;
}

void Parser::parse_signature(MacroDef& def) {
  expect_op("(");
  while (!is_op(")")) {
    if (!def.params.empty()) expect_op(",");
    def.params.push_back(expect(TokenType::kName, "a parameter name").value);
    if (skip_op("="))
      def.defaults.push_back(parse_expression());
    else if (!def.defaults.empty())
      fail("non-default argument follows default argument");
  }
  expect_op(")");
}

StmtPtr Parser::parse_macro() {
  auto s = std::make_unique<MacroStmt>(next().line);
  s->def.line = s->line;
  s->def.name = expect(TokenType::kName, "a macro name").value;
  parse_signature(s->def);
  s->def.body = parse_scoped_body({"endmacro"});
  return s;
}

StmtPtr Parser::parse_call_block() {
  auto s = std::make_unique<CallBlockStmt>(next().line);
  s->caller.name = "caller";
  s->caller.line = s->line;
  if (is_op("(")) parse_signature(s->caller);
  s->call = parse_expression();
  if (s->call->kind != ExprKind::kCall) fail("expected call", s->line);
  s->caller.body = parse_scoped_body({"endcall"});
  return s;
}

StmtPtr Parser::parse_filter_block() {
  auto s = std::make_unique<FilterBlockStmt>(next().line);
  s->filter = parse_filter(nullptr, true);
  s->body = parse_statements({"endfilter"}, true);
  return s;
}

StmtPtr Parser::parse_with() {
  auto s = std::make_unique<WithStmt>(next().line);
  while (!is(TokenType::kBlockEnd)) {
    if (!s->assignments.empty()) expect_op(",");
    Target target = parse_assign_target(true, false);
    expect_op("=");
    s->assignments.emplace_back(std::move(target), parse_expression());
  }
  s->body = parse_statements({"endwith"}, true);
  return s;
}

StmtPtr Parser::parse_generation() {
  auto s = std::make_unique<GenerationStmt>(next().line);
  s->body = parse_scoped_body({"endgeneration"});  // a call block in transformers' extension
  return s;
}

Target Parser::parse_assign_target(bool with_tuple, bool with_namespace, const char* extra_end) {
  ExprPtr e = with_tuple ? parse_tuple(true, true, extra_end, false, with_namespace) : parse_primary(with_namespace);
  return target_from(*e);
}

Target Parser::target_from(const Expr& e) const {
  Target t;
  t.line = e.line;
  switch (e.kind) {
    case ExprKind::kName:
      t.name = static_cast<const NameExpr&>(e).name;
      return t;
    case ExprKind::kTuple:
      t.kind = Target::Kind::kTuple;
      for (const ExprPtr& item : static_cast<const SeqExpr&>(e).items) t.items.push_back(target_from(*item));
      return t;
    case ExprKind::kGetAttr: {  // only parse_primary(with_namespace) builds one here: ns.attr
      const auto& g = static_cast<const GetAttrExpr&>(e);
      t.kind = Target::Kind::kNamespaceAttr;
      t.name = static_cast<const NameExpr&>(*g.object).name;
      t.attr = g.name;
      return t;
    }
    default: break;
  }
  const char* what = e.kind == ExprKind::kConst ? "const" : e.kind == ExprKind::kList ? "list" : "expression";
  fail(std::string("can't assign to '") + what + "'", e.line);
}

Program parse(std::string_view source, const std::string& template_name) {
  Program program;
  program.name = template_name;
  Parser parser(tokenize(source, template_name), template_name);
  program.body = parser.parse_template();
  check_program(program);
  return program;
}

}  // namespace fptrain::jinja
