// Tree-walking interpreter: jinja2's scoping (a fresh scope per loop
// iteration, macro and block; `if` shares its scope), Undefined semantics,
// getattr/getitem fallbacks of the sandbox, and the work limits.
#include <nlohmann/json.hpp>

#include "tessera/error.h"
#include "chat_template/chat_template_builtins.h"

namespace tessera::chat_template_detail {

namespace {

// A macro or a call block's `caller`: body + the scope it was defined in. The
// scope is held weakly so that a macro stored in its own scope is no cycle.
struct MacroFn : Callable {
  std::shared_ptr<MacroDef> def;
  std::weak_ptr<Scope> scope;
  Value caller;
  MacroFn(std::shared_ptr<MacroDef> d, std::weak_ptr<Scope> s, Value c)
      : def(std::move(d)), scope(std::move(s)), caller(std::move(c)) {}
  Value call(Interp& in, Args& args) override { return in.call_macro(def, scope, args, caller); }
  std::string repr() const override { return "<Macro '" + def->name + "'>"; }
};

struct DepthGuard {
  int& depth;
  DepthGuard(int& d, int limit) : depth(d) {
    if (++depth > limit) {
      --depth;
      raise("template recursion too deep (limit " + std::to_string(limit) + ")");
    }
  }
  ~DepthGuard() { --depth; }
};

Value undefined_name(const std::string& name) { return Value::undefined("'" + name + "' is undefined"); }

Value missing_attr(const Value& obj, const std::string& attr) {
  return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + attr + "'");
}

[[noreturn]] void undefined_error(const Value& v) {
  raise(v.undefined_hint().empty() ? "value is undefined" : v.undefined_hint());
}

// Python slice semantics (PySlice_AdjustIndices) over code points or items.
template <typename Seq>
Seq slice_seq(const Seq& seq, const Value& start_v, const Value& stop_v, const Value& step_v) {
  auto len = static_cast<std::int64_t>(seq.size());
  auto as_index = [](const Value& v) -> std::optional<std::int64_t> {
    if (v.is_none()) return std::nullopt;
    if (!v.is_int()) raise("slice indices must be integers or None");
    return v.as_int();
  };
  std::int64_t step = as_index(step_v).value_or(1);
  if (step == 0) raise("slice step cannot be zero");
  auto adjust = [&](std::optional<std::int64_t> i, bool is_start) {
    if (!i) return step < 0 ? (is_start ? len - 1 : -1) : (is_start ? 0 : len);
    std::int64_t x = *i;
    if (x < 0) {
      x += len;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= len) {
      x = step < 0 ? len - 1 : len;
    }
    return x;
  };
  std::int64_t start = adjust(as_index(start_v), true);
  std::int64_t stop = adjust(as_index(stop_v), false);
  Seq out;
  for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
    out.push_back(seq[static_cast<std::size_t>(i)]);
  return out;
}

Value loop_attr(const Value& loop_value, const std::string& name) {
  const LoopState& l = *loop_value.as_loop();
  const ValueList& items = l.items->items;
  auto n = static_cast<std::int64_t>(items.size());
  auto i = static_cast<std::int64_t>(l.index0);
  if (name == "index") return Value::integer(i + 1);
  if (name == "index0") return Value::integer(i);
  if (name == "revindex") return Value::integer(n - i);
  if (name == "revindex0") return Value::integer(n - i - 1);
  if (name == "first") return Value::boolean(i == 0);
  if (name == "last") return Value::boolean(i == n - 1);
  if (name == "length") return Value::integer(n);
  if (name == "depth") return Value::integer(l.depth0 + 1);
  if (name == "depth0") return Value::integer(l.depth0);
  if (name == "previtem")
    return i > 0 ? items[static_cast<std::size_t>(i - 1)] : Value::undefined("there is no previous item");
  if (name == "nextitem")
    return i + 1 < n ? items[static_cast<std::size_t>(i + 1)] : Value::undefined("there is no next item");
  if (auto m = method_value(loop_value, name)) return *m;
  return missing_attr(loop_value, name);
}

}  // namespace

Interp::Interp(const Program& program, Value globals, const ChatTemplateOptions& options)
    : program_(program), globals_(std::move(globals)), options_(options) {}

std::string Interp::render() {
  auto root = std::make_shared<Scope>();
  std::string out;
  exec(program_.body, root, out);
  return out;
}

void Interp::step(std::uint64_t n) {
  steps_ += n;
  if (steps_ > options_.limits.max_steps) {
    raise("template exceeded the work limit of " + std::to_string(options_.limits.max_steps) + " steps");
  }
}

void Interp::charge(const Value& v) {
  switch (v.kind()) {
    case Kind::String:
      step(v.as_str().size() / 256);
      break;
    case Kind::List:
    case Kind::Tuple:
      step(v.as_list().size() / 16);
      break;
    case Kind::Dict:
      step(v.as_dict().size() / 16);
      break;
    default:
      break;
  }
}

void Interp::check_size(std::size_t n) const {
  if (n > options_.limits.max_output_bytes) {
    raise("value exceeds the size limit of " + std::to_string(options_.limits.max_output_bytes) + " bytes");
  }
}

std::tm Interp::now() const {
  std::tm tm{};
  if (options_.now_unix_seconds) {
    auto t = static_cast<std::time_t>(*options_.now_unix_seconds);
    gmtime_r(&t, &tm);
  } else {
    std::time_t t = std::time(nullptr);
    localtime_r(&t, &tm);
  }
  return tm;
}

void Interp::append_output(std::string& out, const std::string& text) {
  check_size(out.size() + text.size());
  step(text.size() / 256);
  out += text;
}

// ------------------------------------------------------------ lookups

Value Interp::lookup(const std::string& name, const ScopePtr& scope) const {
  for (const Scope* s = scope.get(); s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  if (const Value* v = globals_.as_dict().find(name)) return *v;
  if (auto g = global_value(name)) return *g;
  return undefined_name(name);
}

Value Interp::getattr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Kind::Undefined:
      undefined_error(obj);
    case Kind::Dict:
      // Python attribute lookup first (dict methods), then the item.
      if (auto m = method_value(obj, name)) return *m;
      if (const Value* v = obj.as_dict().find(name)) return *v;
      return missing_attr(obj, name);
    case Kind::Namespace:
      if (const Value* v = obj.as_ns()->attrs.find(name)) return *v;
      return missing_attr(obj, name);
    case Kind::Loop:
      return loop_attr(obj, name);
    default:
      if (auto m = method_value(obj, name)) return *m;
      return missing_attr(obj, name);
  }
}

Value Interp::getitem(const Value& obj, const Value& key) {
  charge(obj);
  switch (obj.kind()) {
    case Kind::Undefined:
      undefined_error(obj);
    case Kind::Dict: {
      if (key.kind() == Kind::List || key.kind() == Kind::Dict) break;
      if (const Value* v = obj.as_dict().find(key)) return *v;
      break;
    }
    case Kind::List:
    case Kind::Tuple:
    case Kind::String: {
      if (!key.is_int()) break;
      std::int64_t i = key.as_int();
      if (obj.is_string()) {
        std::u32string u = utf8_decode(obj.as_str());
        auto n = static_cast<std::int64_t>(u.size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined("string index out of range");
        std::string out;
        utf8_append(out, u[static_cast<std::size_t>(i)]);
        return Value::string(out);
      }
      const ValueList& items = obj.as_list();
      auto n = static_cast<std::int64_t>(items.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined(obj.type_name() + " index out of range");
      return items[static_cast<std::size_t>(i)];
    }
    default:
      break;
  }
  // The sandbox falls back to attribute lookup for string keys.
  if (key.is_string()) return getattr(obj, key.as_str());
  return Value::undefined("'" + obj.type_name() + " object' has no item " + py_repr(key));
}

Value Interp::call(const Value& callee, Args& args) {
  step();
  for (const auto& a : args.positional) charge(a);
  if (callee.kind() == Kind::Callable) return callee.as_callable()->call(*this, args);
  if (callee.is_undefined()) undefined_error(callee);
  raise("'" + callee.type_name() + "' object is not callable");
}

Value Interp::apply_filter(const std::string& name, const Value& input, Args& args) {
  step();
  charge(input);
  return call_filter(*this, name, input, args);
}

bool Interp::apply_test(const std::string& name, const Value& input, Args& args) {
  step();
  return call_test(*this, name, input, args);
}

Value Interp::call_macro(const std::shared_ptr<MacroDef>& macro, const std::weak_ptr<Scope>& weak_scope,
                         Args& args, const Value& caller) {
  DepthGuard guard(depth_, options_.limits.max_depth);
  ScopePtr defining = weak_scope.lock();
  if (!defining) raise("macro '" + macro->name + "' called after the block that defined it ended");
  auto scope = std::make_shared<Scope>();
  scope->parent = defining;
  const auto& params = macro->params;
  if (args.positional.size() > params.size()) {
    raise("macro '" + macro->name + "' takes not more than " + std::to_string(params.size()) +
          " argument(s)");
  }
  ValueList given(params.size());
  std::vector<bool> has(params.size(), false);
  for (std::size_t i = 0; i < args.positional.size(); ++i) {
    given[i] = args.positional[i];
    has[i] = true;
  }
  auto kwargs = std::make_shared<Dict>();
  Value caller_value = caller;
  for (auto& [key, v] : args.keyword) {
    const std::string& k =
        key;  // named copy: lambdas cannot capture structured bindings before C++20 in clang
    auto it = std::find_if(params.begin(), params.end(), [&k](const Param& p) { return p.name == k; });
    if (it == params.end()) {
      if (k == "caller") {
        caller_value = v;
        continue;
      }
      kwargs->set(Value::string(k), v);
      continue;
    }
    auto idx = static_cast<std::size_t>(it - params.begin());
    if (has[idx]) raise("macro '" + macro->name + "' got multiple values for argument '" + k + "'");
    given[idx] = v;
    has[idx] = true;
  }
  // Defaults are evaluated at call time in the macro's scope, left to right.
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!has[i] && params[i].default_value) given[i] = eval(*params[i].default_value, scope);
    if (!has[i] && !params[i].default_value)
      given[i] = Value::undefined("parameter '" + params[i].name + "' was not provided");
    scope->vars[params[i].name] = given[i];
  }
  scope->vars["varargs"] = Value::list({});
  scope->vars["kwargs"] = Value::dict(kwargs);
  if (!caller_value.is_undefined()) scope->vars["caller"] = caller_value;
  std::string out;
  exec(macro->body, scope, out);
  return Value::string(std::move(out));
}

// ------------------------------------------------------------ expressions

Value Interp::eval(const Expr& e, const ScopePtr& scope) {
  try {
    DepthGuard guard(depth_, options_.limits.max_depth);
    step();
    Value v = eval_inner(e, scope);
    if (e.kind != ExprKind::Name && e.kind != ExprKind::Const) charge(v);  // built values cost their size
    return v;
  } catch (const TemplateError& err) {
    fail_at(e.pos, err.message);
  }
}

Args Interp::eval_args(const Expr& e, std::size_t first_arg, const ScopePtr& scope) {
  Args args;
  for (std::size_t i = first_arg; i < e.kids.size(); ++i) args.positional.push_back(eval(*e.kids[i], scope));
  if (e.dyn_args) {
    for (auto& v : iterate(eval(*e.dyn_args, scope))) args.positional.push_back(std::move(v));
  }
  for (const auto& kw : e.keywords) args.keyword.emplace_back(kw.name, eval(*kw.value, scope));
  if (e.dyn_kwargs) {
    Value extra = eval(*e.dyn_kwargs, scope);
    if (extra.kind() != Kind::Dict) raise("argument after ** must be a mapping, not " + extra.type_name());
    for (const auto& [k, v] : extra.as_dict().items()) {
      if (!k.is_string()) raise("keywords must be strings");
      args.keyword.emplace_back(k.as_str(), v);
    }
  }
  return args;
}

Value Interp::eval_call(const Expr& e, const ScopePtr& scope) {
  Value callee = eval(*e.kids[0], scope);
  Args args = eval_args(e, 1, scope);
  return call(callee, args);
}

Value Interp::eval_compare(const Expr& e, const ScopePtr& scope) {
  Value left = eval(*e.kids[0], scope);
  for (std::size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.kids[i + 1], scope);
    const std::string& op = e.ops[i];
    bool ok = false;
    if (op == "==") {
      ok = py_equal(left, right);
    } else if (op == "!=") {
      ok = !py_equal(left, right);
    } else if (op == "<") {
      ok = py_less(left, right);
    } else if (op == ">") {
      ok = py_less(right, left);
    } else if (op == "<=") {
      ok = py_equal(left, right) || py_less(left, right);
    } else if (op == ">=") {
      ok = py_equal(left, right) || py_less(right, left);
    } else if (op == "in") {
      charge(right);
      ok = contains(right, left);
    } else {
      charge(right);
      ok = !contains(right, left);
    }
    if (!ok) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

Value Interp::eval_inner(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case ExprKind::Const:
      return e.constant;
    case ExprKind::Name:
      return lookup(e.name, scope);
    case ExprKind::Getattr:
      return getattr(eval(*e.kids[0], scope), e.name);
    case ExprKind::Getitem: {
      Value obj = eval(*e.kids[0], scope);
      const Expr& key = *e.kids[1];
      if (key.kind != ExprKind::Slice) return getitem(obj, eval(key, scope));
      auto part = [&](std::size_t i) { return key.kids[i] ? eval(*key.kids[i], scope) : Value::none(); };
      Value start = part(0);
      Value stop = part(1);
      Value stride = part(2);
      if (obj.is_undefined()) undefined_error(obj);
      if (obj.is_string())
        return Value::string(utf8_encode(slice_seq(utf8_decode(obj.as_str()), start, stop, stride)));
      if (obj.is_sequence()) {
        ValueList items = slice_seq(obj.as_list(), start, stop, stride);
        return obj.kind() == Kind::Tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
      }
      return Value::undefined("'" + obj.type_name() + " object' is not subscriptable with a slice");
    }
    case ExprKind::Slice:
      raise("slice outside of a subscript");
    case ExprKind::Call:
      return eval_call(e, scope);
    case ExprKind::Filter: {
      Value input = eval(*e.kids[0], scope);
      Args args = eval_args(e, 1, scope);
      return apply_filter(e.name, input, args);
    }
    case ExprKind::Test: {
      Value input = eval(*e.kids[0], scope);
      Args args = eval_args(e, 1, scope);
      bool r = apply_test(e.name, input, args);
      return Value::boolean(e.negated ? !r : r);
    }
    case ExprKind::Not:
      return Value::boolean(!eval(*e.kids[0], scope).truthy());
    case ExprKind::Neg:
    case ExprKind::Pos: {
      Value v = eval(*e.kids[0], scope);
      bool neg = e.kind == ExprKind::Neg;
      if (v.kind() == Kind::Float) return Value::number(neg ? -v.as_float() : v.as_float());
      if (v.is_int()) {
        if (neg && v.as_int() == std::numeric_limits<std::int64_t>::min()) raise("integer overflow");
        return Value::integer(neg ? -v.as_int() : v.as_int());
      }
      if (v.is_undefined()) undefined_error(v);
      raise(std::string("bad operand type for unary ") + (neg ? "-" : "+") + ": '" + v.type_name() + "'");
    }
    case ExprKind::Binary: {
      Value a = eval(*e.kids[0], scope);
      Value b = eval(*e.kids[1], scope);
      return binary_op(*this, e.name, a, b);
    }
    case ExprKind::And: {
      Value a = eval(*e.kids[0], scope);
      return a.truthy() ? eval(*e.kids[1], scope) : a;
    }
    case ExprKind::Or: {
      Value a = eval(*e.kids[0], scope);
      return a.truthy() ? a : eval(*e.kids[1], scope);
    }
    case ExprKind::Compare:
      return eval_compare(e, scope);
    case ExprKind::CondExpr:
      if (eval(*e.kids[0], scope).truthy()) return eval(*e.kids[1], scope);
      if (e.kids[2]) return eval(*e.kids[2], scope);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.pos.line) +
                              " evaluated to false and no else section was defined.");
    case ExprKind::ListLit:
    case ExprKind::TupleLit: {
      ValueList items;
      for (const auto& k : e.kids) items.push_back(eval(*k, scope));
      return e.kind == ExprKind::ListLit ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprKind::DictLit: {
      auto d = std::make_shared<Dict>();
      for (std::size_t i = 0; i + 1 < e.kids.size(); i += 2) {
        Value k = eval(*e.kids[i], scope);
        d->set(k, eval(*e.kids[i + 1], scope));
      }
      return Value::dict(d);
    }
  }
  raise("unknown expression");
}

// ------------------------------------------------------------ statements

void Interp::assign(const Target& t, const Value& v, const ScopePtr& scope) {
  if (!t.attr.empty()) {
    Value target = lookup(t.names[0], scope);
    if (target.kind() != Kind::Namespace) raise("Can not assign attribute on non-namespace object");
    if (t.attr[0] == '_') {
      raise("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" + t.attr +
            "'");
    }
    // Keeps values acyclic: a namespace never (transitively) holds a namespace or loop.
    if (v.holds_mutable()) raise("storing a namespace or loop inside a namespace is not supported");
    target.as_ns()->attrs.set(Value::string(t.attr), v);
    return;
  }
  if (!t.is_tuple) {
    scope->vars[t.names[0]] = v;
    return;
  }
  ValueList items = iterate(v);
  if (items.size() != t.names.size()) {
    raise(items.size() > t.names.size()
              ? "too many values to unpack (expected " + std::to_string(t.names.size()) + ")"
              : "not enough values to unpack (expected " + std::to_string(t.names.size()) + ", got " +
                    std::to_string(items.size()) + ")");
  }
  for (std::size_t i = 0; i < items.size(); ++i) scope->vars[t.names[i]] = items[i];
}

Interp::Flow Interp::exec(const Body& body, const ScopePtr& scope, std::string& out) {
  for (const auto& s : body) {
    Flow f = exec_stmt(*s, scope, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

void Interp::exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
  Value iterable = eval(*s.expr, scope);
  charge(iterable);
  ValueList items = iterate(iterable);
  if (s.filter) {
    ValueList kept;
    for (auto& item : items) {
      auto probe = std::make_shared<Scope>();
      probe->parent = scope;
      assign(s.target, item, probe);
      if (eval(*s.filter, probe).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    auto else_scope = std::make_shared<Scope>();
    else_scope->parent = scope;
    exec(s.else_body, else_scope, out);
    return;
  }
  auto state = std::make_shared<LoopState>();
  Value all = Value::list(std::move(items));
  state->items = all.list_data();
  Value loop_value = Value::loop(state);
  for (std::size_t i = 0; i < state->items->items.size(); ++i) {
    step();
    state->index0 = i;
    auto iter_scope = std::make_shared<Scope>();
    iter_scope->parent = scope;
    assign(s.target, state->items->items[i], iter_scope);
    iter_scope->vars["loop"] = loop_value;
    if (exec(s.bodies[0], iter_scope, out) == Flow::Break) break;
  }
}

Interp::Flow Interp::exec_stmt(const Stmt& s, const ScopePtr& scope, std::string& out) {
  try {
    DepthGuard guard(depth_, options_.limits.max_depth);
    step();
    auto child = [&scope] {
      auto c = std::make_shared<Scope>();
      c->parent = scope;
      return c;
    };
    switch (s.kind) {
      case StmtKind::Text:
        append_output(out, s.text);
        return Flow::Normal;
      case StmtKind::Print:
        append_output(out, py_str(eval(*s.expr, scope)));
        return Flow::Normal;
      case StmtKind::If:
        for (std::size_t i = 0; i < s.conditions.size(); ++i) {
          if (eval(*s.conditions[i], scope).truthy()) return exec(s.bodies[i], scope, out);
        }
        return exec(s.else_body, scope, out);
      case StmtKind::For:
        exec_for(s, scope, out);
        return Flow::Normal;
      case StmtKind::Set:
        assign(s.target, eval(*s.expr, scope), scope);
        return Flow::Normal;
      case StmtKind::SetBlock:
      case StmtKind::FilterBlock: {
        auto inner = child();
        std::string text;
        exec(s.bodies[0], inner, text);
        Value v = Value::string(std::move(text));
        if (s.filter) {
          inner->vars[""] = v;  // the filter chain's operand placeholder
          v = eval(*s.filter, inner);
        }
        if (s.kind == StmtKind::SetBlock) {
          assign(s.target, v, scope);
        } else {
          append_output(out, py_str(v));
        }
        return Flow::Normal;
      }
      case StmtKind::Macro:
        scope->vars[s.macro->name] = Value::callable(std::make_shared<MacroFn>(s.macro, scope, Value()));
        return Flow::Normal;
      case StmtKind::CallBlock: {
        const Expr& call_expr = *s.expr;
        Value callee = eval(*call_expr.kids[0], scope);
        Args args = eval_args(call_expr, 1, scope);
        args.keyword.emplace_back("caller",
                                  Value::callable(std::make_shared<MacroFn>(s.macro, scope, Value())));
        Value result = call(callee, args);
        append_output(out, py_str(result));
        return Flow::Normal;
      }
      case StmtKind::With: {
        auto inner = child();
        for (std::size_t i = 0; i < s.with_targets.size(); ++i) {
          assign(s.with_targets[i], eval(*s.with_values[i], scope), inner);
        }
        exec(s.bodies[0], inner, out);
        return Flow::Normal;
      }
      case StmtKind::Generation:
        exec(s.bodies[0], child(), out);
        return Flow::Normal;
      case StmtKind::Break:
        return Flow::Break;
      case StmtKind::Continue:
        return Flow::Continue;
    }
    return Flow::Normal;
  } catch (const TemplateError& err) {
    fail_at(s.pos, err.message);
  }
}

// ------------------------------------------------------------ JSON input

namespace {

template <typename Json>
Value from_json(const Json& j, int depth, const std::string& path) {
  if (depth > 150) fail("chat template: variable ", path, " is nested too deeply");
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::integer(j.template get<std::int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      auto u = j.template get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        fail("chat template: variable ", path, ": integer ", u, " does not fit in 64 bits");
      }
      return Value::integer(static_cast<std::int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value::number(j.template get<double>());
    case nlohmann::json::value_t::string: {
      const auto& s = j.template get_ref<const std::string&>();
      std::size_t bad = 0;
      if (!utf8_valid(s, &bad)) fail("chat template: variable ", path, ": invalid UTF-8 at byte ", bad);
      return Value::string(s);
    }
    case nlohmann::json::value_t::array: {
      ValueList items;
      std::size_t i = 0;
      for (const auto& item : j)
        items.push_back(from_json(item, depth + 1, path + "[" + std::to_string(i++) + "]"));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      auto d = std::make_shared<Dict>();
      for (auto it = j.begin(); it != j.end(); ++it) {
        std::size_t bad = 0;
        if (!utf8_valid(it.key(), &bad)) fail("chat template: variable ", path, ": key is not valid UTF-8");
        d->set(Value::string(it.key()), from_json(it.value(), depth + 1, path + "." + it.key()));
      }
      return Value::dict(d);
    }
    default:
      fail("chat template: variable ", path, " has an unsupported JSON type");
  }
}

template <typename Json>
std::string render_json(const Program& program, const Json& vars, const ChatTemplateOptions& options) {
  if (!vars.is_object() && !vars.is_null()) fail("chat template: render variables must be a JSON object");
  Value globals;
  try {
    globals = vars.is_null() ? Value::dict(std::make_shared<Dict>()) : from_json(vars, 0, "vars");
  } catch (const TemplateError& err) {
    fail("chat template: variables: ", err.message);
  }
  Interp interp(program, std::move(globals), options);
  try {
    return interp.render();
  } catch (const TemplateError& err) {  // raised outside any node (should not happen)
    fail("chat template: ", err.message);
  }
}

}  // namespace

}  // namespace tessera::chat_template_detail

namespace tessera {

ChatTemplate ChatTemplate::parse(const std::string& source) {
  ChatTemplate t;
  t.program_ = chat_template_detail::parse_template(source);
  return t;
}

std::string ChatTemplate::render(const nlohmann::json& vars) const {
  return render(vars, ChatTemplateOptions{});
}

std::string ChatTemplate::render(const nlohmann::ordered_json& vars) const {
  return render(vars, ChatTemplateOptions{});
}

std::string ChatTemplate::render(const nlohmann::json& vars, const ChatTemplateOptions& options) const {
  if (!program_) fail("chat template: render() called on a template that was not parsed");
  return chat_template_detail::render_json(*program_, vars, options);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& vars,
                                 const ChatTemplateOptions& options) const {
  if (!program_) fail("chat template: render() called on a template that was not parsed");
  return chat_template_detail::render_json(*program_, vars, options);
}

}  // namespace tessera
