// OpenAI's HTTP API as `tessera serve` speaks it: request bodies of /v1/chat/completions and /v1/completions
// checked field by field and turned into engine requests, and the JSON (whole or Server-Sent-Event chunks)
// sent back. Every field is either understood or refused with a 400 naming it; nothing is silently ignored
// but `user`, which OpenAI defines as informational.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "serve/engine.h"
#include "serve/reasoning.h"
#include "serve/tool_calls.h"
#include "tessera/constraint.h"
#include "tessera/generation.h"
#include "tessera/tokenizer.h"

namespace tessera::serve {

// An answer other than 200: {"error": {"message", "type", "param", "code"}} with this HTTP status.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string param = "",
           std::string type = "invalid_request_error", std::string code = "")
      : std::runtime_error(message),
        status(status),
        type(std::move(type)),
        param(std::move(param)),
        code(std::move(code)) {}
  int status;
  std::string type, param, code;
};
nlohmann::ordered_json error_body(const ApiError& e);

enum class Endpoint { Chat, Completion };

struct ParsedRequest {
  Endpoint endpoint = Endpoint::Completion;
  bool stream = false, include_usage = false;
  int n = 1;
  std::vector<int32_t> prompt;
  GenerationConfig config;        // the model's defaults with the request's fields
  bool max_tokens_given = false;  // max_tokens / max_completion_tokens (else: what fits the context)
  std::vector<std::string> stop;  // up to 4
  int logprobs = -1;              // chat logprobs + top_logprobs, completions logprobs: alternatives; -1 off
  // Chat only: the served model's reasoning format (completions return the raw text), and whether the
  // rendered prompt opened a think block.
  ReasoningFormat reasoning = ReasoningFormat::None;
  bool reasoning_open = false;
  // Chat with `tools` and tool_choice other than "none": the format the answer's calls are parsed from
  // (ToolCallParser); None: no parsing. `forced`: tool_choice "required" or a named function (the output is
  // constrained to calls, config.constraint).
  ToolCallFormat tool_format = ToolCallFormat::None;
  bool tool_calls_forced = false;
  bool parallel_tool_calls = true;
  // Harmony calls come out of the reasoning parser in canonical form (EngineRequest::harmony_tool_calls).
  bool harmony_tool_calls() const {
    return tool_format == ToolCallFormat::Harmony && reasoning == ReasoningFormat::Harmony;
  }
  std::vector<int32_t> keep_special;  // special token ids the answer's text keeps (the format's markers)
};

// What the server answers to: its model name, the model's defaults and tokenizer.
struct ServedModel {
  std::string name;
  const Tokenizer* tokenizer = nullptr;
  GenerationConfig defaults;
  int64_t vocab_size = 0;
  ReasoningFormat reasoning = ReasoningFormat::None;  // --reasoning-parser, resolved for this model
  // Constrained decoding (response_format json_object / json_schema, structured_outputs): the vocabulary
  // constraints are compiled for; null when llguidance is not available (`constraints_unavailable` says why
  // and how to install it), and constrained requests get a 400 saying so.
  std::shared_ptr<const ConstraintVocabulary> constraint_vocab;
  std::string constraints_unavailable;
  ToolCallFormat tool_format = ToolCallFormat::Hermes;  // --tool-call-parser, resolved for this model
};

// A request body as JSON, with the checks every endpoint's body gets (nesting depth, UTF-8, numbers in
// range): ApiError 400 naming the top-level field at fault.
nlohmann::json parse_json_body(const std::string& text);

// Parses and checks a request body. Throws ApiError (400 naming the field; 404 for another model name).
ParsedRequest parse_request(Endpoint endpoint, const std::string& body, const ServedModel& served);

// Response pieces. `id` is "chatcmpl-..." / "cmpl-...", `created` Unix seconds.
struct ChoiceResult {
  std::string text, finish_reason;
  std::vector<ToolCall> tool_calls;  // message.tool_calls (text is then null when empty)
  std::string tool_call_id_prefix;   // each call's id is this + its index
  // With a reasoning parser: the reasoning, written as message.reasoning_content (null when empty); nullopt:
  // no such field.
  std::optional<std::string> reasoning;
  int completion_tokens = 0;
  nlohmann::ordered_json logprobs;  // null, or logprobs_json() of its tokens
};
// A choice's "logprobs" for `tokens` as the endpoint writes it: chat {"content": [{token, logprob, bytes,
// top_logprobs}]} (each entry the chosen token with its own logprob, whether or not it is among its
// top_logprobs); completions {tokens, token_logprobs, top_logprobs, text_offset}, each top_logprobs object
// holding the most likely tokens and the chosen one (up to logprobs + 1 entries, as OpenAI's), and
// `text_offset` (the bytes of the choice's tokens before these) advancing past them, so stream chunks
// continue the count.
nlohmann::ordered_json logprobs_json(Endpoint endpoint, const Tokenizer& tok,
                                     const std::vector<TokenLogprob>& tokens, size_t& text_offset);
nlohmann::ordered_json usage_json(int prompt_tokens, int completion_tokens);
nlohmann::ordered_json response_json(Endpoint endpoint, const std::string& id, int64_t created,
                                     const std::string& model, const std::vector<ChoiceResult>& choices,
                                     int prompt_tokens);
// One SSE chunk's JSON for choice `index`: `text` (the first chat chunk carries the role), and
// `finish_reason`
// ("" = null). `with_usage`: the chunk carries "usage": null (include_usage was asked for). `logprobs`: those
// of the chunk's tokens (logprobs_json), or null. `reasoning` (chat with a reasoning parser): the delta
// carries "reasoning_content" when it is not empty, and "content" only when that is not empty (or with the
// role).
nlohmann::ordered_json chunk_json(Endpoint endpoint, const std::string& id, int64_t created,
                                  const std::string& model, int index, const std::string* text, bool role,
                                  const std::string& finish_reason, bool with_usage,
                                  const nlohmann::ordered_json& logprobs = nullptr,
                                  const std::string* reasoning = nullptr);
// A chunk carrying tool call `call_index` of choice `index`: the first for a call gives its id, type and name
// (and empty arguments), later ones fragments of its arguments (`id` and `name` null), as OpenAI streams
// them.
nlohmann::ordered_json tool_call_chunk_json(const std::string& id, int64_t created, const std::string& model,
                                            int index, int call_index, const std::string* call_id,
                                            const std::string* name, const std::string& arguments,
                                            bool with_usage);
// message.tool_calls / the ids of a choice's calls: `prefix` + the call's index.
nlohmann::ordered_json tool_calls_json(const std::vector<ToolCall>& calls, const std::string& prefix);
// The last chunk of a stream with include_usage: empty choices and the totals.
nlohmann::ordered_json usage_chunk_json(Endpoint endpoint, const std::string& id, int64_t created,
                                        const std::string& model, int prompt_tokens, int completion_tokens);
// "data: <json>\n\n"
std::string sse(const nlohmann::ordered_json& j);

}  // namespace tessera::serve
