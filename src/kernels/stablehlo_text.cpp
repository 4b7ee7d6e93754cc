// Reading a kernel package's StableHLO text for splicing (stablehlo_text.h).
#include "kernels/stablehlo_text.h"

#include <cctype>
#include <set>

#include "tessera/error.h"

namespace tessera::kernels {
namespace {

bool ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '.';
}

// The index just past the bracket that closes the one at `open` ('(', '{', '<' or '['), skipping string
// literals; npos when unbalanced. "->" is an arrow, not a closing angle bracket.
size_t skip_balanced(const std::string& s, size_t open) {
  int depth = 0;
  for (size_t i = open; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '"') {
      for (++i; i < s.size() && s[i] != '"'; ++i)
        if (s[i] == '\\') ++i;
      continue;
    }
    if (c == '(' || c == '{' || c == '[' || c == '<') ++depth;
    if (c == '>' && i > 0 && s[i - 1] == '-') continue;
    if (c == ')' || c == '}' || c == ']' || c == '>') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string::npos;
}

size_t skip_space(const std::string& s, size_t i) {
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return i;
}

// Splits s[begin, end) at top-level commas.
std::vector<std::string> split_top(const std::string& s, size_t begin, size_t end) {
  std::vector<std::string> out;
  size_t start = begin;
  for (size_t i = begin; i < end; ++i) {
    const char c = s[i];
    if (c == '(' || c == '{' || c == '[' || c == '<' || c == '"') {
      const size_t j = skip_balanced(s, i);
      if (c == '"') {  // a string literal: skip to its closing quote
        size_t k = i + 1;
        while (k < end && s[k] != '"') k += s[k] == '\\' ? 2 : 1;
        i = k;
      } else if (j != std::string::npos) {
        i = j - 1;
      }
      continue;
    }
    if (c == ',') {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  if (end > start && s.find_first_not_of(" \t\r\n", start) < end) out.push_back(s.substr(start, end - start));
  return out;
}

// The type in "%arg0: tensor<4xf32> {attrs}" or "tensor<4xf32> {attrs}": up to a top-level '{', whitespace
// removed.
std::string type_of(std::string part, bool named) {
  if (named) {
    const size_t colon = part.find(':');
    part = colon == std::string::npos ? std::string() : part.substr(colon + 1);
  }
  std::string t;
  int depth = 0;
  for (char c : part) {
    if (c == '{' && depth == 0) break;
    if (c == '<') ++depth;
    if (c == '>') --depth;
    if (!std::isspace(static_cast<unsigned char>(c))) t += c;
  }
  return t;
}

}  // namespace

std::string signature_text(const std::vector<std::string>& args, const std::vector<std::string>& results) {
  std::string s = "(";
  for (size_t i = 0; i < args.size(); ++i) s += (i ? ", " : "") + args[i];
  s += ") -> ";
  if (results.size() != 1) s += "(";
  for (size_t i = 0; i < results.size(); ++i) s += (i ? ", " : "") + results[i];
  if (results.size() != 1) s += ")";
  return s;
}

StablehloKernelText parse_stablehlo_kernel(const std::string& text, const std::string& file,
                                           const std::string& prefix) {
  StablehloKernelText k;
  k.prefix = prefix;
  k.tpu_custom_call = text.find("@tpu_custom_call") != std::string::npos;
  auto bad = [&](const std::string& what) { fail("kernel StableHLO ", file, ": ", what); };
  // Top-level attribute aliases (#loc..., #map...), kept for the definitions that refer to them.
  for (size_t line = 0; line < text.size();) {
    size_t end = text.find('\n', line);
    if (end == std::string::npos) end = text.size();
    if (text[line] == '#') k.aliases.push_back(text.substr(line, end - line));
    line = end + 1;
  }
  const std::string kw = "func.func";
  for (size_t at = text.find(kw); at != std::string::npos; at = text.find(kw, at)) {
    StablehloFunction f;
    size_t i = skip_space(text, at + kw.size());
    for (const char* vis : {"public", "private", "nested"}) {
      const std::string v = vis;
      if (text.compare(i, v.size(), v) == 0 && !ident_char(text[i + v.size()])) {
        f.is_public = v == "public";
        i = skip_space(text, i + v.size());
      }
    }
    if (i >= text.size() || text[i] != '@') bad("a func.func without a @name at byte " + std::to_string(at));
    size_t n = i + 1;
    while (n < text.size() && ident_char(text[n])) ++n;
    f.name = text.substr(i + 1, n - i - 1);
    i = skip_space(text, n);
    if (i >= text.size() || text[i] != '(') bad("@" + f.name + ": no argument list");
    const size_t args_end = skip_balanced(text, i);
    if (args_end == std::string::npos) bad("@" + f.name + ": unbalanced argument list");
    for (const std::string& a : split_top(text, i + 1, args_end - 1)) f.arg_types.push_back(type_of(a, true));
    i = skip_space(text, args_end);
    if (text.compare(i, 2, "->") == 0) {
      i = skip_space(text, i + 2);
      if (text[i] == '(') {
        const size_t r_end = skip_balanced(text, i);
        if (r_end == std::string::npos) bad("@" + f.name + ": unbalanced result list");
        for (const std::string& r : split_top(text, i + 1, r_end - 1))
          f.result_types.push_back(type_of(r, false));
        i = r_end;
      } else {
        size_t e = i;
        while (e < text.size() && !std::isspace(static_cast<unsigned char>(text[e])) && text[e] != '{') {
          if (text[e] == '<') e = skip_balanced(text, e) - 1;
          ++e;
        }
        f.result_types.push_back(type_of(text.substr(i, e - i), false));
        i = e;
      }
    }
    i = skip_space(text, i);
    if (text.compare(i, 10, "attributes") == 0) {
      i = skip_space(text, i + 10);
      i = skip_space(text, skip_balanced(text, i));
    }
    if (i >= text.size() || text[i] != '{') bad("@" + f.name + ": no body");
    const size_t body_end = skip_balanced(text, i);
    if (body_end == std::string::npos) bad("@" + f.name + ": unbalanced body");
    f.text = "func.func private @" + f.name + text.substr(n, body_end - n);
    k.functions.push_back(std::move(f));
    at = body_end;
  }
  if (k.functions.empty()) bad("no func.func definition");
  // Rename every defined symbol (definitions and references) to prefix + name.
  std::set<std::string> defined;
  for (const auto& f : k.functions) defined.insert(f.name);
  for (auto& f : k.functions) {
    std::string out;
    for (size_t i = 0; i < f.text.size(); ++i) {
      out += f.text[i];
      if (f.text[i] != '@') continue;
      size_t e = i + 1;
      while (e < f.text.size() && ident_char(f.text[e])) ++e;
      if (defined.count(f.text.substr(i + 1, e - i - 1))) out += prefix;
    }
    f.text = std::move(out);
  }
  return k;
}

}  // namespace tessera::kernels
