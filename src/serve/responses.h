// OpenAI's Responses API (POST /v1/responses), without server-side state: a request is turned into the
// chat-completions request it means (input items as messages, instructions as a system message, function
// tools, text.format as response_format) and checked by parse_request; the answer's text, reasoning and tool
// calls become the response's output items, whole or as the API's typed stream events.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "serve/openai.h"

namespace tessera::serve {

struct ResponsesRequest {
  ParsedRequest parsed;  // as a chat completion
  // The request's settings a response object repeats (instructions, max_output_tokens, temperature, top_p,
  // tools, tool_choice, parallel_tool_calls, text, metadata).
  nlohmann::ordered_json echo;
};

// Checks a /v1/responses body and translates it. ApiError 400 naming the Responses field (store true,
// previous_response_id and conversation are refused by name: this server keeps no state), 404 for another
// model.
ResponsesRequest parse_responses_request(const std::string& body, const ServedModel& served);

// What one answer produced, for the output items.
struct ResponsesOutput {
  std::string text, reasoning;
  std::vector<ToolCall> calls;
  std::string finish_reason;  // the engine's: stop, length, tool_calls
  int input_tokens = 0, output_tokens = 0;
};

// The ids of one response's items: resp_<id>, msg_<id>, rs_<id>, fc_<id>_<k>, call_<id>_<k>.
struct ResponseIds {
  std::string base;
  std::string response() const { return "resp_" + base; }
  std::string message() const { return "msg_" + base; }
  std::string reasoning() const { return "rs_" + base; }
  std::string function_item(size_t k) const { return "fc_" + base + "_" + std::to_string(k); }
  std::string call(size_t k) const { return "call_" + base + "_" + std::to_string(k); }
};

// The response object: `status` "in_progress" (output empty, for response.created), "completed" or
// "incomplete" (max_output_tokens reached).
nlohmann::ordered_json response_object(const ResponseIds& ids, int64_t created, const std::string& model,
                                       const nlohmann::ordered_json& echo, const ResponsesOutput* out);
// Output items: reasoning (when there is any), the message (when there is text or no call), each call.
nlohmann::ordered_json response_output_items(const ResponseIds& ids, const ResponsesOutput& out);

// The typed stream: each event is `event: TYPE\ndata: {..., "type": TYPE, "sequence_number": n}\n\n`.
class ResponsesEventStream {
 public:
  ResponsesEventStream(ResponseIds ids, int64_t created, std::string model, nlohmann::ordered_json echo);
  // response.created and response.in_progress.
  std::string begin();
  // New reasoning / text: the item and part are opened on first use, then a delta.
  std::string reasoning_delta(const std::string& text);
  std::string text_delta(const std::string& text);
  // A completed call: its item added, its arguments as one delta, done.
  std::string call(const ToolCall& c);
  // Closes open items and sends response.completed (or response.incomplete).
  std::string end(const ResponsesOutput& out);
  // An error event (the response failed).
  std::string error(const std::string& message);

 private:
  std::string event(const std::string& type, nlohmann::ordered_json data);
  std::string close_reasoning();
  std::string close_message();
  ResponseIds ids_;
  int64_t created_;
  std::string model_;
  nlohmann::ordered_json echo_;
  int seq_ = 0, next_index_ = 0;
  int reasoning_index_ = -1, message_index_ = -1;
  bool reasoning_closed_ = false, message_closed_ = false;
  std::string reasoning_, text_;
  size_t calls_ = 0;
};

}  // namespace tessera::serve
