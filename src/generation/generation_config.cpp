// generation_config.json read with the typed config reader, and the effective settings of a generate() call
// resolved as Transformers 5 resolves them (generation/utils.py: _prepare_generation_config, then
// _prepare_special_tokens and _prepare_generated_length).
#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/json_util.h"
#include "models/config.h"
#include "tessera/error.h"
#include "tessera/generation.h"

namespace tessera {

namespace {

// Keys of Transformers' GenerationConfig that change what generate() outputs but that Tessera does not
// implement: each is accepted only at its no-op value (or null), otherwise refused naming the key and value,
// so that a checkpoint is never run differently from how Transformers runs it.
struct Unsupported {
  const char* key;
  enum Kind { kInt, kNumber, kNull } kind;
  double noop;  // the value that changes nothing (kInt / kNumber)
  const char* why;
};
constexpr Unsupported kUnsupported[] = {
    {"num_beams", Unsupported::kInt, 1, "beam search is not implemented"},
    {"num_beam_groups", Unsupported::kInt, 1, "group beam search is not implemented"},
    {"num_return_sequences", Unsupported::kInt, 1, "one sequence per prompt row is returned"},
    {"no_repeat_ngram_size", Unsupported::kInt, 0, "n-gram blocking is not implemented"},
    {"encoder_no_repeat_ngram_size", Unsupported::kInt, 0, "encoder-decoder models are not supported"},
    {"min_length", Unsupported::kInt, 0, "minimum lengths are not implemented"},
    {"min_new_tokens", Unsupported::kInt, 0, "minimum lengths are not implemented"},
    {"typical_p", Unsupported::kNumber, 1, "typical sampling is not implemented"},
    {"epsilon_cutoff", Unsupported::kNumber, 0, "epsilon sampling is not implemented"},
    {"eta_cutoff", Unsupported::kNumber, 0, "eta sampling is not implemented"},
    {"encoder_repetition_penalty", Unsupported::kNumber, 1, "encoder-decoder models are not supported"},
    {"diversity_penalty", Unsupported::kNumber, 0, "group beam search is not implemented"},
    {"penalty_alpha", Unsupported::kNumber, 0, "contrastive search is not implemented"},
    {"guidance_scale", Unsupported::kNumber, 1, "classifier-free guidance is not implemented"},
    {"top_h", Unsupported::kNull, 0, "top-h sampling is not implemented"},
    {"bad_words_ids", Unsupported::kNull, 0, "banned words are not implemented"},
    {"force_words_ids", Unsupported::kNull, 0, "constrained beam search is not implemented"},
    {"constraints", Unsupported::kNull, 0, "constrained beam search is not implemented"},
    {"suppress_tokens", Unsupported::kNull, 0, "token suppression is not implemented"},
    {"begin_suppress_tokens", Unsupported::kNull, 0, "token suppression is not implemented"},
    {"forced_bos_token_id", Unsupported::kNull, 0, "forced tokens are not implemented"},
    {"forced_eos_token_id", Unsupported::kNull, 0, "forced tokens are not implemented"},
    {"sequence_bias", Unsupported::kNull, 0, "sequence bias is not implemented"},
    {"exponential_decay_length_penalty", Unsupported::kNull, 0, "length penalties are not implemented"},
    {"stop_strings", Unsupported::kNull, 0, "stop strings are not implemented"},
    {"max_time", Unsupported::kNull, 0, "time limits are not implemented"},
    {"dola_layers", Unsupported::kNull, 0, "DoLa decoding is not implemented"},
    {"watermarking_config", Unsupported::kNull, 0, "watermarking is not implemented"},
};

void refuse_unsupported(const models::ConfigReader& r) {
  for (const Unsupported& u : kUnsupported) {
    const nlohmann::json* v = r.find(u.key);
    if (!v) continue;
    bool noop = false;
    if (u.kind == Unsupported::kInt)
      noop = r.optional_int(u.key, 0, INT32_MAX).value() == static_cast<int64_t>(u.noop);
    else if (u.kind == Unsupported::kNumber)
      noop = r.optional_number(u.key).value() == u.noop;
    else
      noop = (v->is_array() || v->is_object()) && v->empty();
    if (!noop)
      r.fail_field(u.key,
                   "is " + models::ConfigReader::show(*v) + ", which is not supported (" + u.why + ")");
  }
}

}  // namespace

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
  refuse_unsupported(r);
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
  o.prompt_lookup_num_tokens = int32_field("prompt_lookup_num_tokens", 0);
  o.max_matching_ngram_size = int32_field("max_matching_ngram_size", 1);
  o.num_assistant_tokens = int32_field("num_assistant_tokens", 1);
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
  if (o.prompt_lookup_num_tokens) g.prompt_lookup_num_tokens = *o.prompt_lookup_num_tokens;
  if (o.max_matching_ngram_size) g.max_matching_ngram_size = *o.max_matching_ngram_size;
  if (o.num_assistant_tokens) g.num_assistant_tokens = *o.num_assistant_tokens;
  return g;
}

GenerationConfig GenerationConfig::from_json(const std::string& text, const std::string& origin) {
  GenerationConfig g = merged(GenerationConfig{}, GenerationOverrides::from_json(text, origin));
  if (auto p = g.invalid_field()) fail(origin, ": field '", p->first, "' ", p->second);
  return g;
}

std::optional<std::pair<std::string, std::string>> GenerationConfig::invalid_field() const {
  using P = std::pair<std::string, std::string>;
  auto str = [](auto v) {
    std::ostringstream os;
    os << v;
    return os.str();
  };
  if (max_new_tokens && *max_new_tokens <= 0)
    return P{"max_new_tokens", "must be > 0, got " + str(*max_new_tokens)};
  if (max_length <= 0) return P{"max_length", "must be > 0, got " + str(max_length)};
  if (!std::isfinite(temperature) || temperature < 0.0f)
    return P{"temperature", "must be a finite number >= 0, got " + str(temperature)};
  if (do_sample && !(temperature > 0.0f))
    return P{"temperature", "must be > 0 when sampling (do_sample), got " + str(temperature)};
  if (top_k < 0) return P{"top_k", "must be >= 0, got " + str(top_k)};
  if (!(top_p > 0.0f && top_p <= 1.0f)) return P{"top_p", "must be in (0, 1], got " + str(top_p)};
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return P{"min_p", "must be in [0, 1], got " + str(min_p)};
  if (!(repetition_penalty > 0.0f && std::isfinite(repetition_penalty)))
    return P{"repetition_penalty", "must be a finite number > 0, got " + str(repetition_penalty)};
  for (int32_t id : eos_token_id)
    if (id < 0) return P{"eos_token_id", "must hold token ids >= 0, got " + str(id)};
  if (pad_token_id && *pad_token_id < 0) return P{"pad_token_id", "must be >= 0, got " + str(*pad_token_id)};
  if (prompt_lookup_num_tokens < 0 || prompt_lookup_num_tokens > kMaxDraftTokens)
    return P{"prompt_lookup_num_tokens",
             "must be in 0.." + str(kMaxDraftTokens) + ", got " + str(prompt_lookup_num_tokens)};
  if (num_assistant_tokens < 1 || num_assistant_tokens > kMaxDraftTokens)
    return P{"num_assistant_tokens",
             "must be in 1.." + str(kMaxDraftTokens) + ", got " + str(num_assistant_tokens)};
  if (max_matching_ngram_size < 0 || max_matching_ngram_size > kMaxDraftTokens)
    return P{"max_matching_ngram_size",
             "must be in 0.." + str(kMaxDraftTokens) + " (0: 2), got " + str(max_matching_ngram_size)};
  if (cache_implementation != "static" && cache_implementation != "dynamic")
    return P{"cache_implementation",
             "must be \"static\" or \"dynamic\", got \"" + cache_implementation + "\""};
  return std::nullopt;
}

void GenerationConfig::validate() const {
  if (auto p = invalid_field()) fail("generation config: ", p->first, " ", p->second);
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
