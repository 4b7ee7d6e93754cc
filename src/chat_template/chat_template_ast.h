// Tokens and syntax tree of the chat-template language (the jinja2 subset that
// chat templates use), shared by the lexer, the parser and the interpreter.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat_template/chat_template_value.h"

namespace tessera::chat_template_detail {

struct SourcePos {
  int line = 1;
  int column = 1;
};

// "chat template: line L, column C: what" as a tessera::Error.
[[noreturn]] void fail_at(SourcePos pos, const std::string& what);

enum class Tok {
  Data,        // literal text between tags (after whitespace control)
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,
  String,  // value already unescaped
  Int,
  Float,
  Op,  // operator or punctuation, text in `text`
  Eof,
};

struct Token {
  Tok type;
  std::string text;
  SourcePos pos;
  std::int64_t int_value = 0;
  double float_value = 0;
};

// Splits normalised template source into tokens; throws on lexical errors.
std::vector<Token> lex_template(const std::string& source);

// ------------------------------------------------------------ expressions

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Keyword {
  std::string name;
  ExprPtr value;
};

enum class ExprKind {
  Const,
  Name,
  Getattr,  // a.name
  Getitem,  // a[b]
  Slice,    // only inside Getitem: a[start:stop:step]
  Call,     // callee(args)
  Filter,   // operand | name(args)
  Test,     // operand is [not] name(args)
  Not,
  Neg,
  Pos,
  Binary,  // + - * / // % ** ~
  And,
  Or,
  Compare,   // operand (op other)+
  CondExpr,  // then if test else otherwise
  ListLit,
  TupleLit,
  DictLit,
};

struct Expr {
  ExprKind kind;
  SourcePos pos;
  Value constant;             // Const
  std::string name;           // Name, Getattr attribute, Filter/Test name, Binary/Compare op
  std::vector<ExprPtr> kids;  // operands, call args, list items, dict keys/values interleaved
  std::vector<Keyword> keywords;
  ExprPtr dyn_args;              // Call/Filter/Test: *args
  ExprPtr dyn_kwargs;            // Call/Filter/Test: **kwargs
  std::vector<std::string> ops;  // Compare: one op per extra operand
  bool negated = false;          // Test: `is not`
  bool soft = false;             // Filter/Test: unknown names fail at run time only (inside if)
  int height = 1;                // longest path to a leaf, bounded so evaluation cannot overflow the stack
};

// ------------------------------------------------------------ statements

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class StmtKind {
  Text,         // literal text
  Print,        // {{ expr }}
  If,           // conditions[i] -> bodies[i]; else_body
  For,          // target in iter [if filter] body [else]
  Set,          // target = value
  SetBlock,     // {% set target %}body{% endset %}, optional filters
  Macro,        // {% macro name(params) %}
  CallBlock,    // {% call(params) macro(args) %}
  FilterBlock,  // {% filter f %}body{% endfilter %}
  With,         // {% with a = 1 %}body{% endwith %}
  Break,
  Continue,
  Generation,  // {% generation %} (transformers' assistant-mask tag): renders its body
};

// An assignment target: a name, a namespace attribute, or a tuple of names.
struct Target {
  std::vector<std::string> names;  // one name, or several for tuple unpacking
  std::string attr;                // non-empty: names[0].attr (namespace assignment)
  bool is_tuple = false;
  SourcePos pos;
};

struct Param {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct MacroDef {
  std::string name;
  std::vector<Param> params;
  Body body;
  SourcePos pos;
};

struct Stmt {
  StmtKind kind;
  SourcePos pos;
  std::string text;                 // Text
  ExprPtr expr;                     // Print, For iterable, Set value, CallBlock call
  ExprPtr filter;                   // For filter condition; SetBlock/FilterBlock filter chain
  std::vector<ExprPtr> conditions;  // If
  std::vector<Body> bodies;         // If bodies; For/SetBlock/... body in bodies[0]
  Body else_body;
  Target target;                     // For, Set, SetBlock
  std::vector<Target> with_targets;  // With
  std::vector<ExprPtr> with_values;
  std::shared_ptr<MacroDef> macro;  // Macro, CallBlock (the caller)
};

struct Program {
  Body body;
};

// Parses the token stream; throws fail_at errors.
std::shared_ptr<Program> parse_template(const std::string& source);

}  // namespace tessera::chat_template_detail
