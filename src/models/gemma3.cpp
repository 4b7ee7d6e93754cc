// Gemma3ForCausalLM (Gemma 3, text only: model_type gemma3_text, e.g. gemma-3-1b and the language model of
// the larger ones): Gemma 2's layer (pre- and post-norms, (1 + weight) RMSNorms, scaled embeddings, GeGLU,
// query_pre_attn_scalar) plus per-head q_norm / k_norm before RoPE, sliding layers by layer_types or
// sliding_window_pattern (every pattern-th layer full, the others sliding), and two ropes: the sliding layers
// use their own (rope_parameters.sliding_attention, or rope_local_base_freq), the full layers theirs
// (rope_parameters.full_attention, or rope_theta with rope_scaling). No attention soft-capping (Transformers
// 5.24 never applies attn_logit_softcapping for Gemma 3, so a value is refused); final_logit_softcapping when
// set.
#include <cfloat>
#include <nlohmann/json.hpp>

#include "models/blocks.h"
#include "models/families.h"
#include "tessera/error.h"

namespace tessera::models::gemma3 {

namespace {

// Every key Transformers 5.24's configuration_gemma3.py (Gemma3TextConfig) / modeling_gemma3.py reads
// besides common_config_keys() and decoder_config_keys() (config.cpp), and what we do with it:
// gemma_config_keys() (the keys Gemma 2 reads alike) and Gemma 3's own.
std::vector<ConfigKey> keys() {
  using enum KeyUse;
  std::vector<ConfigKey> k = gemma_config_keys();
  const std::vector<ConfigKey> own = {
      {"max_position_embeddings", kImplemented, "", "absent: 131072"},
      {"final_logit_softcapping", kImplemented, "", "logits x -> tanh(x / cap) * cap; absent or null: none"},
      {"attn_logit_softcapping", kRefused, "null",
       "Transformers 5.24's Gemma3Attention keeps it but never applies it, so what a checkpoint setting it "
       "means is ambiguous"},
      {"layer_types", kImplemented, "",
       "full_attention / sliding_attention per layer; absent or null: from sliding_window_pattern"},
      {"sliding_window_pattern", kImplemented, "",
       "without layer_types: layer i slides unless (i + 1) % pattern == 0; absent: 6"},
      {"_sliding_window_pattern", kNoEffect, "", "written by save_pretrained; not read back"},
      {"rope_local_base_freq", kImplemented, "",
       "the sliding layers' rope theta when rope_parameters.sliding_attention has none; absent: 10000"},
  };
  k.insert(k.end(), own.begin(), own.end());
  return k;
}

// The Gemma pre- and post-norm layer with q_norm / k_norm.
int layer(GraphBuilder& b, const StepNodes& in, int x, int l) {
  const DecoderConfig& c = b.config();
  return pre_post_norm_layer(b, in, x, l,
                             {.qkv_bias = c.attention_bias, .o_bias = c.attention_bias, .qk_norm = true});
}

// Gemma3TextConfig.convert_rope_params_to_dict: rope_parameters is nested by layer type (full_attention,
// sliding_attention; a missing or null entry is the default rope); a legacy rope_scaling updates the
// full_attention entry, rope_theta (default 1e6) fills its theta and rope_local_base_freq (default 1e4) the
// sliding one's. Each is then read as one rope by parse_rope (the same checks, both layouts agreeing or
// refused), from the keys that apply to it. Keys of rope_parameters beside the two entries are never read by
// Transformers and are refused as ambiguous.
void parse_rope_by_layer_type(const ConfigReader& r, DecoderConfig& c, const std::vector<uint8_t>& sliding) {
  using nlohmann::json;
  const json& j = r.json();
  json full = json::object(), local = json::object();
  rope_parameters_by_layer_type(r, "Gemma 3", full, local);
  const auto local_theta = r.optional_number("rope_local_base_freq", 0.0, FLT_MAX, true);
  auto theta_in = [](const json& d) {
    return d.is_object() && d.contains("rope_theta") && !d["rope_theta"].is_null();
  };

  json g = json::object();
  if (!full.empty()) g["rope_parameters"] = full;
  for (const char* k :
       {"rope_scaling", "rope_theta", "partial_rotary_factor", "original_max_position_embeddings"})
    if (j.contains(k)) g[k] = j[k];
  if (!theta_in(full) && !theta_in(j) && !(j.contains("rope_scaling") && theta_in(j["rope_scaling"])))
    g["rope_theta"] = 1000000.0;
  c.rope =
      parse_rope(ConfigReader(g, r.origin() + " (the full_attention layers' rope: rope_parameters here is "
                                              "rope_parameters.full_attention)"),
                 std::nullopt, c.max_position_embeddings);

  json l = json::object();
  if (!local.empty()) l["rope_parameters"] = local;
  if (j.contains("partial_rotary_factor")) l["partial_rotary_factor"] = j["partial_rotary_factor"];
  if (local_theta && theta_in(local) && local["rope_theta"] != json(*local_theta))
    r.fail_field("rope_local_base_freq", "(" + ConfigReader::show(j["rope_local_base_freq"]) +
                                             ") and rope_parameters.sliding_attention.rope_theta (" +
                                             ConfigReader::show(local["rope_theta"]) +
                                             ") disagree; Transformers would silently use the latter, so the "
                                             "checkpoint is ambiguous");
  if (!theta_in(local)) l["rope_theta"] = local_theta.value_or(10000.0);
  c.local_rope =
      parse_rope(ConfigReader(l, r.origin() + " (the sliding_attention layers' rope: rope_parameters here is "
                                              "rope_parameters.sliding_attention)"),
                 std::nullopt, c.max_position_embeddings);
  bool any = false;
  for (uint8_t s : sliding) any = any || s;
  c.layer_local_rope = any ? sliding : std::vector<uint8_t>{};
}

void finish(const ConfigReader& r, DecoderConfig& c) {
  parse_gemma_common(r, c, std::nullopt, std::nullopt);
  const int64_t pattern = r.int_or("sliding_window_pattern", 6, 1, ConfigReader::kIntMax);
  const std::vector<uint8_t> sliding = parse_gemma_sliding(r, c, pattern);
  parse_rope_by_layer_type(r, c, sliding);
}

// Gemma3TextConfig's defaults: Gemma's, with its two ropes.
ConfigDefaults defaults() {
  ConfigDefaults d = gemma_defaults("gemma3_text", 131072);
  d.own_rope = true;
  return d;
}

}  // namespace

Architecture architecture() {
  return causal_lm_architecture(
      {.name = "Gemma3ForCausalLM",
       .layer = layer,
       .defaults = defaults(),
       .null_refused = {{"num_key_value_heads", "Gemma3TextConfig's field is an integer"},
                        {"head_dim", "Gemma3Attention reads it as given"}},
       .finish = finish,
       .config_keys = keys(),
       // Gemma 3's base_model_tp_plan, plus the vocab-parallel LM head.
       .tp_plan = causal_lm_tp_plan({attention_tp_plan(), qk_norm_tp_plan(), gated_mlp_tp_plan()})});
}

}  // namespace tessera::models::gemma3
