// generation_config.json read with the typed config reader, and the effective settings of a generate() call
// resolved as Transformers 5 resolves them (generation/utils.py: _prepare_generation_config, then
// _prepare_special_tokens and _prepare_generated_length).
#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <nlohmann/json.hpp>

#include "io/json_util.h"
#include "models/config.h"
#include "tessera/error.h"
#include "tessera/generation.h"

namespace tessera {

GenerationOverrides GenerationOverrides::from_json(const std::string& text, const std::string& origin) {
  GenerationOverrides o;
  if (text.empty()) return o;
  const nlohmann::json j = io::parse_json(text, origin);  // nesting depth bounded
  const models::ConfigReader r(j, origin);  // the typed reader of config.json; requires an object
  auto int32_field = [&r](const char* key, int64_t lo) -> std::optional<int> {
    if (auto v = r.optional_int(key, lo, INT32_MAX)) return static_cast<int>(*v);
    return std::nullopt;
  };
  auto float_field = [&r](const char* key, double hi) -> std::optional<float> {
    if (auto v = r.optional_number(key, 0.0, hi)) return static_cast<float>(*v);
    return std::nullopt;
  };
  // Transformers refuses max_new_tokens <= 0 when it reads the file (GenerationConfig.validate).
  o.max_new_tokens = int32_field("max_new_tokens", 1);
  o.max_length = int32_field("max_length", 1);
  o.do_sample = r.optional_bool("do_sample");
  o.temperature = float_field("temperature", FLT_MAX);
  o.top_k = int32_field("top_k", 0);
  o.top_p = float_field("top_p", 1.0);
  o.min_p = float_field("min_p", 1.0);
  o.repetition_penalty = float_field("repetition_penalty", FLT_MAX);
  if (r.has("eos_token_id")) o.eos_token_id = r.id_list("eos_token_id");  // one id or a list, as Transformers
  o.pad_token_id = r.optional_id("pad_token_id");
  o.bos_token_id = r.optional_id("bos_token_id");
  if (auto s = r.optional_string("cache_implementation")) {
    // Transformers unsets "hybrid" (the old sliding-window default) and uses its default cache.
    if (*s == "static" || *s == "dynamic")
      o.cache_implementation = *s;
    else if (*s != "hybrid")
      r.fail_field("cache_implementation",
                   "is " + models::ConfigReader::show(nlohmann::json(*s)) +
                       ", which is not supported (supported: static, dynamic, hybrid)");
  }
  return o;
}

GenerationConfig GenerationConfig::merged(const GenerationConfig& d, const GenerationOverrides& o) {
  GenerationConfig g = d;
  if (o.max_new_tokens) g.max_new_tokens = o.max_new_tokens;
  if (o.max_length) {
    g.max_length = *o.max_length;
    g.max_length_is_default = false;
  }
  if (o.do_sample) g.do_sample = *o.do_sample;
  if (o.temperature) g.temperature = *o.temperature;
  if (o.top_k) g.top_k = *o.top_k;
  if (o.top_p) g.top_p = *o.top_p;
  if (o.min_p) g.min_p = *o.min_p;
  if (o.repetition_penalty) g.repetition_penalty = *o.repetition_penalty;
  if (o.seed) g.seed = o.seed;
  if (o.eos_token_id) g.eos_token_id = *o.eos_token_id;
  if (o.pad_token_id) g.pad_token_id = o.pad_token_id;
  if (o.bos_token_id) g.bos_token_id = o.bos_token_id;
  if (o.cache_implementation) g.cache_implementation = *o.cache_implementation;
  if (o.disable_compile) g.disable_compile = *o.disable_compile;
  return g;
}

GenerationConfig GenerationConfig::from_json(const std::string& text, const std::string& origin) {
  return merged(GenerationConfig{}, GenerationOverrides::from_json(text, origin));
}

void GenerationConfig::validate() const {
  if (max_new_tokens && *max_new_tokens <= 0)
    fail("generation config: max_new_tokens must be > 0, got ", *max_new_tokens);
  if (max_length <= 0) fail("generation config: max_length must be > 0, got ", max_length);
  if (do_sample && !(temperature > 0.0f && std::isfinite(temperature)))
    fail("generation config: temperature must be > 0 when sampling, got ", temperature);
  if (top_k < 0) fail("generation config: top_k must be >= 0, got ", top_k);
  if (!(top_p > 0.0f && top_p <= 1.0f)) fail("generation config: top_p must be in (0, 1], got ", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) fail("generation config: min_p must be in [0, 1], got ", min_p);
  if (!(repetition_penalty > 0.0f && std::isfinite(repetition_penalty)))
    fail("generation config: repetition_penalty must be > 0, got ", repetition_penalty);
  for (int32_t id : eos_token_id)
    if (id < 0) fail("generation config: eos_token_id must hold token ids >= 0, got ", id);
  if (pad_token_id && *pad_token_id < 0)
    fail("generation config: pad_token_id must be >= 0, got ", *pad_token_id);
  if (cache_implementation != "static" && cache_implementation != "dynamic")
    fail("generation config: cache_implementation must be \"static\" or \"dynamic\", got \"",
         cache_implementation, "\"");
}

int GenerationConfig::new_token_budget(int prompt_len, int64_t max_position_embeddings) const {
  int64_t total = 0;  // Transformers' max_length after the prompt is known
  if (max_new_tokens) {
    total = int64_t{*max_new_tokens} + prompt_len;
  } else if (max_length_is_default) {  // "by default generate 20 new tokens", within the model's positions
    total = int64_t{max_length} + prompt_len;
    if (max_position_embeddings > 0) total = std::min(total, max_position_embeddings);
  } else {
    total = max_length;
  }
  if (prompt_len >= total)
    fail("generate: the prompt has ", prompt_len, " tokens but max_length is ", total,
         max_new_tokens
             ? ""
             : (max_length_is_default ? " (max_position_embeddings)" : " (max_length counts the prompt)"),
         "; set max_new_tokens");
  return static_cast<int>(std::min<int64_t>(total - prompt_len, INT_MAX));
}

std::optional<int32_t> GenerationConfig::effective_pad_token_id() const {
  if (pad_token_id) return pad_token_id;
  if (!eos_token_id.empty()) return eos_token_id[0];
  return std::nullopt;
}

}  // namespace tessera
