#include "chat_template/chat_template_value.h"
#include "tokenizer/unicode_util.h"

#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace tessera::chat_template_detail {

namespace {
// Containers nested deeper than this are refused: printing, comparing and
// freeing them recurse, and real chat data is a few levels deep.
constexpr int kMaxValueDepth = 200;

void check_depth(int depth) {
  if (depth > kMaxValueDepth) raise("value nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
}
}  // namespace

void raise(std::string message) { throw TemplateError{std::move(message)}; }

// ---------------------------------------------------------------- UTF-8

namespace {
// Length of the sequence starting with lead byte c, or 0 when c cannot start one.
int utf8_seq_len(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}
}  // namespace

bool utf8_valid(std::string_view s, std::size_t* bad_offset) {
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    int n = utf8_seq_len(c);
    bool ok = n > 0 && i + n <= s.size();
    for (int k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
    if (ok && n >= 3) {
      auto c1 = static_cast<unsigned char>(s[i + 1]);
      if (c == 0xE0 && c1 < 0xA0) ok = false;   // overlong
      if (c == 0xED && c1 >= 0xA0) ok = false;  // surrogate
      if (c == 0xF0 && c1 < 0x90) ok = false;   // overlong
      if (c == 0xF4 && c1 >= 0x90) ok = false;  // > U+10FFFF
    }
    if (!ok) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    i += static_cast<std::size_t>(n);
  }
  return true;
}

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    int n = std::max(1, utf8_seq_len(c));
    char32_t cp = n == 1 ? c : (c & (0x7F >> n));
    for (int k = 1; k < n && i + k < s.size(); ++k)
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += static_cast<std::size_t>(n);
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) { tok::utf8_append(static_cast<uint32_t>(cp), out); }

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

std::size_t utf8_length(std::string_view s) {
  std::size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

// Python's str.isspace() / the \s of its re module.
bool py_isspace(char32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// ---------------------------------------------------------------- Value

Value Value::undefined(std::string hint) {
  Value v;
  v.data_ = std::move(hint);
  return v;
}
Value Value::none() {
  Value v;
  v.kind_ = Kind::None;
  return v;
}
Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::Bool;
  v.data_ = b;
  return v;
}
Value Value::integer(std::int64_t i) {
  Value v;
  v.kind_ = Kind::Int;
  v.data_ = i;
  return v;
}
Value Value::number(double f) {
  Value v;
  v.kind_ = Kind::Float;
  v.data_ = f;
  return v;
}
Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::String;
  v.data_ = std::move(s);
  return v;
}

namespace {
std::shared_ptr<const ListData> make_list_data(ValueList items) {
  auto d = std::make_shared<ListData>();
  for (const auto& item : items) {
    d->depth = std::max(d->depth, item.depth() + 1);
    d->mutable_inside = d->mutable_inside || item.holds_mutable();
  }
  check_depth(d->depth);
  d->items = std::move(items);
  return d;
}
}  // namespace

Value Value::list(ValueList items) {
  Value v;
  v.kind_ = Kind::List;
  v.data_ = make_list_data(std::move(items));
  return v;
}
Value Value::tuple(ValueList items) {
  Value v;
  v.kind_ = Kind::Tuple;
  v.data_ = make_list_data(std::move(items));
  return v;
}
Value Value::dict(std::shared_ptr<const Dict> d) {
  check_depth(d->depth);
  Value v;
  v.kind_ = Kind::Dict;
  v.data_ = std::move(d);
  return v;
}
Value Value::callable(std::shared_ptr<Callable> c) {
  Value v;
  v.kind_ = Kind::Callable;
  v.data_ = std::move(c);
  return v;
}
Value Value::ns(std::shared_ptr<Namespace> n) {
  Value v;
  v.kind_ = Kind::Namespace;
  v.data_ = std::move(n);
  return v;
}
Value Value::loop(std::shared_ptr<LoopState> l) {
  Value v;
  v.kind_ = Kind::Loop;
  v.data_ = std::move(l);
  return v;
}

const ValueList& Value::as_list() const { return list_data()->items; }

std::int64_t Value::as_int() const {
  if (kind_ == Kind::Bool) return as_bool() ? 1 : 0;
  return std::get<std::int64_t>(data_);
}

double Value::as_float() const {
  if (kind_ == Kind::Float) return std::get<double>(data_);
  return static_cast<double>(as_int());
}

int Value::depth() const {
  switch (kind_) {
    case Kind::List:
    case Kind::Tuple:
      return list_data()->depth;
    case Kind::Dict:
      return as_dict().depth;
    default:
      return 0;
  }
}

bool Value::holds_mutable() const {
  switch (kind_) {
    case Kind::List:
    case Kind::Tuple:
      return list_data()->mutable_inside;
    case Kind::Dict:
      return as_dict().mutable_inside;
    case Kind::Namespace:
    case Kind::Loop:
      return true;
    case Kind::Callable:
      return as_callable()->holds_mutable();
    default:
      return false;
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
      return as_bool();
    case Kind::Int:
      return as_int() != 0;
    case Kind::Float:
      return as_float() != 0.0;
    case Kind::String:
      return !as_str().empty();
    case Kind::List:
    case Kind::Tuple:
      return !as_list().empty();
    case Kind::Dict:
      return as_dict().size() != 0;
    default:
      return true;
  }
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::Undefined:
      return "Undefined";
    case Kind::None:
      return "NoneType";
    case Kind::Bool:
      return "bool";
    case Kind::Int:
      return "int";
    case Kind::Float:
      return "float";
    case Kind::String:
      return "str";
    case Kind::List:
      return "list";
    case Kind::Tuple:
      return "tuple";
    case Kind::Dict:
      return "dict";
    case Kind::Callable:
      return "function";
    case Kind::Namespace:
      return "Namespace";
    case Kind::Loop:
      return "LoopContext";
  }
  return "object";
}

// ---------------------------------------------------------------- Dict

namespace {
bool hashable(const Value& k) {
  switch (k.kind()) {
    case Kind::List:
    case Kind::Dict:
    case Kind::Namespace:
    case Kind::Loop:
      return false;
    case Kind::Tuple:
      return std::all_of(k.as_list().begin(), k.as_list().end(), hashable);
    default:
      return true;
  }
}
}  // namespace

const Value* Dict::find(const std::string& key) const {
  auto it = str_index_.find(key);
  return it == str_index_.end() ? nullptr : &items_[it->second].second;
}

const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(key.as_str());
  if (!hashable(key)) raise("unhashable type: '" + key.type_name() + "'");
  for (const auto& [k, v] : items_) {
    if (!k.is_string() && py_equal(k, key)) return &v;
  }
  return nullptr;
}

void Dict::set(const Value& key, Value value) {
  if (!hashable(key)) raise("unhashable type: '" + key.type_name() + "'");
  depth = std::max({depth, value.depth() + 1, key.depth() + 1});
  mutable_inside = mutable_inside || value.holds_mutable() || key.holds_mutable();
  if (const Value* existing = find(key)) {
    *const_cast<Value*>(existing) = std::move(value);
    return;
  }
  if (key.is_string()) str_index_.emplace(key.as_str(), items_.size());
  items_.emplace_back(key, std::move(value));
}

// ---------------------------------------------------------------- comparisons

bool py_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::Float || b.kind() == Kind::Float) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::Undefined:
    case Kind::None:
      return true;
    case Kind::String:
      return a.as_str() == b.as_str();
    case Kind::List:
    case Kind::Tuple: {
      const auto& x = a.as_list();
      const auto& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (!py_equal(x[i], y[i])) return false;
      }
      return true;
    }
    case Kind::Dict: {
      const auto& x = a.as_dict();
      const auto& y = b.as_dict();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.items()) {
        const Value* other = y.find(k);
        if (!other || !py_equal(v, *other)) return false;
      }
      return true;
    }
    case Kind::Callable:
      return a.as_callable() == b.as_callable();
    case Kind::Namespace:
      return a.as_ns() == b.as_ns();
    case Kind::Loop:
      return a.as_loop() == b.as_loop();
    default:
      return false;
  }
}

bool py_less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::Float || b.kind() == Kind::Float) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_str() < b.as_str();  // UTF-8 byte order == code point order
  if (a.kind() == b.kind() && a.is_sequence()) {
    const auto& x = a.as_list();
    const auto& y = b.as_list();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!py_equal(x[i], y[i])) return py_less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  if (a.is_undefined() || b.is_undefined()) {
    raise((a.is_undefined() ? a : b).undefined_hint());
  }
  raise("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

// ---------------------------------------------------------------- str / repr

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  auto epos = sci.find('e');
  int exp10 = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (char c : sci.substr(0, epos)) {
    if (c != '.') digits.push_back(c);
  }
  std::string out = negative ? "-" : "";
  if (exp10 >= -4 && exp10 < 16) {
    int point = exp10 + 1;  // digits before the decimal point
    auto n = static_cast<int>(digits.size());
    if (point <= 0) {
      out += "0." + std::string(static_cast<std::size_t>(-point), '0') + digits;
    } else if (point >= n) {
      out += digits + std::string(static_cast<std::size_t>(point - n), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<std::size_t>(point)) + "." +
             digits.substr(static_cast<std::size_t>(point));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
  return out + exp_buf;
}

namespace {
bool py_isprintable(char32_t c) {
  if (c == ' ') return true;
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}
}  // namespace

std::string py_string_repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : utf8_decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (py_isprintable(c)) {
      utf8_append(out, c);
    } else {
      char buf[16];
      if (c < 0x100) {
        std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(c));
      } else if (c < 0x10000) {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      } else {
        std::snprintf(buf, sizeof buf, "\\U%08x", static_cast<unsigned>(c));
      }
      out += buf;
    }
  }
  out.push_back(quote);
  return out;
}

namespace {
void repr_into(std::string& out, const Value& v);

void repr_items(std::string& out, const ValueList& items) {
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    repr_into(out, items[i]);
  }
}

void str_into(std::string& out, const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined:
      return;
    case Kind::None:
      out += "None";
      return;
    case Kind::Bool:
      out += v.as_bool() ? "True" : "False";
      return;
    case Kind::Int:
      out += std::to_string(v.as_int());
      return;
    case Kind::Float:
      out += py_float_repr(v.as_float());
      return;
    case Kind::String:
      out += v.as_str();
      return;
    case Kind::List:
      out += '[';
      repr_items(out, v.as_list());
      out += ']';
      return;
    case Kind::Tuple:
      out += '(';
      repr_items(out, v.as_list());
      if (v.as_list().size() == 1) out += ',';
      out += ')';
      return;
    case Kind::Dict: {
      out += '{';
      bool first = true;
      for (const auto& [k, val] : v.as_dict().items()) {
        if (!first) out += ", ";
        first = false;
        repr_into(out, k);
        out += ": ";
        repr_into(out, val);
      }
      out += '}';
      return;
    }
    case Kind::Callable:
      out += v.as_callable()->repr();
      return;
    case Kind::Namespace: {
      out += "<Namespace {";
      bool first = true;
      for (const auto& [k, val] : v.as_ns()->attrs.items()) {
        if (!first) out += ", ";
        first = false;
        repr_into(out, k);
        out += ": ";
        repr_into(out, val);
      }
      out += "}>";
      return;
    }
    case Kind::Loop: {
      const auto& l = *v.as_loop();
      out +=
          "<LoopContext " + std::to_string(l.index0 + 1) + "/" + std::to_string(l.items->items.size()) + ">";
      return;
    }
  }
}

void repr_into(std::string& out, const Value& v) {
  if (v.is_string()) {
    out += py_string_repr(v.as_str());
  } else if (v.is_undefined()) {
    out += "Undefined";
  } else {
    str_into(out, v);
  }
}
}  // namespace

std::string py_str(const Value& v) {
  if (v.is_string()) return v.as_str();
  std::string out;
  str_into(out, v);
  return out;
}

std::string py_repr(const Value& v) {
  std::string out;
  repr_into(out, v);
  return out;
}

// ---------------------------------------------------------------- json.dumps

namespace {
void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out.push_back('"');
  for (char32_t c : utf8_decode(s)) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default: {
        char buf[16];
        if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
          if (c >= 0x10000) {  // surrogate pair, as Python writes it
            char32_t v = c - 0x10000;
            std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 | (v >> 10)),
                          static_cast<unsigned>(0xDC00 | (v & 0x3FF)));
          } else {
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          }
          out += buf;
        } else {
          utf8_append(out, c);
        }
      }
    }
  }
  out.push_back('"');
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return py_float_repr(d);
}

// Python converts these key types to strings; anything else is a TypeError.
std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Kind::String:
      return k.as_str();
    case Kind::Bool:
      return k.as_bool() ? "true" : "false";
    case Kind::Int:
      return std::to_string(k.as_int());
    case Kind::Float:
      return json_float(k.as_float());
    case Kind::None:
      return "null";
    default:
      raise("keys must be str, int, float, bool or None, not " + k.type_name());
  }
}

struct JsonWriter {
  const JsonDumpOptions& opt;
  std::string out;

  void newline(int level) {
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += opt.indent;
  }

  void write(const Value& v, int level) {
    switch (v.kind()) {
      case Kind::None:
        out += "null";
        return;
      case Kind::Bool:
        out += v.as_bool() ? "true" : "false";
        return;
      case Kind::Int:
        out += std::to_string(v.as_int());
        return;
      case Kind::Float:
        out += json_float(v.as_float());
        return;
      case Kind::String:
        json_string(out, v.as_str(), opt.ensure_ascii);
        return;
      case Kind::List:
      case Kind::Tuple:
        write_list(v.as_list(), level);
        return;
      case Kind::Dict:
        write_dict(v.as_dict(), level);
        return;
      default:
        raise("Object of type " + v.type_name() + " is not JSON serializable");
    }
  }

  void write_list(const ValueList& items, int level) {
    if (items.empty()) {
      out += "[]";
      return;
    }
    out.push_back('[');
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (i) out += opt.item_separator;
      if (opt.has_indent) newline(level + 1);
      write(items[i], level + 1);
    }
    if (opt.has_indent) newline(level);
    out.push_back(']');
  }

  void write_dict(const Dict& d, int level) {
    if (d.size() == 0) {
      out += "{}";
      return;
    }
    std::vector<std::pair<std::string, const Value*>> entries;
    for (const auto& [k, v] : d.items()) entries.emplace_back(json_key(k), &v);
    if (opt.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
    }
    out.push_back('{');
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (i) out += opt.item_separator;
      if (opt.has_indent) newline(level + 1);
      json_string(out, entries[i].first, opt.ensure_ascii);
      out += opt.key_separator;
      write(*entries[i].second, level + 1);
    }
    if (opt.has_indent) newline(level);
    out.push_back('}');
  }
};
}  // namespace

std::string json_dumps(const Value& v, const JsonDumpOptions& options) {
  JsonWriter w{options, {}};
  w.write(v, 0);
  return std::move(w.out);
}

}  // namespace tessera::chat_template_detail
