// Lexer with jinja2's whitespace rules as transformers configures them:
// trim_blocks (drop the first newline after a block or comment tag),
// lstrip_blocks (drop spaces before a block or comment tag that starts a line),
// `-` / `+` markers, and no trailing newline kept.
#include <algorithm>
#include <cstring>

#include "tessera/error.h"
#include "chat_template/chat_template_ast.h"

namespace tessera::chat_template_detail {

void fail_at(SourcePos pos, const std::string& what) {
  fail("chat template: line ", pos.line, ", column ", pos.column, ": ", what);
}

namespace {

bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident_char(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  explicit Lexer(const std::string& src) : src_(src) {
    line_starts_.push_back(0);
    for (std::size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) lex_root();
    push(Tok::Eof, "", src_.size());
    return std::move(tokens_);
  }

 private:
  const std::string& src_;
  std::size_t pos_ = 0;
  bool line_starting_ = true;  // the previous match ended with a newline
  std::vector<std::size_t> line_starts_;
  std::vector<Token> tokens_;
  std::vector<char> balance_;  // open brackets inside the current tag

  // Line and column (in code points) of a byte offset; incremental because
  // tokens arrive in source order.
  SourcePos where(std::size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    auto line = static_cast<int>(it - line_starts_.begin());
    std::size_t start = line_starts_[static_cast<std::size_t>(line - 1)];
    std::size_t from = start;
    int column = 1;
    if (cache_line_ == line && cache_offset_ <= offset) {
      from = cache_offset_;
      column = cache_column_;
    }
    column += static_cast<int>(utf8_length(std::string_view(src_).substr(from, offset - from)));
    cache_line_ = line;
    cache_offset_ = offset;
    cache_column_ = column;
    return {line, column};
  }
  mutable int cache_line_ = 0;
  mutable std::size_t cache_offset_ = 0;
  mutable int cache_column_ = 1;

  [[noreturn]] void error(std::size_t offset, const std::string& what) const { fail_at(where(offset), what); }

  void push(Tok type, std::string text, std::size_t offset) {
    tokens_.push_back(Token{type, std::move(text), where(offset)});
  }

  bool starts_with(std::size_t at, const char* s) const {
    std::size_t n = std::strlen(s);
    return at + n <= src_.size() && src_.compare(at, n, s) == 0;
  }

  // Python whitespace (str.isspace) at byte offset `at`; returns its byte length or 0.
  std::size_t space_len(std::size_t at) const {
    if (at >= src_.size()) return 0;
    auto c = static_cast<unsigned char>(src_[at]);
    if (c < 0x80) return py_isspace(c) ? 1 : 0;
    std::size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    if (at + n > src_.size()) return 0;
    auto cps = utf8_decode(std::string_view(src_).substr(at, n));
    return (cps.size() == 1 && py_isspace(cps[0])) ? n : 0;
  }

  std::size_t skip_spaces(std::size_t at) const {
    while (std::size_t n = space_len(at)) at += n;
    return at;
  }

  static std::string rstrip_py(const std::string& text) {
    auto cps = utf8_decode(text);
    while (!cps.empty() && py_isspace(cps.back())) cps.pop_back();
    return utf8_encode(cps);
  }

  static bool all_space(std::string_view text) {
    if (text.empty()) return false;
    for (char32_t c : utf8_decode(text)) {
      if (!py_isspace(c)) return false;
    }
    return true;
  }

  // Whitespace control for the text before a tag: `-` strips all trailing
  // whitespace; otherwise lstrip_blocks drops the indentation of a block or
  // comment tag that is alone at the start of its line.
  std::string control_text(std::string text, char sign, bool is_variable) const {
    if (sign == '-') return rstrip_py(text);
    if (sign != '+' && !is_variable) {
      std::size_t nl = text.rfind('\n');
      std::size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && all_space(std::string_view(text).substr(l_pos)))
        text.resize(l_pos);
    }
    return text;
  }

  void lex_root() {
    std::size_t start = pos_;
    std::size_t tag = src_.find('{', pos_);
    while (tag != std::string::npos && tag + 1 < src_.size() && src_[tag + 1] != '{' &&
           src_[tag + 1] != '%' && src_[tag + 1] != '#') {
      tag = src_.find('{', tag + 1);
    }
    if (tag == std::string::npos || tag + 1 >= src_.size()) {
      push(Tok::Data, src_.substr(start), start);
      pos_ = src_.size();
      return;
    }
    char kind = src_[tag + 1];
    std::size_t after = tag + 2;
    char sign = 0;
    if (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) sign = src_[after++];
    std::string text = control_text(src_.substr(start, tag - start), sign, kind == '{');
    if (!text.empty()) push(Tok::Data, std::move(text), start);
    line_starting_ = false;
    pos_ = after;
    if (kind == '#') {
      lex_comment(tag);
    } else if (kind == '%' && is_raw_begin(after)) {
      lex_raw(tag);
    } else {
      lex_tag(kind == '{', tag);
    }
  }

  void lex_comment(std::size_t tag) {
    std::size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) error(tag, "missing end of comment tag");
    char sign = (end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+')) ? src_[end - 1] : 0;
    pos_ = end + 2;
    finish_tag_end(sign);
  }

  // After a block or comment end marker: `-` eats all whitespace, `+` nothing,
  // plain trim_blocks eats one newline.
  void finish_tag_end(char sign) {
    if (sign == '-') {
      std::size_t next = skip_spaces(pos_);
      line_starting_ = next > pos_ && src_[next - 1] == '\n';
      pos_ = next;
    } else if (sign != '+' && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      line_starting_ = true;
    } else {
      line_starting_ = false;
    }
  }

  bool is_raw_begin(std::size_t at) const {
    at = skip_spaces(at);
    if (!starts_with(at, "raw")) return false;
    at = skip_spaces(at + 3);
    return starts_with(at, "-%}") || starts_with(at, "%}");
  }

  void lex_raw(std::size_t tag) {
    std::size_t at = skip_spaces(skip_spaces(pos_) + 3);
    if (src_[at] == '-') {
      pos_ = skip_spaces(at + 3);
    } else {
      pos_ = at + 2;
    }
    // Body runs to the first `{% endraw %}` (with optional markers).
    std::size_t search = pos_;
    while (true) {
      std::size_t open = src_.find("{%", search);
      if (open == std::string::npos) error(tag, "missing end of raw directive");
      std::size_t p = open + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      p = skip_spaces(p);
      if (starts_with(p, "endraw")) {
        p = skip_spaces(p + 6);
        char end_sign = 0;
        if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) end_sign = src_[p++];
        if (starts_with(p, "%}")) {
          std::string text = control_text(src_.substr(pos_, open - pos_), sign, false);
          if (!text.empty()) push(Tok::Data, std::move(text), pos_);
          pos_ = p + 2;
          finish_tag_end(end_sign);
          return;
        }
      }
      search = open + 2;
    }
  }

  void lex_tag(bool is_variable, std::size_t tag) {
    push(is_variable ? Tok::VarBegin : Tok::BlockBegin, "", tag);
    balance_.clear();
    while (true) {
      if (pos_ >= src_.size())
        error(tag, is_variable ? "unexpected end of template, expected '}}'"
                               : "unexpected end of template, expected '%}'");
      if (balance_.empty() && try_tag_end(is_variable)) return;
      std::size_t ws = skip_spaces(pos_);
      if (ws > pos_) {
        pos_ = ws;
        continue;
      }
      lex_expression_token();
    }
  }

  bool try_tag_end(bool is_variable) {
    std::size_t at = pos_;
    char sign = 0;
    if (src_[at] == '-' || (!is_variable && src_[at] == '+')) sign = src_[at++];
    if (!starts_with(at, is_variable ? "}}" : "%}")) return false;
    push(is_variable ? Tok::VarEnd : Tok::BlockEnd, "", pos_);
    pos_ = at + 2;
    if (is_variable) {
      if (sign == '-') {
        std::size_t next = skip_spaces(pos_);
        line_starting_ = next > pos_ && src_[next - 1] == '\n';
        pos_ = next;
      } else {
        line_starting_ = false;
      }
    } else {
      finish_tag_end(sign);
    }
    return true;
  }

  void lex_expression_token() {
    std::size_t start = pos_;
    char c = src_[pos_];
    if (is_digit(c)) return lex_number();
    if (is_ident_start(c)) {
      while (pos_ < src_.size() && is_ident_char(src_[pos_])) ++pos_;
      push(Tok::Name, src_.substr(start, pos_ - start), start);
      return;
    }
    if (c == '\'' || c == '"') return lex_string();
    lex_operator();
  }

  // Digits with optional single underscores between them.
  std::size_t scan_digits(std::size_t at, bool (*ok)(char)) const {
    std::size_t p = at;
    if (p >= src_.size() || !ok(src_[p])) return at;
    while (p < src_.size()) {
      if (ok(src_[p])) {
        ++p;
      } else if (src_[p] == '_' && p + 1 < src_.size() && ok(src_[p + 1])) {
        p += 2;
      } else {
        break;
      }
    }
    return p;
  }

  static std::string strip_underscores(std::string s) {
    s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
    return s;
  }

  void lex_number() {
    std::size_t start = pos_;
    bool after_dot = start > 0 && src_[start - 1] == '.';
    std::size_t int_end = scan_digits(start, is_digit);
    // Float: digits, then a fraction and/or an exponent (not right after a dot: `a.0.1`).
    if (!after_dot) {
      std::size_t p = int_end;
      bool is_float = false;
      if (p + 1 < src_.size() && src_[p] == '.' && is_digit(src_[p + 1])) {
        p = scan_digits(p + 1, is_digit);
        is_float = true;
      }
      if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
        std::size_t q = p + 1;
        if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
        std::size_t e_end = scan_digits(q, is_digit);
        if (e_end > q) {
          p = e_end;
          is_float = true;
        }
      }
      if (is_float) {
        std::string text = strip_underscores(src_.substr(start, p - start));
        Token t{Tok::Float, text, where(start)};
        t.float_value = std::strtod(text.c_str(), nullptr);
        tokens_.push_back(std::move(t));
        pos_ = p;
        return;
      }
    }
    lex_integer(start);
  }

  void lex_integer(std::size_t start) {
    int base = 10;
    std::size_t digits_at = start;
    if (src_[start] == '0' && start + 1 < src_.size()) {
      char b = static_cast<char>(src_[start + 1] | 0x20);
      if (b == 'x') base = 16;
      if (b == 'o') base = 8;
      if (b == 'b') base = 2;
      if (base != 10) digits_at = start + 2;
    }
    std::size_t end = start;
    if (base == 10) {
      end = src_[start] == '0' ? start + 1 : scan_digits(start, is_digit);
      while (src_[start] == '0' && end < src_.size() &&
             (src_[end] == '0' || (src_[end] == '_' && end + 1 < src_.size() && src_[end + 1] == '0'))) {
        end += src_[end] == '_' ? 2 : 1;
      }
    } else {
      std::size_t p = digits_at;
      auto ok = [&](char ch) {
        int d =
            std::isxdigit(static_cast<unsigned char>(ch)) ? std::stoi(std::string(1, ch), nullptr, 16) : 99;
        return d < base;
      };
      while (p < src_.size() && (ok(src_[p]) || (src_[p] == '_' && p + 1 < src_.size() && ok(src_[p + 1]))))
        ++p;
      if (p == digits_at) {  // "0x" without digits lexes as 0 followed by a name
        base = 10;
        digits_at = start;
        p = start + 1;
      }
      end = p;
    }
    std::string digits = strip_underscores(src_.substr(digits_at, end - digits_at));
    errno = 0;
    char* parse_end = nullptr;
    long long v = std::strtoll(digits.c_str(), &parse_end, base);
    if (errno == ERANGE) error(start, "integer literal too large");
    Token t{Tok::Int, src_.substr(start, end - start), where(start)};
    t.int_value = v;
    tokens_.push_back(std::move(t));
    pos_ = end;
  }

  void lex_string() {
    std::size_t start = pos_;
    char quote = src_[pos_++];
    std::string raw;
    while (true) {
      if (pos_ >= src_.size()) error(start, "unexpected end of string");
      char c = src_[pos_];
      if (c == quote) break;
      if (c == '\\' && pos_ + 1 < src_.size()) {
        raw.push_back(c);
        raw.push_back(src_[pos_ + 1]);
        pos_ += 2;
        continue;
      }
      raw.push_back(c);
      ++pos_;
    }
    ++pos_;
    Token t{Tok::String, unescape(raw, start), where(start)};
    tokens_.push_back(std::move(t));
  }

  // Python's "unicode-escape" decoding, which jinja2 applies to string literals.
  std::string unescape(const std::string& raw, std::size_t at) const {
    std::string out;
    for (std::size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '\\' || i + 1 >= raw.size()) {
        out.push_back(raw[i]);
        continue;
      }
      char e = raw[++i];
      switch (e) {
        case '\n':
          break;  // line continuation
        case '\\':
          out.push_back('\\');
          break;
        case '\'':
          out.push_back('\'');
          break;
        case '"':
          out.push_back('"');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'x':
        case 'u':
        case 'U': {
          std::size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          std::string hex = raw.substr(i + 1, n);
          if (hex.size() != n || !std::all_of(hex.begin(), hex.end(), [](char h) {
                return std::isxdigit(static_cast<unsigned char>(h));
              })) {
            error(at, "truncated \\" + std::string(1, e) + " escape");
          }
          auto cp = static_cast<char32_t>(std::stoul(hex, nullptr, 16));
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            error(at, "illegal Unicode character in escape");
          utf8_append(out, cp);
          i += n;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {  // octal, up to three digits
            unsigned v = 0;
            std::size_t k = 0;
            while (k < 3 && i < raw.size() && raw[i] >= '0' && raw[i] <= '7') {
              v = v * 8 + static_cast<unsigned>(raw[i] - '0');
              ++i;
              ++k;
            }
            --i;
            utf8_append(out, v);
          } else {  // unknown escapes stay as written
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    return out;
  }

  void lex_operator() {
    static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                       "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";"};
    for (const char* op : kOps) {
      if (!starts_with(pos_, op)) continue;
      char c = op[0];
      if (std::strlen(op) == 1 && std::strchr("([{", c))
        balance_.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
      if (std::strlen(op) == 1 && std::strchr(")]}", c)) {
        if (balance_.empty()) error(pos_, std::string("unexpected '") + c + "'");
        if (balance_.back() != c)
          error(pos_, std::string("unexpected '") + c + "', expected '" + balance_.back() + "'");
        balance_.pop_back();
      }
      push(Tok::Op, op, pos_);
      pos_ += std::strlen(op);
      return;
    }
    std::size_t n = 1;
    auto c = static_cast<unsigned char>(src_[pos_]);
    if (c >= 0x80) n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    error(pos_, "unexpected char " + py_string_repr(src_.substr(pos_, n)));
  }
};

}  // namespace

std::vector<Token> lex_template(const std::string& source) {
  Lexer lexer(source);
  return lexer.run();
}

}  // namespace tessera::chat_template_detail
