#include "serve/responses.h"

#include <set>
#include <utility>

namespace tessera::serve {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, message, param);
}

// Text parts of an input message: a string, or [{type: input_text | output_text | text, text}].
json message_content(const json& content, const std::string& at) {
  if (content.is_string()) return content;
  if (!content.is_array()) bad(at, "'" + at + "' must be a string or an array of input_text parts");
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const std::string p_at = at + "[" + std::to_string(j) + "]";
    const json& part = content[j];
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      bad(p_at + ".type", "'" + p_at + ".type' must be a string");
    const std::string type = part["type"].get<std::string>();
    if (type != "input_text" && type != "output_text" && type != "text")
      bad(p_at + ".type",
          "'" + p_at + ".type' \"" + type + "\" is not supported (only input_text and output_text)");
    if (!part.contains("text") || !part["text"].is_string())
      bad(p_at + ".text", "'" + p_at + ".text' must be a string");
    text += part["text"].get<std::string>();
  }
  return text;
}

std::string string_field(const json& item, const char* key, const std::string& at) {
  if (!item.contains(key) || !item[key].is_string())
    bad(at + "." + key, "'" + at + "." + key + "' must be a string");
  return item[key].get<std::string>();
}

// input (a string, or items) as chat messages after `instructions`.
json input_messages(const json& body) {
  json msgs = json::array();
  if (body.contains("instructions") && !body["instructions"].is_null()) {
    if (!body["instructions"].is_string()) bad("instructions", "'instructions' must be a string");
    msgs.push_back({{"role", "system"}, {"content", body["instructions"]}});
  }
  if (!body.contains("input") || body["input"].is_null()) bad("input", "'input' is required");
  const json& input = body["input"];
  if (input.is_string()) {
    msgs.push_back({{"role", "user"}, {"content", input}});
    return msgs;
  }
  if (!input.is_array() || input.empty())
    bad("input", "'input' must be a string or a non-empty array of items");
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string at = "input[" + std::to_string(i) + "]";
    const json& item = input[i];
    if (!item.is_object()) bad(at, "'" + at + "' must be an object");
    const std::string type = item.contains("type") && item["type"].is_string()
                                 ? item["type"].get<std::string>()
                                 : std::string("message");
    static const std::set<std::string> message_keys = {"type", "role", "content", "id", "status"};
    if (type == "message") {
      for (const auto& [k, v] : item.items())
        if (!message_keys.count(k)) bad(at + "." + k, "unknown field '" + at + "." + k + "'");
      const std::string role = string_field(item, "role", at);
      if (role != "user" && role != "system" && role != "developer" && role != "assistant")
        bad(at + ".role",
            "'" + at + ".role' must be user, system, developer or assistant, got \"" + role + "\"");
      if (!item.contains("content")) bad(at + ".content", "'" + at + ".content' is required");
      msgs.push_back({{"role", role}, {"content", message_content(item["content"], at + ".content")}});
    } else if (type == "function_call") {
      json call = {
          {"id", string_field(item, "call_id", at)},
          {"type", "function"},
          {"function",
           {{"name", string_field(item, "name", at)}, {"arguments", string_field(item, "arguments", at)}}}};
      // Consecutive calls are one assistant turn.
      if (!msgs.empty() && msgs.back()["role"] == "assistant" && msgs.back().contains("tool_calls"))
        msgs.back()["tool_calls"].push_back(std::move(call));
      else
        msgs.push_back(
            {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array({std::move(call)})}});
    } else if (type == "function_call_output") {
      json output = item.contains("output") ? item["output"] : json();
      if (output.is_array()) output = message_content(output, at + ".output");
      if (!output.is_string()) bad(at + ".output", "'" + at + ".output' must be a string");
      msgs.push_back(
          {{"role", "tool"}, {"tool_call_id", string_field(item, "call_id", at)}, {"content", output}});
    } else if (type == "reasoning") {
      // An earlier answer's reasoning sent back: chat templates drop past reasoning, and so does this.
      continue;
    } else {
      bad(at + ".type", "'" + at + ".type' \"" + type +
                            "\" is not supported (message, function_call, function_call_output, reasoning)");
    }
  }
  return msgs;
}

// Responses' function tools ({type, name, description, parameters, strict}) in chat's form.
json chat_tools(const json& tools) {
  if (!tools.is_array()) bad("tools", "'tools' must be an array");
  json out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = "tools[" + std::to_string(i) + "]";
    const json& t = tools[i];
    if (!t.is_object()) bad(at, "'" + at + "' must be an object");
    if (!t.contains("type") || t["type"] != "function")
      bad(at + ".type", "'" + at + ".type' " +
                            (t.contains("type") ? t["type"].dump() : std::string("(none)")) +
                            " is not supported: this server runs function tools only");
    json f = json::object();
    for (const auto& [k, v] : t.items()) {
      if (k == "type") continue;
      if (k != "name" && k != "description" && k != "parameters" && k != "strict")
        bad(at + "." + k, "unknown field '" + at + "." + k + "'");
      f[k] = v;
    }
    out.push_back({{"type", "function"}, {"function", std::move(f)}});
  }
  return out;
}

// Chat's error parameter in the Responses request's terms.
std::string responses_param(const std::string& p) {
  auto starts = [&](const char* prefix) { return p.rfind(prefix, 0) == 0; };
  if (starts("max_completion_tokens")) return "max_output_tokens";
  if (starts("response_format")) return "text.format" + p.substr(std::string("response_format").size());
  if (starts("messages")) return "input";  // indices shift (instructions, merged calls): the field alone
  if (starts("tools[")) {
    const size_t f = p.find("].function");
    if (f != std::string::npos) return p.substr(0, f + 1) + p.substr(f + 10);
  }
  return p;
}

}  // namespace

ResponsesRequest parse_responses_request(const std::string& body_text, const ServedModel& served) {
  const json body = parse_json_body(body_text);
  if (!body.is_object()) throw ApiError(400, "the body must be a JSON object");
  static const std::set<std::string> known = {"model",
                                              "input",
                                              "instructions",
                                              "tools",
                                              "tool_choice",
                                              "parallel_tool_calls",
                                              "text",
                                              "stream",
                                              "store",
                                              "temperature",
                                              "top_p",
                                              "user",
                                              "metadata",
                                              "max_output_tokens",
                                              "include",
                                              "truncation",
                                              "previous_response_id",
                                              "conversation",
                                              "reasoning",
                                              "background",
                                              "stream_options"};
  for (const auto& [k, v] : body.items())
    if (!known.count(k)) bad(k, "unknown field '" + k + "' (or one this server does not support)");
  auto set = [&](const char* k) { return body.contains(k) && !body[k].is_null(); };
  if (set("store") && (!body["store"].is_boolean() || body["store"].get<bool>()))
    bad("store", "'store' must be false: this server keeps no responses (leave it out or send false)");
  for (const char* k : {"previous_response_id", "conversation"})
    if (set(k))
      bad(k, std::string("'") + k +
                 "' is not supported: this server keeps no responses; send the whole "
                 "conversation as input items");
  if (set("background") && body["background"] != false) bad("background", "'background' is not supported");
  if (set("reasoning") && !(body["reasoning"].is_object() && body["reasoning"].empty()))
    bad("reasoning",
        "'reasoning' settings are not supported (the model's chat template decides whether it thinks)");
  if (set("include") && !(body["include"].is_array() && body["include"].empty()))
    bad("include", "'include' is not supported (only an empty list)");
  if (set("truncation") && body["truncation"] != "disabled")
    bad("truncation",
        "'truncation' must be \"disabled\": an input longer than the context is refused, not cut");
  if (set("stream_options")) {
    const json& so = body["stream_options"];
    if (!so.is_object()) bad("stream_options", "'stream_options' must be an object");
    for (const auto& [k, v] : so.items())  // obfuscation pads events against side channels; none here
      if (k != "include_obfuscation" || !(v.is_boolean() || v.is_null()))
        bad("stream_options." + k, "'stream_options." + k + "' is not supported");
  }
  if (set("metadata") && !body["metadata"].is_object()) bad("metadata", "'metadata' must be an object");
  if (set("user") && !body["user"].is_string()) bad("user", "'user' must be a string");

  json chat = json::object();
  chat["messages"] = input_messages(body);
  for (const char* k : {"model", "temperature", "top_p", "stream", "parallel_tool_calls", "user"})
    if (body.contains(k)) chat[k] = body[k];
  if (body.contains("max_output_tokens")) chat["max_completion_tokens"] = body["max_output_tokens"];
  if (set("tools")) chat["tools"] = chat_tools(body["tools"]);
  if (set("tool_choice")) {
    const json& tc = body["tool_choice"];
    if (tc.is_object() && tc.contains("name") && tc.value("type", "") == "function")
      chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", tc["name"]}}}};
    else
      chat["tool_choice"] = tc;
  }
  json text_echo = {{"format", {{"type", "text"}}}};
  if (set("text")) {
    const json& t = body["text"];
    if (!t.is_object()) bad("text", "'text' must be an object");
    for (const auto& [k, v] : t.items())
      if (k != "format" && !(k == "verbosity" && (v.is_null() || v == "medium")))
        bad("text." + k, "'text." + k + "' is not supported");
    if (t.contains("format") && !t["format"].is_null()) {
      const json& f = t["format"];
      if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
        bad("text.format.type", "'text.format.type' must be \"text\", \"json_object\" or \"json_schema\"");
      const std::string type = f["type"].get<std::string>();
      if (type == "json_schema") {
        json js = json::object();
        for (const auto& [k, v] : f.items()) {
          if (k == "type") continue;
          if (k != "name" && k != "schema" && k != "strict" && k != "description")
            bad("text.format." + k, "unknown field 'text.format." + k + "'");
          js[k] = v;
        }
        chat["response_format"] = {{"type", "json_schema"}, {"json_schema", std::move(js)}};
      } else {
        chat["response_format"] = f;
      }
      text_echo["format"] = f;
    }
  }
  ResponsesRequest out;
  try {
    out.parsed = parse_request(Endpoint::Chat, chat.dump(), served);
  } catch (const ApiError& e) {
    std::string msg = e.what();
    for (const auto& [chat_name, name] :
         {std::pair<std::string, std::string>{"max_completion_tokens", "max_output_tokens"},
          {"response_format", "text.format"}})
      for (size_t at = msg.find(chat_name); at != std::string::npos;
           at = msg.find(chat_name, at + name.size()))
        msg.replace(at, chat_name.size(), name);
    throw ApiError(e.status, msg, responses_param(e.param), e.type, e.code);
  }
  ordered_json echo;
  echo["instructions"] =
      set("instructions") ? ordered_json(body["instructions"].get<std::string>()) : ordered_json(nullptr);
  echo["max_output_tokens"] = set("max_output_tokens") ? ordered_json::parse(body["max_output_tokens"].dump())
                                                       : ordered_json(nullptr);
  echo["temperature"] =
      set("temperature") ? ordered_json::parse(body["temperature"].dump()) : ordered_json(1.0);
  echo["top_p"] = set("top_p") ? ordered_json::parse(body["top_p"].dump()) : ordered_json(1.0);
  echo["tools"] = set("tools") ? ordered_json::parse(body["tools"].dump()) : ordered_json::array();
  echo["tool_choice"] =
      set("tool_choice") ? ordered_json::parse(body["tool_choice"].dump()) : ordered_json("auto");
  echo["parallel_tool_calls"] = !set("parallel_tool_calls") || body["parallel_tool_calls"] == true;
  echo["text"] = ordered_json::parse(text_echo.dump());
  echo["metadata"] = set("metadata") ? ordered_json::parse(body["metadata"].dump()) : ordered_json::object();
  echo["user"] = set("user") ? ordered_json(body["user"].get<std::string>()) : ordered_json(nullptr);
  out.echo = std::move(echo);
  return out;
}

namespace {
ordered_json text_part(const std::string& text) {
  return {{"type", "output_text"},
          {"text", text},
          {"annotations", ordered_json::array()},
          {"logprobs", ordered_json::array()}};
}
ordered_json reasoning_item(const std::string& id, const std::string& text, const char* status) {
  return {{"type", "reasoning"},
          {"id", id},
          {"summary", ordered_json::array()},
          {"content", ordered_json::array({{{"type", "reasoning_text"}, {"text", text}}})},
          {"status", status}};
}
ordered_json message_item(const std::string& id, const std::string& text, const char* status,
                          bool with_part) {
  return {{"type", "message"},
          {"id", id},
          {"status", status},
          {"role", "assistant"},
          {"content", with_part ? ordered_json::array({text_part(text)}) : ordered_json::array()}};
}
ordered_json call_item(const ResponseIds& ids, size_t k, const ToolCall& c, const char* status,
                       bool with_arguments) {
  return {{"type", "function_call"},
          {"id", ids.function_item(k)},
          {"call_id", ids.call(k)},
          {"name", c.name},
          {"arguments", with_arguments ? c.arguments : std::string()},
          {"status", status}};
}
}  // namespace

ordered_json response_output_items(const ResponseIds& ids, const ResponsesOutput& out) {
  ordered_json items = ordered_json::array();
  if (!out.reasoning.empty()) items.push_back(reasoning_item(ids.reasoning(), out.reasoning, "completed"));
  if (!out.text.empty() || out.calls.empty())
    items.push_back(message_item(ids.message(), out.text,
                                 out.finish_reason == "length" ? "incomplete" : "completed", true));
  for (size_t k = 0; k < out.calls.size(); ++k)
    items.push_back(call_item(ids, k, out.calls[k], "completed", true));
  return items;
}

ordered_json response_object(const ResponseIds& ids, int64_t created, const std::string& model,
                             const ordered_json& echo, const ResponsesOutput* out) {
  const bool incomplete = out && out->finish_reason == "length";
  ordered_json r = {{"id", ids.response()},
                    {"object", "response"},
                    {"created_at", created},
                    {"status", !out         ? "in_progress"
                               : incomplete ? "incomplete"
                                            : "completed"},
                    {"error", nullptr},
                    {"incomplete_details",
                     incomplete ? ordered_json({{"reason", "max_output_tokens"}}) : ordered_json(nullptr)},
                    {"model", model},
                    {"output", out ? response_output_items(ids, *out) : ordered_json::array()},
                    {"previous_response_id", nullptr},
                    {"reasoning", {{"effort", nullptr}, {"summary", nullptr}}},
                    {"store", false},
                    {"truncation", "disabled"}};
  for (const auto& [k, v] : echo.items()) r[k] = v;
  if (out) {
    r["usage"] = {{"input_tokens", out->input_tokens},
                  {"input_tokens_details", {{"cached_tokens", 0}}},
                  {"output_tokens", out->output_tokens},
                  {"output_tokens_details", {{"reasoning_tokens", 0}}},
                  {"total_tokens", out->input_tokens + out->output_tokens}};
  } else {
    r["usage"] = nullptr;
  }
  return r;
}

ResponsesEventStream::ResponsesEventStream(ResponseIds ids, int64_t created, std::string model,
                                           ordered_json echo)
    : ids_(std::move(ids)), created_(created), model_(std::move(model)), echo_(std::move(echo)) {}

std::string ResponsesEventStream::event(const std::string& type, ordered_json data) {
  ordered_json e = {{"type", type}, {"sequence_number", seq_++}};
  for (auto& [k, v] : data.items()) e[k] = std::move(v);
  return "event: " + type + "\ndata: " + e.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

std::string ResponsesEventStream::begin() {
  // One event per statement: the operands of + are evaluated in no fixed order, and each takes a number.
  std::string out =
      event("response.created", {{"response", response_object(ids_, created_, model_, echo_, nullptr)}});
  out +=
      event("response.in_progress", {{"response", response_object(ids_, created_, model_, echo_, nullptr)}});
  return out;
}

std::string ResponsesEventStream::reasoning_delta(const std::string& text) {
  if (text.empty() || reasoning_closed_) return "";
  std::string out;
  if (reasoning_index_ < 0) {
    reasoning_index_ = next_index_++;
    out += event(
        "response.output_item.added",
        {{"output_index", reasoning_index_}, {"item", reasoning_item(ids_.reasoning(), "", "in_progress")}});
  }
  reasoning_ += text;
  return out + event("response.reasoning_text.delta", {{"item_id", ids_.reasoning()},
                                                       {"output_index", reasoning_index_},
                                                       {"content_index", 0},
                                                       {"delta", text}});
}

std::string ResponsesEventStream::close_reasoning() {
  if (reasoning_index_ < 0 || reasoning_closed_) return "";
  reasoning_closed_ = true;
  std::string out = event("response.reasoning_text.done", {{"item_id", ids_.reasoning()},
                                                           {"output_index", reasoning_index_},
                                                           {"content_index", 0},
                                                           {"text", reasoning_}});
  out += event("response.output_item.done",
               {{"output_index", reasoning_index_},
                {"item", reasoning_item(ids_.reasoning(), reasoning_, "completed")}});
  return out;
}

std::string ResponsesEventStream::text_delta(const std::string& text) {
  if (text.empty() || message_closed_) return "";
  std::string out = close_reasoning();
  if (message_index_ < 0) {
    message_index_ = next_index_++;
    out += event(
        "response.output_item.added",
        {{"output_index", message_index_}, {"item", message_item(ids_.message(), "", "in_progress", false)}});
    out += event("response.content_part.added", {{"item_id", ids_.message()},
                                                 {"output_index", message_index_},
                                                 {"content_index", 0},
                                                 {"part", text_part("")}});
  }
  text_ += text;
  return out + event("response.output_text.delta", {{"item_id", ids_.message()},
                                                    {"output_index", message_index_},
                                                    {"content_index", 0},
                                                    {"delta", text},
                                                    {"logprobs", ordered_json::array()}});
}

std::string ResponsesEventStream::close_message() {
  if (message_index_ < 0 || message_closed_) return "";
  message_closed_ = true;
  std::string out = event("response.output_text.done", {{"item_id", ids_.message()},
                                                        {"output_index", message_index_},
                                                        {"content_index", 0},
                                                        {"text", text_},
                                                        {"logprobs", ordered_json::array()}});
  out += event("response.content_part.done", {{"item_id", ids_.message()},
                                              {"output_index", message_index_},
                                              {"content_index", 0},
                                              {"part", text_part(text_)}});
  out += event(
      "response.output_item.done",
      {{"output_index", message_index_}, {"item", message_item(ids_.message(), text_, "completed", true)}});
  return out;
}

std::string ResponsesEventStream::call(const ToolCall& c) {
  std::string out = close_reasoning();  // an open message stays open: text may follow the call
  const size_t k = calls_++;
  const int index = next_index_++;
  out += event("response.output_item.added",
               {{"output_index", index}, {"item", call_item(ids_, k, c, "in_progress", false)}});
  out += event("response.function_call_arguments.delta",
               {{"item_id", ids_.function_item(k)}, {"output_index", index}, {"delta", c.arguments}});
  out += event("response.function_call_arguments.done", {{"item_id", ids_.function_item(k)},
                                                         {"output_index", index},
                                                         {"name", c.name},
                                                         {"arguments", c.arguments}});
  return out + event("response.output_item.done",
                     {{"output_index", index}, {"item", call_item(ids_, k, c, "completed", true)}});
}

std::string ResponsesEventStream::end(const ResponsesOutput& out) {
  std::string s = close_reasoning();
  if (message_index_ < 0 && calls_ == 0) {
    // No text and no call: an empty message, as the whole response has.
    message_index_ = next_index_++;
    s += event(
        "response.output_item.added",
        {{"output_index", message_index_}, {"item", message_item(ids_.message(), "", "in_progress", false)}});
    s += event("response.content_part.added", {{"item_id", ids_.message()},
                                               {"output_index", message_index_},
                                               {"content_index", 0},
                                               {"part", text_part("")}});
  }
  s += close_message();
  const bool incomplete = out.finish_reason == "length";
  return s + event(incomplete ? "response.incomplete" : "response.completed",
                   {{"response", response_object(ids_, created_, model_, echo_, &out)}});
}

std::string ResponsesEventStream::error(const std::string& message) {
  return event("error", {{"code", "server_error"}, {"message", message}, {"param", nullptr}});
}

}  // namespace tessera::serve
