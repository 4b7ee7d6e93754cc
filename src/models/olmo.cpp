// Olmo2ForCausalLM and Olmo3ForCausalLM (AI2's OLMo 2 and OLMo 3): a post-norm layer (the attention and
// the MLP outputs are normed, then added to the residual; nothing is normed before them), q_norm / k_norm
// RMSNorms over the whole q and k projections (not per head) before RoPE, biases on q/k/v/o with
// attention_bias, untied by default. OLMo 3 adds sliding-window layers (layer_types; absent: every fourth
// layer full) and a rope per layer type (full_attention / sliding_attention, e.g. YaRN on the full layers
// only). Because the norms span every head, attention is never split by heads under tensor parallelism: the
// plan Transformers gives (q/k/v colwise_gather_output, o_proj rowwise_split_input) runs as replicated
// attention, the same numbers without the gather.
#include <limits>
#include <nlohmann/json.hpp>

#include "models/blocks.h"

namespace tessera::models::olmo {

namespace {

constexpr const char* kUnsplit = "its q_norm / k_norm normalise the whole q and k projections (every head)";
constexpr double kOlmo3Theta = 500000.0;  // Olmo3Config.default_theta

// The keys Transformers 5.24's configuration_olmo2.py / modeling_olmo2.py read besides common_config_keys()
// and decoder_config_keys() (config.cpp); OLMo 3 reads these too.
std::vector<ConfigKey> olmo2_keys() {
  using enum KeyUse;
  return {
      {"num_key_value_heads", kImplemented, "", "absent or null: num_attention_heads"},
      {"head_dim", kImplemented, "", "absent: hidden_size / num_attention_heads"},
      {"max_position_embeddings", kImplemented, "", "absent: 2048"},
      {"attention_bias", kImplemented, "", "biases on q/k/v and o_proj"},
      {"partial_rotary_factor", kImplemented, "",
       "ignored by the default rope (as Transformers); refused with a scaled rope (Transformers fails)"},
  };
}

std::vector<ConfigKey> olmo3_keys() {
  using enum KeyUse;
  std::vector<ConfigKey> k = olmo2_keys();
  const std::vector<ConfigKey> own = {
      {"sliding_window", kImplemented, "", "the sliding layers' window; absent: 4096; null: refused"},
      {"layer_types", kImplemented, "",
       "full_attention / sliding_attention per layer; absent or null: layer i slides unless (i + 1) % 4 == "
       "0"},
  };
  k.insert(k.end(), own.begin(), own.end());
  return k;
}

int layer(GraphBuilder& b, const StepNodes& in, int x, int l) {
  const DecoderConfig& c = b.config();
  return post_norm_layer(
      b, in, x, l, {.qkv_bias = c.attention_bias, .o_bias = c.attention_bias, .qk_norm_whole = true}, {});
}

// Olmo3Config.convert_rope_params_to_dict: rope_parameters nested by layer type (a missing or null entry is
// the default rope); a legacy rope_scaling updates the full_attention entry; the full entry's theta
// defaults to the top-level rope_theta, else 500000, and the sliding entry's to 500000 (Transformers pops
// rope_theta while filling the full entry, so the sliding layers never see it). Keys beside the two entries
// are never read by Transformers and are refused as ambiguous.
void parse_rope_by_layer_type(const ConfigReader& r, DecoderConfig& c, const std::vector<uint8_t>& sliding) {
  using nlohmann::json;
  json full = json::object(), local = json::object();
  rope_parameters_by_layer_type(r, "OLMo 3", full, local);
  if (const auto s = r.optional_object("rope_scaling"))
    for (const auto& [k, v] : s->json().items()) full[k] = v;
  auto theta_in = [](const json& d) { return d.contains("rope_theta") && !d["rope_theta"].is_null(); };
  if (!theta_in(full)) full["rope_theta"] = r.number_or("rope_theta", kOlmo3Theta, 0.0, 3.4e38, true);
  if (!theta_in(local)) local["rope_theta"] = kOlmo3Theta;
  auto read = [&](const json& d, const char* type) {
    const json g = {{"rope_parameters", d}};
    return parse_rope(
        ConfigReader(g, r.origin() + " (the " + type + " layers' rope: rope_parameters here is " +
                            "rope_parameters." + type + ")"),
        std::nullopt, c.max_position_embeddings);
  };
  c.rope = read(full, "full_attention");
  c.local_rope = read(local, "sliding_attention");
  bool any = false;
  for (uint8_t s : sliding) any = any || s;
  c.layer_local_rope = any ? sliding : std::vector<uint8_t>{};
}

// Olmo3Config: sliding_window (default 4096; Transformers builds the sliding mask for every OLMo 3 model and
// fails without a window), layer_types (absent: every fourth layer full, the others sliding), the ropes.
void finish_olmo3(const ConfigReader& r, DecoderConfig& c) {
  if (r.json().contains("sliding_window") && r.json()["sliding_window"].is_null())
    r.fail_field("sliding_window", "is null; Transformers' Olmo3Model fails without a window");
  const int64_t window = r.int_or("sliding_window", 4096, 1, std::numeric_limits<int32_t>::max());
  std::vector<uint8_t> sliding(static_cast<size_t>(c.num_layers), 0);
  if (auto types = r.optional_string_list("layer_types"))
    sliding = sliding_from_layer_types(r, *types, c.num_layers);
  else
    for (int64_t i = 0; i < c.num_layers; ++i) sliding[static_cast<size_t>(i)] = (i + 1) % 4 != 0;
  set_sliding_layers(c, window, sliding);
  parse_rope_by_layer_type(r, c, sliding);
}

// Olmo2Config's defaults (Olmo3Config's are the same but for the rope).
ConfigDefaults defaults(const char* model_type) {
  ConfigDefaults d;
  d.model_type = model_type;
  d.max_position_embeddings = 2048;
  d.rms_norm_eps = 1e-5;
  d.pad_token_id = 1;
  d.eos_token_ids = {50279};
  return d;
}

TpPlan tp_plan() {
  // OLMo's base_model_tp_plan (q/k/v gathered and o_proj split on its input: attention computed whole on
  // every rank), plus the vocab-parallel LM head.
  return causal_lm_tp_plan({{{"layers.*.self_attn.q_proj", "colwise_gather_output"},
                             {"layers.*.self_attn.k_proj", "colwise_gather_output"},
                             {"layers.*.self_attn.v_proj", "colwise_gather_output"},
                             {"layers.*.self_attn.o_proj", "rowwise_split_input"}},
                            gated_mlp_tp_plan()});
}

}  // namespace

Architecture olmo2_architecture() {
  return causal_lm_architecture(
      {.name = "Olmo2ForCausalLM",
       .layer = layer,
       .defaults = defaults("olmo2"),
       // Olmo2Attention reads getattr(config, "head_dim", ...): a null there is used as is (and fails).
       .null_refused = {{"head_dim", "Transformers fails on it"}},
       .config_keys = olmo2_keys(),
       .tp_plan = tp_plan(),
       .unsplit_attention = kUnsplit});
}

Architecture olmo3_architecture() {
  ConfigDefaults d = defaults("olmo3");
  d.own_rope = true;
  return causal_lm_architecture({.name = "Olmo3ForCausalLM",
                                 .layer = layer,
                                 .defaults = d,
                                 .null_refused = {{"head_dim", "Transformers fails on it"}},
                                 .finish = finish_olmo3,
                                 .config_keys = olmo3_keys(),
                                 .tp_plan = tp_plan(),
                                 .unsplit_attention = kUnsplit});
}

}  // namespace tessera::models::olmo
