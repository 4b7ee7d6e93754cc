// Runtime values of the chat-template interpreter, modelled on the Python
// objects jinja2 works with: their truthiness, equality, ordering, str() and
// repr() follow Python so that rendered text is byte-identical.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace tessera::chat_template_detail {

// Thrown by value operations and builtins; the interpreter adds line and column.
struct TemplateError {
  std::string message;
};
[[noreturn]] void raise(std::string message);

// ---- UTF-8 (all strings inside the interpreter are valid UTF-8) ----
bool utf8_valid(std::string_view s, std::size_t* bad_offset = nullptr);
std::u32string utf8_decode(std::string_view s);
void utf8_append(std::string& out, char32_t cp);
std::string utf8_encode(std::u32string_view s);
std::size_t utf8_length(std::string_view s);
bool py_isspace(char32_t c);

class Value;
using ValueList = std::vector<Value>;
class Dict;
struct Callable;
struct Namespace;
struct LoopState;
struct ListData;

enum class Kind : std::uint8_t {
  Undefined,
  None,
  Bool,
  Int,
  Float,
  String,
  List,
  Tuple,
  Dict,
  Callable,
  Namespace,
  Loop,
};

// Immutable except Namespace (jinja's sandbox forbids mutating lists and dicts).
class Value {
 public:
  Value() = default;  // Undefined
  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(std::int64_t i);
  static Value number(double f);
  static Value string(std::string s);
  static Value list(ValueList items);
  static Value tuple(ValueList items);
  static Value dict(std::shared_ptr<const Dict> d);
  static Value callable(std::shared_ptr<Callable> c);
  static Value ns(std::shared_ptr<Namespace> n);
  static Value loop(std::shared_ptr<LoopState> l);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::Undefined; }
  bool is_none() const { return kind_ == Kind::None; }
  bool is_string() const { return kind_ == Kind::String; }
  bool is_int() const { return kind_ == Kind::Int || kind_ == Kind::Bool; }  // Python: bool is an int
  bool is_number() const { return is_int() || kind_ == Kind::Float; }
  bool is_sequence() const { return kind_ == Kind::List || kind_ == Kind::Tuple; }

  bool as_bool() const { return std::get<bool>(data_); }
  std::int64_t as_int() const;  // Bool or Int
  double as_float() const;      // any number
  const std::string& as_str() const { return std::get<std::string>(data_); }
  const std::string& undefined_hint() const { return std::get<std::string>(data_); }
  const ValueList& as_list() const;  // List or Tuple
  const Dict& as_dict() const { return *std::get<std::shared_ptr<const Dict>>(data_); }
  const std::shared_ptr<Callable>& as_callable() const { return std::get<std::shared_ptr<Callable>>(data_); }
  const std::shared_ptr<Namespace>& as_ns() const { return std::get<std::shared_ptr<Namespace>>(data_); }
  const std::shared_ptr<LoopState>& as_loop() const { return std::get<std::shared_ptr<LoopState>>(data_); }

  // Nesting depth of containers (0 for scalars) and whether a mutable object
  // (namespace, loop) is reachable: both keep values acyclic and shallow.
  int depth() const;
  bool holds_mutable() const;

  bool truthy() const;
  std::string type_name() const;  // Python's type name, for error messages

  const std::shared_ptr<const ListData>& list_data() const {
    return std::get<std::shared_ptr<const ListData>>(data_);
  }

 private:
  Kind kind_ = Kind::Undefined;
  std::variant<std::monostate, bool, std::int64_t, double, std::string, std::shared_ptr<const ListData>,
               std::shared_ptr<const Dict>, std::shared_ptr<Callable>, std::shared_ptr<Namespace>,
               std::shared_ptr<LoopState>>
      data_;
};

struct ListData {
  ValueList items;
  int depth = 1;
  bool mutable_inside = false;
};

// Insertion-ordered mapping with Python key equality (1 == 1.0 == True).
class Dict {
 public:
  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(const Value& key, Value value);
  const std::vector<std::pair<Value, Value>>& items() const { return items_; }
  std::size_t size() const { return items_.size(); }
  int depth = 1;
  bool mutable_inside = false;

 private:
  std::vector<std::pair<Value, Value>> items_;
  std::unordered_map<std::string, std::size_t> str_index_;
};

struct Namespace {
  Dict attrs;
};

struct Args {
  ValueList positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

class Interp;
struct Callable {
  virtual ~Callable() = default;
  virtual Value call(Interp& interp, Args& args) = 0;
  virtual std::string repr() const = 0;
  virtual bool holds_mutable() const { return false; }
};

// The `loop` variable of a for loop.
struct LoopState {
  std::shared_ptr<const ListData> items;
  std::size_t index0 = 0;
  int depth0 = 0;
  Value last_changed;
  bool changed_called = false;
};

// ---- Python semantics ----
bool py_equal(const Value& a, const Value& b);
bool py_less(const Value& a, const Value& b);  // raises TypeError-like errors for unorderable types
std::string py_str(const Value& v);
std::string py_repr(const Value& v);
std::string py_float_repr(double d);
std::string py_string_repr(std::string_view s);

struct JsonDumpOptions {
  std::string indent;  // used when has_indent
  bool has_indent = false;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// json.dumps with the given options (Python's layout and escapes).
std::string json_dumps(const Value& v, const JsonDumpOptions& options);

}  // namespace tessera::chat_template_detail
