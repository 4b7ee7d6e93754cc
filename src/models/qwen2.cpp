// Qwen2ForCausalLM (Qwen2, Qwen2.5): the Llama decoder layer with biases on q/k/v always (none on o_proj or
// the MLP: Qwen2Config has no attention_bias / mlp_bias), tied or untied embeddings, and sliding-window
// attention in the layers Qwen2Config marks (use_sliding_window / max_window_layers / layer_types, decided as
// for Qwen3). head_dim is not a Qwen2Config field, but modeling_qwen2 reads it when config.json has it.
#include <nlohmann/json.hpp>

#include "models/blocks.h"

namespace tessera::models::qwen2 {

namespace {

// Every key Transformers 5.24's configuration_qwen2.py / modeling_qwen2.py reads besides common_config_keys()
// and decoder_config_keys() (config.cpp), and what we do with it.
std::vector<ConfigKey> keys() {
  using enum KeyUse;
  return {
      {"num_key_value_heads", kImplemented, "",
       "absent: 32 (Qwen2Config's default); null: num_attention_heads"},
      {"head_dim", kImplemented, "",
       "absent: hidden_size / num_attention_heads (modeling_qwen2's getattr); null: refused (Transformers "
       "fails)"},
      {"max_position_embeddings", kImplemented, "", "absent: 32768"},
      {"partial_rotary_factor", kImplemented, "",
       "ignored by Qwen2's default rope (as Transformers); refused with a scaled rope (Transformers fails)"},
      {"use_sliding_window", kImplemented, "", "sliding_window counts only when true"},
      {"sliding_window", kImplemented, "", "absent: 4096; null: no window"},
      {"max_window_layers", kImplemented, "", "without layer_types: layers >= this slide (absent: 28)"},
      {"layer_types", kImplemented, "", "full_attention / sliding_attention per layer"},
      {"attention_bias", kNoEffect, "", "not read: Qwen2 always has q/k/v biases and none on o_proj"},
      {"mlp_bias", kNoEffect, "", "not read: Qwen2's MLP has no biases"},
  };
}

// input_layernorm -> self-attention with q/k/v biases (sliding in the layers the config marks) -> residual
// -> post_attention_layernorm -> gated MLP (gate_proj, up_proj, down_proj) -> residual.
int layer(GraphBuilder& b, const StepNodes& in, int x, int l) {
  const DecoderConfig& c = b.config();
  const LayerNames n = layer_names(l);
  int h = b.norm(x, n.module + "input_layernorm", c.hidden_size, n.node + "attn_norm");
  const int attn = self_attention(
      b, in, n, h,
      {.qkv_bias = true, .o_bias = false, .window = c.layer_is_sliding(l) ? c.sliding_window : 0});
  x = b.add(x, attn, n.node + "attn_residual");
  h = b.norm(x, n.module + "post_attention_layernorm", c.hidden_size, n.node + "mlp_norm");
  const int mlp = gated_mlp(b, n, h, {.act = graph_activation(c.hidden_act), .bias = false});
  return b.add(x, mlp, n.node + "mlp_residual");
}

// Qwen2's base_model_tp_plan, plus the vocab-parallel LM head.
const TpPlan kTpPlan = {
    {"layers.*.self_attn.q_proj", "colwise"}, {"layers.*.self_attn.k_proj", "colwise"},
    {"layers.*.self_attn.v_proj", "colwise"}, {"layers.*.self_attn.o_proj", "rowwise"},
    {"layers.*.mlp.gate_proj", "colwise"},    {"layers.*.mlp.up_proj", "colwise"},
    {"layers.*.mlp.down_proj", "rowwise"},    {"lm_head", "colwise_gather_output"},
};

DecoderConfig parse(const nlohmann::json& j, const std::string& origin) {
  static const std::vector<ConfigKey> table = keys();
  const ConfigReader r = checked_config_reader(j, origin, table);
  // Qwen2Attention reads getattr(config, "head_dim", ...): a null there is used as is (and fails).
  if (j.contains("head_dim") && j["head_dim"].is_null())
    r.fail_field("head_dim", "is null, which Qwen2ForCausalLM does not support (Transformers fails on it)");
  DecoderConfig c;
  c.architecture = "Qwen2ForCausalLM";
  ConfigDefaults d;
  d.model_type = "qwen2";
  d.num_kv_heads = 32;
  d.max_position_embeddings = 32768;
  d.rms_norm_eps = 1e-6;
  parse_decoder_config(r, d, c);
  parse_qwen_sliding(r, c);
  c.attention_bias = true;  // on q/k/v (the layer puts none on o_proj)
  c.mlp_bias = false;
  validate(c, origin);
  return c;
}

}  // namespace

Architecture architecture() {
  return causal_lm_architecture({.name = "Qwen2ForCausalLM",
                                 .layer = layer,
                                 .parse = parse,
                                 .config_keys = keys(),
                                 .tp_plan = kTpPlan});
}

}  // namespace tessera::models::qwen2
