// libFuzzer target: any bytes as a chat template, parsed and rendered with a
// small fixed conversation. Must never crash, hang or leak; errors are
// tessera::Error. Tight limits keep each input cheap.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "tessera/chat_template.h"
#include "tessera/error.h"

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json vars = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Hi <tool_response>é😀</tool_response>"},
      {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHello", "reasoning_content": null,
       "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": 1, "b": [1.5, "x"]}}}]},
      {"role": "tool", "content": "{\"ok\": true}"}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d",
               "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}],
    "documents": null, "add_generation_prompt": true, "enable_thinking": false,
    "bos_token": "<s>", "eos_token": "</s>", "n": 3, "f": 0.1, "nothing": null
  })");
  return vars;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 64 * 1024) return 0;
  std::string source(reinterpret_cast<const char*>(data), size);
  tessera::ChatTemplateOptions options;
  options.limits.max_output_bytes = 64 * 1024;
  options.limits.max_steps = 20000;
  options.limits.max_depth = 200;
  options.now_unix_seconds = 0;
  try {
    tessera::ChatTemplate tpl = tessera::ChatTemplate::parse(source);
    std::string out = tpl.render(context(), options);
    if (out.size() > options.limits.max_output_bytes) __builtin_trap();
  } catch (const tessera::Error&) {
  }
  return 0;
}
