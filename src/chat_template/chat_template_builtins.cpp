// Builtin filters, tests, str/dict/list methods and globals, each following
// the jinja2 3.1 / CPython behaviour it stands for (quoted in comments where
// the behaviour is surprising).
#include "chat_template/chat_template_builtins.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <set>

namespace tessera::chat_template_detail {

namespace {

// ------------------------------------------------------------ argument binding

// Binds positional and keyword arguments to parameter names, Python style.
class Bound {
 public:
  Bound(Args& args, std::initializer_list<const char*> names, const std::string& fn)
      : names_(names.begin(), names.end()), vals_(names.size()) {
    if (args.positional.size() > names_.size()) {
      raise(fn + "() takes at most " + std::to_string(names_.size()) + " arguments (" +
            std::to_string(args.positional.size()) + " given)");
    }
    for (std::size_t i = 0; i < args.positional.size(); ++i) vals_[i] = args.positional[i];
    for (auto& [k, v] : args.keyword) {
      auto it = std::find(names_.begin(), names_.end(), k);
      if (it == names_.end()) raise(fn + "() got an unexpected keyword argument '" + k + "'");
      auto idx = static_cast<std::size_t>(it - names_.begin());
      if (vals_[idx]) raise(fn + "() got multiple values for argument '" + k + "'");
      vals_[idx] = v;
    }
  }
  bool has(std::size_t i) const { return vals_[i].has_value(); }
  const Value& get(std::size_t i, const Value& fallback) const { return vals_[i] ? *vals_[i] : fallback; }
  const Value& get(std::size_t i) const {
    static const Value kNone = Value::none();
    return vals_[i] ? *vals_[i] : kNone;
  }

 private:
  std::vector<std::string> names_;
  std::vector<std::optional<Value>> vals_;
};

void no_args(const Args& args, const std::string& fn) {
  if (!args.positional.empty() || !args.keyword.empty()) raise(fn + "() takes no arguments");
}

const std::string& need_str(const Value& v, const std::string& what) {
  if (!v.is_string()) raise(what + " must be str, not " + v.type_name());
  return v.as_str();
}

std::int64_t need_int(const Value& v, const std::string& what) {
  if (v.kind() != Kind::Int && v.kind() != Kind::Bool) {
    raise("'" + v.type_name() + "' object cannot be interpreted as an integer (" + what + ")");
  }
  return v.as_int();
}

Value str_value(std::u32string_view s) { return Value::string(utf8_encode(s)); }

// ------------------------------------------------------------ case mapping

bool is_cased(char32_t c) {
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}
char32_t to_lower(char32_t c) {
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}
char32_t to_upper(char32_t c) {
  return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
}
char32_t to_title(char32_t c) {
  return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c)));
}

std::string lower(const std::string& s) {
  std::u32string u = utf8_decode(s);
  for (auto& c : u) c = to_lower(c);
  return utf8_encode(u);
}
std::string upper(const std::string& s) {
  std::u32string u = utf8_decode(s);
  for (auto& c : u) c = to_upper(c);
  return utf8_encode(u);
}
// str.title(): a cased character after an uncased one starts a word.
std::string py_title(const std::string& s) {
  std::u32string u = utf8_decode(s);
  bool prev_cased = false;
  for (auto& c : u) {
    bool cased = is_cased(c);
    c = prev_cased ? to_lower(c) : to_title(c);
    prev_cased = cased;
  }
  return utf8_encode(u);
}
std::string py_capitalize(const std::string& s) {
  std::u32string u = utf8_decode(s);
  for (std::size_t i = 0; i < u.size(); ++i) u[i] = i == 0 ? to_title(u[i]) : to_lower(u[i]);
  return utf8_encode(u);
}

// ------------------------------------------------------------ str helpers

std::u32string strip_chars(const Value& chars_arg, bool* whitespace) {
  *whitespace = chars_arg.is_none() || chars_arg.is_undefined();
  if (*whitespace) return {};
  return utf8_decode(need_str(chars_arg, "strip arg"));
}

std::string py_strip(const std::string& s, const Value& chars_arg, bool left, bool right) {
  bool ws = false;
  std::u32string chars = strip_chars(chars_arg, &ws);
  std::u32string u = utf8_decode(s);
  auto drop = [&](char32_t c) { return ws ? py_isspace(c) : chars.find(c) != std::u32string::npos; };
  std::size_t b = 0;
  std::size_t e = u.size();
  if (left) {
    while (b < e && drop(u[b])) ++b;
  }
  if (right) {
    while (e > b && drop(u[e - 1])) --e;
  }
  return utf8_encode(std::u32string_view(u).substr(b, e - b));
}

ValueList py_split(const std::string& s, const Value& sep, std::int64_t maxsplit, bool from_right) {
  ValueList out;
  if (sep.is_none()) {  // runs of whitespace, no empty strings
    std::u32string u = utf8_decode(s);
    std::vector<std::pair<std::size_t, std::size_t>> words;
    std::size_t i = 0;
    while (i < u.size()) {
      while (i < u.size() && py_isspace(u[i])) ++i;
      if (i >= u.size()) break;
      std::size_t j = i;
      while (j < u.size() && !py_isspace(u[j])) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    if (maxsplit >= 0 && static_cast<std::int64_t>(words.size()) > maxsplit + 1) {
      if (!from_right) {
        auto k = static_cast<std::size_t>(maxsplit);
        std::size_t rest = words[k].first;
        std::size_t end = u.size();  // the remainder keeps its trailing whitespace
        words.resize(k);
        for (auto& [a, b] : words) out.push_back(str_value(std::u32string_view(u).substr(a, b - a)));
        out.push_back(str_value(std::u32string_view(u).substr(rest, end - rest)));
      } else {
        std::size_t k = words.size() - static_cast<std::size_t>(maxsplit);
        std::size_t begin = 0;  // the remainder keeps its leading whitespace
        out.push_back(str_value(std::u32string_view(u).substr(begin, words[k - 1].second - begin)));
        for (std::size_t w = k; w < words.size(); ++w) {
          out.push_back(
              str_value(std::u32string_view(u).substr(words[w].first, words[w].second - words[w].first)));
        }
      }
      return out;
    }
    for (auto& [a, b] : words) out.push_back(str_value(std::u32string_view(u).substr(a, b - a)));
    return out;
  }
  const std::string& d = need_str(sep, "separator");
  if (d.empty()) raise("empty separator");
  std::vector<std::string> parts;
  if (!from_right) {
    std::size_t start = 0;
    std::int64_t n = 0;
    while (maxsplit < 0 || n < maxsplit) {
      std::size_t hit = s.find(d, start);
      if (hit == std::string::npos) break;
      parts.push_back(s.substr(start, hit - start));
      start = hit + d.size();
      ++n;
    }
    parts.push_back(s.substr(start));
  } else {
    std::size_t end = s.size();
    std::int64_t n = 0;
    while (maxsplit < 0 || n < maxsplit) {
      if (end < d.size()) break;
      std::size_t hit = s.rfind(d, end - d.size());
      if (hit == std::string::npos) break;
      parts.push_back(s.substr(hit + d.size(), end - hit - d.size()));
      end = hit;
      ++n;
    }
    parts.push_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
  }
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return out;
}

std::string py_replace(Interp& in, const std::string& s, const std::string& old, const std::string& repl,
                       std::int64_t count) {
  std::string out;
  if (old.empty()) {  // inserts between every character
    std::u32string u = utf8_decode(s);
    std::int64_t n = 0;
    for (std::size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || n < count) {
        out += repl;
        ++n;
      }
      if (i < u.size()) utf8_append(out, u[i]);
      in.check_size(out.size());
    }
    return out;
  }
  std::size_t start = 0;
  std::int64_t n = 0;
  while (count < 0 || n < count) {
    std::size_t hit = s.find(old, start);
    if (hit == std::string::npos) break;
    out.append(s, start, hit - start);
    out += repl;
    in.check_size(out.size());
    start = hit + old.size();
    ++n;
  }
  out.append(s, start, std::string::npos);
  in.check_size(out.size());
  return out;
}

// Python slice-style bounds for find/count/startswith: code point indices to byte offsets.
std::pair<std::size_t, std::size_t> byte_range(const std::string& s, const Value& start, const Value& end) {
  auto n = static_cast<std::int64_t>(utf8_length(s));
  auto clamp = [n](std::int64_t i) { return i < 0 ? std::max<std::int64_t>(0, i + n) : std::min(i, n); };
  std::int64_t a = start.is_none() ? 0 : clamp(need_int(start, "start"));
  std::int64_t b = end.is_none() ? n : clamp(need_int(end, "end"));
  auto to_byte = [&s](std::int64_t cp) {
    std::size_t i = 0;
    for (std::int64_t k = 0; k < cp && i < s.size(); ++k) {
      ++i;
      while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) ++i;
    }
    return i;
  };
  if (b < a) return {to_byte(a), to_byte(a)};
  return {to_byte(a), to_byte(b)};
}

std::int64_t cp_index(const std::string& s, std::size_t byte) {
  return static_cast<std::int64_t>(utf8_length(std::string_view(s).substr(0, byte)));
}

bool affix_match(const std::string& s, const Value& affix, const Value& start, const Value& end, bool prefix,
                 const std::string& fn) {
  auto [a, b] = byte_range(s, start, end);
  std::string_view view = std::string_view(s).substr(a, b - a);
  auto one = [&](const Value& v) {
    const std::string& x = need_str(v, fn + " first arg");
    if (x.size() > view.size()) return false;
    return prefix ? view.substr(0, x.size()) == x : view.substr(view.size() - x.size()) == x;
  };
  if (affix.kind() == Kind::Tuple) {
    return std::any_of(affix.as_list().begin(), affix.as_list().end(), one);
  }
  return one(affix);
}

// Line boundaries of str.splitlines().
bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}
std::vector<std::u32string> splitlines(const std::u32string& u) {
  std::vector<std::u32string> lines;
  std::size_t start = 0;
  for (std::size_t i = 0; i < u.size(); ++i) {
    if (!is_line_break(u[i])) continue;
    lines.push_back(u.substr(start, i - start));
    if (u[i] == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < u.size()) lines.push_back(u.substr(start));
  return lines;
}

// str.format with auto/manual numbering and names; no format specs beyond none.
std::string py_format(Interp& in, const std::string& fmt, Args& args) {
  std::string out;
  std::size_t auto_index = 0;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      raise("Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    std::size_t close = fmt.find('}', i);
    if (close == std::string::npos) raise("Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos)
      raise("format specs are not supported in str.format");
    Value v;
    if (field.empty() || std::all_of(field.begin(), field.end(), ::isdigit)) {
      std::size_t idx = field.empty() ? auto_index++ : std::stoul(field);
      if (idx >= args.positional.size()) raise("Replacement index " + std::to_string(idx) + " out of range");
      v = args.positional[idx];
    } else {
      auto it = std::find_if(args.keyword.begin(), args.keyword.end(),
                             [&](const auto& kv) { return kv.first == field; });
      if (it == args.keyword.end()) raise("KeyError: '" + field + "'");
      v = it->second;
    }
    out += py_str(v);
    in.check_size(out.size());
    i = close;
  }
  return out;
}

// printf-style `fmt % args` (Python's str.__mod__) for the common conversions.
std::string percent_format(Interp& in, const std::string& fmt, const Value& args) {
  ValueList positional;
  const Dict* mapping = nullptr;
  if (args.kind() == Kind::Tuple) {
    positional = args.as_list();
  } else if (args.kind() == Kind::Dict) {
    mapping = &args.as_dict();
    positional.push_back(args);
  } else {
    positional.push_back(args);
  }
  std::size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) raise("incomplete format");
    Value arg;
    bool have_arg = false;
    if (fmt[i] == '(') {
      std::size_t close = fmt.find(')', i);
      if (close == std::string::npos || !mapping) raise("format requires a mapping");
      const Value* v = mapping->find(fmt.substr(i + 1, close - i - 1));
      if (!v) raise("KeyError: '" + fmt.substr(i + 1, close - i - 1) + "'");
      arg = *v;
      have_arg = used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < fmt.size() && std::string("-+ #0").find(fmt[i]) != std::string::npos)
      flags.push_back(fmt[i++]);
    std::string width;
    while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) width.push_back(fmt[i++]);
    std::string precision;
    bool has_precision = false;
    if (i < fmt.size() && fmt[i] == '.') {
      has_precision = true;
      ++i;
      while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i])))
        precision.push_back(fmt[i++]);
    }
    if (i >= fmt.size()) raise("incomplete format");
    char conv = fmt[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (!have_arg) {
      if (next >= positional.size()) raise("not enough arguments for format string");
      arg = positional[next++];
    }
    if (width.size() > 4 || precision.size() > 4) raise("format width or precision too large");
    std::string spec =
        "%" + flags + width + (has_precision ? "." + (precision.empty() ? "0" : precision) : "");
    char buf[512];
    std::string piece;
    switch (conv) {
      case 's':
      case 'r':
      case 'a': {
        std::string text = conv == 's' ? py_str(arg) : py_repr(arg);
        if (has_precision) {
          std::u32string u = utf8_decode(text);
          u.resize(std::min<std::size_t>(u.size(), std::stoul(precision.empty() ? "0" : precision)));
          text = utf8_encode(u);
        }
        std::size_t w = width.empty() ? 0 : std::stoul(width);
        std::size_t len = utf8_length(text);
        if (len < w)
          text = flags.find('-') != std::string::npos ? text + std::string(w - len, ' ')
                                                      : std::string(w - len, ' ') + text;
        piece = text;
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        if (!arg.is_number())
          raise("%" + std::string(1, conv) + " format: a real number is required, not " + arg.type_name());
        long long v = arg.kind() == Kind::Float ? static_cast<long long>(arg.as_float()) : arg.as_int();
        char c = conv == 'i' || conv == 'u' ? 'd' : conv;
        std::snprintf(buf, sizeof buf, (spec + "ll" + c).c_str(), v);
        piece = buf;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!arg.is_number()) raise("must be real number, not " + arg.type_name());
        std::snprintf(buf, sizeof buf, (spec + conv).c_str(), arg.as_float());
        piece = buf;
        break;
      }
      case 'c': {
        if (arg.is_string() && utf8_length(arg.as_str()) == 1) {
          piece = arg.as_str();
        } else if (arg.is_int() && arg.as_int() >= 0 && arg.as_int() <= 0x10FFFF) {
          utf8_append(piece, static_cast<char32_t>(arg.as_int()));
        } else {
          raise("%c requires int or char");
        }
        break;
      }
      default:
        raise(std::string("unsupported format character '") + conv + "'");
    }
    out += piece;
    in.check_size(out.size());
  }
  if (!used_mapping && !mapping && next < positional.size())
    raise("not all arguments converted during string formatting");
  return out;
}

// ------------------------------------------------------------ bound methods

struct BoundMethod : Callable {
  Value self;
  std::string name;
  BoundMethod(Value s, std::string n) : self(std::move(s)), name(std::move(n)) {}
  Value call(Interp& in, Args& args) override;
  std::string repr() const override {
    return "<built-in method " + name + " of " + self.type_name() + " object>";
  }
  bool holds_mutable() const override { return self.holds_mutable(); }
};

const std::set<std::string>& str_methods() {
  static const std::set<std::string> names = {
      "capitalize",   "count",      "endswith",  "find",    "format",  "index",  "isalnum",
      "isalpha",      "isdigit",    "islower",   "isspace", "isupper", "join",   "lower",
      "lstrip",       "replace",    "rfind",     "rindex",  "rsplit",  "rstrip", "split",
      "splitlines",   "startswith", "strip",     "title",   "upper",   "zfill",  "removeprefix",
      "removesuffix", "casefold",   "swapcase",  "center",  "ljust",   "rjust",  "partition",
      "rpartition",   "isnumeric",  "isdecimal", "istitle"};
  return names;
}
const std::set<std::string>& dict_methods() {
  static const std::set<std::string> names = {"items", "keys", "values", "get", "copy"};
  return names;
}
const std::set<std::string>& dict_unsafe() {
  static const std::set<std::string> names = {"clear", "pop", "popitem", "setdefault", "update"};
  return names;
}
const std::set<std::string>& list_methods() {
  static const std::set<std::string> names = {"count", "index", "copy"};
  return names;
}
const std::set<std::string>& list_unsafe() {
  static const std::set<std::string> names = {"append", "clear",  "extend",  "insert",
                                              "pop",    "remove", "reverse", "sort"};
  return names;
}

Value dict_items(const Dict& d) {
  ValueList items;
  for (const auto& [k, v] : d.items()) items.push_back(Value::tuple({k, v}));
  return Value::list(std::move(items));
}

bool str_predicate(const std::string& s, const std::string& name) {
  std::u32string u = utf8_decode(s);
  if (u.empty()) return false;
  auto all = [&](auto pred) { return std::all_of(u.begin(), u.end(), pred); };
  auto cat = [](char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); };
  auto is_alpha = [&](char32_t c) {
    auto k = cat(c);
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT ||
           k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_LO;
  };
  auto is_digit = [&](char32_t c) { return cat(c) == UTF8PROC_CATEGORY_ND; };
  auto is_numeric = [&](char32_t c) {
    auto k = cat(c);
    return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
  };
  if (name == "isalpha") return all(is_alpha);
  if (name == "isdigit" || name == "isdecimal") return all(is_digit);
  if (name == "isnumeric") return all(is_numeric);
  if (name == "isalnum") return all([&](char32_t c) { return is_alpha(c) || is_numeric(c); });
  if (name == "isspace") return all(py_isspace);
  bool any_cased = std::any_of(u.begin(), u.end(), is_cased);
  if (name == "islower")
    return any_cased &&
           all([](char32_t c) { return !is_cased(c) || to_upper(c) != c || to_lower(c) == c; }) &&
           std::none_of(u.begin(), u.end(), [&](char32_t c) {
             return cat(c) == UTF8PROC_CATEGORY_LU || cat(c) == UTF8PROC_CATEGORY_LT;
           });
  if (name == "isupper")
    return any_cased && std::none_of(u.begin(), u.end(), [&](char32_t c) {
             return cat(c) == UTF8PROC_CATEGORY_LL || cat(c) == UTF8PROC_CATEGORY_LT;
           });
  if (name == "istitle") return py_title(s) == s && any_cased;
  return false;
}

Value str_method(Interp& in, const std::string& s, const std::string& name, Args& args) {
  const std::string fn = "str." + name;
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    Bound b(args, {"chars"}, fn);
    return Value::string(py_strip(s, b.get(0), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    Bound b(args, {"sep", "maxsplit"}, fn);
    std::int64_t maxsplit = b.has(1) ? need_int(b.get(1), "maxsplit") : -1;
    return Value::list(py_split(s, b.get(0), maxsplit, name == "rsplit"));
  }
  if (name == "startswith" || name == "endswith") {
    Bound b(args, {"prefix", "start", "end"}, fn);
    if (!b.has(0)) raise(fn + "() takes at least 1 argument (0 given)");
    return Value::boolean(affix_match(s, b.get(0), b.get(1), b.get(2), name == "startswith", fn));
  }
  if (name == "upper") return no_args(args, fn), Value::string(upper(s));
  if (name == "lower" || name == "casefold") return no_args(args, fn), Value::string(lower(s));
  if (name == "title") return no_args(args, fn), Value::string(py_title(s));
  if (name == "capitalize") return no_args(args, fn), Value::string(py_capitalize(s));
  if (name == "swapcase") {
    no_args(args, fn);
    std::u32string u = utf8_decode(s);
    for (auto& c : u) c = to_upper(c) != c ? to_upper(c) : to_lower(c);
    return str_value(u);
  }
  if (name == "replace") {
    Bound b(args, {"old", "new", "count"}, fn);
    std::int64_t count = b.has(2) ? need_int(b.get(2), "count") : -1;
    return Value::string(
        py_replace(in, s, need_str(b.get(0), "replace arg 1"), need_str(b.get(1), "replace arg 2"), count));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    Bound b(args, {"sub", "start", "end"}, fn);
    const std::string& sub = need_str(b.get(0), fn + " arg");
    auto [a, e] = byte_range(s, b.get(1), b.get(2));
    std::string_view view = std::string_view(s).substr(a, e - a);
    if (name == "count") {
      if (sub.empty()) return Value::integer(static_cast<std::int64_t>(utf8_length(view)) + 1);
      std::int64_t n = 0;
      for (std::size_t p = view.find(sub); p != std::string_view::npos; p = view.find(sub, p + sub.size()))
        ++n;
      return Value::integer(n);
    }
    std::size_t hit = (name[0] == 'r') ? view.rfind(sub) : view.find(sub);
    if (hit == std::string_view::npos) {
      if (name == "index" || name == "rindex") raise("substring not found");
      return Value::integer(-1);
    }
    return Value::integer(cp_index(s, a + hit));
  }
  if (name == "join") {
    Bound b(args, {"iterable"}, fn);
    std::string out;
    bool first = true;
    for (const auto& item : iterate(b.get(0))) {
      if (!first) out += s;
      first = false;
      out += need_str(item, "sequence item");
      in.check_size(out.size());
    }
    return Value::string(std::move(out));
  }
  if (name == "format") return Value::string(py_format(in, s, args));
  if (name == "splitlines") {
    no_args(args, fn);
    ValueList out;
    for (auto& line : splitlines(utf8_decode(s))) out.push_back(str_value(line));
    return Value::list(std::move(out));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    Bound b(args, {"affix"}, fn);
    const std::string& x = need_str(b.get(0), fn + " arg");
    if (name == "removeprefix" && s.compare(0, x.size(), x) == 0) return Value::string(s.substr(x.size()));
    if (name == "removesuffix" && !x.empty() && s.size() >= x.size() &&
        s.compare(s.size() - x.size(), x.size(), x) == 0) {
      return Value::string(s.substr(0, s.size() - x.size()));
    }
    return Value::string(s);
  }
  if (name == "partition" || name == "rpartition") {
    Bound b(args, {"sep"}, fn);
    const std::string& sep = need_str(b.get(0), fn + " arg");
    if (sep.empty()) raise("empty separator");
    std::size_t hit = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (hit == std::string::npos) {
      return name == "partition" ? Value::tuple({Value::string(s), Value::string(""), Value::string("")})
                                 : Value::tuple({Value::string(""), Value::string(""), Value::string(s)});
    }
    return Value::tuple(
        {Value::string(s.substr(0, hit)), Value::string(sep), Value::string(s.substr(hit + sep.size()))});
  }
  if (name == "zfill" || name == "center" || name == "ljust" || name == "rjust") {
    Bound b(args, {"width", "fillchar"}, fn);
    std::int64_t width = need_int(b.get(0), "width");
    std::u32string u = utf8_decode(s);
    char32_t fill = ' ';
    if (b.has(1)) {
      std::u32string f = utf8_decode(need_str(b.get(1), "fillchar"));
      if (f.size() != 1) raise("The fill character must be exactly one character long");
      fill = f[0];
    }
    if (width <= static_cast<std::int64_t>(u.size())) return Value::string(s);
    in.check_size(static_cast<std::size_t>(width) * 4);
    auto pad = static_cast<std::size_t>(width) - u.size();
    if (name == "zfill") {
      std::size_t sign = (!u.empty() && (u[0] == '+' || u[0] == '-')) ? 1 : 0;
      u.insert(sign, pad, U'0');
    } else if (name == "ljust") {
      u.append(pad, fill);
    } else if (name == "rjust") {
      u.insert(0, pad, fill);
    } else {  // CPython: left = pad/2 + (pad & width & 1)
      std::size_t left = pad / 2 + (pad & static_cast<std::size_t>(width) & 1);
      u.insert(0, left, fill);
      u.append(pad - left, fill);
    }
    return str_value(u);
  }
  no_args(args, fn);
  return Value::boolean(str_predicate(s, name));
}

Value dict_method(const Dict& d, const Value& self, const std::string& name, Args& args) {
  const std::string fn = "dict." + name;
  if (name == "items") return no_args(args, fn), dict_items(d);
  if (name == "copy") return no_args(args, fn), self;
  if (name == "keys" || name == "values") {
    no_args(args, fn);
    ValueList out;
    for (const auto& [k, v] : d.items()) out.push_back(name == "keys" ? k : v);
    return Value::list(std::move(out));
  }
  Bound b(args, {"key", "default"}, fn);
  if (!b.has(0)) raise("get expected at least 1 argument, got 0");
  const Value* hit = d.find(b.get(0));
  return hit ? *hit : b.get(1);
}

Value list_method(const Value& self, const std::string& name, Args& args) {
  const std::string fn = "list." + name;
  const ValueList& items = self.as_list();
  if (name == "copy") return no_args(args, fn), Value::list(items);
  Bound b(args, {"value"}, fn);
  if (name == "count") {
    return Value::integer(
        std::count_if(items.begin(), items.end(), [&](const Value& v) { return py_equal(v, b.get(0)); }));
  }
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (py_equal(items[i], b.get(0))) return Value::integer(static_cast<std::int64_t>(i));
  }
  raise(py_repr(b.get(0)) + " is not in list");
}

Value BoundMethod::call(Interp& in, Args& args) {
  in.charge(self);
  switch (self.kind()) {
    case Kind::String:
      return str_method(in, self.as_str(), name, args);
    case Kind::Dict:
      return dict_method(self.as_dict(), self, name, args);
    case Kind::List:
    case Kind::Tuple:
      return list_method(self, name, args);
    case Kind::Loop: {
      auto& loop = *self.as_loop();
      if (name == "cycle") {
        if (args.positional.empty()) raise("no items for cycling given");
        return args.positional[loop.index0 % args.positional.size()];
      }
      // loop.changed(*values): true when the values differ from the previous call.
      Value current = Value::list(args.positional);
      bool changed = !loop.changed_called || !py_equal(current, loop.last_changed);
      loop.changed_called = true;
      loop.last_changed = current;
      return Value::boolean(changed);
    }
    default:
      raise("'" + self.type_name() + "' object has no method '" + name + "'");
  }
}

// ------------------------------------------------------------ globals

struct Builtin : Callable {
  std::string name;
  std::function<Value(Interp&, Args&)> fn;
  Builtin(std::string n, std::function<Value(Interp&, Args&)> f) : name(std::move(n)), fn(std::move(f)) {}
  Value call(Interp& in, Args& args) override { return fn(in, args); }
  std::string repr() const override { return "<function " + name + ">"; }
};

void check_ns_name(const std::string& name) {
  if (!name.empty() && name[0] == '_') {
    raise("Chat templates cannot store underscore-prefixed attributes on a namespace, but got '" + name +
          "'");
  }
}

// dict(*args, **kwargs) as Python builds it: a mapping or pairs, then keywords.
std::shared_ptr<Dict> build_dict(Args& args, const std::string& fn) {
  auto d = std::make_shared<Dict>();
  if (args.positional.size() > 1)
    raise(fn + " expected at most 1 argument, got " + std::to_string(args.positional.size()));
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.kind() == Kind::Dict) {
      for (const auto& [k, v] : src.as_dict().items()) d->set(k, v);
    } else {
      for (const auto& pair : iterate(src)) {
        ValueList kv = iterate(pair);
        if (kv.size() != 2)
          raise("dictionary update sequence element has length " + std::to_string(kv.size()) +
                "; 2 is required");
        d->set(kv[0], kv[1]);
      }
    }
  }
  for (auto& [k, v] : args.keyword) d->set(Value::string(k), v);
  return d;
}

Value range_fn(Interp& in, Args& args) {
  if (!args.keyword.empty()) raise("range() takes no keyword arguments");
  std::vector<std::int64_t> a;
  for (const auto& v : args.positional) a.push_back(need_int(v, "range"));
  if (a.empty() || a.size() > 3) raise("range expected 1 to 3 arguments, got " + std::to_string(a.size()));
  std::int64_t start = a.size() == 1 ? 0 : a[0];
  std::int64_t stop = a.size() == 1 ? a[0] : a[1];
  std::int64_t step = a.size() == 3 ? a[2] : 1;
  if (step == 0) raise("range() arg 3 must not be zero");
  // Length computed in long double to avoid overflow; the sandbox caps ranges at 100000.
  long double span =
      step > 0 ? (static_cast<long double>(stop) - start) : (static_cast<long double>(start) - stop);
  long double len = span <= 0 ? 0 : std::ceil(span / std::fabs(static_cast<long double>(step)));
  if (len > 100000) raise("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  ValueList out;
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(len); ++i)
    out.push_back(Value::integer(start + i * step));
  in.step(out.size());
  return Value::list(std::move(out));
}

Value strftime_fn(Interp& in, Args& args) {
  Bound b(args, {"format"}, "strftime_now");
  const std::string& fmt = need_str(b.get(0), "strftime_now format");
  std::tm tm = in.now();
  std::string out(256 + fmt.size() * 8, '\0');
  if (fmt.empty()) return Value::string("");
  std::size_t n = std::strftime(out.data(), out.size(), fmt.c_str(), &tm);
  if (n == 0) raise("strftime_now: format produced no output or is too long");
  out.resize(n);
  std::size_t bad = 0;
  if (!utf8_valid(out, &bad)) raise("strftime_now: result is not valid UTF-8");
  return Value::string(out);
}

// ------------------------------------------------------------ filters

// jinja2's make_attrgetter: "a.b.0" walks getitem per dotted part.
Value attr_path(Interp& in, const Value& item, const std::string& path) {
  Value cur = item;
  std::size_t start = 0;
  while (true) {
    std::size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    cur = in.getitem(cur, digits ? Value::integer(std::stoll(part)) : Value::string(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Value attribute_or_item(Interp& in, const Value& item, const Value& attribute) {
  if (attribute.is_string()) return attr_path(in, item, attribute.as_str());
  if (attribute.is_int()) return in.getitem(item, attribute);
  return item;
}

Args rest_args(const Args& args, std::size_t skip) {
  Args out;
  for (std::size_t i = skip; i < args.positional.size(); ++i) out.positional.push_back(args.positional[i]);
  out.keyword = args.keyword;
  return out;
}

// select/reject/selectattr/rejectattr share this: keep items whose test (or truthiness) matches `want`.
Value select_items(Interp& in, const Value& input, Args& args, bool by_attr, bool want) {
  std::size_t skip = 0;
  std::string attr;
  if (by_attr) {
    if (args.positional.empty()) raise("selectattr/rejectattr need an attribute name");
    attr = need_str(args.positional[0], "attribute");
    skip = 1;
  }
  std::string test;
  if (args.positional.size() > skip) test = need_str(args.positional[skip], "test name");
  Args test_args = rest_args(args, skip + 1);
  ValueList out;
  if (!input.truthy()) return Value::list({});  // jinja2: `if value:` guards the loop
  for (const auto& item : iterate(input)) {
    Value subject = by_attr ? attr_path(in, item, attr) : item;
    Args a = test_args;
    bool ok = test.empty() ? subject.truthy() : in.apply_test(test, subject, a);
    if (ok == want) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value map_filter(Interp& in, const Value& input, Args& args) {
  ValueList out;
  if (!input.truthy()) return Value::list({});  // jinja2: `if value:` guards the loop
  auto kw = [&](const char* name) -> const Value* {
    for (auto& [k, v] : args.keyword) {
      if (k == name) return &v;
    }
    return nullptr;
  };
  if (args.positional.empty() && kw("attribute")) {
    const Value* attribute = kw("attribute");
    const Value* dflt = kw("default");
    for (const auto& item : iterate(input)) {
      Value v = attribute_or_item(in, item, *attribute);
      out.push_back(v.is_undefined() && dflt ? *dflt : v);
    }
    return Value::list(std::move(out));
  }
  if (args.positional.empty()) raise("map requires a filter argument");
  std::string filter = need_str(args.positional[0], "filter name");
  Args filter_args = rest_args(args, 1);
  for (const auto& item : iterate(input)) {
    Args a = filter_args;
    out.push_back(in.apply_filter(filter, item, a));
  }
  return Value::list(std::move(out));
}

std::string soft_str(const Value& v) { return py_str(v); }

Value tojson_filter(Interp& in, const Value& input, Args& args) {
  Bound b(args, {"ensure_ascii", "indent", "separators", "sort_keys"}, "tojson");
  JsonDumpOptions opt;
  opt.ensure_ascii = b.get(0, Value::boolean(false)).truthy();
  opt.sort_keys = b.get(3, Value::boolean(false)).truthy();
  Value indent = b.get(1);
  if (!indent.is_none()) {
    opt.has_indent = true;
    opt.item_separator = ",";
    if (indent.is_string()) {
      opt.indent = indent.as_str();
    } else {
      std::int64_t n = need_int(indent, "indent");
      opt.indent = std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(n, 0, 1000)), ' ');
    }
  }
  Value seps = b.get(2);
  if (!seps.is_none()) {
    ValueList parts = iterate(seps);
    if (parts.size() != 2) raise("separators must be a pair of strings");
    opt.item_separator = need_str(parts[0], "item separator");
    opt.key_separator = need_str(parts[1], "key separator");
  }
  std::string out = json_dumps(input, opt);
  in.check_size(out.size());
  return Value::string(std::move(out));
}

std::optional<Value> parse_py_int(const std::string& text, int base) {
  std::string s = text;
  std::u32string u = utf8_decode(s);
  std::size_t b = 0;
  std::size_t e = u.size();
  while (b < e && py_isspace(u[b])) ++b;
  while (e > b && py_isspace(u[e - 1])) --e;
  s = utf8_encode(std::u32string_view(u).substr(b, e - b));
  std::string digits;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && std::isalnum(static_cast<unsigned char>(s[i - 1])) &&
        std::isalnum(static_cast<unsigned char>(s[i + 1]))) {
      continue;
    }
    digits.push_back(s[i]);
  }
  if (digits.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(digits.c_str(), &end, base);
  if (end != digits.c_str() + digits.size() || errno == ERANGE ||
      !std::isalnum(static_cast<unsigned char>(digits.back()))) {
    return std::nullopt;
  }
  return Value::integer(v);
}

std::optional<double> parse_py_float(const std::string& text) {
  std::string s = py_strip(text, Value::none(), true, true);
  if (s.empty()) return std::nullopt;
  std::string low = lower(s);
  std::string body = (low[0] == '+' || low[0] == '-') ? low.substr(1) : low;
  double sign = low[0] == '-' ? -1.0 : 1.0;
  if (body == "inf" || body == "infinity") return sign * std::numeric_limits<double>::infinity();
  if (body == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (body.find_first_not_of("0123456789.e+-_") != std::string::npos) return std::nullopt;
  std::string clean;
  for (char c : s) {
    if (c != '_') clean.push_back(c);
  }
  char* end = nullptr;
  double v = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return v;
}

Value int_filter(const Value& input, Args& args) {
  Bound b(args, {"default", "base"}, "int");
  Value dflt = b.get(0, Value::integer(0));
  int base = static_cast<int>(b.has(1) ? need_int(b.get(1), "base") : 10);
  if (input.is_string()) {
    if (auto v = parse_py_int(input.as_str(), base)) return *v;
    if (auto f = parse_py_float(input.as_str()); f && std::isfinite(*f) && std::fabs(*f) < 9.2e18) {
      return Value::integer(static_cast<std::int64_t>(*f));
    }
    return dflt;
  }
  if (input.is_int()) return Value::integer(input.as_int());
  if (input.kind() == Kind::Float) {
    double f = input.as_float();
    if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) return dflt;
    return Value::integer(static_cast<std::int64_t>(f));
  }
  return dflt;
}

Value float_filter(const Value& input, Args& args) {
  Bound b(args, {"default"}, "float");
  Value dflt = b.get(0, Value::number(0.0));
  if (input.is_number()) return Value::number(input.as_float());
  if (input.is_string()) {
    if (auto f = parse_py_float(input.as_str())) return Value::number(*f);
  }
  return dflt;
}

// round(x, ndigits) with Python's correctly rounded half-even result.
double py_round(double x, std::int64_t ndigits) {
  if (!std::isfinite(x)) return x;
  if (ndigits > 300) return x;
  if (ndigits < -308) return 0.0 * x;
  if (ndigits >= 0) {
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(ndigits), x);
    return std::strtod(buf, nullptr);
  }
  double p = std::pow(10.0, static_cast<double>(-ndigits));
  double y = x / p;
  double r = std::nearbyint(y);
  return r * p;
}

Value round_filter(const Value& input, Args& args) {
  Bound b(args, {"precision", "method"}, "round");
  std::int64_t precision = b.has(0) ? need_int(b.get(0), "precision") : 0;
  std::string method = b.has(1) ? need_str(b.get(1), "method") : "common";
  if (!input.is_number()) raise("round() needs a number, got " + input.type_name());
  double x = input.as_float();
  if (method == "common") {
    if (input.kind() != Kind::Float) return Value::integer(input.as_int());
    return Value::number(py_round(x, precision));
  }
  double p = std::pow(10.0, static_cast<double>(precision));
  if (method == "ceil") return Value::number(std::ceil(x * p) / p);
  if (method == "floor") return Value::number(std::floor(x * p) / p);
  raise("method must be common, ceil or floor");
}

// jinja2's do_indent: indents every line but the first (unless first=True), blank lines only with blank=True.
Value indent_filter(const Value& input, Args& args) {
  Bound b(args, {"width", "first", "blank"}, "indent");
  Value width = b.get(0, Value::integer(4));
  std::string indention =
      width.is_string()
          ? width.as_str()
          : std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(need_int(width, "width"), 0, 1000)),
                        ' ');
  bool first = b.get(1, Value::boolean(false)).truthy();
  bool blank = b.get(2, Value::boolean(false)).truthy();
  std::u32string s = utf8_decode(soft_str(input) + "\n");
  std::vector<std::u32string> lines = splitlines(s);
  std::string rv;
  if (blank) {
    for (std::size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + indention;
      rv += utf8_encode(lines[i]);
    }
  } else {
    rv = lines.empty() ? "" : utf8_encode(lines[0]);
    for (std::size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += indention;
      rv += utf8_encode(lines[i]);
    }
  }
  if (first) rv = indention + rv;
  return Value::string(rv);
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// Sort key used by sort/unique/dictsort/min/max: lower-cased strings unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(lower(v.as_str()));
  return v;
}

Value sort_filter(Interp& in, const Value& input, Args& args) {
  Bound b(args, {"reverse", "case_sensitive", "attribute"}, "sort");
  bool reverse = b.get(0, Value::boolean(false)).truthy();
  bool cs = b.get(1, Value::boolean(false)).truthy();
  Value attribute = b.get(2);
  ValueList items = iterate(input);
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& item : items) keyed.emplace_back(sort_key(attribute_or_item(in, item, attribute), cs), item);
  in.step(keyed.size());
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? py_less(y.first, x.first) : py_less(x.first, y.first);
  });
  ValueList out;
  for (auto& kv : keyed) out.push_back(kv.second);
  return Value::list(std::move(out));
}

Value minmax_filter(Interp& in, const Value& input, Args& args, bool want_max) {
  Bound b(args, {"case_sensitive", "attribute"}, want_max ? "max" : "min");
  bool cs = b.get(0, Value::boolean(false)).truthy();
  ValueList items = iterate(input);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  std::size_t best = 0;
  Value best_key = sort_key(attribute_or_item(in, items[0], b.get(1)), cs);
  for (std::size_t i = 1; i < items.size(); ++i) {
    Value k = sort_key(attribute_or_item(in, items[i], b.get(1)), cs);
    if (want_max ? py_less(best_key, k) : py_less(k, best_key)) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}

Value unique_filter(Interp& in, const Value& input, Args& args) {
  Bound b(args, {"case_sensitive", "attribute"}, "unique");
  bool cs = b.get(0, Value::boolean(false)).truthy();
  ValueList seen;
  ValueList out;
  for (const auto& item : iterate(input)) {
    Value key = sort_key(attribute_or_item(in, item, b.get(1)), cs);
    in.step(seen.size() / 64 + 1);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return py_equal(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value::list(std::move(out));
}

Value dictsort_filter(const Value& input, Args& args) {
  Bound b(args, {"case_sensitive", "by", "reverse"}, "dictsort");
  if (input.kind() != Kind::Dict) raise("dictsort needs a mapping");
  bool cs = b.get(0, Value::boolean(false)).truthy();
  std::string by = b.has(1) ? need_str(b.get(1), "by") : "key";
  bool reverse = b.get(2, Value::boolean(false)).truthy();
  if (by != "key" && by != "value") raise("You can only sort by either \"key\" or \"value\"");
  ValueList items = iterate(dict_items(input.as_dict()));
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    std::size_t i = by == "key" ? 0 : 1;
    Value kx = sort_key(x.as_list()[i], cs);
    Value ky = sort_key(y.as_list()[i], cs);
    return reverse ? py_less(ky, kx) : py_less(kx, ky);
  });
  return Value::list(std::move(items));
}

Value sum_filter(Interp& in, const Value& input, Args& args) {
  Bound b(args, {"attribute", "start"}, "sum");
  Value total = b.get(1, Value::integer(0));
  for (const auto& item : iterate(input))
    total = binary_op(in, "+", total, attribute_or_item(in, item, b.get(0)));
  return total;
}

Value reverse_filter(const Value& input) {
  if (input.is_string()) {
    std::u32string u = utf8_decode(input.as_str());
    std::reverse(u.begin(), u.end());
    return str_value(u);
  }
  ValueList items = iterate(input);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value join_filter(Interp& in, const Value& input, Args& args) {
  Bound b(args, {"d", "attribute"}, "join");
  std::string sep = b.has(0) ? soft_str(b.get(0)) : "";
  std::string out;
  bool first = true;
  for (const auto& item : iterate(input)) {
    if (!first) out += sep;
    first = false;
    out += soft_str(b.has(1) ? attribute_or_item(in, item, b.get(1)) : item);
    in.check_size(out.size());
  }
  return Value::string(std::move(out));
}

Value first_last(const Value& input, bool first) {
  if (input.is_string()) {
    std::u32string u = utf8_decode(input.as_str());
    if (u.empty())
      return Value::undefined(first ? "No first item, sequence was empty."
                                    : "No last item, sequence was empty.");
    return str_value(std::u32string(1, first ? u.front() : u.back()));
  }
  ValueList items = iterate(input);
  if (items.empty())
    return Value::undefined(first ? "No first item, sequence was empty."
                                  : "No last item, sequence was empty.");
  return first ? items.front() : items.back();
}

Value wordcount(const Value& input) {
  std::u32string u = utf8_decode(soft_str(input));
  std::int64_t n = 0;
  bool in_word = false;
  for (char32_t c : u) {
    bool word = c == '_' || (c < 0x80 ? std::isalnum(static_cast<int>(c)) != 0 : !py_isspace(c));
    if (word && !in_word) ++n;
    in_word = word;
  }
  return Value::integer(n);
}

// jinja2's do_title: capitalise after runs of whitespace, '-', '(', '{', '[', '<'.
std::string jinja_title(const std::string& s) {
  std::u32string u = utf8_decode(s);
  bool boundary = true;
  for (auto& c : u) {
    bool sep = py_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      boundary = true;
      continue;
    }
    c = boundary ? to_upper(c) : to_lower(c);
    boundary = false;
  }
  return utf8_encode(u);
}

using FilterFn = std::function<Value(Interp&, const Value&, Args&)>;

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> table = [] {
    std::unordered_map<std::string, FilterFn> t;
    auto simple_str = [](std::function<std::string(const std::string&)> f, std::string name) {
      return [f, name](Interp&, const Value& v, Args& a) {
        no_args(a, name);
        return Value::string(f(soft_str(v)));
      };
    };
    t["tojson"] = tojson_filter;
    t["trim"] = [](Interp&, const Value& v, Args& a) {
      Bound b(a, {"chars"}, "trim");
      return Value::string(py_strip(soft_str(v), b.get(0), true, true));
    };
    t["length"] = [](Interp&, const Value& v, Args& a) {
      no_args(a, "length");
      return Value::integer(py_len(v));
    };
    t["count"] = t["length"];
    t["string"] = [](Interp&, const Value& v, Args& a) {
      no_args(a, "string");
      return Value::string(soft_str(v));
    };
    t["lower"] = simple_str(lower, "lower");
    t["upper"] = simple_str(upper, "upper");
    t["title"] = simple_str(jinja_title, "title");
    t["capitalize"] = simple_str(py_capitalize, "capitalize");
    t["e"] = simple_str(html_escape, "escape");
    t["escape"] = t["e"];
    t["forceescape"] = t["e"];
    t["safe"] = [](Interp&, const Value& v, Args& a) {
      no_args(a, "safe");
      return v.is_string() ? v : Value::string(soft_str(v));
    };
    t["replace"] = [](Interp& in, const Value& v, Args& a) {
      Bound b(a, {"old", "new", "count"}, "replace");
      std::int64_t count = b.has(2) && !b.get(2).is_none() ? need_int(b.get(2), "count") : -1;
      return Value::string(py_replace(in, soft_str(v), soft_str(b.get(0)), soft_str(b.get(1)), count));
    };
    t["join"] = join_filter;
    t["default"] = [](Interp&, const Value& v, Args& a) {
      Bound b(a, {"default_value", "boolean"}, "default");
      bool boolean = b.get(1, Value::boolean(false)).truthy();
      if (v.is_undefined() || (boolean && !v.truthy())) return b.get(0, Value::string(""));
      return v;
    };
    t["d"] = t["default"];
    t["first"] = [](Interp&, const Value& v, Args& a) { return no_args(a, "first"), first_last(v, true); };
    t["last"] = [](Interp&, const Value& v, Args& a) { return no_args(a, "last"), first_last(v, false); };
    t["list"] = [](Interp&, const Value& v, Args& a) { return no_args(a, "list"), Value::list(iterate(v)); };
    t["items"] = [](Interp&, const Value& v, Args& a) {
      no_args(a, "items");
      if (v.is_undefined()) return Value::list({});
      if (v.kind() != Kind::Dict) raise("Can only get item pairs from a mapping.");
      return dict_items(v.as_dict());
    };
    t["int"] = [](Interp&, const Value& v, Args& a) { return int_filter(v, a); };
    t["float"] = [](Interp&, const Value& v, Args& a) { return float_filter(v, a); };
    t["abs"] = [](Interp&, const Value& v, Args& a) {
      no_args(a, "abs");
      if (v.kind() == Kind::Float) return Value::number(std::fabs(v.as_float()));
      if (!v.is_int()) raise("bad operand type for abs(): '" + v.type_name() + "'");
      if (v.as_int() == std::numeric_limits<std::int64_t>::min()) raise("integer overflow");
      return Value::integer(std::llabs(v.as_int()));
    };
    t["round"] = [](Interp&, const Value& v, Args& a) { return round_filter(v, a); };
    t["indent"] = [](Interp&, const Value& v, Args& a) { return indent_filter(v, a); };
    t["unique"] = unique_filter;
    t["reverse"] = [](Interp&, const Value& v, Args& a) { return no_args(a, "reverse"), reverse_filter(v); };
    t["sort"] = sort_filter;
    t["dictsort"] = [](Interp&, const Value& v, Args& a) { return dictsort_filter(v, a); };
    t["sum"] = sum_filter;
    t["min"] = [](Interp& in, const Value& v, Args& a) { return minmax_filter(in, v, a, false); };
    t["max"] = [](Interp& in, const Value& v, Args& a) { return minmax_filter(in, v, a, true); };
    t["map"] = map_filter;
    t["select"] = [](Interp& in, const Value& v, Args& a) { return select_items(in, v, a, false, true); };
    t["reject"] = [](Interp& in, const Value& v, Args& a) { return select_items(in, v, a, false, false); };
    t["selectattr"] = [](Interp& in, const Value& v, Args& a) { return select_items(in, v, a, true, true); };
    t["rejectattr"] = [](Interp& in, const Value& v, Args& a) { return select_items(in, v, a, true, false); };
    t["attr"] = [](Interp& in, const Value& v, Args& a) {
      Bound b(a, {"name"}, "attr");
      return in.getattr(v, need_str(b.get(0), "attribute name"));
    };
    t["format"] = [](Interp& in, const Value& v, Args& a) {
      if (!a.positional.empty() && !a.keyword.empty())
        raise("can't handle positional and keyword arguments at the same time");
      if (!a.keyword.empty()) {
        auto d = std::make_shared<Dict>();
        for (auto& [k, val] : a.keyword) d->set(Value::string(k), val);
        return Value::string(percent_format(in, soft_str(v), Value::dict(d)));
      }
      return Value::string(percent_format(in, soft_str(v), Value::tuple(a.positional)));
    };
    t["wordcount"] = [](Interp&, const Value& v, Args& a) { return no_args(a, "wordcount"), wordcount(v); };
    t["center"] = [](Interp& in, const Value& v, Args& a) {
      Bound b(a, {"width"}, "center");
      Args inner;
      inner.positional.push_back(b.get(0, Value::integer(80)));
      return str_method(in, soft_str(v), "center", inner);
    };
    return t;
  }();
  return table;
}

// ------------------------------------------------------------ tests

using TestFn = std::function<bool(Interp&, const Value&, Args&)>;

const std::unordered_map<std::string, TestFn>& tests() {
  static const std::unordered_map<std::string, TestFn> table = [] {
    std::unordered_map<std::string, TestFn> t;
    auto unary = [](std::function<bool(const Value&)> f, std::string name) {
      return [f, name](Interp&, const Value& v, Args& a) {
        no_args(a, name);
        return f(v);
      };
    };
    auto compare = [](std::function<bool(const Value&, const Value&)> f, std::string name) {
      return [f, name](Interp&, const Value& v, Args& a) {
        Bound b(a, {"other"}, name);
        if (!b.has(0)) raise(name + "() missing required argument 'other'");
        return f(v, b.get(0));
      };
    };
    t["defined"] = unary([](const Value& v) { return !v.is_undefined(); }, "defined");
    t["undefined"] = unary([](const Value& v) { return v.is_undefined(); }, "undefined");
    t["none"] = unary([](const Value& v) { return v.is_none(); }, "none");
    t["boolean"] = unary([](const Value& v) { return v.kind() == Kind::Bool; }, "boolean");
    t["true"] = unary([](const Value& v) { return v.kind() == Kind::Bool && v.as_bool(); }, "true");
    t["false"] = unary([](const Value& v) { return v.kind() == Kind::Bool && !v.as_bool(); }, "false");
    t["integer"] = unary([](const Value& v) { return v.kind() == Kind::Int; }, "integer");
    t["float"] = unary([](const Value& v) { return v.kind() == Kind::Float; }, "float");
    t["number"] = unary([](const Value& v) { return v.is_number(); }, "number");
    t["string"] = unary([](const Value& v) { return v.is_string(); }, "string");
    t["mapping"] = unary([](const Value& v) { return v.kind() == Kind::Dict; }, "mapping");
    t["sequence"] =
        unary([](const Value& v) { return v.is_string() || v.is_sequence() || v.kind() == Kind::Dict; },
              "sequence");
    t["iterable"] = unary(
        [](const Value& v) {
          return v.is_string() || v.is_sequence() || v.kind() == Kind::Dict || v.is_undefined();
        },
        "iterable");
    // Undefined defines __call__ (it raises), so Python's callable() says True.
    t["callable"] =
        unary([](const Value& v) { return v.kind() == Kind::Callable || v.is_undefined(); }, "callable");
    t["lower"] = unary([](const Value& v) { return str_predicate(py_str(v), "islower"); }, "lower");
    t["upper"] = unary([](const Value& v) { return str_predicate(py_str(v), "isupper"); }, "upper");
    t["escaped"] = unary([](const Value&) { return false; }, "escaped");
    t["odd"] = unary([](const Value& v) { return need_int(v, "odd") % 2 != 0; }, "odd");
    t["even"] = unary([](const Value& v) { return need_int(v, "even") % 2 == 0; }, "even");
    t["divisibleby"] = compare(
        [](const Value& v, const Value& n) {
          std::int64_t d = need_int(n, "divisibleby");
          if (d == 0) raise("integer division or modulo by zero");
          return need_int(v, "divisibleby") % d == 0;
        },
        "divisibleby");
    t["eq"] = compare(py_equal, "eq");
    t["equalto"] = t["eq"];
    t["=="] = t["eq"];
    t["ne"] = compare([](const Value& a, const Value& b) { return !py_equal(a, b); }, "ne");
    t["!="] = t["ne"];
    t["lt"] = compare(py_less, "lt");
    t["lessthan"] = t["lt"];
    t["<"] = t["lt"];
    t["gt"] = compare([](const Value& a, const Value& b) { return py_less(b, a); }, "gt");
    t["greaterthan"] = t["gt"];
    t[">"] = t["gt"];
    t["le"] = compare([](const Value& a, const Value& b) { return !py_less(b, a); }, "le");
    t["<="] = t["le"];
    t["ge"] = compare([](const Value& a, const Value& b) { return !py_less(a, b); }, "ge");
    t[">="] = t["ge"];
    t["in"] = compare([](const Value& a, const Value& b) { return contains(b, a); }, "in");
    // `is` identity: singletons, CPython's cached small ints, shared containers.
    t["sameas"] = compare(
        [](const Value& a, const Value& b) {
          if (a.kind() != b.kind()) return false;
          switch (a.kind()) {
            case Kind::None:
              return true;
            case Kind::Bool:
              return a.as_bool() == b.as_bool();
            case Kind::Int:
              return a.as_int() == b.as_int() && a.as_int() >= -5 && a.as_int() <= 256;
            case Kind::List:
            case Kind::Tuple:
              return a.list_data() == b.list_data();
            case Kind::Dict:
              return &a.as_dict() == &b.as_dict();
            case Kind::Namespace:
            case Kind::Callable:
            case Kind::Loop:
              return py_equal(a, b);
            default:
              return false;
          }
        },
        "sameas");
    t["filter"] =
        unary([](const Value& v) { return v.is_string() && is_known_filter(v.as_str()); }, "filter");
    t["test"] = unary([](const Value& v) { return v.is_string() && is_known_test(v.as_str()); }, "test");
    return t;
  }();
  return table;
}

}  // namespace

bool is_known_filter(const std::string& name) { return filters().count(name) != 0; }
bool is_known_test(const std::string& name) { return tests().count(name) != 0; }

Value call_filter(Interp& in, const std::string& name, const Value& input, Args& args) {
  auto it = filters().find(name);
  if (it == filters().end()) raise("no filter named '" + name + "'");
  return it->second(in, input, args);
}

bool call_test(Interp& in, const std::string& name, const Value& input, Args& args) {
  auto it = tests().find(name);
  if (it == tests().end()) raise("no test named '" + name + "'");
  return it->second(in, input, args);
}

std::optional<Value> method_value(const Value& obj, const std::string& name) {
  auto bound = [&] { return Value::callable(std::make_shared<BoundMethod>(obj, name)); };
  auto unsafe = [&] {
    return Value::undefined("access to attribute '" + name + "' of '" + obj.type_name() +
                            "' object is unsafe.");
  };
  switch (obj.kind()) {
    case Kind::String:
      if (str_methods().count(name)) return bound();
      break;
    case Kind::Dict:
      if (dict_methods().count(name)) return bound();
      if (dict_unsafe().count(name)) return unsafe();
      break;
    case Kind::List:
      if (list_methods().count(name)) return bound();
      if (list_unsafe().count(name)) return unsafe();
      break;
    case Kind::Tuple:
      if (name == "count" || name == "index") return bound();
      break;
    case Kind::Loop:
      if (name == "cycle" || name == "changed") return bound();
      break;
    default:
      break;
  }
  return std::nullopt;
}

std::optional<Value> global_value(const std::string& name) {
  auto make = [](std::string n, std::function<Value(Interp&, Args&)> f) {
    return Value::callable(std::make_shared<Builtin>(std::move(n), std::move(f)));
  };
  if (name == "range") return make("range", range_fn);
  if (name == "dict") {
    return make("dict", [](Interp&, Args& a) { return Value::dict(build_dict(a, "dict")); });
  }
  if (name == "namespace") {
    return make("namespace", [](Interp&, Args& a) {
      auto ns = std::make_shared<Namespace>();
      auto d = build_dict(a, "namespace");
      for (const auto& [k, v] : d->items()) {
        if (k.is_string()) check_ns_name(k.as_str());
        if (v.holds_mutable()) raise("storing a namespace or loop inside a namespace is not supported");
        ns->attrs.set(k, v);
      }
      return Value::ns(ns);
    });
  }
  if (name == "raise_exception") {
    return make("raise_exception", [](Interp&, Args& a) -> Value {
      Bound b(a, {"message"}, "raise_exception");
      raise(py_str(b.get(0, Value::undefined())));
    });
  }
  if (name == "strftime_now") return make("strftime_now", strftime_fn);
  return std::nullopt;
}

// ------------------------------------------------------------ operators

namespace {
void check_overflow(bool overflow) {
  if (overflow) raise("integer overflow (Python ints are unbounded; this engine uses 64 bits)");
}

// CPython's float floor division and modulo (result takes the divisor's sign).
std::pair<double, double> float_divmod(double a, double b) {
  if (b == 0.0) raise("float division by zero");
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0.0) {
    if ((b < 0) != (mod < 0)) {
      mod += b;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, b);
  }
  double floordiv;
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, a / b);
  }
  return {floordiv, mod};
}

Value repeat(Interp& in, const Value& seq, std::int64_t n) {
  if (n <= 0)
    return seq.is_string()             ? Value::string("")
           : seq.kind() == Kind::Tuple ? Value::tuple({})
                                       : Value::list({});
  if (seq.is_string()) {
    const std::string& s = seq.as_str();
    in.check_size(s.size() * static_cast<std::size_t>(std::min<std::int64_t>(n, 1LL << 40)));
    std::string out;
    out.reserve(s.size() * static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) out += s;
    in.step(out.size() / 256);
    return Value::string(std::move(out));
  }
  const ValueList& items = seq.as_list();
  in.check_size(items.size() * static_cast<std::size_t>(std::min<std::int64_t>(n, 1LL << 40)) * 16);
  ValueList out;
  for (std::int64_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  in.step(out.size());
  return seq.kind() == Kind::Tuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

[[noreturn]] void bad_operands(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) raise(a.undefined_hint());
  if (b.is_undefined()) raise(b.undefined_hint());
  raise("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
}

Value int_pow(std::int64_t base, std::int64_t exp) {
  std::int64_t result = 1;
  for (std::int64_t i = 0; i < exp; ++i) {
    if (result == 0 || (base >= -1 && base <= 1 && i >= 2)) {
      // 0, 1 and -1 never grow: finish by parity instead of looping.
      if (base == -1) result = ((exp - i) % 2 == 0) ? result : -result;
      return Value::integer(result);
    }
    check_overflow(__builtin_mul_overflow(result, base, &result));
  }
  return Value::integer(result);
}
}  // namespace

Value binary_op(Interp& in, const std::string& op, const Value& a, const Value& b) {
  in.charge(a);
  in.charge(b);
  if (op == "~") {
    std::string out = py_str(a) + py_str(b);
    in.check_size(out.size());
    in.step(out.size() / 256);
    return Value::string(std::move(out));
  }
  bool ints =
      (a.kind() == Kind::Int || a.kind() == Kind::Bool) && (b.kind() == Kind::Int || b.kind() == Kind::Bool);
  bool nums = a.is_number() && b.is_number();
  std::int64_t r = 0;
  if (op == "+") {
    if (ints) return check_overflow(__builtin_add_overflow(a.as_int(), b.as_int(), &r)), Value::integer(r);
    if (nums) return Value::number(a.as_float() + b.as_float());
    if (a.is_string() && b.is_string()) {
      in.check_size(a.as_str().size() + b.as_str().size());
      in.step((a.as_str().size() + b.as_str().size()) / 256);
      return Value::string(a.as_str() + b.as_str());
    }
    if (a.kind() == b.kind() && a.is_sequence()) {
      ValueList out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      in.check_size(out.size() * 16);
      in.step(out.size() / 16);
      return a.kind() == Kind::Tuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
    if (a.is_string() && !b.is_undefined())
      raise("can only concatenate str (not \"" + b.type_name() + "\") to str");
    if (a.kind() == Kind::List && !b.is_undefined())
      raise("can only concatenate list (not \"" + b.type_name() + "\") to list");
    bad_operands(op, a, b);
  }
  if (op == "-") {
    if (ints) return check_overflow(__builtin_sub_overflow(a.as_int(), b.as_int(), &r)), Value::integer(r);
    if (nums) return Value::number(a.as_float() - b.as_float());
    bad_operands(op, a, b);
  }
  if (op == "*") {
    if (ints) return check_overflow(__builtin_mul_overflow(a.as_int(), b.as_int(), &r)), Value::integer(r);
    if (nums) return Value::number(a.as_float() * b.as_float());
    if ((a.is_string() || a.is_sequence()) && b.is_int()) return repeat(in, a, b.as_int());
    if ((b.is_string() || b.is_sequence()) && a.is_int()) return repeat(in, b, a.as_int());
    bad_operands(op, a, b);
  }
  if (op == "/") {
    if (!nums) bad_operands(op, a, b);
    if (b.as_float() == 0.0) raise("division by zero");
    return Value::number(a.as_float() / b.as_float());
  }
  if (op == "//" || op == "%") {
    if (ints) {
      std::int64_t x = a.as_int();
      std::int64_t y = b.as_int();
      if (y == 0) raise("integer division or modulo by zero");
      if (x == std::numeric_limits<std::int64_t>::min() && y == -1) raise("integer overflow");
      std::int64_t q = x / y;
      std::int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        q -= 1;
        m += y;
      }
      return Value::integer(op == "//" ? q : m);
    }
    if (nums) {
      auto [q, m] = float_divmod(a.as_float(), b.as_float());
      return Value::number(op == "//" ? q : m);
    }
    if (op == "%" && a.is_string()) return Value::string(percent_format(in, a.as_str(), b));
    bad_operands(op, a, b);
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) return int_pow(a.as_int(), b.as_int());
    if (nums) {
      if (a.as_float() == 0.0 && b.as_float() < 0) raise("0.0 cannot be raised to a negative power");
      return Value::number(std::pow(a.as_float(), b.as_float()));
    }
    bad_operands(op, a, b);
  }
  raise("unknown operator " + op);
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::String:
      if (!item.is_string()) raise("'in <string>' requires string as left operand, not " + item.type_name());
      return container.as_str().find(item.as_str()) != std::string::npos;
    case Kind::List:
    case Kind::Tuple:
      return std::any_of(container.as_list().begin(), container.as_list().end(),
                         [&](const Value& v) { return py_equal(v, item); });
    case Kind::Dict:
      return container.as_dict().find(item) != nullptr;
    case Kind::Undefined:
      return false;
    case Kind::Namespace:
      raise("argument of type 'Namespace' is not iterable");
    default:
      raise("argument of type '" + container.type_name() + "' is not iterable");
  }
}

ValueList iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::List:
    case Kind::Tuple:
      return v.as_list();
    case Kind::Dict: {
      ValueList keys;
      for (const auto& [k, val] : v.as_dict().items()) keys.push_back(k);
      return keys;
    }
    case Kind::String: {
      ValueList chars;
      for (char32_t c : utf8_decode(v.as_str())) chars.push_back(str_value(std::u32string(1, c)));
      return chars;
    }
    case Kind::Undefined:
      return {};
    default:
      raise("'" + v.type_name() + "' object is not iterable");
  }
}

std::int64_t py_len(const Value& v) {
  switch (v.kind()) {
    case Kind::String:
      return static_cast<std::int64_t>(utf8_length(v.as_str()));
    case Kind::List:
    case Kind::Tuple:
      return static_cast<std::int64_t>(v.as_list().size());
    case Kind::Dict:
      return static_cast<std::int64_t>(v.as_dict().size());
    case Kind::Undefined:
      return 0;
    default:
      raise("object of type '" + v.type_name() + "' has no len()");
  }
}

}  // namespace tessera::chat_template_detail
