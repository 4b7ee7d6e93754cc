// Qwen2ForCausalLM (Qwen2, Qwen2.5): the Llama decoder layer with biases on q/k/v always (none on o_proj or
// the MLP: Qwen2Config has no attention_bias / mlp_bias), tied or untied embeddings, and sliding-window
// attention in the layers Qwen2Config marks (use_sliding_window / max_window_layers / layer_types, decided as
// for Qwen3). head_dim is not a Qwen2Config field, but modeling_qwen2 reads it when config.json has it.
#include <nlohmann/json.hpp>

#include "models/blocks.h"
#include "models/families.h"

namespace tessera::models::qwen2 {

namespace {

// Every key Transformers 5.24's configuration_qwen2.py / modeling_qwen2.py reads besides common_config_keys()
// and decoder_config_keys() (config.cpp), and what we do with it.
std::vector<ConfigKey> keys() {
  using enum KeyUse;
  std::vector<ConfigKey> k = {
      {"num_key_value_heads", kImplemented, "",
       "absent: 32 (Qwen2Config's default); null: num_attention_heads"},
      {"head_dim", kImplemented, "",
       "absent: hidden_size / num_attention_heads (modeling_qwen2's getattr); null: refused (Transformers "
       "fails)"},
      {"max_position_embeddings", kImplemented, "", "absent: 32768"},
      {"partial_rotary_factor", kImplemented, "",
       "ignored by Qwen2's default rope (as Transformers); refused with a scaled rope (Transformers fails)"},
      {"attention_bias", kNoEffect, "", "not read: Qwen2 always has q/k/v biases and none on o_proj"},
      {"mlp_bias", kNoEffect, "", "not read: Qwen2's MLP has no biases"},
  };
  const std::vector<ConfigKey> sliding = qwen_sliding_keys();  // use_sliding_window, ..., layer_types
  k.insert(k.end(), sliding.begin(), sliding.end());
  return k;
}

// The pre-norm layer with q/k/v biases (none on o_proj or the MLP), sliding in the layers the config marks.
int layer(GraphBuilder& b, const StepNodes& in, int x, int l) {
  return pre_norm_layer(b, in, x, l, {.qkv_bias = true, .o_bias = false}, {});
}

void finish(const ConfigReader& r, DecoderConfig& c) {
  parse_qwen_sliding(r, c);
  c.attention_bias = true;  // on q/k/v (the layer puts none on o_proj)
}

}  // namespace

Architecture architecture() {
  return causal_lm_architecture(
      {.name = "Qwen2ForCausalLM",
       .layer = layer,
       .defaults = qwen_defaults("qwen2"),
       // Qwen2Attention reads getattr(config, "head_dim", ...): a null there is used as is (and fails).
       .null_refused = {{"head_dim", "Transformers fails on it"}},
       .finish = finish,
       .config_keys = keys(),
       // Qwen2's base_model_tp_plan, plus the vocab-parallel LM head.
       .tp_plan = causal_lm_tp_plan({attention_tp_plan(), gated_mlp_tp_plan()})});
}

}  // namespace tessera::models::qwen2

namespace tessera::models {

ConfigDefaults qwen_defaults(const char* model_type) {
  ConfigDefaults d;
  d.model_type = model_type;
  d.num_kv_heads = 32;
  d.max_position_embeddings = 32768;
  d.rms_norm_eps = 1e-6;
  return d;
}

}  // namespace tessera::models
