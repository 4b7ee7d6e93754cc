// SmolLM3ForCausalLM (SmolLM3): Llama's pre-norm layer with NoPE layers (no_rope_layers: q and k of a 0
// layer are not rotated; absent: every no_rope_layer_interval-th layer), biases on q/k/v/o (attention_bias)
// and on the MLP (mlp_bias), tied embeddings by default, sliding-window layers by layer_types (absent: the
// NoPE layers slide when use_sliding_window and sliding_window are set).
#include <limits>
#include <nlohmann/json.hpp>

#include "models/blocks.h"

namespace tessera::models::smollm3 {

namespace {

// Every key Transformers 5.24's configuration_smollm3.py / modeling_smollm3.py reads besides
// common_config_keys() and decoder_config_keys() (config.cpp), and what we do with it.
std::vector<ConfigKey> keys() {
  using enum KeyUse;
  return {
      {"num_key_value_heads", kImplemented, "", "absent: 4; null: num_attention_heads"},
      {"head_dim", kImplemented, "", "absent: hidden_size / num_attention_heads"},
      {"max_position_embeddings", kImplemented, "", "absent: 32768"},
      {"attention_bias", kImplemented, "", "biases on q/k/v and o_proj"},
      {"mlp_bias", kImplemented, "", "biases on gate/up/down"},
      {"no_rope_layers", kImplemented, "",
       "per layer: 1 rotates q and k, 0 does not (NoPE); absent or null: from no_rope_layer_interval"},
      {"no_rope_layer_interval", kImplemented, "",
       "without no_rope_layers: layer i is NoPE when (i + 1) % interval == 0; absent: 4"},
      {"use_sliding_window", kImplemented, "",
       "without layer_types: the NoPE layers slide when it is true and sliding_window is set"},
      {"sliding_window", kImplemented, "", "the window of the layers layer_types marks sliding_attention"},
      {"layer_types", kImplemented, "",
       "full_attention / sliding_attention per layer (the mask Transformers builds follows it)"},
      {"partial_rotary_factor", kImplemented, "",
       "ignored by the default rope (as Transformers); refused with a scaled rope (Transformers fails)"},
  };
}

// The pre-norm layer with biases on q/k/v and o_proj (attention_bias) and on the MLP (mlp_bias); a NoPE
// layer (DecoderConfig::layer_no_rope) skips the rope inside self_attention.
int layer(GraphBuilder& b, const StepNodes& in, int x, int l) {
  const DecoderConfig& c = b.config();
  return pre_norm_layer(b, in, x, l, {.qkv_bias = c.attention_bias, .o_bias = c.attention_bias},
                        {.bias = c.mlp_bias});
}

// SmolLM3Config.__post_init__: no_rope_layers, else [(i + 1) % interval != 0]; layer_types, else
// "sliding_attention" where use_sliding_window and sliding_window are set and the layer is NoPE. The model
// then builds the sliding mask (from sliding_window) for every layer layer_types marks, whatever
// use_sliding_window says, and fails without a window.
void finish(const ConfigReader& r, DecoderConfig& c) {
  c.mlp_bias = r.bool_or("mlp_bias", false);
  const size_t n = static_cast<size_t>(c.num_layers);
  std::vector<uint8_t> rope(n, 1);
  if (const nlohmann::json* list = r.find("no_rope_layers")) {
    if (!list->is_array() || list->size() < n)
      r.fail_field("no_rope_layers", "must be a list of at least num_hidden_layers (" + std::to_string(n) +
                                         ") integers, got " + ConfigReader::show(*list));
    for (size_t i = 0; i < n; ++i) {
      const nlohmann::json& v = (*list)[i];
      if (!v.is_number_integer() && !v.is_boolean())
        r.fail_field("no_rope_layers",
                     "has " + ConfigReader::show(v) + " at index " + std::to_string(i) + ", not 0 or 1");
      rope[i] = v.is_boolean() ? v.get<bool>() : v.get<int64_t>() != 0;
    }
  } else {
    const int64_t interval = r.int_or("no_rope_layer_interval", 4, 1, ConfigReader::kIntMax);
    for (size_t i = 0; i < n; ++i) rope[i] = (static_cast<int64_t>(i) + 1) % interval != 0;
  }
  c.layer_no_rope.assign(n, 0);
  for (size_t i = 0; i < n; ++i) c.layer_no_rope[i] = rope[i] ? 0 : 1;

  const std::optional<int64_t> window =
      r.optional_int("sliding_window", 1, std::numeric_limits<int32_t>::max());
  std::vector<uint8_t> sliding(n, 0);
  if (auto types = r.optional_string_list("layer_types")) {
    sliding = sliding_from_layer_types(r, *types, c.num_layers);
    for (size_t i = 0; i < n; ++i)
      if (sliding[i] && !window)
        r.fail_field("layer_types", "marks layer " + std::to_string(i) +
                                        " 'sliding_attention' but sliding_window is not set (Transformers "
                                        "fails to build its mask)");
  } else if (r.bool_or("use_sliding_window", false) && window) {
    for (size_t i = 0; i < n; ++i) sliding[i] = rope[i] ? 0 : 1;
  }
  set_sliding_layers(c, window.value_or(0), std::move(sliding));
}

// SmolLM3Config's defaults.
ConfigDefaults defaults() {
  ConfigDefaults d;
  d.model_type = "smollm3";
  d.num_kv_heads = 4;
  d.max_position_embeddings = 32768;
  d.rms_norm_eps = 1e-6;
  d.bos_token_id = 128000;
  d.pad_token_id = 128004;
  d.eos_token_ids = {128001};
  d.tie_word_embeddings = true;
  d.rope_theta = 2000000.0;  // SmolLM3Config.default_theta
  return d;
}

}  // namespace

Architecture architecture() {
  return causal_lm_architecture(
      {.name = "SmolLM3ForCausalLM",
       .layer = layer,
       .defaults = defaults(),
       // SmolLM3Attention reads getattr(config, "head_dim", ...): a null there is used as is (and fails).
       .null_refused = {{"head_dim", "Transformers fails on it"}},
       .finish = finish,
       .config_keys = keys(),
       // SmolLM3's base_model_tp_plan, plus the vocab-parallel LM head.
       .tp_plan = causal_lm_tp_plan({attention_tp_plan(), gated_mlp_tp_plan()})});
}

}  // namespace tessera::models::smollm3
