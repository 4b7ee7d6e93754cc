// Gemma2ForCausalLM (Gemma 2): token embeddings times sqrt(hidden_size) (rounded to the model dtype), a norm
// before and after each sublayer (input_layernorm / post_attention_layernorm around attention,
// pre_feedforward_layernorm / post_feedforward_layernorm around the MLP), every RMSNorm scaling by
// (1 + weight), a GeGLU MLP (hidden_activation, gelu_pytorch_tanh), attention scaled by
// query_pre_attn_scalar^-0.5 with its scores soft-capped (tanh(s / cap) * cap, attn_logit_softcapping),
// sliding-window attention in the layers layer_types marks (by default every other one, layer 0 first), tied
// embeddings by default and soft-capped logits (final_logit_softcapping).
#include <limits>
#include <nlohmann/json.hpp>

#include "models/blocks.h"
#include "models/families.h"

namespace tessera::models::gemma2 {

namespace {

// Every key Transformers 5.24's configuration_gemma2.py / modeling_gemma2.py reads besides
// common_config_keys() and decoder_config_keys() (config.cpp), and what we do with it: gemma_config_keys()
// (the keys Gemma 3 reads alike) and Gemma 2's own.
std::vector<ConfigKey> keys() {
  using enum KeyUse;
  std::vector<ConfigKey> k = gemma_config_keys();
  const std::vector<ConfigKey> own = {
      {"max_position_embeddings", kImplemented, "", "absent: 8192"},
      {"attn_logit_softcapping", kImplemented, "",
       "attention scores s -> tanh(s / cap) * cap before the mask; absent: 50; null: none"},
      {"final_logit_softcapping", kImplemented, "",
       "logits x -> tanh(x / cap) * cap; absent: 30; null: none"},
      {"layer_types", kImplemented, "",
       "full_attention / sliding_attention per layer; absent or null: sliding in even layers (0, 2, ...)"},
  };
  k.insert(k.end(), own.begin(), own.end());
  return k;
}

// The pre- and post-norm layer, q/k/v/o biases when attention_bias.
int layer(GraphBuilder& b, const StepNodes& in, int x, int l) {
  const DecoderConfig& c = b.config();
  return pre_post_norm_layer(b, in, x, l, {.qkv_bias = c.attention_bias, .o_bias = c.attention_bias});
}

}  // namespace

}  // namespace tessera::models::gemma2

namespace tessera::models {

std::vector<ConfigKey> gemma_config_keys() {
  using enum KeyUse;
  return {
      {"num_key_value_heads", kImplemented, "",
       "absent: 4 (Gemma2Config's and Gemma3TextConfig's default); null: refused"},
      {"head_dim", kImplemented, "", "absent: 256 (both classes' default); null: refused"},
      {"hidden_activation", kImplemented, "",
       "the MLP's gate activation (absent: gelu_pytorch_tanh); hidden_act is not read by Gemma, so a "
       "hidden_act naming another function is refused as ambiguous"},
      {"query_pre_attn_scalar", kImplemented, "", "attention scale query_pre_attn_scalar^-0.5; absent: 256"},
      {"sliding_window", kImplemented, "", "the window of the sliding layers; absent: 4096"},
      {"attention_bias", kImplemented, "", "biases on q/k/v and o_proj; absent: false"},
      {"use_bidirectional_attention", kImplemented, "",
       "null or false: causal attention (the only mode here); true (bidirectional, as EmbeddingGemma) is "
       "refused by name"},
      {"partial_rotary_factor", kImplemented, "",
       "ignored by the default rope (as Transformers); refused with a scaled rope"},
      {"mlp_bias", kNoEffect, "", "not read: Gemma's MLP has no biases"},
      {"cache_implementation", kNoEffect, "", "a generation setting (hub configs say \"hybrid\")"},
  };
}

ConfigDefaults gemma_defaults(const char* model_type, int64_t max_position_embeddings) {
  ConfigDefaults d;
  d.model_type = model_type;
  d.head_dim = 256;
  d.num_kv_heads = 4;
  d.max_position_embeddings = max_position_embeddings;
  d.rms_norm_eps = 1e-6;
  d.bos_token_id = 2;
  d.pad_token_id = 0;
  d.eos_token_ids = {1};
  d.tie_word_embeddings = true;
  d.activation_key = "hidden_activation";
  d.activation = "gelu_pytorch_tanh";
  return d;
}

void parse_gemma_common(const ConfigReader& r, DecoderConfig& c, std::optional<double> attn_softcap_absent,
                        std::optional<double> final_softcap_absent) {
  const nlohmann::json& j = r.json();
  c.scale_embeddings = true;
  c.norm_plus_one = true;
  // Both read as config.<key>: a null scalar would fail in Transformers (None ** -0.5).
  if (j.contains("query_pre_attn_scalar") && j["query_pre_attn_scalar"].is_null())
    r.fail_field("query_pre_attn_scalar", "is null, which " + c.architecture + " does not support");
  c.query_pre_attn_scalar = r.number_or("query_pre_attn_scalar", 256, 0.0, ConfigReader::kInf, true);
  // Absent: the class default; null: no soft-capping; 0 would divide by zero in Transformers.
  auto cap = [&](const char* key, std::optional<double> absent) {
    if (!j.contains(key)) return absent.value_or(0.0);
    return r.optional_number(key, 0.0, ConfigReader::kInf, true).value_or(0.0);
  };
  c.attn_logit_softcapping = cap("attn_logit_softcapping", attn_softcap_absent);
  c.final_logit_softcapping = cap("final_logit_softcapping", final_softcap_absent);
  // Gemma's modeling reads hidden_activation only; a hidden_act beside it that names another function leaves
  // the checkpoint's intent ambiguous (Gemma 1 checkpoints were the case: hidden_act gelu, run as tanh GELU).
  if (r.has("hidden_act")) {
    const Activation other = parse_activation(r, "hidden_act");
    if (other != c.hidden_act)
      r.fail_field(
          "hidden_act",
          "is " + ConfigReader::show(j["hidden_act"]) + " but " + c.architecture +
              " uses hidden_activation (" +
              ConfigReader::show(nlohmann::json(r.string_or("hidden_activation", "gelu_pytorch_tanh"))) +
              "); Transformers ignores hidden_act, so the checkpoint is ambiguous");
  }
  if (const auto bidi = r.optional_bool("use_bidirectional_attention"); bidi && *bidi)
    r.fail_field(
        "use_bidirectional_attention",
        "is true, which is not supported (bidirectional attention, for embedding models; only causal "
        "attention is)");
}

// Gemma 2 / Gemma 3 sliding layers: layer_types (absent or null: `pattern` - a layer i slides unless
// (i + 1) % pattern == 0), sliding_window (absent: 4096; the sliding layers need one).
std::vector<uint8_t> parse_gemma_sliding(const ConfigReader& r, DecoderConfig& c, int64_t pattern) {
  const nlohmann::json& j = r.json();
  std::vector<uint8_t> sliding(static_cast<size_t>(c.num_layers));
  if (const auto types = r.optional_string_list("layer_types")) {
    sliding = sliding_from_layer_types(r, *types, c.num_layers);
  } else {
    for (int64_t i = 0; i < c.num_layers; ++i) sliding[static_cast<size_t>(i)] = (i + 1) % pattern != 0;
  }
  bool any = false;
  for (uint8_t s : sliding) any = any || s;
  const int64_t window = j.contains("sliding_window")
                             ? r.int_or("sliding_window", 0, 1, std::numeric_limits<int32_t>::max())
                             : 4096;
  if (any && window == 0)
    r.fail_field("sliding_window", "is null, but layer_types has sliding layers (Transformers fails on it)");
  set_sliding_layers(c, window, sliding);
  return sliding;
}

}  // namespace tessera::models

namespace tessera::models::gemma2 {

namespace {

void finish(const ConfigReader& r, DecoderConfig& c) {
  parse_gemma_common(r, c, 50.0, 30.0);
  parse_gemma_sliding(r, c, 2);
}

}  // namespace

Architecture architecture() {
  return causal_lm_architecture(
      {.name = "Gemma2ForCausalLM",
       .layer = layer,
       .defaults = gemma_defaults("gemma2", 8192),  // Gemma2Config's
       .null_refused = {{"num_key_value_heads", "Gemma2Config's field is an integer"},
                        {"head_dim", "Gemma2Attention reads it as given"}},
       .finish = finish,
       .config_keys = keys(),
       // Gemma 2's base_model_tp_plan, plus the vocab-parallel LM head.
       .tp_plan = causal_lm_tp_plan({attention_tp_plan(), gated_mlp_tp_plan()})});
}

}  // namespace tessera::models::gemma2
