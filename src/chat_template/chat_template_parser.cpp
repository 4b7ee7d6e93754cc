// Recursive-descent parser mirroring jinja2's grammar (parser.py): the same
// precedence levels, tuple rules, test arguments without parentheses, and
// statement set that chat templates use.
#include "tessera/error.h"
#include "chat_template/chat_template_ast.h"
#include "chat_template/chat_template_builtins.h"

namespace tessera::chat_template_detail {

namespace {

// Bounds that keep parsing, evaluation and destruction of the tree off the
// end of the stack for any input.
constexpr int kMaxParseDepth = 150;
constexpr int kMaxExprHeight = 400;
constexpr int kMaxBlockDepth = 100;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Body parse_all() {
    Body body = subparse({});
    if (cur().type != Tok::Eof) fail_here("unexpected " + describe(cur()));
    return body;
  }

 private:
  std::vector<Token> toks_;
  std::size_t i_ = 0;
  int depth_ = 0;        // parser recursion
  int block_depth_ = 0;  // nested block statements
  int loop_depth_ = 0;   // enclosing for loops (for break/continue)
  bool soft_ = false;    // inside an if/conditional expression: unknown filters fail only when run

  struct DepthGuard {
    int& d;
    DepthGuard(int& depth, int limit, const Parser& p) : d(depth) {
      if (++d > limit) p.fail_here("template nested too deeply");
    }
    ~DepthGuard() { --d; }
  };

  // Restores a flag at scope exit.
  template <typename T>
  struct Saved {
    T& ref;
    T old;
    Saved(T& r, T v) : ref(r), old(r) { ref = v; }
    ~Saved() { ref = old; }
  };

  const Token& cur() const { return toks_[i_]; }
  const Token& look() const { return toks_[std::min(i_ + 1, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[i_];
    if (i_ + 1 < toks_.size()) ++i_;
    return t;
  }

  [[noreturn]] void fail_here(const std::string& what) const { fail_at(cur().pos, what); }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::Data:
        return "template data";
      case Tok::VarBegin:
        return "'{{'";
      case Tok::VarEnd:
        return "end of print statement";
      case Tok::BlockBegin:
        return "'{%'";
      case Tok::BlockEnd:
        return "end of statement block";
      case Tok::Name:
        return "'" + t.text + "'";
      case Tok::String:
        return "string";
      case Tok::Int:
        return "integer";
      case Tok::Float:
        return "float";
      case Tok::Op:
        return "'" + t.text + "'";
      case Tok::Eof:
        return "end of template";
    }
    return "token";
  }

  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == Tok::Name && cur().text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail_here(std::string("expected '") + op + "', got " + describe(cur()));
  }
  void expect_name_kw(const char* name) {
    if (!skip_name(name)) fail_here(std::string("expected '") + name + "', got " + describe(cur()));
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail_here("expected a name, got " + describe(cur()));
    return next().text;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) fail_here("expected end of statement block, got " + describe(cur()));
    next();
  }

  // ------------------------------------------------------------ node helpers

  ExprPtr make(ExprKind kind, SourcePos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }

  // Computes the height and refuses trees too tall to evaluate recursively.
  ExprPtr done(ExprPtr e) {
    int h = 0;
    for (const auto& k : e->kids) {
      if (k) h = std::max(h, k->height);
    }
    for (const auto& kw : e->keywords) h = std::max(h, kw.value->height);
    if (e->dyn_args) h = std::max(h, e->dyn_args->height);
    if (e->dyn_kwargs) h = std::max(h, e->dyn_kwargs->height);
    e->height = h + 1;
    if (e->height > kMaxExprHeight) fail_at(e->pos, "expression too deeply nested");
    return e;
  }

  ExprPtr constant(Value v, SourcePos pos) {
    auto e = make(ExprKind::Const, pos);
    e->constant = std::move(v);
    return done(std::move(e));
  }

  // ------------------------------------------------------------ expressions

  ExprPtr parse_expression(bool with_condexpr = true) {
    DepthGuard guard(depth_, kMaxParseDepth, *this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      SourcePos pos = next().pos;
      Saved<bool> soft(soft_, true);
      auto cond = make(ExprKind::CondExpr, pos);
      ExprPtr test = parse_or();
      ExprPtr otherwise;
      if (skip_name("else")) otherwise = parse_condexpr();
      cond->kids.push_back(std::move(test));
      cond->kids.push_back(std::move(expr));
      cond->kids.push_back(std::move(otherwise));
      expr = done(std::move(cond));
    }
    return expr;
  }

  ExprPtr binary(ExprKind kind, const std::string& op, ExprPtr left, ExprPtr right, SourcePos pos) {
    auto e = make(kind, pos);
    e->name = op;
    e->kids.push_back(std::move(left));
    e->kids.push_back(std::move(right));
    return done(std::move(e));
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      SourcePos pos = next().pos;
      left = binary(ExprKind::Or, "or", std::move(left), parse_and(), pos);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      SourcePos pos = next().pos;
      left = binary(ExprKind::And, "and", std::move(left), parse_not(), pos);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(depth_, kMaxParseDepth, *this);
      SourcePos pos = next().pos;
      auto e = make(ExprKind::Not, pos);
      e->kids.push_back(parse_not());
      return done(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    SourcePos pos = cur().pos;
    ExprPtr first = parse_math1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> operands;
    while (true) {
      static const char* const kCmp[] = {"==", "!=", "<", "<=", ">", ">="};
      std::string op;
      for (const char* c : kCmp) {
        if (is_op(c)) op = c;
      }
      if (!op.empty()) {
        next();
      } else if (skip_name("in")) {
        op = "in";
      } else if (is_name("not") && look().type == Tok::Name && look().text == "in") {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      ops.push_back(op);
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto e = make(ExprKind::Compare, pos);
    e->kids.push_back(std::move(first));
    for (auto& o : operands) e->kids.push_back(std::move(o));
    e->ops = std::move(ops);
    return done(std::move(e));
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      SourcePos pos = cur().pos;
      std::string op = next().text;
      left = binary(ExprKind::Binary, op, std::move(left), parse_concat(), pos);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      SourcePos pos = next().pos;
      left = binary(ExprKind::Binary, "~", std::move(left), parse_math2(), pos);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      SourcePos pos = cur().pos;
      std::string op = next().text;
      left = binary(ExprKind::Binary, op, std::move(left), parse_pow(), pos);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      SourcePos pos = next().pos;
      left = binary(ExprKind::Binary, "**", std::move(left), parse_unary(true), pos);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(depth_, kMaxParseDepth, *this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      SourcePos pos = cur().pos;
      bool neg = next().text == "-";
      node = make(neg ? ExprKind::Neg : ExprKind::Pos, pos);
      node->kids.push_back(parse_unary(false));
      node = done(std::move(node));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    DepthGuard guard(depth_, kMaxParseDepth, *this);
    const Token& t = cur();
    SourcePos pos = t.pos;
    switch (t.type) {
      case Tok::Name: {
        std::string name = next().text;
        if (name == "true" || name == "True") return constant(Value::boolean(true), pos);
        if (name == "false" || name == "False") return constant(Value::boolean(false), pos);
        if (name == "none" || name == "None") return constant(Value::none(), pos);
        auto e = make(ExprKind::Name, pos);
        e->name = name;
        return done(std::move(e));
      }
      case Tok::String: {
        std::string s;
        while (cur().type == Tok::String) s += next().text;  // adjacent literals concatenate
        return constant(Value::string(std::move(s)), pos);
      }
      case Tok::Int:
        return constant(Value::integer(next().int_value), pos);
      case Tok::Float:
        return constant(Value::number(next().float_value), pos);
      case Tok::Op:
        if (t.text == "(") {
          next();
          ExprPtr e = parse_tuple(false, true, {}, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    fail_here("unexpected " + describe(t));
  }

  bool is_tuple_end(const std::vector<std::string>& extra_end) const {
    if (cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || is_op(")")) return true;
    if (cur().type == Tok::Eof) return true;
    for (const auto& n : extra_end) {
      if (cur().type == Tok::Name && cur().text == n) return true;
    }
    return false;
  }

  // Comma-separated expressions; a tuple when a comma appears (or `()`).
  ExprPtr parse_tuple(bool simplified, bool with_condexpr, const std::vector<std::string>& extra_end,
                      bool explicit_parens) {
    DepthGuard guard(depth_, kMaxParseDepth, *this);
    SourcePos pos = cur().pos;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail_here("expected an expression, got " + describe(cur()));
    }
    auto e = make(ExprKind::TupleLit, pos);
    e->kids = std::move(items);
    return done(std::move(e));
  }

  ExprPtr parse_list() {
    SourcePos pos = next().pos;
    auto e = make(ExprKind::ListLit, pos);
    while (!is_op("]")) {
      if (!e->kids.empty()) expect_op(",");
      if (is_op("]")) break;
      e->kids.push_back(parse_expression());
    }
    expect_op("]");
    return done(std::move(e));
  }

  ExprPtr parse_dict() {
    SourcePos pos = next().pos;
    auto e = make(ExprKind::DictLit, pos);
    while (!is_op("}")) {
      if (!e->kids.empty()) expect_op(",");
      if (is_op("}")) break;
      e->kids.push_back(parse_expression());
      expect_op(":");
      e->kids.push_back(parse_expression());
    }
    expect_op("}");
    return done(std::move(e));
  }

  ExprPtr parse_postfix(ExprPtr node) {
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

  ExprPtr parse_filter_expr(ExprPtr node) {
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

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& t = next();
    SourcePos pos = t.pos;
    if (t.text == ".") {
      const Token& attr = cur();
      if (attr.type == Tok::Name) {
        auto e = make(ExprKind::Getattr, pos);
        e->name = next().text;
        e->kids.push_back(std::move(node));
        return done(std::move(e));
      }
      if (attr.type != Tok::Int) fail_here("expected name or number");
      auto e = make(ExprKind::Getitem, pos);
      e->kids.push_back(std::move(node));
      e->kids.push_back(constant(Value::integer(next().int_value), attr.pos));
      return done(std::move(e));
    }
    std::vector<ExprPtr> args;
    while (!is_op("]")) {
      if (!args.empty()) expect_op(",");
      args.push_back(parse_subscribed());
    }
    expect_op("]");
    auto e = make(ExprKind::Getitem, pos);
    e->kids.push_back(std::move(node));
    if (args.size() == 1) {
      e->kids.push_back(std::move(args[0]));
    } else {
      auto tuple = make(ExprKind::TupleLit, pos);
      tuple->kids = std::move(args);
      e->kids.push_back(done(std::move(tuple)));
    }
    return done(std::move(e));
  }

  // One subscript: an expression or a slice `start:stop:step` with optional parts.
  ExprPtr parse_subscribed() {
    SourcePos pos = cur().pos;
    std::vector<ExprPtr> parts;
    if (is_op(":")) {
      next();
      parts.push_back(nullptr);
    } else {
      ExprPtr e = parse_expression();
      if (!is_op(":")) return e;
      next();
      parts.push_back(std::move(e));
    }
    if (is_op(":")) {
      parts.push_back(nullptr);
    } else if (!is_op("]") && !is_op(",")) {
      parts.push_back(parse_expression());
    } else {
      parts.push_back(nullptr);
    }
    if (skip_op(":")) {
      parts.push_back((!is_op("]") && !is_op(",")) ? parse_expression() : nullptr);
    } else {
      parts.push_back(nullptr);
    }
    auto e = make(ExprKind::Slice, pos);
    e->kids = std::move(parts);
    return done(std::move(e));
  }

  void parse_call_args(Expr& call) {
    SourcePos pos = cur().pos;
    expect_op("(");
    bool require_comma = false;
    while (!is_op(")")) {
      if (require_comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*")) {
        if (call.dyn_args || call.dyn_kwargs) fail_at(pos, "invalid syntax for function call expression");
        next();
        call.dyn_args = parse_expression();
      } else if (is_op("**")) {
        if (call.dyn_kwargs) fail_at(pos, "invalid syntax for function call expression");
        next();
        call.dyn_kwargs = parse_expression();
      } else if (cur().type == Tok::Name && look().type == Tok::Op && look().text == "=") {
        std::string key = next().text;
        next();
        if (call.dyn_kwargs) fail_at(pos, "invalid syntax for function call expression");
        call.keywords.push_back(Keyword{key, parse_expression()});
      } else {
        if (!call.keywords.empty() || call.dyn_args || call.dyn_kwargs) {
          fail_at(pos, "invalid syntax for function call expression");
        }
        call.kids.push_back(parse_expression());
      }
      require_comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make(ExprKind::Call, callee->pos);  // errors point at the callee, e.g. raise_exception
    e->kids.push_back(std::move(callee));
    parse_call_args(*e);
    return done(std::move(e));
  }

  std::string dotted_name() {
    std::string name = expect_name();
    while (is_op(".")) {
      next();
      name += "." + expect_name();
    }
    return name;
  }

  // `| name(args)` repeated; `node` may be null for filter blocks.
  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) next();
      start_inline = false;
      SourcePos pos = cur().pos;
      auto e = make(ExprKind::Filter, pos);
      e->name = dotted_name();
      if (!is_known_filter(e->name)) {
        if (!soft_) fail_at(pos, "no filter named '" + e->name + "'");
        e->soft = true;
      }
      if (!node) {  // filter block: the operand is the rendered body, bound to a reserved name
        node = make(ExprKind::Name, pos);
        node->name = "";
        node = done(std::move(node));
      }
      e->kids.push_back(std::move(node));
      if (is_op("(")) parse_call_args(*e);
      node = done(std::move(e));
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    SourcePos pos = next().pos;  // `is`
    bool negated = skip_name("not");
    auto e = make(ExprKind::Test, pos);
    e->name = dotted_name();
    e->negated = negated;
    if (!is_known_test(e->name)) {
      if (!soft_) fail_at(pos, "no test named '" + e->name + "'");
      e->soft = true;
    }
    e->kids.push_back(std::move(node));
    const Token& t = cur();
    bool arg_start = t.type == Tok::Name || t.type == Tok::String || t.type == Tok::Int ||
                     t.type == Tok::Float ||
                     (t.type == Tok::Op && (t.text == "(" || t.text == "[" || t.text == "{"));
    if (is_op("(")) {
      parse_call_args(*e);
    } else if (arg_start && !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail_here("you cannot chain multiple tests with is");
      e->kids.push_back(parse_postfix(parse_primary()));
    }
    return done(std::move(e));
  }

  // ------------------------------------------------------------ statements

  bool at_end_tag(const std::vector<std::string>& end_tags) const {
    if (cur().type != Tok::Name) return false;
    for (const auto& t : end_tags) {
      if (cur().text == t) return true;
    }
    return false;
  }

  // Statements until one of end_tags (left as the current token) or the end.
  Body subparse(const std::vector<std::string>& end_tags) {
    Body body;
    while (cur().type != Tok::Eof) {
      const Token& t = cur();
      if (t.type == Tok::Data) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::Text;
        s->pos = t.pos;
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == Tok::VarBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::Print;
        s->pos = next().pos;
        s->expr = parse_tuple(false, true, {}, false);
        if (cur().type != Tok::VarEnd) fail_here("expected end of print statement, got " + describe(cur()));
        next();
        body.push_back(std::move(s));
      } else if (t.type == Tok::BlockBegin) {
        next();
        if (!end_tags.empty() && at_end_tag(end_tags)) return body;
        body.push_back(parse_statement());
        expect_block_end();
      } else {
        fail_here("unexpected " + describe(t));
      }
    }
    return body;
  }

  // `%}` then statements up to one of end_tags; consumes the end tag name when drop_needle.
  Body parse_statements(const std::vector<std::string>& end_tags, bool drop_needle) {
    skip_op(":");
    expect_block_end();
    Body body = subparse(end_tags);
    if (cur().type == Tok::Eof) {
      std::string expected;
      for (const auto& t : end_tags) expected += (expected.empty() ? "'" : " or '") + t + "'";
      fail_here("unexpected end of template, expected " + expected);
    }
    if (drop_needle) next();
    return body;
  }

  StmtPtr new_stmt(StmtKind kind, SourcePos pos) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->pos = pos;
    return s;
  }

  StmtPtr parse_statement() {
    DepthGuard guard(block_depth_, kMaxBlockDepth, *this);
    const Token& t = cur();
    if (t.type != Tok::Name) fail_here("tag name expected");
    const std::string& name = t.text;
    if (name == "for") return parse_for();
    if (name == "if") return parse_if();
    if (name == "set") return parse_set();
    if (name == "macro") return parse_macro();
    if (name == "call") return parse_call_block();
    if (name == "filter") return parse_filter_block();
    if (name == "with") return parse_with();
    if (name == "generation") return parse_generation();
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) fail_here("'" + name + "' outside loop");
      return new_stmt(name == "break" ? StmtKind::Break : StmtKind::Continue, next().pos);
    }
    if (name == "block" || name == "extends" || name == "include" || name == "import" || name == "from" ||
        name == "autoescape" || name == "do" || name == "trans") {
      fail_here("tag '" + name + "' is not supported in chat templates");
    }
    fail_here("encountered unknown tag '" + name + "'");
  }

  Target parse_assign_target(bool with_namespace, const std::vector<std::string>& extra_end) {
    Target target;
    target.pos = cur().pos;
    if (with_namespace && cur().type == Tok::Name && look().type == Tok::Op && look().text == ".") {
      target.names.push_back(next().text);
      next();
      target.attr = expect_name();
      return target;
    }
    while (true) {
      if (!target.names.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      if (cur().type != Tok::Name) fail_here("can't assign to " + describe(cur()));
      const std::string& n = cur().text;
      if (n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None") {
        fail_here("can't assign to const");
      }
      target.names.push_back(next().text);
      if (is_op(",")) {
        target.is_tuple = true;
      } else {
        break;
      }
    }
    if (target.names.empty()) fail_here("can't assign to tuple");
    return target;
  }

  StmtPtr parse_for() {
    auto s = new_stmt(StmtKind::For, next().pos);
    s->target = parse_assign_target(false, {"in"});
    expect_name_kw("in");
    s->expr = parse_tuple(false, false, {"recursive"}, false);
    if (skip_name("if")) s->filter = parse_expression();
    if (is_name("recursive")) fail_here("recursive loops are not supported");
    Saved<bool> soft(soft_, false);
    {
      Saved<int> loops(loop_depth_, loop_depth_ + 1);
      s->bodies.push_back(parse_statements({"endfor", "else"}, false));
    }
    if (next().text == "else") s->else_body = parse_statements({"endfor"}, true);
    return s;
  }

  StmtPtr parse_if() {
    auto s = new_stmt(StmtKind::If, next().pos);
    Saved<bool> soft(soft_, true);
    while (true) {
      s->conditions.push_back(parse_tuple(false, false, {}, false));
      s->bodies.push_back(parse_statements({"elif", "else", "endif"}, false));
      std::string tag = next().text;
      if (tag == "elif") continue;
      if (tag == "else") s->else_body = parse_statements({"endif"}, true);
      break;
    }
    return s;
  }

  StmtPtr parse_set() {
    SourcePos pos = next().pos;
    Target target = parse_assign_target(true, {});
    if (skip_op("=")) {
      auto s = new_stmt(StmtKind::Set, pos);
      s->target = std::move(target);
      s->expr = parse_tuple(false, true, {}, false);
      return s;
    }
    auto s = new_stmt(StmtKind::SetBlock, pos);
    s->target = std::move(target);
    Saved<bool> soft(soft_, false);
    s->filter = parse_filter(nullptr, false);
    s->bodies.push_back(parse_statements({"endset"}, true));
    return s;
  }

  std::vector<Param> parse_signature() {
    std::vector<Param> params;
    expect_op("(");
    bool has_default = false;
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      Param p;
      p.name = expect_name();
      if (skip_op("=")) {
        p.default_value = parse_expression();
        has_default = true;
      } else if (has_default) {
        fail_here("non-default argument follows default argument");
      }
      params.push_back(std::move(p));
    }
    expect_op(")");
    return params;
  }

  StmtPtr parse_macro() {
    auto s = new_stmt(StmtKind::Macro, next().pos);
    auto m = std::make_shared<MacroDef>();
    m->pos = s->pos;
    m->name = expect_name();
    m->params = parse_signature();
    Saved<bool> soft(soft_, false);
    Saved<int> loops(loop_depth_, 0);
    m->body = parse_statements({"endmacro"}, true);
    s->macro = std::move(m);
    return s;
  }

  StmtPtr parse_call_block() {
    auto s = new_stmt(StmtKind::CallBlock, next().pos);
    auto m = std::make_shared<MacroDef>();
    m->pos = s->pos;
    m->name = "caller";
    if (is_op("(")) m->params = parse_signature();
    s->expr = parse_expression();
    if (s->expr->kind != ExprKind::Call) fail_at(s->pos, "expected call");
    Saved<bool> soft(soft_, false);
    Saved<int> loops(loop_depth_, 0);
    m->body = parse_statements({"endcall"}, true);
    s->macro = std::move(m);
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = new_stmt(StmtKind::FilterBlock, next().pos);
    Saved<bool> soft(soft_, false);
    s->filter = parse_filter(nullptr, true);
    s->bodies.push_back(parse_statements({"endfilter"}, true));
    return s;
  }

  StmtPtr parse_with() {
    auto s = new_stmt(StmtKind::With, next().pos);
    while (cur().type != Tok::BlockEnd) {
      if (!s->with_targets.empty()) expect_op(",");
      s->with_targets.push_back(parse_assign_target(false, {}));
      expect_op("=");
      s->with_values.push_back(parse_expression());
    }
    Saved<bool> soft(soft_, false);
    s->bodies.push_back(parse_statements({"endwith"}, true));
    return s;
  }

  StmtPtr parse_generation() {
    auto s = new_stmt(StmtKind::Generation, next().pos);
    s->bodies.push_back(parse_statements({"endgeneration"}, true));
    return s;
  }
};

// jinja2 reads templates with universal newlines and drops one trailing newline.
std::string normalize_source(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::shared_ptr<Program> parse_template(const std::string& source) {
  std::size_t bad = 0;
  if (!utf8_valid(source, &bad)) {
    std::string prefix = source.substr(0, bad);
    int line = 1;
    std::size_t line_start = 0;
    for (std::size_t i = 0; i < prefix.size(); ++i) {
      if (prefix[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    fail_at({line, static_cast<int>(utf8_length(std::string_view(prefix).substr(line_start))) + 1},
            "template is not valid UTF-8");
  }
  auto program = std::make_shared<Program>();
  Parser parser(lex_template(normalize_source(source)));
  program->body = parser.parse_all();
  return program;
}

}  // namespace tessera::chat_template_detail
