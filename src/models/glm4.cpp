// Glm4ForCausalLM (GLM-4-0414): a Llama-like decoder layer with an RMSNorm on each sublayer's output before
// its residual add (post_self_attn_layernorm, post_mlp_layernorm), a fused mlp.gate_up_proj (gate rows
// first), q/k/v biases but none on o_proj, and rotary embedding on the first half of each head
// (partial_rotary_factor, default 0.5) in the interleaved-pair convention. The interleaving is undone when
// the q/k rows are loaded (graph::WeightView, RopePairs::kInterleaved), so the shared Rope op applies. No
// sliding window: Glm4Config and modeling_glm4 never read sliding_window / layer_types.
#include <nlohmann/json.hpp>

#include "models/blocks.h"

namespace tessera::models::glm4 {

namespace {

// Every key Transformers 5.24's configuration_glm4.py / modeling_glm4.py reads besides common_config_keys()
// and decoder_config_keys() (config.cpp), and what we do with it.
std::vector<ConfigKey> keys() {
  using enum KeyUse;
  return {
      {"num_key_value_heads", kImplemented, "", "absent: 2 (Glm4Config's default)"},
      {"head_dim", kImplemented, "", "absent: 128 (Glm4Config's default)"},
      {"max_position_embeddings", kImplemented, "", "absent: 131072"},
      {"attention_bias", kImplemented, "", "biases on q/k/v (never o_proj); absent: true"},
      {"partial_rotary_factor", kImplemented, "", "rotary on the first head_dim * factor dims; absent: 0.5"},
      {"mlp_bias", kNoEffect, "", "GLM-4's MLP has no biases; Transformers never reads it"},
      {"sliding_window", kNoEffect, "", "not read by Glm4Config / modeling_glm4"},
      {"layer_types", kNoEffect, "", "not read by modeling_glm4 (every layer is full attention)"},
  };
}

// input_layernorm -> self-attention (interleaved rotary pairs, no o_proj bias) -> post_self_attn_layernorm ->
// residual -> post_attention_layernorm -> gated MLP (fused gate_up_proj, down_proj) -> post_mlp_layernorm ->
// residual.
int layer(GraphBuilder& b, const StepNodes& in, int x, int l) {
  const DecoderConfig& c = b.config();
  const LayerNames n = layer_names(l);
  const int64_t H = c.hidden_size;
  int h = b.norm(x, n.module + "input_layernorm", H, n.node + "attn_norm");
  int attn = self_attention(b, in, n, h,
                            {.qkv_bias = c.attention_bias, .o_bias = false, .rope = RopePairs::kInterleaved});
  attn = b.norm(attn, n.module + "post_self_attn_layernorm", H, n.node + "attn_post_norm");
  x = b.add(x, attn, n.node + "attn_residual");
  h = b.norm(x, n.module + "post_attention_layernorm", H, n.node + "mlp_norm");
  int mlp = gated_mlp(b, n, h, {.fused_gate_up = true});
  mlp = b.norm(mlp, n.module + "post_mlp_layernorm", H, n.node + "mlp_post_norm");
  return b.add(x, mlp, n.node + "mlp_residual");
}

std::vector<int32_t> default_eos() { return {151329, 151336, 151338}; }  // Glm4Config's eos_token_id

void finish(const ConfigReader& r, DecoderConfig& c) {
  // Glm4Config replaces an eos_token_id of null (not only an absent one) with its default list.
  const nlohmann::json& j = r.json();
  if (c.eos_token_ids.empty() && j.contains("eos_token_id") && j["eos_token_id"].is_null())
    c.eos_token_ids = default_eos();
}

// Glm4Config's defaults.
ConfigDefaults defaults() {
  ConfigDefaults d;
  d.model_type = "glm4";
  d.head_dim = 128;
  d.num_kv_heads = 2;
  d.max_position_embeddings = 131072;
  d.rms_norm_eps = 1.5625e-7;
  d.attention_bias = true;
  d.partial_rotary_factor = 0.5;
  d.pad_token_id = 151329;
  d.eos_token_ids = default_eos();
  return d;
}

}  // namespace

Architecture architecture() {
  return causal_lm_architecture(
      {.name = "Glm4ForCausalLM",
       .layer = layer,
       .defaults = defaults(),
       .finish = finish,
       .config_keys = keys(),
       // GLM-4's base_model_tp_plan, plus the vocab-parallel LM head.
       .tp_plan = causal_lm_tp_plan({attention_tp_plan(), fused_gate_up_tp_plan()})});
}

}  // namespace tessera::models::glm4
