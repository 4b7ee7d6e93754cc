// Tool calls in a model's own output format: parsing them out of the generated text (whole or streamed, for
// tool_choice "auto") and the grammar that forces one (tool_choice "required" or a named function), per model
// family. The server turns parsed calls into OpenAI's message.tool_calls / delta.tool_calls.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/tokenizer.h"

namespace tessera::serve {

enum class ToolCallFormat {
  None,    // no parsing: the text is content
  Hermes,  // Qwen2.5 / Qwen3 / Hermes: <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>, repeated
  Llama3Json,  // Llama 3.1-3.3 JSON tool calling: optional <|python_tag|>, {"name": ..., "parameters": {...}}
               // (several separated by ";")
  Mistral,     // [TOOL_CALLS] then a JSON array of {"name", "arguments"} (or the v11 form name[ARGS]{...})
  Pythonic,    // Llama 4 / Gemma 3 style: [func(a=1, b="x"), g()] (Python call syntax, literal arguments)
  Glm4,        // GLM-4.5/4.6: <tool_call>name\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>...</tool_call>
  Harmony,     // gpt-oss: a message to `functions.NAME` on the commentary channel, JSON arguments, <|call|>;
               // read from the canonical form the harmony reasoning parser gives it (serve/reasoning.h)
  Gemma4,      // Gemma 4: <|tool_call>call:NAME{key:value,...}<tool_call|>, repeated; strings between <|"|>
               // markers, numbers, true/false, nested {...} and [...] (its chat template's format_argument)
};
const char* tool_call_format_name(ToolCallFormat f);  // "none", "hermes", "llama3_json", "mistral", ...
std::optional<ToolCallFormat> tool_call_format_from_name(const std::string& name);
// The format a model's chat template renders calls in (from the architecture and the template's text);
// Hermes when the template shows none, the format required/named calls are then constrained to.
ToolCallFormat choose_tool_call_format(const std::string& architecture, const std::string& chat_template);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object as text (OpenAI sends function.arguments as a string)
};

// Streaming parser of one choice's generated text. push() takes each new piece of text and gives back the
// content that can be sent now (text that may still turn out to be the start of a call is held back) and the
// calls completed by this piece; finish() gives what is still held back. Text around calls stays content; a
// malformed or unfinished call is returned as content, never dropped. The concatenation of every output's
// content and calls does not depend on how the text was split into pieces.
// Only the whitespace between calls and after the last one is dropped (with Llama3Json and Pythonic, the
// whitespace and tags around the calls too). Hermes, Glm4 and Mistral find calls anywhere and hold back only
// a suffix that may begin a marker; Llama3Json's calls must open the output and Pythonic's call list must be
// the whole output, so a text that may still be one is held until decided. A Hermes call whose closing tag
// never came counts when its JSON is complete. Arguments come out as compact JSON (keys sorted, UTF-8).
class ToolCallParser {
 public:
  explicit ToolCallParser(ToolCallFormat format);
  struct Output {
    std::string content;
    std::vector<ToolCall> calls;
  };
  // `last`: the text ends the answer (push then finish, in one output).
  Output push(std::string_view text, bool last = false);
  Output finish();

 private:
  Output run(bool final);  // gives out what held_ decides (at the end: everything)
  ToolCallFormat format_;
  std::string held_;  // text not yet given out
  int state_ = 0;     // where held_ starts in the format's output (tool_calls.cpp: State)
};

// One function a request offers: its name and the JSON schema of its parameters (an object schema; {} when
// the tool gives none).
struct ToolSpec {
  std::string name;
  nlohmann::json parameters = nlohmann::json::object();
};

// A Lark grammar (llguidance's dialect, ConstraintKind::Grammar) that admits exactly one call — or, with
// `parallel`, one or more — in `format` to one of `tools`, with arguments valid against that tool's schema,
// and nothing else, so the output always parses with ToolCallParser(format). Special tokens the format uses
// are looked up in `tok`. Throws Error when the format needs a token the tokenizer lacks.
// Hermes: <tool_call>\n{"name", "arguments"}\n</tool_call> (joined by "\n"); Llama3Json: <|python_tag|> then
// {"name", "parameters"} (joined by "; "); Mistral: [TOOL_CALLS]NAME[ARGS]{...} (repeated) where the
// tokenizer has [ARGS], else [TOOL_CALLS] and a JSON array; Pythonic: [name(k=v, ...)] with each tool's
// properties in their (sorted) order, values as JSON (True/False/None for plain boolean/null properties).
// Glm4 and None throw Error (no forced calls in those formats).
std::string tool_call_grammar(ToolCallFormat format, const std::vector<ToolSpec>& tools, bool parallel,
                              const Tokenizer& tok);

}  // namespace tessera::serve
