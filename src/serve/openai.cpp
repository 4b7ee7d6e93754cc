#include "serve/openai.h"

#include <cmath>
#include <set>
#include <utility>

#include "generation/constraint_state.h"
#include "tessera/auto_tokenizer.h"
#include "tessera/error.h"
#include "tokenizer/unicode_util.h"

namespace tessera::serve {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {
// `s` with each invalid UTF-8 subpart replaced by U+FFFD, so dump() never throws (type_error 316) on text
// that quotes a request: a parser message's "last read" bytes, a field name.
std::string valid_utf8(const std::string& s) {
  if (tok::utf8_is_valid(s)) return s;
  std::string out;
  tok::utf8_repair_append(s, out);
  return out;
}
}  // namespace

ordered_json error_body(const ApiError& e) {
  ordered_json err;
  err["message"] = valid_utf8(e.what());
  err["type"] = valid_utf8(e.type);
  err["param"] = e.param.empty() ? ordered_json(nullptr) : ordered_json(valid_utf8(e.param));
  err["code"] = e.code.empty() ? ordered_json(nullptr) : ordered_json(valid_utf8(e.code));
  return {{"error", err}};
}

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    default:
      return "a number";
  }
}

[[noreturn]] void wrong_type(const std::string& field, const json& v, const char* want) {
  bad(field, "'" + field + "' must be " + want + ", got " + type_name(v));
}

double number(const json& v, const std::string& field, double lo, double hi, const char* range) {
  if (!v.is_number()) wrong_type(field, v, "a number");
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    bad(field, "'" + field + "' must be in " + range + ", got " + v.dump());
  return x;
}

int64_t integer(const json& v, const std::string& field, int64_t lo, int64_t hi) {
  if (v.is_number_float())  // 1.5, or 1e20 (JSON numbers with an exponent or beyond 64 bits parse as doubles)
    bad(field, "'" + field + "' must be an integer in " + std::to_string(lo) + ".." + std::to_string(hi) +
                   ", got " + v.dump());
  if (!v.is_number_integer()) wrong_type(field, v, "an integer");
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
    bad(field,
        "'" + field + "' must be in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + v.dump());
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    bad(field,
        "'" + field + "' must be in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + v.dump());
  return x;
}

bool boolean(const json& v, const std::string& field) {
  if (!v.is_boolean()) wrong_type(field, v, "a boolean");
  return v.get<bool>();
}

// Fields OpenAI defines that Tessera does not do (yet): a 400 naming them rather than a silent default.
const std::set<std::string>& unsupported() {
  static const std::set<std::string> s = {
      "tools",  "functions", "function_call", "logit_bias",       "best_of",
      "suffix", "audio",     "modalities",    "prediction",       "echo",
      "store",  "metadata",  "service_tier",  "reasoning_effort", "web_search_options"};
  return s;
}

std::string message_text(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return {};
  if (!content.is_array()) wrong_type(where, content, "a string or an array of text parts");
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const json& part = content[j];
    const std::string at = where + "[" + std::to_string(j) + "]";
    if (!part.is_object()) wrong_type(at, part, "an object");
    if (!part.contains("type") || !part["type"].is_string())
      bad(at + ".type", "'" + at + ".type' must be a string");
    if (part["type"] != "text")
      bad(at + ".type", "'" + at + ".type' " + part["type"].dump() + " is not supported (only \"text\")");
    if (!part.contains("text") || !part["text"].is_string())
      bad(at + ".text", "'" + at + ".text' must be a string");
    text += part["text"].get<std::string>();
  }
  return text;
}

// A constraint a request asks for: its kind, its text, and the field that asked (for messages).
struct ConstraintSpec {
  ConstraintKind kind = ConstraintKind::JsonObject;
  std::string text, field;
};

// Rust regex syntax for the literal `s` (structured_outputs.choice).
std::string regex_literal(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\.+*?()|[]{}^$#&-~").find(c) != std::string_view::npos) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

std::string object_string(const json& v, const std::string& field) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_object() && !v.is_boolean()) wrong_type(field, v, "an object (a JSON schema)");
  return v.dump();
}

// response_format (OpenAI's), or structured_outputs / guided_* (vLLM's spellings); at most one constraint.
std::optional<ConstraintSpec> requested_constraint(const json& body) {
  std::optional<ConstraintSpec> out;
  auto set = [&](ConstraintSpec spec) {
    if (out)
      bad(spec.field, "'" + spec.field + "' and '" + out->field + "' both constrain the output; give one");
    out = std::move(spec);
  };
  if (body.contains("response_format") && !body["response_format"].is_null()) {
    const json& f = body["response_format"];
    if (!f.is_object()) wrong_type("response_format", f, "an object");
    if (!f.contains("type") || !f["type"].is_string())
      bad("response_format.type",
          "'response_format.type' must be a string (\"text\", \"json_object\" or "
          "\"json_schema\")");
    const std::string type = f["type"].get<std::string>();
    for (const auto& [k, v] : f.items())
      if (k != "type" && !(type == "json_schema" && k == "json_schema"))
        bad("response_format." + k, "unknown field 'response_format." + k + "'");
    if (type == "json_object") {
      set({ConstraintKind::JsonObject, "", "response_format"});
    } else if (type == "json_schema") {
      if (!f.contains("json_schema"))
        bad("response_format.json_schema", "'response_format.json_schema' is required");
      const json& js = f["json_schema"];
      if (!js.is_object()) wrong_type("response_format.json_schema", js, "an object");
      for (const auto& [k, v] : js.items()) {
        const std::string at = "response_format.json_schema." + k;
        if (k == "name" || k == "description") {
          if (!v.is_string()) wrong_type(at, v, "a string");
        } else if (k == "strict") {
          if (!v.is_null()) boolean(v, at);
        } else if (k != "schema") {
          bad(at, "unknown field '" + at + "'");
        }
      }
      // Without a schema any JSON value is allowed (an empty schema).
      const std::string text = js.contains("schema") && !js["schema"].is_null()
                                   ? object_string(js["schema"], "response_format.json_schema.schema")
                                   : std::string("{}");
      set({ConstraintKind::JsonSchema, text, "response_format"});
    } else if (type != "text") {
      bad("response_format.type", "'response_format.type' " + f["type"].dump() +
                                      " is not supported (\"text\", \"json_object\" or \"json_schema\")");
    }
  }
  auto choice = [&](const json& v, const std::string& field) {
    if (!v.is_array() || v.empty()) wrong_type(field, v, "a non-empty array of strings");
    std::string rx;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) wrong_type(field + "[" + std::to_string(i) + "]", v[i], "a string");
      rx += (i ? "|" : "") + std::string("(") + regex_literal(v[i].get<std::string>()) + ")";
    }
    set({ConstraintKind::Regex, rx, field});
  };
  auto string_field = [&](const json& v, const std::string& field) {
    if (!v.is_string()) wrong_type(field, v, "a string");
    return v.get<std::string>();
  };
  if (body.contains("structured_outputs") && !body["structured_outputs"].is_null()) {
    const json& so = body["structured_outputs"];
    if (!so.is_object()) wrong_type("structured_outputs", so, "an object");
    for (const auto& [k, v] : so.items()) {
      const std::string at = "structured_outputs." + k;
      if (v.is_null()) continue;
      if (k == "json")
        set({ConstraintKind::JsonSchema, object_string(v, at), at});
      else if (k == "regex")
        set({ConstraintKind::Regex, string_field(v, at), at});
      else if (k == "choice")
        choice(v, at);
      else if (k == "grammar")
        set({ConstraintKind::Grammar, string_field(v, at), at});
      else if (k == "json_object") {
        if (boolean(v, at)) set({ConstraintKind::JsonObject, "", at});
      } else
        bad(at, "'" + at + "' is not supported (json, regex, choice, grammar, json_object)");
    }
  }
  // vLLM's older top-level spellings.
  if (body.contains("guided_json") && !body["guided_json"].is_null())
    set({ConstraintKind::JsonSchema, object_string(body["guided_json"], "guided_json"), "guided_json"});
  if (body.contains("guided_regex") && !body["guided_regex"].is_null())
    set({ConstraintKind::Regex, string_field(body["guided_regex"], "guided_regex"), "guided_regex"});
  if (body.contains("guided_choice") && !body["guided_choice"].is_null())
    choice(body["guided_choice"], "guided_choice");
  if (body.contains("guided_grammar") && !body["guided_grammar"].is_null())
    set({ConstraintKind::Grammar, string_field(body["guided_grammar"], "guided_grammar"), "guided_grammar"});
  return out;
}

std::shared_ptr<const Constraint> compile_constraint(const ConstraintSpec& spec, const ServedModel& served) {
  if (!served.constraint_vocab)
    bad(spec.field, "'" + spec.field + "' needs constrained decoding, which this server cannot do: " +
                        served.constraints_unavailable);
  if (spec.kind == ConstraintKind::Grammar && spec.text.find("::=") != std::string::npos)
    bad(spec.field, "'" + spec.field +
                        "' looks like a GBNF grammar; this server takes Lark grammars (llguidance's dialect; "
                        "llguidance.gbnf_to_lark converts GBNF)");
  try {
    return served.constraint_vocab->compile(spec.kind, spec.text);
  } catch (const Error& e) {
    bad(spec.field, "'" + spec.field + "': " + e.what());
  }
}

// An assistant turn's tool_calls ([{id, type: "function", function: {name, arguments}}]) as a chat template
// takes them: arguments (a JSON string, as OpenAI sends it) parsed into an object where it is one, as
// Transformers' templates expect (`arguments | tojson`).
ordered_json assistant_tool_calls(const json& calls, const std::string& at) {
  if (!calls.is_array()) wrong_type(at, calls, "an array");
  ordered_json out = ordered_json::array();
  for (size_t j = 0; j < calls.size(); ++j) {
    const std::string c_at = at + "[" + std::to_string(j) + "]";
    const json& c = calls[j];
    if (!c.is_object()) wrong_type(c_at, c, "an object");
    for (const auto& [k, v] : c.items())
      if (k != "id" && k != "type" && k != "function")
        bad(c_at + "." + k, "unknown field '" + c_at + "." + k + "'");
    if (c.contains("type") && c["type"] != "function")
      bad(c_at + ".type", "'" + c_at + ".type' must be \"function\"");
    if (!c.contains("function") || !c["function"].is_object())
      bad(c_at + ".function", "'" + c_at + ".function' must be an object");
    const json& f = c["function"];
    if (!f.contains("name") || !f["name"].is_string())
      bad(c_at + ".function.name", "'" + c_at + ".function.name' must be a string");
    ordered_json args = ordered_json::object();
    if (f.contains("arguments") && !f["arguments"].is_null()) {
      const json& a = f["arguments"];
      if (a.is_string()) {
        try {
          args = ordered_json::parse(a.get<std::string>());
        } catch (const json::exception&) {
          args = a.get<std::string>();  // not JSON: the template gets the text
        }
      } else if (a.is_object()) {
        args = ordered_json::parse(a.dump());
      } else {
        wrong_type(c_at + ".function.arguments", a, "a string (a JSON object)");
      }
    }
    ordered_json call = {{"type", "function"}, {"function", {{"name", f["name"]}, {"arguments", args}}}};
    if (c.contains("id") && !c["id"].is_null()) {
      if (!c["id"].is_string()) wrong_type(c_at + ".id", c["id"], "a string");
      call["id"] = c["id"];
    }
    out.push_back(std::move(call));
  }
  return out;
}

// The special tokens of `format`'s markers that the tokenizer has: the answer's text keeps them (a decoder
// that skips special tokens would hide the calls from the parser).
std::vector<int32_t> tool_marker_ids(ToolCallFormat format, const Tokenizer& tok) {
  std::vector<const char*> names;
  switch (format) {
    case ToolCallFormat::Hermes:
      names = {"<tool_call>", "</tool_call>"};
      break;
    case ToolCallFormat::Llama3Json:
      names = {"<|python_tag|>"};
      break;
    case ToolCallFormat::Mistral:
      names = {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"};
      break;
    case ToolCallFormat::Glm4:
      names = {"<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"};
      break;
    default:
      break;
  }
  std::vector<int32_t> ids;
  for (const char* n : names)
    if (auto id = tok.token_to_id(n); id && tok.is_special(*id)) ids.push_back(*id);
  return ids;
}

// `tools` checked ([{type: "function", function: {name, description, parameters, strict}}]), as the chat
// template takes them, and each function's name and parameter schema.
ordered_json request_tools(const json& body, std::vector<ToolSpec>& specs) {
  ordered_json out = ordered_json::array();
  if (!body.contains("tools") || body["tools"].is_null()) return out;
  const json& tools = body["tools"];
  if (!tools.is_array()) wrong_type("tools", tools, "an array");
  if (tools.size() > 128)
    bad("tools", "'tools' takes at most 128 functions, got " + std::to_string(tools.size()));
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = "tools[" + std::to_string(i) + "]";
    const json& t = tools[i];
    if (!t.is_object()) wrong_type(at, t, "an object");
    for (const auto& [k, v] : t.items())
      if (k != "type" && k != "function") bad(at + "." + k, "unknown field '" + at + "." + k + "'");
    if (!t.contains("type") || t["type"] != "function")
      bad(at + ".type", "'" + at + ".type' must be \"function\" (the only tool type this server runs)");
    if (!t.contains("function") || !t["function"].is_object())
      bad(at + ".function", "'" + at + ".function' must be an object");
    const json& f = t["function"];
    ToolSpec spec;
    for (const auto& [k, v] : f.items()) {
      const std::string f_at = at + ".function." + k;
      if (k == "name") {
        if (!v.is_string()) wrong_type(f_at, v, "a string");
        spec.name = v.get<std::string>();
        const bool ok =
            !spec.name.empty() && spec.name.size() <= 64 &&
            spec.name.find_first_not_of(
                "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") == std::string::npos;
        if (!ok) bad(f_at, "'" + f_at + "' must be 1-64 characters of a-z, A-Z, 0-9, _, - and .");
      } else if (k == "description") {
        if (!v.is_null() && !v.is_string()) wrong_type(f_at, v, "a string");
      } else if (k == "parameters") {
        if (!v.is_null() && !v.is_object()) wrong_type(f_at, v, "an object (a JSON schema)");
        if (v.is_object()) {
          spec.parameters = v;
          generation::drop_no_op_schema_keywords(spec.parameters);
        }
      } else if (k == "strict") {
        if (!v.is_null()) boolean(v, f_at);
      } else {
        bad(f_at, "unknown field '" + f_at + "'");
      }
    }
    if (spec.name.empty()) bad(at + ".function.name", "'" + at + ".function.name' is required");
    for (const ToolSpec& other : specs)
      if (other.name == spec.name) bad(at + ".function.name", "two tools are named '" + spec.name + "'");
    specs.push_back(spec);
    out.push_back(ordered_json::parse(t.dump()));
  }
  return out;
}

std::vector<int32_t> chat_prompt(const json& body, const ServedModel& served, std::string& text,
                                 const ordered_json& tools) {
  if (!body.contains("messages")) bad("messages", "'messages' is required");
  ordered_json extra = ordered_json::object();
  const json& msgs = body["messages"];
  if (!msgs.is_array()) wrong_type("messages", msgs, "an array");
  if (msgs.empty()) bad("messages", "'messages' must not be empty");
  ordered_json rendered = ordered_json::array();
  for (size_t i = 0; i < msgs.size(); ++i) {
    const std::string at = "messages[" + std::to_string(i) + "]";
    const json& m = msgs[i];
    if (!m.is_object()) wrong_type(at, m, "an object");
    if (!m.contains("role") || !m["role"].is_string())
      bad(at + ".role", "'" + at + ".role' must be a string");
    const std::string role = m["role"].get<std::string>();
    for (const auto& [k, v] : m.items())
      if (k != "role" && k != "content" && k != "name" && !(role == "assistant" && k == "tool_calls") &&
          !(role == "tool" && k == "tool_call_id"))
        bad(at + "." + k, "'" + at + "." + k + "' is not supported");
    if (role != "system" && role != "user" && role != "assistant" && role != "tool" && role != "developer")
      bad(at + ".role", "'" + at +
                            ".role' must be \"system\", \"developer\", \"user\", \"assistant\" or "
                            "\"tool\", got \"" +
                            role + "\"");
    const bool calls = role == "assistant" && m.contains("tool_calls") && !m["tool_calls"].is_null();
    if (!m.contains("content") && !calls) bad(at + ".content", "'" + at + ".content' is required");
    // developer is the newer name of system (OpenAI's o-series); templates know system.
    ordered_json out = {
        {"role", role == "developer" ? "system" : role},
        {"content", m.contains("content") ? message_text(m["content"], at + ".content") : ""}};
    if (m.contains("name") && !m["name"].is_null()) {
      if (!m["name"].is_string()) wrong_type(at + ".name", m["name"], "a string");
      if (role == "tool") out["name"] = m["name"];
    }
    if (role == "tool") {
      if (!m.contains("tool_call_id") || !m["tool_call_id"].is_string())
        bad(at + ".tool_call_id", "'" + at + ".tool_call_id' must be a string (the id of the call answered)");
      out["tool_call_id"] = m["tool_call_id"];
    }
    if (calls) out["tool_calls"] = assistant_tool_calls(m["tool_calls"], at + ".tool_calls");
    rendered.push_back(std::move(out));
  }
  if (!tools.empty()) extra["tools"] = tools;
  if (body.contains("chat_template_kwargs")) {
    const json& k = body["chat_template_kwargs"];
    if (!k.is_object()) wrong_type("chat_template_kwargs", k, "an object");
    const ordered_json kwargs = ordered_json::parse(k.dump());
    for (const auto& [key, v] : kwargs.items()) extra[key] = v;
  }
  if (served.tokenizer->chat_template().empty())
    bad("messages", "this model's tokenizer has no chat template; use /v1/completions");
  try {
    text = apply_chat_template(*served.tokenizer, rendered, true, extra);
  } catch (const Error& e) {
    bad("messages", std::string("the chat template failed: ") + e.what());
  }
  return served.tokenizer->encode(text, false);
}

std::vector<int32_t> completion_prompt(const json& body, const ServedModel& served) {
  if (!body.contains("prompt")) bad("prompt", "'prompt' is required");
  json p = body["prompt"];
  if (p.is_array() && p.size() == 1 && (p[0].is_string() || p[0].is_array())) p = p[0];
  if (p.is_string()) {
    std::vector<int32_t> ids = served.tokenizer->encode(p.get<std::string>(), true);
    if (ids.empty()) bad("prompt", "'prompt' is empty");
    return ids;
  }
  if (!p.is_array()) wrong_type("prompt", p, "a string or an array of token ids");
  if (p.empty()) bad("prompt", "'prompt' is empty");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i].is_string() || p[i].is_array())
      bad("prompt", "'prompt' with several prompts is not supported: send one request per prompt");
    ids.push_back(
        static_cast<int32_t>(integer(p[i], "prompt[" + std::to_string(i) + "]", 0, served.vocab_size - 1)));
  }
  return ids;
}

}  // namespace

namespace {

// How deep a request may nest arrays and objects (the body itself is level 1). Refused while parsing, so no
// recursive code (dump(), copies, the chat template's values) ever sees a deeper value.
constexpr int kMaxDepth = 64;

std::string hex_bytes(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    static const char* digits = "0123456789ABCDEF";
    if (!out.empty()) out += ' ';
    out += "0x";
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

// What a numeric top-level field must be, for the message about a number that overflows a double ("": not a
// numeric field).
std::string numeric_expectation(const std::string& field, bool chat) {
  static const std::pair<const char*, const char*> table[] = {
      {"max_tokens", "an integer in 1..16777216"},
      {"max_completion_tokens", "an integer in 1..16777216"},
      {"temperature", "a number in [0, 2]"},
      {"top_p", "a number in (0, 1]"},
      {"top_k", "an integer in -1..16777216"},
      {"min_p", "a number in [0, 1]"},
      {"repetition_penalty", "a number in (0, 1e6]"},
      {"presence_penalty", "a number in [-2, 2]"},
      {"frequency_penalty", "a number in [-2, 2]"},
      {"seed", "a 64-bit integer"},
      {"n", "an integer in 1..16"},
      {"top_logprobs", "an integer in 0..20"},
  };
  for (const auto& [name, what] : table)
    if (field == name) return std::string("must be ") + what;
  if (field == "logprobs") return chat ? "must be a boolean" : "must be an integer in 0..20";
  if (field == "prompt") return "must be a string or token ids in 0..vocab_size-1";
  return "";
}

// The body parsed, nesting at most kMaxDepth levels, every string valid UTF-8 and every number finite;
// otherwise a 400 naming the top-level field where parsing stopped (when it stopped inside one).
json parse_body(const std::string& text, bool chat) {
  std::string field;  // the top-level field whose value is being parsed ("" between fields)
  bool in_value = false;
  const json::parser_callback_t track = [&](int depth, json::parse_event_t event, json& parsed) {
    using E = json::parse_event_t;
    if ((event == E::object_start || event == E::array_start) && depth >= kMaxDepth)
      throw ApiError(400,
                     (in_value ? "'" + field + "' nests" : std::string("the body nests")) +
                         " arrays and objects too deep: a request may nest at most " +
                         std::to_string(kMaxDepth) + " levels (the body is level 1)",
                     in_value ? field : "");
    if (depth == 1) {
      if (event == E::key) {
        field = parsed.get<std::string>();
        in_value = true;
      } else if (event == E::value || event == E::object_end || event == E::array_end) {
        in_value = false;
      }
    }
    return true;
  };
  try {
    return json::parse(text, track);
  } catch (const json::parse_error& e) {
    size_t subpart = 0;
    if (const size_t at = tok::utf8_first_invalid(text, &subpart); at != std::string::npos) {
      const std::string bytes(text.substr(at, subpart));  // the maximal ill-formed subpart
      // The parser stopped at the bad bytes (not at a syntax error before them): the field it was in holds
      // them.
      const bool named = in_value && e.byte > at;
      throw ApiError(400,
                     "the body is not valid UTF-8: byte offset " + std::to_string(at) +
                         (named ? " (in '" + field + "')" : "") + " starts an ill-formed sequence (" +
                         hex_bytes(bytes) + ")",
                     named ? field : "");
    }
    throw ApiError(400, valid_utf8(std::string("the body is not valid JSON: ") + e.what()));
  } catch (const json::out_of_range& e) {
    // 406: a number beyond a double's range (1e999), which would parse to infinity.
    std::string number;
    const std::string what = e.what();
    if (const size_t q = what.find("parsing '"); q != std::string::npos) {
      const size_t end = what.find('\'', q + 9);
      if (end != std::string::npos) number = what.substr(q + 9, end - q - 9);
    }
    const std::string got = number.empty() ? "a number" : number;
    if (!in_value)
      throw ApiError(400, valid_utf8("the body holds a number out of range: " + got + " overflows a double"));
    const std::string want = numeric_expectation(field, chat);
    throw ApiError(400,
                   valid_utf8("'" + field + "' " +
                              (want.empty() ? "holds a number out of range: " + got + " overflows a double"
                                            : want + ", got " + got + " (it overflows a double)")),
                   field);
  }
}

}  // namespace

nlohmann::json parse_json_body(const std::string& text) { return parse_body(text, true); }

ParsedRequest parse_request(Endpoint endpoint, const std::string& body_text, const ServedModel& served) {
  json body = parse_body(body_text, endpoint == Endpoint::Chat);
  if (!body.is_object())
    throw ApiError(400, std::string("the body must be a JSON object, got ") + type_name(body));
  const bool chat = endpoint == Endpoint::Chat;
  static const std::set<std::string> common = {"model",
                                               "max_tokens",
                                               "temperature",
                                               "top_p",
                                               "seed",
                                               "stop",
                                               "stream",
                                               "stream_options",
                                               "n",
                                               "presence_penalty",
                                               "frequency_penalty",
                                               "top_k",
                                               "min_p",
                                               "repetition_penalty",
                                               "ignore_eos",
                                               "user"};
  for (const auto& [k, v] : body.items()) {
    if (common.count(k)) continue;
    if (chat &&
        (k == "messages" || k == "max_completion_tokens" || k == "chat_template_kwargs" || k == "logprobs" ||
         k == "top_logprobs" || k == "tools" || k == "tool_choice" || k == "parallel_tool_calls"))
      continue;
    if (!chat && k == "logprobs") continue;
    if (!chat && k == "prompt") continue;
    if (k == "response_format" || k == "structured_outputs" || k == "guided_json" || k == "guided_regex" ||
        k == "guided_choice" || k == "guided_grammar")
      continue;  // requested_constraint() checks them
    if (unsupported().count(k)) {
      // Explicit "off" values are what clients send by default: those are fine.
      if (v.is_null() || (v.is_boolean() && !v.get<bool>()) || (k == "top_logprobs" && v == 0)) continue;
      bad(k, "'" + k + "' is not supported by this server");
    }
    bad(k, "unknown field '" + k + "'");
  }
  ParsedRequest r;
  r.endpoint = endpoint;
  auto has = [&](const char* k) { return body.contains(k) && !body[k].is_null(); };
  if (has("model")) {
    if (!body["model"].is_string()) wrong_type("model", body["model"], "a string");
    if (body["model"] != served.name)
      throw ApiError(404,
                     "the model '" + body["model"].get<std::string>() +
                         "' does not exist (this server has '" + served.name + "')",
                     "model", "invalid_request_error", "model_not_found");
  }
  std::vector<ToolSpec> tool_specs;
  std::string tool_choice = "none";  // none, auto, required, or the function's name
  if (chat) {
    const ordered_json tools = request_tools(body, tool_specs);
    if (has("tool_choice")) {
      const json& tc = body["tool_choice"];
      if (tc.is_string()) {
        tool_choice = tc.get<std::string>();
        if (tool_choice != "none" && tool_choice != "auto" && tool_choice != "required")
          bad("tool_choice",
              "'tool_choice' must be \"none\", \"auto\", \"required\" or "
              "{\"type\": \"function\", \"function\": {\"name\": ...}}, got " +
                  tc.dump());
      } else if (tc.is_object()) {
        if (!tc.contains("function") || !tc["function"].is_object() || !tc["function"].contains("name") ||
            !tc["function"]["name"].is_string() || (tc.contains("type") && tc["type"] != "function"))
          bad("tool_choice",
              "'tool_choice' names a function as {\"type\": \"function\", \"function\": "
              "{\"name\": \"NAME\"}}");
        tool_choice = tc["function"]["name"].get<std::string>();
        bool known = false;
        for (const ToolSpec& t : tool_specs) known = known || t.name == tool_choice;
        if (!known)
          bad("tool_choice", "'tool_choice' names '" + tool_choice + "', which is not among 'tools'");
      } else {
        wrong_type("tool_choice", tc, "a string or an object");
      }
      if (tool_specs.empty() && tool_choice != "none")
        bad("tool_choice", "'tool_choice' " + tc.dump() + " needs 'tools'");
    } else if (!tool_specs.empty()) {
      tool_choice = "auto";
    }
    if (has("parallel_tool_calls"))
      r.parallel_tool_calls = boolean(body["parallel_tool_calls"], "parallel_tool_calls");
    std::string text;
    r.prompt = chat_prompt(body, served, text, tools);
    r.reasoning = served.reasoning;
    r.reasoning_open = served.reasoning == ReasoningFormat::Qwen3 && prompt_opens_thinking(text);
  } else {
    r.prompt = completion_prompt(body, served);
  }

  GenerationConfig& g = r.config;
  g = served.defaults;
  const char* max_field = has("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (has(max_field)) {
    g.max_new_tokens = static_cast<int>(integer(body[max_field], max_field, 1, 1 << 24));
    r.max_tokens_given = true;
  }
  if (has("temperature")) {
    const double t = number(body["temperature"], "temperature", 0, 2, "[0, 2]");
    g.do_sample = t > 0;
    if (t > 0) g.temperature = static_cast<float>(t);
  }
  if (has("top_p")) {
    const double p = number(body["top_p"], "top_p", 0, 1, "(0, 1]");
    if (p <= 0) bad("top_p", "'top_p' must be in (0, 1], got " + body["top_p"].dump());
    g.top_p = static_cast<float>(p);
  }
  if (has("top_k")) {
    const int64_t k = integer(body["top_k"], "top_k", -1, 1 << 24);
    g.top_k = k <= 0 ? 0 : static_cast<int>(k);
  }
  if (has("min_p")) g.min_p = static_cast<float>(number(body["min_p"], "min_p", 0, 1, "[0, 1]"));
  if (has("repetition_penalty")) {
    const double rp = number(body["repetition_penalty"], "repetition_penalty", 0, 1e6, "(0, 1e6]");
    if (rp <= 0)
      bad("repetition_penalty", "'repetition_penalty' must be > 0, got " + body["repetition_penalty"].dump());
    g.repetition_penalty = static_cast<float>(rp);
  }
  for (const char* k : {"presence_penalty", "frequency_penalty"})
    if (has(k) && number(body[k], k, -2, 2, "[-2, 2]") != 0)
      bad(k, std::string("'") + k + "' other than 0 is not supported (use repetition_penalty)");
  if (has("seed")) g.seed = static_cast<uint64_t>(integer(body["seed"], "seed", INT64_MIN, INT64_MAX));
  if (has("n")) r.n = static_cast<int>(integer(body["n"], "n", 1, 16));
  // vLLM's and llama-server's extension: generate past the end-of-sequence tokens (benchmarks, whose
  // engines must all produce max_tokens).
  if (has("ignore_eos") && boolean(body["ignore_eos"], "ignore_eos")) g.eos_token_id.clear();
  if (has("stream")) r.stream = boolean(body["stream"], "stream");
  if (has("stream_options")) {
    const json& so = body["stream_options"];
    if (!so.is_object()) wrong_type("stream_options", so, "an object");
    if (!r.stream) bad("stream_options", "'stream_options' is only allowed with \"stream\": true");
    for (const auto& [k, v] : so.items()) {
      if (k != "include_usage") bad("stream_options." + k, "unknown field 'stream_options." + k + "'");
      if (!v.is_null()) r.include_usage = boolean(v, "stream_options.include_usage");
    }
  }
  if (has("stop")) {
    const json& s = body["stop"];
    if (s.is_string()) {
      r.stop.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      if (s.size() > 4) bad("stop", "'stop' takes at most 4 strings, got " + std::to_string(s.size()));
      for (size_t i = 0; i < s.size(); ++i) {
        if (!s[i].is_string()) wrong_type("stop[" + std::to_string(i) + "]", s[i], "a string");
        r.stop.push_back(s[i].get<std::string>());
      }
    } else {
      wrong_type("stop", s, "a string or an array of strings");
    }
    for (const auto& x : r.stop)
      if (x.empty()) bad("stop", "'stop' strings must not be empty");
  }
  if (chat) {
    const bool on = has("logprobs") && boolean(body["logprobs"], "logprobs");
    const int top =
        has("top_logprobs") ? static_cast<int>(integer(body["top_logprobs"], "top_logprobs", 0, 20)) : 0;
    if (top > 0 && !on) bad("top_logprobs", "'top_logprobs' needs \"logprobs\": true");
    if (on) r.logprobs = top;
  } else if (has("logprobs")) {
    r.logprobs = static_cast<int>(integer(body["logprobs"], "logprobs", 0, 20));
  }
  if (has("user") && !body["user"].is_string()) wrong_type("user", body["user"], "a string");
  std::optional<ConstraintSpec> spec = requested_constraint(body);
  if (chat && tool_choice != "none") {
    r.tool_format = served.tool_format;
    r.keep_special = tool_marker_ids(served.tool_format, *served.tokenizer);
    if (tool_choice != "auto") {
      // required / a named function: the output is constrained to the format's calls.
      if (spec)
        bad(spec->field, "'" + spec->field + "' and 'tool_choice' " + body["tool_choice"].dump() +
                             " both constrain the output; give one");
      std::vector<ToolSpec> allowed;
      for (const ToolSpec& t : tool_specs)
        if (tool_choice == "required" || t.name == tool_choice) allowed.push_back(t);
      try {
        spec = ConstraintSpec{
            ConstraintKind::Grammar,
            tool_call_grammar(served.tool_format, allowed, tool_choice == "required" && r.parallel_tool_calls,
                              *served.tokenizer),
            "tool_choice"};
      } catch (const Error& e) {
        bad("tool_choice", std::string("'tool_choice': ") + e.what());
      }
      r.tool_calls_forced = true;
    }
  }
  if (spec) {
    g.constraint = compile_constraint(*spec, served);
    // The constraint decides the whole output (JSON, calls, ...), which a model cannot also spend thinking:
    // none of it is reasoning, even where the prompt left a think block open. (Harmony's parser stays: a
    // forced call is a harmony message, read through it.)
    if (r.reasoning != ReasoningFormat::Harmony) r.reasoning = ReasoningFormat::None;
    r.reasoning_open = false;
  }
  g.disable_compile = false;
  if (auto bad_field = g.invalid_field())
    bad(bad_field->first, "'" + bad_field->first + "' " + bad_field->second);
  return r;
}

ordered_json usage_json(int prompt_tokens, int completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

namespace {
// The fields every response and chunk starts with.
ordered_json envelope(const std::string& id, const char* object, int64_t created, const std::string& model) {
  return {{"id", id}, {"object", object}, {"created", created}, {"model", model}};
}
}  // namespace

ordered_json response_json(Endpoint endpoint, const std::string& id, int64_t created,
                           const std::string& model, const std::vector<ChoiceResult>& choices,
                           int prompt_tokens) {
  const bool chat = endpoint == Endpoint::Chat;
  ordered_json out = envelope(id, chat ? "chat.completion" : "text_completion", created, model);
  ordered_json cs = ordered_json::array();
  int completion = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    ordered_json c;
    c["index"] = i;
    if (chat) {
      c["message"] = {{"role", "assistant"}, {"content", choices[i].text}};
      if (!choices[i].tool_calls.empty()) {
        if (choices[i].text.empty()) c["message"]["content"] = nullptr;
        c["message"]["tool_calls"] = tool_calls_json(choices[i].tool_calls, choices[i].tool_call_id_prefix);
      }
      if (const auto& r = choices[i].reasoning)
        c["message"]["reasoning_content"] = r->empty() ? ordered_json(nullptr) : ordered_json(*r);
    } else {
      c["text"] = choices[i].text;
    }
    c["logprobs"] = choices[i].logprobs;
    c["finish_reason"] = choices[i].finish_reason;
    cs.push_back(std::move(c));
    completion += choices[i].completion_tokens;
  }
  out["choices"] = std::move(cs);
  out["usage"] = usage_json(prompt_tokens, completion);
  return out;
}

ordered_json chunk_json(Endpoint endpoint, const std::string& id, int64_t created, const std::string& model,
                        int index, const std::string* text, bool role, const std::string& finish_reason,
                        bool with_usage, const ordered_json& logprobs, const std::string* reasoning) {
  const bool chat = endpoint == Endpoint::Chat;
  ordered_json out = envelope(id, chat ? "chat.completion.chunk" : "text_completion", created, model);
  ordered_json c;
  c["index"] = index;
  if (chat) {
    ordered_json delta = ordered_json::object();
    if (role) delta["role"] = "assistant";
    if (text && (!reasoning || role || !text->empty())) delta["content"] = *text;
    if (reasoning && !reasoning->empty()) delta["reasoning_content"] = *reasoning;
    c["delta"] = std::move(delta);
  } else {
    c["text"] = text ? *text : std::string();
  }
  c["logprobs"] = logprobs;
  c["finish_reason"] = finish_reason.empty() ? ordered_json(nullptr) : ordered_json(finish_reason);
  out["choices"] = ordered_json::array({std::move(c)});
  if (with_usage) out["usage"] = nullptr;
  return out;
}

ordered_json tool_calls_json(const std::vector<ToolCall>& calls, const std::string& prefix) {
  ordered_json out = ordered_json::array();
  for (size_t k = 0; k < calls.size(); ++k)
    out.push_back(
        {{"id", prefix + std::to_string(k)},
         {"type", "function"},
         {"function", {{"name", valid_utf8(calls[k].name)}, {"arguments", valid_utf8(calls[k].arguments)}}}});
  return out;
}

ordered_json tool_call_chunk_json(const std::string& id, int64_t created, const std::string& model, int index,
                                  int call_index, const std::string* call_id, const std::string* name,
                                  const std::string& arguments, bool with_usage) {
  ordered_json out = envelope(id, "chat.completion.chunk", created, model);
  ordered_json call = {{"index", call_index}};
  if (call_id) {
    call["id"] = *call_id;
    call["type"] = "function";
  }
  ordered_json function = ordered_json::object();
  if (name) function["name"] = valid_utf8(*name);
  function["arguments"] = valid_utf8(arguments);
  call["function"] = std::move(function);
  ordered_json c = {{"index", index},
                    {"delta", {{"tool_calls", ordered_json::array({std::move(call)})}}},
                    {"logprobs", nullptr},
                    {"finish_reason", nullptr}};
  out["choices"] = ordered_json::array({std::move(c)});
  if (with_usage) out["usage"] = nullptr;
  return out;
}

ordered_json usage_chunk_json(Endpoint endpoint, const std::string& id, int64_t created,
                              const std::string& model, int prompt_tokens, int completion_tokens) {
  ordered_json out =
      envelope(id, endpoint == Endpoint::Chat ? "chat.completion.chunk" : "text_completion", created, model);
  out["choices"] = ordered_json::array();
  out["usage"] = usage_json(prompt_tokens, completion_tokens);
  return out;
}

namespace {
// A token's text as JSON can hold it (invalid UTF-8, e.g. half a character, repaired to U+FFFD) and its raw
// bytes.
std::string token_text(const std::string& raw) {
  if (tok::utf8_is_valid(raw)) return raw;
  std::string out;
  tok::utf8_repair_append(raw, out);
  return out;
}
ordered_json byte_list(const std::string& raw) {
  ordered_json b = ordered_json::array();
  for (unsigned char c : raw) b.push_back(static_cast<int>(c));
  return b;
}
}  // namespace

ordered_json logprobs_json(Endpoint endpoint, const Tokenizer& tok, const std::vector<TokenLogprob>& tokens,
                           size_t& text_offset) {
  if (endpoint == Endpoint::Chat) {
    ordered_json content = ordered_json::array();
    for (const TokenLogprob& t : tokens) {
      const std::string raw = tok.token_bytes(t.token, false);
      ordered_json e = {{"token", token_text(raw)}, {"logprob", t.logprob}, {"bytes", byte_list(raw)}};
      ordered_json top = ordered_json::array();
      for (const auto& [id, lp] : t.top) {
        const std::string r = tok.token_bytes(id, false);
        top.push_back({{"token", token_text(r)}, {"logprob", lp}, {"bytes", byte_list(r)}});
      }
      e["top_logprobs"] = std::move(top);
      content.push_back(std::move(e));
      text_offset += raw.size();
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
  }
  ordered_json toks = ordered_json::array(), lps = ordered_json::array(), tops = ordered_json::array(),
               offsets = ordered_json::array();
  for (const TokenLogprob& t : tokens) {
    const std::string raw = tok.token_bytes(t.token, false);
    toks.push_back(token_text(raw));
    lps.push_back(t.logprob);
    ordered_json top = ordered_json::object();
    for (const auto& [id, lp] : t.top) {
      const std::string key = token_text(tok.token_bytes(id, false));
      if (!top.contains(key)) top[key] = lp;  // two ids with one text: the likelier one
    }
    // OpenAI's completions always list the sampled token too (up to logprobs + 1 entries), also when it is
    // not among the most likely (a sampled draw) or logprobs is 0.
    if (const std::string key = token_text(raw); !top.contains(key)) top[key] = t.logprob;
    tops.push_back(std::move(top));
    offsets.push_back(text_offset);
    text_offset += raw.size();
  }
  return {{"tokens", std::move(toks)},
          {"token_logprobs", std::move(lps)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

std::string sse(const ordered_json& j) {
  return "data: " + j.dump(-1, ' ', false, ordered_json::error_handler_t::replace) + "\n\n";
}

}  // namespace tessera::serve
