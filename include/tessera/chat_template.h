// Jinja2 chat templates rendered the way Hugging Face Transformers renders them
// (apply_chat_template: sandboxed jinja2 with trim_blocks, lstrip_blocks, loop
// controls, a tojson that keeps non-ASCII, raise_exception and strftime_now).
//
//   auto tpl = tessera::ChatTemplate::parse(source);        // throws Error on syntax errors
//   std::string prompt = tpl.render(vars);                  // vars: messages, add_generation_prompt, ...
//
// Every error (syntax, runtime, limits) is a tessera::Error whose message reads
// "chat template: line L, column C: <what>".
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

namespace tessera {

namespace chat_template_detail {
struct Program;
}

// Work bounds that make rendering of any template terminate quickly.
struct ChatTemplateLimits {
  std::size_t max_output_bytes = std::size_t{64} << 20;  // rendered text, and any single string or list
  std::uint64_t max_steps = 10'000'000;  // evaluated nodes + loop iterations + (bytes scanned or built)/256
  int max_depth = 400;                   // nested evaluation incl. macro calls
};

struct ChatTemplateOptions {
  ChatTemplateLimits limits;
  // Clock for strftime_now(), as Unix seconds rendered in UTC. Unset: the system clock in local
  // time, as Python's datetime.now() does.
  std::optional<std::int64_t> now_unix_seconds;
};

class ChatTemplate {
 public:
  // Parses a template; throws tessera::Error("chat template: line L, column C: <what>") on syntax errors.
  static ChatTemplate parse(const std::string& source);

  // Renders with the given variables (a JSON object: messages, tools, add_generation_prompt,
  // bos_token, eos_token, enable_thinking, documents, ...). Runtime errors (raise_exception, type
  // errors, undefined calls, limits) throw tessera::Error with line and column.
  // nlohmann::json sorts object keys; pass an ordered_json to keep the caller's key order, which
  // matters for tojson output (Python dicts keep insertion order).
  std::string render(const nlohmann::json& vars) const;
  std::string render(const nlohmann::ordered_json& vars) const;
  std::string render(const nlohmann::json& vars, const ChatTemplateOptions& options) const;
  std::string render(const nlohmann::ordered_json& vars, const ChatTemplateOptions& options) const;

 private:
  std::shared_ptr<const chat_template_detail::Program> program_;
};

}  // namespace tessera
