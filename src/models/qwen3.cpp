// Qwen3ForCausalLM: the Llama decoder layer plus RMSNorm over each head of q
// and k before RoPE; head_dim is read from the config (Qwen3 sets it apart
// from hidden / heads); tied or untied embeddings; q/k/v/o biases with
// attention_bias; no MLP biases; sliding-window attention in the layers
// Qwen3Config marks (use_sliding_window / max_window_layers / layer_types).
#include <nlohmann/json.hpp>

#include "models/blocks.h"
#include "models/families.h"

namespace tessera::models::qwen3 {

namespace {

// Every key Transformers 5.24's configuration_qwen3.py / modeling_qwen3.py reads besides common_config_keys()
// and decoder_config_keys() (config.cpp), and what we do with it.
std::vector<ConfigKey> keys() {
  using enum KeyUse;
  std::vector<ConfigKey> k = {
      {"num_key_value_heads", kImplemented, "",
       "absent: 32 (Qwen3Config's default); null: num_attention_heads"},
      {"head_dim", kImplemented, "", "absent: 128 (Qwen3Config's default, not hidden / heads)"},
      {"max_position_embeddings", kImplemented, "", "absent: 32768"},
      {"attention_bias", kImplemented, "", "biases on q/k/v and o_proj"},
      {"partial_rotary_factor", kImplemented, "",
       "ignored by Qwen3's default rope (as Transformers); refused with a scaled rope (Transformers fails)"},
      {"mlp_bias", kNoEffect, "", "Qwen3's MLP has no biases; Transformers never reads it"},
  };
  const std::vector<ConfigKey> sliding = qwen_sliding_keys();  // use_sliding_window, ..., layer_types
  k.insert(k.end(), sliding.begin(), sliding.end());
  return k;
}

// The pre-norm layer with q_norm / k_norm and q/k/v/o biases (attention_bias), sliding in the layers the
// config marks; no MLP biases.
int layer(GraphBuilder& b, const StepNodes& in, int x, int l) {
  const DecoderConfig& c = b.config();
  return pre_norm_layer(b, in, x, l,
                        {.qkv_bias = c.attention_bias, .o_bias = c.attention_bias, .qk_norm = true}, {});
}

// Qwen3Config's defaults: Qwen2Config's, and head_dim 128.
ConfigDefaults defaults() {
  ConfigDefaults d = qwen_defaults("qwen3");
  d.head_dim = 128;
  return d;
}

}  // namespace

Architecture architecture() {
  return causal_lm_architecture(
      {.name = "Qwen3ForCausalLM",
       .layer = layer,
       .defaults = defaults(),
       .finish = parse_qwen_sliding,
       .config_keys = keys(),
       // Qwen3's base_model_tp_plan, plus the vocab-parallel LM head.
       .tp_plan = causal_lm_tp_plan({attention_tp_plan(), qk_norm_tp_plan(), gated_mlp_tp_plan()})});
}

}  // namespace tessera::models::qwen3

namespace tessera::models {

TpPlan qk_norm_tp_plan() {
  return {{"layers.*.self_attn.q_norm", "replicated_with_grad_allreduce"},
          {"layers.*.self_attn.k_norm", "replicated_with_grad_allreduce"}};
}

}  // namespace tessera::models
