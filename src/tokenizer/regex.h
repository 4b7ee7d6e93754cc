// PCRE2 (UTF + UCP, JIT) regex with the matching semantics of Oniguruma, the
// engine HF tokenizers uses: the pattern is rewritten where the two differ
// (\s, \S, \h, \H, \w, \W) and matches are enumerated like onig's find_iter.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::tok {

struct Span {
  size_t begin, end;
};

class Regex {
 public:
  // `where` names the field in error messages. Throws Error on a bad pattern.
  Regex(const std::string& onig_pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends every match in `subject` (valid UTF-8) to `out`, in order.
  void find_all(std::string_view subject, std::vector<Span>& out) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;  // as written in the file
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

// Rewrites the Oniguruma-only escapes into PCRE2 syntax with the same meaning.
std::string onig_to_pcre2(const std::string& pattern);
// Escapes every regex metacharacter so the string matches literally.
std::string regex_quote(std::string_view literal);

}  // namespace tessera::tok
