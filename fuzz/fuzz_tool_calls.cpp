// libFuzzer target: arbitrary model output through serve::ToolCallParser in every format, whole and split at
// a fuzzer-chosen byte. Any input must parse without crashing, give the same content and calls whichever way
// it was split, and every call's arguments must be a JSON object.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "serve/tool_calls.h"

namespace {
using tessera::serve::ToolCallFormat;
using tessera::serve::ToolCallParser;

std::pair<std::string, std::vector<tessera::serve::ToolCall>> run(ToolCallFormat f, const std::string& text,
                                                                  size_t split) {
  ToolCallParser p(f);
  std::string content;
  std::vector<tessera::serve::ToolCall> calls;
  auto take = [&](ToolCallParser::Output o) {
    content += o.content;
    for (auto& c : o.calls) calls.push_back(std::move(c));
  };
  take(p.push(std::string_view(text).substr(0, split)));
  take(p.push(std::string_view(text).substr(split)));
  take(p.finish());
  return {content, calls};
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  constexpr ToolCallFormat kFormats[] = {ToolCallFormat::None,       ToolCallFormat::Hermes,
                                         ToolCallFormat::Llama3Json, ToolCallFormat::Mistral,
                                         ToolCallFormat::Pythonic,   ToolCallFormat::Glm4};
  const ToolCallFormat f = kFormats[data[0] % 6];
  const std::string text(reinterpret_cast<const char*>(data) + 3, size - 3);
  const size_t split = text.empty() ? 0 : ((size_t{data[1]} << 8) | data[2]) % (text.size() + 1);
  const auto whole = run(f, text, text.size());
  const auto parts = run(f, text, split);
  if (whole.first != parts.first || whole.second.size() != parts.second.size()) std::abort();
  for (size_t i = 0; i < whole.second.size(); ++i) {
    if (whole.second[i].name != parts.second[i].name ||
        whole.second[i].arguments != parts.second[i].arguments)
      std::abort();
    const auto args = nlohmann::json::parse(whole.second[i].arguments, nullptr, false);
    if (!args.is_object()) std::abort();
  }
  return 0;
}
