#include "serve/tool_calls.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <set>
#include <utility>

#include "tessera/error.h"

namespace tessera::serve {

using nlohmann::json;
using nlohmann::ordered_json;

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::Hermes:
      return "hermes";
    case ToolCallFormat::Llama3Json:
      return "llama3_json";
    case ToolCallFormat::Mistral:
      return "mistral";
    case ToolCallFormat::Pythonic:
      return "pythonic";
    case ToolCallFormat::Glm4:
      return "glm45";
    case ToolCallFormat::Harmony:
      return "harmony";
    case ToolCallFormat::Gemma4:
      return "gemma4";
    default:
      return "none";
  }
}

std::optional<ToolCallFormat> tool_call_format_from_name(const std::string& name) {
  for (ToolCallFormat f :
       {ToolCallFormat::None, ToolCallFormat::Hermes, ToolCallFormat::Llama3Json, ToolCallFormat::Mistral,
        ToolCallFormat::Pythonic, ToolCallFormat::Glm4, ToolCallFormat::Harmony, ToolCallFormat::Gemma4})
    if (name == tool_call_format_name(f)) return f;
  return std::nullopt;
}

namespace {
bool has(std::string_view s, std::string_view x) { return s.find(x) != std::string_view::npos; }
}  // namespace

ToolCallFormat choose_tool_call_format(const std::string& architecture, const std::string& chat_template) {
  const std::string_view t = chat_template, a = architecture;
  // What the template writes a call as (or tells the model to write).
  if (a == "GptOssForCausalLM" || (has(t, "<|channel|>") && has(t, "<|message|>")))
    return ToolCallFormat::Harmony;
  if (a.starts_with("Gemma4") || has(t, "<|tool_call>call:")) return ToolCallFormat::Gemma4;
  if (has(t, "<tool_call>") && has(t, "<arg_key>")) return ToolCallFormat::Glm4;
  if (has(t, "[TOOL_CALLS]")) return ToolCallFormat::Mistral;
  if (has(t, "<tool_call>")) return ToolCallFormat::Hermes;
  if (has(t, "[func_name1(params_name1=params_value1")) return ToolCallFormat::Pythonic;
  if (has(t, "<|python_tag|>") || has(t, "\"parameters\": dictionary of argument name"))
    return ToolCallFormat::Llama3Json;
  // The family's own format when the template shows none.
  if (a.starts_with("Qwen")) return ToolCallFormat::Hermes;
  if (a.starts_with("Mistral") || a.starts_with("Mixtral") || a.starts_with("Ministral"))
    return ToolCallFormat::Mistral;
  if (a.starts_with("Glm4")) return ToolCallFormat::Glm4;
  if (a.starts_with("Llama4") || a.starts_with("Gemma3")) return ToolCallFormat::Pythonic;
  if (a == "LlamaForCausalLM" && has(t, "tools")) return ToolCallFormat::Llama3Json;
  return ToolCallFormat::Hermes;
}

// ---------------------------------------------------------------- parsing

namespace {

constexpr std::string_view kToolCall = "<tool_call>", kToolCallEnd = "</tool_call>";
constexpr std::string_view kMistralCalls = "[TOOL_CALLS]", kMistralArgs = "[ARGS]", kMistralId = "[CALL_ID]";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kPythonStart = "<|python_start|>", kPythonEnd = "<|python_end|>";
constexpr std::string_view kArgKey = "<arg_key>", kArgKeyEnd = "</arg_key>";
constexpr std::string_view kArgValue = "<arg_value>", kArgValueEnd = "</arg_value>";
// The canonical form of a harmony call (make_harmony_parser's tool_calls): the marker, NAME, <|message|>,
// the JSON arguments, <|call|>.
constexpr std::string_view kHarmonyCall = "<|channel|>commentary to=functions.";
constexpr std::string_view kHarmonyMessage = "<|message|>", kHarmonyEnd = "<|call|>";
constexpr int kMaxDepth = 512;
constexpr std::string_view kGemmaCall = "<|tool_call>", kGemmaCallEnd = "<tool_call|>",
                           kGemmaQuote = "<|\"|>";

// Where held text starts. Marker formats (Hermes, Glm4, Mistral) go Text -> (call) -> AfterCall -> ...; the
// formats that are calls only when the output starts with one (Llama3Json, Pythonic) start in Start and end
// in Pass once the rest is known to be content.
enum State : int { kText = 0, kAfterCall = 1, kStart = 2, kPass = 3 };

bool space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
size_t skip_ws(std::string_view s, size_t i) {
  while (i < s.size() && space(s[i])) ++i;
  return i;
}
std::string_view trim(std::string_view s) {
  size_t b = skip_ws(s, 0), e = s.size();
  while (e > b && space(s[e - 1])) --e;
  return s.substr(b, e - b);
}
// Whether `s` (not empty) is a proper prefix of `marker`: more text may still make it the marker.
bool partial(std::string_view s, std::string_view marker) {
  return s.size() < marker.size() && marker.starts_with(s);
}
// The longest suffix of `s` that is a proper prefix of `marker`.
size_t partial_suffix(std::string_view s, std::string_view marker) {
  for (size_t k = std::min(s.size(), marker.size() - 1); k > 0; --k)
    if (s.ends_with(marker.substr(0, k))) return k;
  return 0;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// The extent of the JSON object or array that starts at s[start] ('{' or '['), found by its brackets outside
// strings (the text is validated by parsing it afterwards). A stop marker outside a string ends the search:
// the value cannot be complete there.
struct Extent {
  enum Kind { Complete, NeedMore, Invalid } kind;
  size_t end = 0;
};
Extent json_extent(std::string_view s, size_t start, std::initializer_list<std::string_view> stops = {}) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = start; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (i > start && (c == '<' || c == '['))
      for (std::string_view stop : stops)
        if (s.substr(i).starts_with(stop)) return {Extent::Invalid, i};
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxDepth) return {Extent::Invalid, i};
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return {Extent::Complete, i + 1};
    }
  }
  return {Extent::NeedMore, s.size()};
}

json parse_json(std::string_view s) { return json::parse(s.begin(), s.end(), nullptr, false); }

// {"name": NAME, "arguments": {...}} (or "parameters"; arguments may be a string holding the object). Without
// either key the arguments are {} unless `require_args`.
std::optional<ToolCall> call_from_json(const json& j, bool require_args) {
  if (!j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty())
    return std::nullopt;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  json parsed = json::object();
  if (args == j.end()) {
    if (require_args) return std::nullopt;
  } else if (args->is_string()) {
    parsed = parse_json(args->get_ref<const std::string&>());
  } else {
    parsed = *args;
  }
  if (!parsed.is_object()) return std::nullopt;
  return ToolCall{name->get<std::string>(), dump(parsed)};
}

// What a call's text turned out to be: not decided yet, calls (ending at `end`), or not a call (the text up
// to `end` is content; the parser goes on after it).
struct Block {
  enum Kind { NeedMore, Calls, Malformed } kind;
  size_t end = 0;
  std::vector<ToolCall> calls;
};
Block need_more() { return {Block::NeedMore, 0, {}}; }
Block malformed(size_t end) { return {Block::Malformed, end, {}}; }
Block one_call(ToolCall c, size_t end) { return {Block::Calls, end, {std::move(c)}}; }

// A call's JSON object at s[i] (after whitespace) and its closing marker `close`: an object left unclosed at
// the very end of the output counts too. Calls: the object's text in `json`, the call's end in `end`;
// Malformed: at `open` (the text from there on is taken again as content).
struct ObjectThenClose {
  Block::Kind kind;
  size_t end = 0;
  std::string_view json;
};
ObjectThenClose object_then_close(std::string_view s, size_t i, std::string_view close,
                                  std::initializer_list<std::string_view> stops, size_t open, bool final) {
  const ObjectThenClose more{Block::NeedMore, 0, {}}, bad{Block::Malformed, open, {}};
  i = skip_ws(s, i);
  if (i == s.size()) return more;
  if (s[i] != '{') return bad;
  const Extent e = json_extent(s, i, stops);
  if (e.kind == Extent::NeedMore) return more;
  if (e.kind == Extent::Invalid) return bad;
  const size_t k = skip_ws(s, e.end);
  const std::string_view rest = s.substr(k);
  size_t end = 0;
  if (rest.starts_with(close))
    end = k + close.size();
  else if (final && (rest.empty() || partial(rest, close)))  // the output ended before the marker
    end = s.size();
  else if (rest.empty() || partial(rest, close))
    return more;
  else
    return bad;
  return {Block::Calls, end, s.substr(i, e.end - i)};
}

// Hermes: s starts with <tool_call>; then a JSON object and </tool_call> (an object left unclosed at the very
// end of the output counts too).
Block hermes_block(std::string_view s, bool final) {
  const ObjectThenClose o = object_then_close(s, kToolCall.size(), kToolCallEnd, {kToolCallEnd, kToolCall},
                                              kToolCall.size(), final);
  if (o.kind != Block::Calls) return {o.kind, o.end, {}};
  auto call = call_from_json(parse_json(o.json), false);
  if (!call) return malformed(kToolCall.size());
  return one_call(std::move(*call), o.end);
}

// Harmony (canonical form): s starts with kHarmonyCall; NAME, <|message|>, a JSON object, <|call|> (an object
// whose <|call|> never came at the very end of the output counts too, as Hermes').
Block harmony_block(std::string_view s, bool final) {
  const size_t m = s.find(kHarmonyMessage, kHarmonyCall.size());
  if (m == std::string_view::npos)
    return s.size() > kHarmonyCall.size() + 128 ? malformed(kHarmonyCall.size()) : need_more();
  const std::string_view name = s.substr(kHarmonyCall.size(), m - kHarmonyCall.size());
  if (name.empty() || name.find_first_of(" \t\n<>") != std::string_view::npos)
    return malformed(kHarmonyCall.size());
  const ObjectThenClose o = object_then_close(s, m + kHarmonyMessage.size(), kHarmonyEnd, {kHarmonyEnd},
                                              kHarmonyCall.size(), final);
  if (o.kind != Block::Calls) return {o.kind, o.end, {}};
  const json args = parse_json(o.json);
  if (!args.is_object()) return malformed(kHarmonyCall.size());
  return one_call(ToolCall{std::string(name), dump(args)}, o.end);
}

// GLM-4.5: s starts with <tool_call>; NAME, then <arg_key>K</arg_key> <arg_value>V</arg_value> pairs, then
// </tool_call>. A value that parses as JSON is that value, any other is a string.
std::optional<ToolCall> glm_call(std::string_view body) {
  size_t first = body.find(kArgKey);
  const std::string_view name = trim(body.substr(0, first));
  if (name.empty()) return std::nullopt;
  for (char c : name)
    if (space(c) || c == '<' || c == '>') return std::nullopt;
  json args = json::object();
  size_t i = first == std::string_view::npos ? body.size() : first;
  while ((i = skip_ws(body, i)) < body.size()) {
    if (!body.substr(i).starts_with(kArgKey)) return std::nullopt;
    i += kArgKey.size();
    const size_t ke = body.find(kArgKeyEnd, i);
    if (ke == std::string_view::npos) return std::nullopt;
    const std::string key(trim(body.substr(i, ke - i)));
    i = skip_ws(body, ke + kArgKeyEnd.size());
    if (key.empty() || !body.substr(i).starts_with(kArgValue)) return std::nullopt;
    i += kArgValue.size();
    const size_t ve = body.find(kArgValueEnd, i);
    if (ve == std::string_view::npos) return std::nullopt;
    const std::string_view value = body.substr(i, ve - i);
    json v = parse_json(value);
    args[key] = v.is_discarded() ? json(std::string(value)) : std::move(v);
    i = ve + kArgValueEnd.size();
  }
  return ToolCall{std::string(name), dump(args)};
}

Block glm_block(std::string_view s) {
  const size_t close = s.find(kToolCallEnd, kToolCall.size());
  const size_t next = s.find(kToolCall, kToolCall.size());
  if (next != std::string_view::npos && next < close) return malformed(kToolCall.size());
  if (close == std::string_view::npos) return need_more();
  auto call = glm_call(s.substr(kToolCall.size(), close - kToolCall.size()));
  if (!call) return malformed(kToolCall.size());
  return one_call(std::move(*call), close + kToolCallEnd.size());
}

// Gemma 4's argument syntax (its template's format_argument): a value at s[i] into `out`; i moves past it.
// Strings between <|"|> markers (taken as they are), true / false, null / None, JSON numbers, {key:value,...}
// with keys bare or quoted, [value,...]. False: not that syntax.
bool gemma_value(std::string_view s, size_t& i, json& out, int depth) {
  if (depth > kMaxDepth) return false;
  i = skip_ws(s, i);
  if (i >= s.size()) return false;
  if (s.substr(i).starts_with(kGemmaQuote)) {
    const size_t b = i + kGemmaQuote.size(), e = s.find(kGemmaQuote, b);
    if (e == std::string_view::npos) return false;
    out = std::string(s.substr(b, e - b));
    i = e + kGemmaQuote.size();
    return true;
  }
  if (s[i] == '{' || s[i] == '[') {
    const bool obj = s[i] == '{';
    const char close = obj ? '}' : ']';
    out = obj ? json::object() : json::array();
    i = skip_ws(s, i + 1);
    if (i < s.size() && s[i] == close) {
      ++i;
      return true;
    }
    for (;;) {
      if (obj) {
        std::string key;
        i = skip_ws(s, i);
        if (s.substr(i).starts_with(kGemmaQuote)) {
          json k;
          if (!gemma_value(s, i, k, depth + 1)) return false;
          key = k.get<std::string>();
        } else {
          const size_t colon = s.find(':', i);
          if (colon == std::string_view::npos) return false;
          key = std::string(trim(s.substr(i, colon - i)));
          if (key.empty() || key.find_first_of("{}[],<>") != std::string::npos) return false;
          i = colon;
        }
        i = skip_ws(s, i);
        if (i >= s.size() || s[i] != ':') return false;
        ++i;
        json v;
        if (!gemma_value(s, i, v, depth + 1)) return false;
        out[key] = std::move(v);
      } else {
        json v;
        if (!gemma_value(s, i, v, depth + 1)) return false;
        out.push_back(std::move(v));
      }
      i = skip_ws(s, i);
      if (i >= s.size()) return false;
      if (s[i] == ',') {
        ++i;
        continue;
      }
      if (s[i] != close) return false;
      ++i;
      return true;
    }
  }
  // A bare word up to the next delimiter: a literal or a number.
  size_t e = i;
  while (e < s.size() && s[e] != ',' && s[e] != '}' && s[e] != ']' && !space(s[e])) ++e;
  const std::string_view word = s.substr(i, e - i);
  if (word == "true" || word == "True") {
    out = true;
  } else if (word == "false" || word == "False") {
    out = false;
  } else if (word == "null" || word == "None") {
    out = nullptr;
  } else {
    json n = json::parse(word.begin(), word.end(), nullptr, false);
    if (n.is_discarded() || !n.is_number()) return false;
    out = std::move(n);
  }
  i = e;
  return true;
}

// Gemma 4: s starts with <|tool_call>; then call:NAME{arguments} and <tool_call|>.
Block gemma_block(std::string_view s) {
  const size_t m = kGemmaCall.size();
  const size_t close = s.find(kGemmaCallEnd, m), next = s.find(kGemmaCall, m);
  if (next != std::string_view::npos && (close == std::string_view::npos || next < close))
    return malformed(m);
  if (close == std::string_view::npos) return need_more();
  std::string_view body = trim(s.substr(m, close - m));
  if (!body.starts_with("call:")) return malformed(m);
  body.remove_prefix(5);
  const size_t brace = body.find('{');
  if (brace == std::string_view::npos) return malformed(m);
  const std::string_view name = trim(body.substr(0, brace));
  if (name.empty() || name.find_first_of(" \t\n<>{}") != std::string_view::npos) return malformed(m);
  size_t i = brace;
  json args;
  if (!gemma_value(body, i, args, 0) || !args.is_object() || skip_ws(body, i) != body.size())
    return malformed(m);
  return one_call(ToolCall{std::string(name), dump(args)}, close + kGemmaCallEnd.size());
}

bool mistral_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
         c == '.';
}

// Mistral: s starts with [TOOL_CALLS]; then a JSON array of calls (or one call object), or NAME[ARGS]{...}
// (v11+; also with [CALL_ID]ID before [ARGS], or the object straight after the name).
Block mistral_block(std::string_view s) {
  const size_t m = kMistralCalls.size();
  size_t i = skip_ws(s, m);
  if (i == s.size()) return need_more();
  if (s[i] == '[' || s[i] == '{') {
    const Extent e = json_extent(s, i, {kMistralCalls});
    if (e.kind == Extent::NeedMore) return need_more();
    if (e.kind == Extent::Invalid) return malformed(m);
    json j = parse_json(s.substr(i, e.end - i));
    Block b{Block::Calls, e.end, {}};
    if (j.is_object()) j = json::array({std::move(j)});
    if (!j.is_array() || j.empty()) return malformed(m);
    for (const json& item : j) {
      auto call = call_from_json(item, false);
      if (!call) return malformed(m);
      b.calls.push_back(std::move(*call));
    }
    return b;
  }
  size_t n = i;
  while (n < s.size() && mistral_name_char(s[n])) ++n;
  if (n == s.size()) return need_more();
  if (n == i) return malformed(m);
  const std::string name(s.substr(i, n - i));
  size_t a = n;
  std::string_view rest = s.substr(a);
  if (rest.starts_with(kMistralId)) {
    a += kMistralId.size();
    while (a < s.size() && mistral_name_char(s[a])) ++a;
    if (a == s.size()) return need_more();
    rest = s.substr(a);
  } else if (partial(rest, kMistralId)) {
    return need_more();
  }
  if (rest.starts_with(kMistralArgs)) {
    a += kMistralArgs.size();
  } else if (partial(rest, kMistralArgs)) {
    return need_more();
  } else if (rest[0] != '{') {
    return malformed(m);
  }
  a = skip_ws(s, a);
  if (a == s.size()) return need_more();
  if (s[a] != '{') return malformed(m);
  const Extent e = json_extent(s, a, {kMistralCalls});
  if (e.kind == Extent::NeedMore) return need_more();
  if (e.kind == Extent::Invalid) return malformed(m);
  const json args = parse_json(s.substr(a, e.end - a));
  if (!args.is_object()) return malformed(m);
  return one_call(ToolCall{name, dump(args)}, e.end);
}

// Llama 3 JSON: the object at s[i] ('{'), a call when it holds "name" and "parameters" (or "arguments").
Block llama_object(std::string_view s, size_t i) {
  const Extent e = json_extent(s, i);
  if (e.kind == Extent::NeedMore) return need_more();
  if (e.kind == Extent::Invalid) return malformed(e.end);
  auto call = call_from_json(parse_json(s.substr(i, e.end - i)), true);
  if (!call) return malformed(e.end);
  return one_call(std::move(*call), e.end);
}

// A Python list of calls with keyword arguments whose values are literals: [f(a=1, b="x"), g()]. Parsed from
// the start of the text each time more arrives; the end of the text anywhere inside makes it incomplete, a
// character that no continuation could make valid makes it invalid.
class PythonCalls {
 public:
  enum Result { Complete, Incomplete, Invalid };
  explicit PythonCalls(std::string_view s) : s_(s) {}
  Result parse() {
    try {
      expect('[');
      if (peek() == ']') throw Bad{};  // an empty list calls nothing: it is text
      for (;;) {
        calls_.push_back(call());
        if (peek() == ',') {
          ++p_;
          if (peek() == ']') break;
          continue;
        }
        if (peek() == ']') break;
        throw Bad{};
      }
      ++p_;
      return Complete;
    } catch (const End&) {
      return Incomplete;
    } catch (const Bad&) {
      return Invalid;
    }
  }
  size_t end() const { return p_; }
  std::vector<ToolCall>& calls() { return calls_; }

 private:
  struct End {};  // the text ended first
  struct Bad {};  // no continuation makes it a call list
  std::string_view s_;
  size_t p_ = 0;
  std::vector<ToolCall> calls_;

  char peek() {  // the next character after whitespace
    p_ = skip_ws(s_, p_);
    if (p_ >= s_.size()) throw End{};
    return s_[p_];
  }
  void expect(char c) {
    if (peek() != c) throw Bad{};
    ++p_;
  }
  static bool ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
  static bool ident_char(char c) { return ident_start(c) || (c >= '0' && c <= '9'); }
  // An identifier; with `dotted`, parts joined by '.' or '-' (function names such as "web.search").
  std::string name(bool dotted) {
    if (!ident_start(peek())) throw Bad{};
    const size_t b = p_;
    for (;;) {
      while (p_ < s_.size() && ident_char(s_[p_])) ++p_;
      if (p_ == s_.size()) throw End{};
      if (dotted && (s_[p_] == '.' || s_[p_] == '-')) {
        if (++p_ == s_.size()) throw End{};
        if (!ident_char(s_[p_])) throw Bad{};
        continue;
      }
      return std::string(s_.substr(b, p_ - b));
    }
  }
  ToolCall call() {
    std::string fn = name(true);
    expect('(');
    json args = json::object();
    for (;;) {
      if (peek() == ')') break;
      std::string key = name(false);
      expect('=');  // positional arguments have no JSON name
      if (args.contains(key)) throw Bad{};
      args[key] = value(0);
      if (peek() == ',') {
        ++p_;
        continue;
      }
      if (peek() != ')') throw Bad{};
    }
    ++p_;
    return ToolCall{std::move(fn), dump(args)};
  }
  json value(int depth) {
    const char c = peek();
    if (c == '"' || c == '\'') return string();
    if (c == '[' || c == '{') {
      if (depth >= kMaxDepth) throw Bad{};
      ++p_;
      const char close = c == '[' ? ']' : '}';
      json out = c == '[' ? json::array() : json::object();
      for (;;) {
        if (peek() == close) break;
        if (c == '[') {
          out.push_back(value(depth + 1));
        } else {
          const char q = peek();
          if (q != '"' && q != '\'') throw Bad{};  // JSON keys are strings
          std::string key = string();
          expect(':');
          out[key] = value(depth + 1);
        }
        if (peek() == ',') {
          ++p_;
          continue;
        }
        if (peek() != close) throw Bad{};
      }
      ++p_;
      return out;
    }
    if (c == '-' || c == '+' || (c >= '0' && c <= '9')) return number();
    if (ident_start(c)) {
      const size_t b = p_;
      while (p_ < s_.size() && ident_char(s_[p_])) ++p_;
      if (p_ == s_.size()) throw End{};
      const std::string_view w = s_.substr(b, p_ - b);
      if (w == "True" || w == "true") return true;
      if (w == "False" || w == "false") return false;
      if (w == "None" || w == "null") return nullptr;
    }
    throw Bad{};
  }
  json number() {
    const size_t b = p_;
    if (s_[p_] == '-' || s_[p_] == '+') ++p_;
    auto digits = [&] {
      const size_t d = p_;
      while (p_ < s_.size() && s_[p_] >= '0' && s_[p_] <= '9') ++p_;
      if (p_ == s_.size()) throw End{};
      return p_ > d;
    };
    bool any = digits(), is_float = false;
    if (s_[p_] == '.') {
      ++p_;
      is_float = true;
      any = digits() || any;
    }
    if (!any) throw Bad{};
    if (s_[p_] == 'e' || s_[p_] == 'E') {
      is_float = true;
      if (++p_ == s_.size()) throw End{};
      if (s_[p_] == '-' || s_[p_] == '+')
        if (++p_ == s_.size()) throw End{};
      if (!digits()) throw Bad{};
    }
    if (ident_char(s_[p_]) || s_[p_] == '.') throw Bad{};
    std::string_view t = s_.substr(b, p_ - b);
    if (t[0] == '+') t.remove_prefix(1);
    if (!is_float) {
      int64_t v = 0;
      auto r = std::from_chars(t.data(), t.data() + t.size(), v);
      if (r.ec == std::errc() && r.ptr == t.data() + t.size()) return v;
    }
    double d = 0;
    auto r = std::from_chars(t.data(), t.data() + t.size(), d);
    if (r.ec != std::errc() || d == std::numeric_limits<double>::infinity() ||
        d == -std::numeric_limits<double>::infinity())
      throw Bad{};
    return d;
  }
  static void put_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  uint32_t hex(size_t n) {
    uint32_t v = 0;
    for (size_t k = 0; k < n; ++k, ++p_) {
      if (p_ >= s_.size()) throw End{};
      const char c = s_[p_];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= static_cast<uint32_t>(c - 'A' + 10);
      else
        throw Bad{};
    }
    return v;
  }
  // A one-line Python string in ' or " with Python's escapes (and JSON's \/); an unknown escape keeps its
  // backslash, as Python does.
  std::string string() {
    const char q = s_[p_++];
    std::string out;
    for (;;) {
      if (p_ >= s_.size()) throw End{};
      const char c = s_[p_++];
      if (c == q) return out;
      if (c == '\n' || c == '\r') throw Bad{};
      if (c != '\\') {
        out += c;
        continue;
      }
      if (p_ >= s_.size()) throw End{};
      const char e = s_[p_++];
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case '0':
          out += '\0';
          break;
        case '\\':
        case '\'':
        case '"':
        case '/':
          out += e;
          break;
        case 'x':
          put_utf8(out, hex(2));
          break;
        case 'u': {
          uint32_t cp = hex(4);
          if (cp >= 0xDC00 && cp <= 0xDFFF) throw Bad{};
          if (cp >= 0xD800 && cp <= 0xDBFF) {  // a surrogate pair, as JSON writes astral characters
            if (p_ + 1 >= s_.size()) throw End{};
            if (s_[p_] != '\\' || s_[p_ + 1] != 'u') throw Bad{};
            p_ += 2;
            const uint32_t lo = hex(4);
            if (lo < 0xDC00 || lo > 0xDFFF) throw Bad{};
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          put_utf8(out, cp);
          break;
        }
        case 'U':
          put_utf8(out, hex(8));
          break;
        default:
          out += '\\';
          out += e;
      }
    }
  }
};

}  // namespace

ToolCallParser::ToolCallParser(ToolCallFormat format) : format_(format) {
  switch (format) {
    case ToolCallFormat::Hermes:
    case ToolCallFormat::Glm4:
    case ToolCallFormat::Mistral:
    case ToolCallFormat::Harmony:
    case ToolCallFormat::Gemma4:
      state_ = kText;
      break;
    case ToolCallFormat::Llama3Json:
    case ToolCallFormat::Pythonic:
      state_ = kStart;
      break;
    default:
      state_ = kPass;
  }
}

ToolCallParser::Output ToolCallParser::push(std::string_view text, bool last) {
  if (state_ == kPass && held_.empty()) return {std::string(text), {}};
  held_.append(text);
  return run(last);
}

ToolCallParser::Output ToolCallParser::finish() { return run(true); }

ToolCallParser::Output ToolCallParser::run(bool final) {
  Output out;
  const std::string_view s = held_;
  size_t pos = 0;
  const std::string_view marker = format_ == ToolCallFormat::Mistral   ? kMistralCalls
                                  : format_ == ToolCallFormat::Harmony ? kHarmonyCall
                                  : format_ == ToolCallFormat::Gemma4  ? kGemmaCall
                                                                       : kToolCall;
  auto block = [&](std::string_view b) {
    if (format_ == ToolCallFormat::Mistral) return mistral_block(b);
    if (format_ == ToolCallFormat::Harmony) return harmony_block(b, final);
    if (format_ == ToolCallFormat::Glm4) return glm_block(b);
    if (format_ == ToolCallFormat::Gemma4) return gemma_block(b);
    return hermes_block(b, final);
  };
  // The block at `at` (after text from `from` that is content unless the block is a call). False: undecided.
  auto take = [&](size_t from, size_t at, Block b) {
    if (b.kind == Block::NeedMore) return false;
    if (b.kind == Block::Calls) {
      for (ToolCall& c : b.calls) out.calls.push_back(std::move(c));
      state_ = kAfterCall;
    } else {
      out.content.append(s.substr(from, at + b.end - from));
      state_ = format_ == ToolCallFormat::Llama3Json ? kPass : kText;
    }
    pos = at + b.end;
    return true;
  };
  for (;;) {
    const std::string_view rest = s.substr(pos);
    if (rest.empty()) break;
    if (state_ == kPass) {
      out.content.append(rest);
      pos = s.size();
      break;
    }
    if (format_ == ToolCallFormat::Llama3Json) {
      // Calls only when the output starts with one: [<|python_tag|>] {"name": ..., "parameters": ...}, more
      // after "; ".
      size_t i = skip_ws(rest, 0);
      if (i == rest.size()) {
        if (final && state_ == kAfterCall) pos = s.size();  // whitespace after the last call
        break;
      }
      if (state_ == kStart) {
        if (rest.substr(i).starts_with(kPythonTag)) {
          i = skip_ws(rest, i + kPythonTag.size());
          if (i == rest.size()) break;
        } else if (partial(rest.substr(i), kPythonTag)) {
          break;
        }
      } else if (rest[i] == ';') {
        i = skip_ws(rest, i + 1);
        if (i == rest.size()) break;
      }
      if (rest[i] != '{') {
        state_ = kPass;
        continue;
      }
      // Taken from `pos`: what precedes the object (whitespace, the tag, the separator) goes with it.
      if (!take(pos, pos, llama_object(rest, i))) break;
      continue;
    }
    if (format_ == ToolCallFormat::Pythonic) {
      // Calls only when the whole output is a call list (optionally in <|python_start|> <|python_end|>).
      size_t i = skip_ws(rest, 0);
      if (i == rest.size()) break;
      if (rest.substr(i).starts_with(kPythonStart)) {
        i = skip_ws(rest, i + kPythonStart.size());
        if (i == rest.size()) break;
      } else if (partial(rest.substr(i), kPythonStart)) {
        break;
      }
      if (rest[i] != '[') {
        state_ = kPass;
        continue;
      }
      PythonCalls list(rest.substr(i));
      const auto r = list.parse();
      if (r == PythonCalls::Incomplete) break;
      if (r == PythonCalls::Invalid) {
        state_ = kPass;
        continue;
      }
      size_t k = skip_ws(rest, i + list.end());
      if (rest.substr(k).starts_with(kPythonEnd))
        k = skip_ws(rest, k + kPythonEnd.size());
      else if (k < rest.size() && partial(rest.substr(k), kPythonEnd))
        break;
      if (k < rest.size()) {
        state_ = kPass;
        continue;
      }
      if (!final) break;  // more text would make it content
      out.calls = std::move(list.calls());
      pos = s.size();
      state_ = kPass;
      break;
    }
    // Marker formats: calls anywhere, text around them is content.
    if (state_ == kAfterCall) {
      const size_t w = skip_ws(rest, 0);
      if (w == rest.size()) {
        if (final) pos = s.size();  // whitespace after the last call
        break;
      }
      const std::string_view r = rest.substr(w);
      if (r.starts_with(marker)) {
        if (!take(pos, pos + w, block(r))) break;
        continue;
      }
      if (partial(r, marker)) break;
      state_ = kText;  // the whitespace is content, before the text after it
    }
    const size_t m = rest.find(marker);
    if (m == std::string_view::npos) {
      const size_t keep = partial_suffix(rest, marker);
      out.content.append(rest.substr(0, rest.size() - keep));
      pos += rest.size() - keep;
      break;
    }
    out.content.append(rest.substr(0, m));
    pos += m;
    if (!take(pos, pos, block(rest.substr(m)))) break;
  }
  if (final) {
    out.content.append(s.substr(pos));
    pos = s.size();
  }
  held_.erase(0, pos);
  return out;
}

// ---------------------------------------------------------------- forcing a call

namespace {

constexpr const char* kJsonWhitespace = "[\\x20\\x0A\\x0D\\x09]{1,24}";

std::string lark_string(std::string_view s) {
  return json(std::string(s)).dump(-1, ' ', false, json::error_handler_t::replace);
}

// A marker as the grammar writes it: the token itself where it is a special token of `tok` (text never
// produces it), its text where it is ordinary text. Without the token, `required` markers are an error.
std::string marker_term(const Tokenizer& tok, std::string_view text, bool required, ToolCallFormat f) {
  if (auto id = tok.token_to_id(text)) {
    if (tok.is_special(*id)) return "<[" + std::to_string(*id) + "]>";
    return lark_string(text);
  }
  if (required)
    fail("forced tool calls in the ", tool_call_format_name(f), " format need the token ", text,
         ", which this tokenizer does not have");
  return lark_string(text);
}

// Tool schemas' $ref into their own $defs / definitions, moved to the root of the schema they are embedded in
// (under a prefix per tool, so two tools' definitions do not clash).
void rewrite_refs(ordered_json& node, const std::string& prefix, int depth) {
  if (depth > kMaxDepth) return;
  if (node.is_object()) {
    for (auto& [key, value] : node.items()) {
      if (key == "$ref" && value.is_string()) {
        const std::string ref = value.get<std::string>();
        if (ref.starts_with("#/$defs/"))
          value = "#/$defs/" + prefix + "_" + ref.substr(8);
        else if (ref.starts_with("#/definitions/"))
          value = "#/$defs/" + prefix + "d_" + ref.substr(14);
      } else {
        rewrite_refs(value, prefix, depth + 1);
      }
    }
  } else if (node.is_array()) {
    for (auto& v : node) rewrite_refs(v, prefix, depth + 1);
  }
}

struct Tool {
  std::string name;
  ordered_json params;  // an object schema, without its definitions
  ordered_json defs;    // its definitions, renamed
};

std::vector<Tool> prepare(const std::vector<ToolSpec>& tools) {
  if (tools.empty()) fail("forced tool calls need at least one tool");
  std::vector<Tool> out;
  for (size_t t = 0; t < tools.size(); ++t) {
    const ToolSpec& spec = tools[t];
    if (spec.name.empty()) fail("forced tool calls: tool ", t, " has no name");
    ordered_json p = spec.parameters.is_null() ? ordered_json::object() : ordered_json(spec.parameters);
    if (!p.is_object())
      fail("forced tool calls: the parameters of tool ", spec.name, " are not a JSON schema object");
    if (!p.contains("type")) p["type"] = "object";
    const std::string prefix = "t" + std::to_string(t);
    rewrite_refs(p, prefix, 0);
    Tool tool{spec.name, ordered_json::object(), ordered_json::object()};
    for (const char* k : {"$defs", "definitions"}) {
      auto it = p.find(k);
      if (it == p.end()) continue;
      if (it->is_object())
        for (auto& [name, def] : it->items()) tool.defs[prefix + (k[0] == '$' ? "_" : "d_") + name] = def;
      p.erase(k);
    }
    tool.params = std::move(p);
    out.push_back(std::move(tool));
  }
  return out;
}

// `%json {...}` of `schema` with the tools' definitions and whitespace bounded.
std::string json_term(ordered_json schema, const ordered_json& defs) {
  if (!defs.empty()) schema["$defs"] = defs;
  schema["x-guidance"] = {{"whitespace_pattern", kJsonWhitespace}};
  return "%json " + schema.dump(-1, ' ', false, json::error_handler_t::replace);
}

// One call's JSON: {"name": NAME, ARGS_KEY: {...}} for any of the tools.
ordered_json call_schema(const std::vector<Tool>& tools, const char* args_key, ordered_json& defs) {
  ordered_json any = ordered_json::array();
  for (const Tool& t : tools) {
    ordered_json one = {{"type", "object"},
                        {"properties", {{"name", {{"const", t.name}}}, {args_key, t.params}}},
                        {"required", {"name", args_key}},
                        {"additionalProperties", false}};
    any.push_back(std::move(one));
    for (auto& [k, v] : t.defs.items()) defs[k] = v;
  }
  return any.size() == 1 ? any[0] : ordered_json{{"anyOf", any}};
}

bool identifier(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && (i == 0 || c < '0' || c > '9')) return false;
  }
  return true;
}

// A name the parser reads as a Python function name: identifiers joined by single '.' or '-'.
bool dotted_name(std::string_view s) {
  size_t b = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == '.' || s[i] == '-') {
      if (!identifier(s.substr(b, i - b))) return false;
      b = i + 1;
    }
  return true;
}

// Pythonic: name(k=v, ...) with each tool's properties as keyword arguments in the schema's order, required
// ones always there; a value is its property's JSON (JSON strings, numbers, arrays and objects are Python
// literals, which the parser reads back, true/false/null included), a plain boolean or null property True /
// False / None.
std::string pythonic_grammar(const std::vector<Tool>& tools, bool parallel) {
  std::string g = parallel ? "start: \"[\" call (\", \" call)* \"]\"\n" : "start: \"[\" call \"]\"\n";
  std::string calls = "call: ";
  for (size_t t = 0; t < tools.size(); ++t) {
    const Tool& tool = tools[t];
    if (!dotted_name(tool.name))
      fail("forced tool calls in the pythonic format: the tool name ", tool.name, " is not a Python name");
    const std::string r = "c" + std::to_string(t);
    calls += (t ? " | " : "") + r;
    // The keyword arguments: properties, then required names the properties lack.
    std::vector<std::pair<std::string, ordered_json>> props;
    std::set<std::string> required;
    if (auto req = tool.params.find("required"); req != tool.params.end() && req->is_array())
      for (const auto& n : *req)
        if (n.is_string()) required.insert(n.get<std::string>());
    if (auto pr = tool.params.find("properties"); pr != tool.params.end() && pr->is_object())
      for (auto& [k, v] : pr->items()) props.emplace_back(k, v);
    for (const std::string& n : required) {
      bool listed = false;
      for (auto& [k, v] : props) listed = listed || k == n;
      if (!listed) props.emplace_back(n, ordered_json::object());
    }
    const size_t n = props.size();
    for (size_t k = 0; k < n; ++k) {
      if (!identifier(props[k].first))
        fail("forced tool calls in the pythonic format: the parameter ", props[k].first, " of tool ",
             tool.name, " is not a Python name");
      ordered_json ps = props[k].second;
      if (ps.is_boolean() && ps.get<bool>()) ps = ordered_json::object();
      if (!ps.is_object())
        fail("forced tool calls in the pythonic format: the parameter ", props[k].first, " of tool ",
             tool.name, " has no usable schema");
      ordered_json bare = ps;
      for (const char* drop : {"description", "title"}) bare.erase(drop);
      std::string value;
      if (bare == ordered_json{{"type", "boolean"}})
        value = "\"True\" | \"False\"";
      else if (bare == ordered_json{{"type", "null"}})
        value = "\"None\"";
      else
        value = json_term(ps, tool.defs);
      g += r + "_v" + std::to_string(k) + ": " + value + "\n";
    }
    auto opt = [&](size_t k) { return !required.contains(props[k].first); };
    auto kv = [&](size_t k) {
      return lark_string(props[k].first + "=") + " " + r + "_v" + std::to_string(k);
    };
    // more_k: the arguments after some were written, from property k on; first_k: the first written is k or
    // later.
    auto more = [&](size_t k) {
      std::string e;
      for (size_t j = k; j < n; ++j) e += opt(j) ? " (\", \" " + kv(j) + ")?" : " \", \" " + kv(j);
      return e;
    };
    for (size_t k = 0; k < n; ++k) {
      g += r + "_f" + std::to_string(k) + ": " + kv(k) + more(k + 1);
      if (opt(k) && k + 1 < n) g += " | " + r + "_f" + std::to_string(k + 1);
      g += "\n";
    }
    bool any_required = false;
    for (size_t k = 0; k < n; ++k) any_required = any_required || !opt(k);
    std::string args = n == 0 ? "" : " " + r + "_f0" + (any_required ? "" : "?");
    g += r + ": " + lark_string(tool.name + "(") + args + " \")\"\n";
  }
  return g + calls + "\n";
}

}  // namespace

std::string tool_call_grammar(ToolCallFormat format, const std::vector<ToolSpec>& specs, bool parallel,
                              const Tokenizer& tok) {
  switch (format) {
    case ToolCallFormat::None:
      fail("forced tool calls need a tool-call format (it is none)");
    case ToolCallFormat::Glm4:
      fail("forced tool calls are not available for the glm45 format");
    case ToolCallFormat::Gemma4:
      fail("forced tool calls are not available for the gemma4 format");
    default:
      break;
  }
  const std::vector<Tool> tools = prepare(specs);
  std::string g;
  if (format == ToolCallFormat::Harmony) {
    // One message to a function per turn (the model's turn ends at <|call|>): `parallel` changes nothing.
    const std::string channel = marker_term(tok, "<|channel|>", true, format);
    const std::string constrain = marker_term(tok, "<|constrain|>", true, format);
    const std::string message = marker_term(tok, kHarmonyMessage, true, format);
    const std::string call = marker_term(tok, kHarmonyEnd, true, format);
    g += "start: ";
    for (size_t t = 0; t < tools.size(); ++t) g += (t ? " | c" : "c") + std::to_string(t);
    g += "\n";
    for (size_t t = 0; t < tools.size(); ++t) {
      g += "c" + std::to_string(t) + ": " + channel + " " +
           lark_string("commentary to=functions." + tools[t].name + " ") + " " + constrain + " \"json\" " +
           message + " a" + std::to_string(t) + " " + call + "\n";
      g += "a" + std::to_string(t) + ": " + json_term(tools[t].params, tools[t].defs) + "\n";
    }
    return g;
  }
  if (format == ToolCallFormat::Hermes) {
    const std::string open = marker_term(tok, kToolCall, false, format);
    const std::string close = marker_term(tok, kToolCallEnd, false, format);
    ordered_json defs = ordered_json::object();
    const ordered_json one = call_schema(tools, "arguments", defs);
    g += parallel ? "start: call (\"\\n\" call)*\n" : "start: call\n";
    g += "call: " + open + " \"\\n\" body \"\\n\" " + close + "\n";
    g += "body: " + json_term(one, defs) + "\n";
  } else if (format == ToolCallFormat::Llama3Json) {
    const std::string tag = marker_term(tok, kPythonTag, true, format);
    ordered_json defs = ordered_json::object();
    const ordered_json one = call_schema(tools, "parameters", defs);
    g += "start: " + tag + (parallel ? " body (\"; \" body)*\n" : " body\n");
    g += "body: " + json_term(one, defs) + "\n";
  } else if (format == ToolCallFormat::Mistral) {
    const std::string calls = marker_term(tok, kMistralCalls, true, format);
    if (tok.token_to_id(kMistralArgs)) {
      // v11+ tokenizers: [TOOL_CALLS]NAME[ARGS]{...}, repeated.
      const std::string args = marker_term(tok, kMistralArgs, true, format);
      g += parallel ? "start: call+\ncall: " : "start: call\ncall: ";
      for (size_t t = 0; t < tools.size(); ++t) g += (t ? " | c" : "c") + std::to_string(t);
      g += "\n";
      for (size_t t = 0; t < tools.size(); ++t) {
        const Tool& tool = tools[t];
        for (char c : tool.name)
          if (!mistral_name_char(c))
            fail("forced tool calls in the mistral format: the tool name ", tool.name,
                 " has a character other than letters, digits, '_', '-' and '.'");
        g += "c" + std::to_string(t) + ": " + calls + " " + lark_string(tool.name) + " " + args + " a" +
             std::to_string(t) + "\n";
        g += "a" + std::to_string(t) + ": " + json_term(tool.params, tool.defs) + "\n";
      }
    } else {
      // Older tokenizers: [TOOL_CALLS] then a JSON array of calls.
      ordered_json defs = ordered_json::object();
      ordered_json arr = {
          {"type", "array"}, {"items", call_schema(tools, "arguments", defs)}, {"minItems", 1}};
      if (!parallel) arr["maxItems"] = 1;
      g += "start: " + calls + " body\n";
      g += "body: " + json_term(arr, defs) + "\n";
    }
  } else {
    g = pythonic_grammar(tools, parallel);
  }
  return g;
}

}  // namespace tessera::serve
