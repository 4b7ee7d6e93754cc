#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include <memory>

#include "tessera/error.h"

namespace tessera::tok {
namespace {

// Oniguruma's \s is the Unicode White_Space property; PCRE2's UCP \s also
// matches U+180E, so spell the set out.
constexpr const char* kSpaceSet = R"(\t\n\x0B\f\r\x{85}\p{Zs}\x{2028}\x{2029})";
// Oniguruma's \w: Letter | Mark | Decimal_Number | Connector_Punctuation.
constexpr const char* kWordSet = R"(\p{L}\p{M}\p{Nd}\p{Pc})";
// Oniguruma (Ruby syntax) \h is a hexadecimal digit, not horizontal space.
constexpr const char* kHexSet = "0-9a-fA-F";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

// Per-thread match data and JIT stack: pcre2 match state must not be shared.
struct MatchScratch {
  pcre2_match_data* data = nullptr;
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* ctx = nullptr;
  MatchScratch() {
    data = pcre2_match_data_create(1, nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    ctx = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_assign(ctx, nullptr, stack);
  }
  ~MatchScratch() {
    pcre2_match_context_free(ctx);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

MatchScratch& scratch() {
  thread_local MatchScratch s;
  return s;
}

}  // namespace

std::string onig_to_pcre2(const std::string& p) {
  std::string out;
  out.reserve(p.size() + 32);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      const char* set = nullptr;
      bool negated = false;
      switch (e) {
        case 's': set = kSpaceSet; break;
        case 'S': set = kSpaceSet; negated = true; break;
        case 'w': set = kWordSet; break;
        case 'W': set = kWordSet; negated = true; break;
        case 'h': set = kHexSet; break;
        case 'H': set = kHexSet; negated = true; break;
        default: break;
      }
      if (set == nullptr || (in_class && negated)) {
        // Negated sets inside a class cannot be inlined; keep PCRE2's meaning.
        out += '\\';
        out += e;
        continue;
      }
      if (in_class) {
        out += set;
      } else {
        out += negated ? "[^" : "[";
        out += set;
        out += ']';
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      const size_t close = p.find(":]", i + 2);
      if (close != std::string::npos) {
        out.append(p, i, close + 2 - i);
        i = close + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

std::string regex_quote(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

Regex::Regex(const std::string& onig_pattern, const std::string& where) : pattern_(onig_pattern) {
  const std::string translated = onig_to_pcre2(onig_pattern);
  int err = 0;
  PCRE2_SIZE err_off = 0;
  // MULTILINE: in Oniguruma's Ruby syntax ^ and $ always match at line breaks.
  const uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), options,
                                   &err, &err_off, nullptr);
  if (code == nullptr) {
    fail(where, ": invalid regex at offset ", err_off, ": ", pcre2_message(err), " (pattern: ", onig_pattern, ")");
  }
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::find_all(std::string_view subject, std::vector<Span>& out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  MatchScratch& s = scratch();
  const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t search_from = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (search_from <= subject.size()) {
    int rc = jit_ ? pcre2_jit_match(code, text, subject.size(), search_from, PCRE2_NO_UTF_CHECK, s.data, s.ctx)
                  : PCRE2_ERROR_JIT_STACKLIMIT;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code, text, subject.size(), search_from, PCRE2_NO_UTF_CHECK, s.data, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) fail("tokenizer: regex match failed: ", pcre2_message(rc), " (pattern: ", pattern_, ")");
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
    const size_t b = ov[0], e = ov[1];
    // Like onig's find_iter: an empty match right after the previous match is
    // skipped by advancing one character.
    if (b == e && have_last && last_end == e) {
      if (search_from >= subject.size()) return;
      size_t step = 1;
      while (search_from + step < subject.size() && (static_cast<uint8_t>(subject[search_from + step]) & 0xC0) == 0x80)
        ++step;
      search_from += step;
      continue;
    }
    out.push_back({b, e});
    search_from = e;
    last_end = e;
    have_last = true;
  }
}

}  // namespace tessera::tok
