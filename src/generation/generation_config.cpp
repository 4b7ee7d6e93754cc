#include <nlohmann/json.hpp>

#include "tessera/error.h"
#include "tessera/generation.h"

namespace tessera {

GenerationConfig GenerationConfig::from_json(const std::string& text, const std::string& origin) {
  GenerationConfig g;
  if (text.empty()) return g;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(origin, ": invalid JSON: ", e.what());
  }
  if (!j.is_object()) fail(origin, ": expected a JSON object");
  auto num = [&](const char* key, auto& out) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return;
    if (!it->is_number()) fail(origin, ": field '", key, "' must be a number, got ", it->dump());
    out = it->get<std::decay_t<decltype(out)>>();
  };
  num("max_new_tokens", g.max_new_tokens);
  num("temperature", g.temperature);
  num("top_k", g.top_k);
  num("top_p", g.top_p);
  num("min_p", g.min_p);
  num("repetition_penalty", g.repetition_penalty);
  if (auto it = j.find("do_sample"); it != j.end() && it->is_boolean()) g.do_sample = it->get<bool>();
  if (auto it = j.find("eos_token_id"); it != j.end() && !it->is_null()) {
    if (it->is_number_integer()) {
      g.eos_token_id = {it->get<int32_t>()};
    } else if (it->is_array()) {
      for (const auto& v : *it) {
        if (!v.is_number_integer()) fail(origin, ": field 'eos_token_id' must hold integers, got ", it->dump());
        g.eos_token_id.push_back(v.get<int32_t>());
      }
    } else {
      fail(origin, ": field 'eos_token_id' must be an integer or a list, got ", it->dump());
    }
  }
  if (auto it = j.find("pad_token_id"); it != j.end() && it->is_number_integer()) g.pad_token_id = it->get<int32_t>();
  if (auto it = j.find("cache_implementation"); it != j.end() && it->is_string())
    g.cache_implementation = it->get<std::string>();
  return g;
}

void GenerationConfig::validate() const {
  if (max_new_tokens < 0) fail("generation config: max_new_tokens must be >= 0, got ", max_new_tokens);
  if (do_sample && !(temperature > 0.0f)) fail("generation config: temperature must be > 0, got ", temperature);
  if (top_k < 0) fail("generation config: top_k must be >= 0, got ", top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f)) fail("generation config: top_p must be in (0, 1], got ", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) fail("generation config: min_p must be in [0, 1], got ", min_p);
  if (!(repetition_penalty > 0.0f))
    fail("generation config: repetition_penalty must be > 0, got ", repetition_penalty);
  if (cache_implementation != "static" && cache_implementation != "dynamic")
    fail("generation config: cache_implementation must be \"static\" or \"dynamic\", got \"", cache_implementation,
         "\"");
}

}  // namespace tessera
