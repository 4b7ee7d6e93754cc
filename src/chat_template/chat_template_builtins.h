// The interpreter and the builtin filters, tests, methods and globals that
// jinja2 (as configured by transformers) provides.
#pragma once

#include <ctime>
#include <optional>
#include <string>
#include <unordered_map>

#include "tessera/chat_template.h"
#include "chat_template/chat_template_ast.h"

namespace tessera::chat_template_detail {

bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);

struct Scope;
using ScopePtr = std::shared_ptr<Scope>;

// Variables of one block level; lookups walk to the parent, then the globals.
struct Scope {
  std::unordered_map<std::string, Value> vars;
  ScopePtr parent;
};

class Interp {
 public:
  Interp(const Program& program, Value globals, const ChatTemplateOptions& options);
  std::string render();

  // Used by builtins.
  Value call(const Value& callee, Args& args);
  Value apply_filter(const std::string& name, const Value& input, Args& args);
  bool apply_test(const std::string& name, const Value& input, Args& args);
  Value getattr(const Value& obj, const std::string& name);
  Value getitem(const Value& obj, const Value& key);
  // Counts work; throws when the step budget is spent.
  void step(std::uint64_t n = 1);
  // Charges work proportional to the size of a value an operation scans or builds.
  void charge(const Value& v);
  // Refuses strings/lists larger than the output limit.
  void check_size(std::size_t n) const;
  std::tm now() const;

  // Macro plumbing (see chat_template_eval.cpp).
  struct Frame;
  Value call_macro(const std::shared_ptr<MacroDef>& macro, const std::weak_ptr<Scope>& scope, Args& args,
                   const Value& caller);

 private:
  friend struct EvalAccess;
  const Program& program_;
  Value globals_;
  ChatTemplateOptions options_;
  std::uint64_t steps_ = 0;
  int depth_ = 0;

 public:
  // Evaluation entry points (defined in chat_template_eval.cpp).
  Value eval(const Expr& e, const ScopePtr& scope);
  enum class Flow { Normal, Break, Continue };
  Flow exec(const Body& body, const ScopePtr& scope, std::string& out);

 private:
  Value eval_inner(const Expr& e, const ScopePtr& scope);
  Flow exec_stmt(const Stmt& s, const ScopePtr& scope, std::string& out);
  Value lookup(const std::string& name, const ScopePtr& scope) const;
  void assign(const Target& t, const Value& v, const ScopePtr& scope);
  void exec_for(const Stmt& s, const ScopePtr& scope, std::string& out);
  Value eval_compare(const Expr& e, const ScopePtr& scope);
  Value eval_call(const Expr& e, const ScopePtr& scope);
  Args eval_args(const Expr& e, std::size_t first_arg, const ScopePtr& scope);
  void append_output(std::string& out, const std::string& text);
};

// Builtins (chat_template_builtins.cpp).
Value call_filter(Interp& in, const std::string& name, const Value& input, Args& args);
bool call_test(Interp& in, const std::string& name, const Value& input, Args& args);
// A bound method value for obj.name, an "unsafe" Undefined for sandbox-blocked
// methods, or nullopt when obj has no such method.
std::optional<Value> method_value(const Value& obj, const std::string& name);
std::optional<Value> global_value(const std::string& name);
Value binary_op(Interp& in, const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);
ValueList iterate(const Value& v);  // Python iter() over a value, materialised
std::int64_t py_len(const Value& v);

}  // namespace tessera::chat_template_detail
