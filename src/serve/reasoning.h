// Reasoning separated from the answer in a chat completion: a parser per request turns the generated tokens
// into text on two channels, the reasoning (`reasoning_content`) and the content, as they arrive. Two
// formats:
// - Harmony (gpt-oss): messages `<|channel|>NAME<|message|>TEXT<|end|>` (also ended by `<|return|>` or
//   `<|call|>`), each later one opened by `<|start|>ROLE`; the header may hold a recipient `to=functions.X`
//   and `<|constrain|>TYPE`. Channel `analysis` is reasoning; `final`, `commentary` (a tool call too, unless
//   the request has tools: see make_harmony_parser; the server has no tools API, so a call's arguments are
//   content) and any other are content. Worked on token ids: every marker is one special token.
// - Qwen3 (`<think>…</think>`, also DeepSeek-R1 style): reasoning is the text inside the think block. The
//   output starts inside it when the prompt ends with an open `<think>` (templates that put it there);
//   otherwise a `<think>` at the very start of the output (whitespace before it allowed) opens it. After
//   `</think>` everything is content; a completion that never closes the block is all reasoning. Worked on
//   text, so tags split over several tokens are found too; a partial tag is held back until it is decided.
// Text never comes out as broken UTF-8, and nothing the model wrote is lost: a completion that breaks the
// format (a header cut off or too long, text where a header should be) comes out as content, markers
// included where they are part of what could not be parsed.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/tokenizer.h"

namespace tessera::serve {

enum class ReasoningFormat { None, Harmony, Qwen3, Gemma4 };

// "none", "harmony", "qwen3", "gemma4"; nullopt for another name ("auto" is the caller's:
// choose_reasoning_format).
std::optional<ReasoningFormat> reasoning_format_from_name(std::string_view name);
const char* reasoning_format_name(ReasoningFormat f);
// What `--reasoning-parser auto` picks: Harmony for GptOssForCausalLM or a template that writes harmony's
// `<|channel|>` and `<|message|>`; Gemma4 for Gemma4* or a template that writes `<|channel>thought`; Qwen3
// for a template that writes `<think>`; else None.
ReasoningFormat choose_reasoning_format(std::string_view architecture, std::string_view chat_template);
// Whether a rendered prompt leaves the model inside a think block: it ends with `<think>` and whitespace.
bool prompt_opens_thinking(std::string_view prompt_text);

enum class Channel { Reasoning, Content };
struct Segment {
  Channel channel;
  std::string text;  // valid UTF-8, not empty
};

// One request's parser. push() takes each generated token: its id, its bytes as the vocabulary holds them (a
// special token's own text) and whether it is special; it appends the text now decided, in order, to `out`.
// finish() appends what is still held back (the completion ended).
class ReasoningParser {
 public:
  virtual ~ReasoningParser() = default;
  virtual void push(int32_t id, std::string_view bytes, bool special, std::vector<Segment>& out) = 0;
  virtual void finish(std::vector<Segment>& out) = 0;
};

// Harmony's marker tokens (o200k_harmony: 200006, 200005, 200008, 200007, 200002, 200012, 200003).
struct HarmonyTokens {
  int32_t start = -1, channel = -1, message = -1, end = -1, return_ = -1, call = -1, constrain = -1;
};
// From the tokenizer's vocabulary; nullopt when one is missing.
std::optional<HarmonyTokens> harmony_tokens(const Tokenizer& tok);
// A parser for the tokens after a prompt ending `<|start|>assistant` (the role given: the header comes next).
// `eos`: the ids that end generation without being harmony's markers (gpt-oss's `<|endoftext|>`): they add
// no text.
// `tool_calls` (a request with tools): a message addressed to a function (`to=functions.NAME` in its header)
// comes out as content in one canonical form, `<|channel|>commentary
// to=functions.NAME<|message|>ARGS<|call|>` (without the end marker when the completion stops inside it),
// which ToolCallParser(Harmony) reads.
std::unique_ptr<ReasoningParser> make_harmony_parser(const HarmonyTokens& ids, std::set<int32_t> eos = {},
                                                     bool tool_calls = false);

// `<think>` / `</think>` as single tokens where the vocabulary has them (else found in the text).
struct ThinkTokens {
  std::optional<int32_t> open, close;
};
ThinkTokens think_tokens(const Tokenizer& tok);
// `in_reasoning`: the prompt opened the think block (prompt_opens_thinking). Special tokens other than the
// tags add no text (as the server's answers skip them).
std::unique_ptr<ReasoningParser> make_qwen3_parser(const ThinkTokens& ids, bool in_reasoning);
// - Gemma 4: the thought channel `<|channel>thought ... <channel|>` at the very start of the output is
//   reasoning (its template's thinking mode; without it the prompt already holds an empty, closed channel and
//   the output is content). `<|channel>` / `<channel|>` as single tokens where the vocabulary has them.
ThinkTokens gemma4_think_tokens(const Tokenizer& tok);
std::unique_ptr<ReasoningParser> make_gemma4_parser(const ThinkTokens& ids);

// The parser of `format` for one request over `tok` (nullptr for None). Throws Error when the tokenizer lacks
// harmony's markers.
std::unique_ptr<ReasoningParser> make_reasoning_parser(ReasoningFormat format, const Tokenizer& tok,
                                                       bool in_reasoning, const std::vector<int32_t>& eos_ids,
                                                       bool tool_calls = false);

// Appends `text` on `channel` to `out`, merged into the last segment when it is on the same channel.
void append_segment(std::vector<Segment>& out, Channel channel, std::string text);

}  // namespace tessera::serve
