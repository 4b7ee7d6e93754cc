// MistralForCausalLM (Mistral 7B v0.1-v0.3, Mistral-Nemo, ...): the Llama decoder layer without biases, GQA
// (8 key-value heads by default), head_dim from the config (Mistral-Nemo sets it apart from hidden / heads),
// and sliding-window attention in every layer when sliding_window is set (absent: 4096, as MistralConfig).
// A config.json with a layer_types key (even null) is loaded by Transformers' AutoConfig as Ministral
// ("treating as ministral for alternating attention"): the layers layer_types marks slide, the others attend
// to the whole prefix. The static KV cache stays full-length: the Attention op masks keys beyond the window.
#include <nlohmann/json.hpp>

#include "models/blocks.h"

namespace tessera::models::mistral {

namespace {

// Every key Transformers 5.24's configuration_mistral.py / modeling_mistral.py reads besides
// common_config_keys() and decoder_config_keys() (config.cpp), and what we do with it.
std::vector<ConfigKey> keys() {
  using enum KeyUse;
  return {
      {"num_key_value_heads", kImplemented, "",
       "absent: 8 (MistralConfig's default); null: refused (not optional in MistralConfig: Transformers "
       "fails)"},
      {"head_dim", kImplemented, "", "absent or null: hidden_size / num_attention_heads"},
      {"max_position_embeddings", kImplemented, "", "absent: 131072"},
      {"sliding_window", kImplemented, "", "every layer slides; absent: 4096; null: no window"},
      {"partial_rotary_factor", kImplemented, "",
       "ignored by Mistral's default rope (as Transformers); refused with a scaled rope (Transformers "
       "fails)"},
      {"layer_types", kImplemented, "",
       "present (even null): loaded as Ministral, full_attention / sliding_attention per layer (null: all "
       "slide); head_dim and sliding_window must then be set (Transformers fails otherwise)"},
      {"attention_bias", kNoEffect, "", "not read: Mistral has no attention biases"},
      {"mlp_bias", kNoEffect, "", "not read: Mistral's MLP has no biases"},
      {"use_sliding_window", kNoEffect, "", "not read by MistralConfig / modeling_mistral"},
      {"max_window_layers", kNoEffect, "", "not read by MistralConfig / modeling_mistral"},
  };
}

// The pre-norm layer without biases, sliding in the layers the config marks.
int layer(GraphBuilder& b, const StepNodes& in, int x, int l) { return pre_norm_layer(b, in, x, l, {}, {}); }

// Which layers slide. Without a layer_types key, MistralConfig: every layer when sliding_window is set. With
// one, MinistralConfig / modeling_ministral: layer_types as PreTrainedConfig.validate_layer_type checks it
// (known names after the legacy "attention" -> "full_attention", one per layer), each full_attention or
// sliding_attention (the only masks Ministral builds), null meaning all sliding; Ministral builds the sliding
// mask in any case (so the window must be set) and reads head_dim without a fallback (so it must be given).
void parse_sliding(const ConfigReader& r, DecoderConfig& c) {
  const nlohmann::json& j = r.json();
  parse_sliding_every_layer(r, c, 4096);
  if (j.contains("layer_types")) {
    const char* why = " when layer_types is (Transformers then loads the config as Ministral, ";
    if (!j.contains("head_dim") || j["head_dim"].is_null())
      r.fail_field("head_dim", std::string("must be set") + why + "whose attention reads it as given)");
    if (c.sliding_window == 0)
      r.fail_field("sliding_window",
                   std::string("must be set") + why + "which always builds the sliding mask)");
    if (const auto types = r.optional_string_list("layer_types")) {
      static const char* const kKnown[] = {
          "full_attention", "sliding_attention", "chunked_attention", "window_attention", "indexed_attention",
          "compressed_sparse_attention", "heavily_compressed_attention", "minimax_m3_sparse", "conv", "moe",
          "hybrid", "hybrid_sliding", "reference_sliding_attention", "linear_attention",
          // legacy names Transformers maps to the ones above
          "attention", "mamba", "deepseek_sparse_attention", "qwen_sparse_attention"};
      for (size_t i = 0; i < types->size(); ++i) {
        const std::string& t = (*types)[i];
        bool known = false;
        for (const char* k : kKnown) known = known || t == k;
        const std::string at = ConfigReader::show(nlohmann::json(t)) + " at index " + std::to_string(i);
        if (!known) r.fail_field("layer_types", "has " + at + ", which is no layer type Transformers knows");
        if (t != "full_attention" && t != "attention" && t != "sliding_attention")
          r.fail_field("layer_types", "has " + at +
                                          ", which MistralForCausalLM (loaded as Ministral) does not support "
                                          "(full_attention, sliding_attention)");
      }
      if (static_cast<int64_t>(types->size()) != c.num_layers)
        r.fail_field("layer_types", "has " + std::to_string(types->size()) +
                                        " entries, num_hidden_layers is " + std::to_string(c.num_layers));
      std::vector<uint8_t> sliding(types->size());
      for (size_t i = 0; i < types->size(); ++i) sliding[i] = (*types)[i] == "sliding_attention" ? 1 : 0;
      set_sliding_layers(c, c.sliding_window, std::move(sliding));
    }
  }
}

void finish(const ConfigReader& r, DecoderConfig& c) {
  parse_sliding(r, c);
  c.attention_bias = false;
}

// MistralConfig's defaults.
ConfigDefaults defaults() {
  ConfigDefaults d;
  d.model_type = "mistral";
  d.num_kv_heads = 8;
  d.max_position_embeddings = 131072;
  d.rms_norm_eps = 1e-6;
  d.bos_token_id = 1;
  d.eos_token_ids = {2};
  return d;
}

}  // namespace

Architecture architecture() {
  return causal_lm_architecture(
      {.name = "MistralForCausalLM",
       .layer = layer,
       .defaults = defaults(),
       .null_refused = {{"num_key_value_heads", "MistralConfig's field is an integer"}},
       .finish = finish,
       .config_keys = keys(),
       // Mistral's base_model_tp_plan, plus the vocab-parallel LM head.
       .tp_plan = causal_lm_tp_plan({attention_tp_plan(), gated_mlp_tp_plan()})});
}

}  // namespace tessera::models::mistral
