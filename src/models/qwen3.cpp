// Qwen3ForCausalLM: the Llama decoder layer plus RMSNorm over each head of q
// and k before RoPE; head_dim is read from the config (Qwen3 sets it apart
// from hidden / heads); tied or untied embeddings; q/k/v/o biases with
// attention_bias; no MLP biases; sliding-window attention in the layers
// Qwen3Config marks (use_sliding_window / max_window_layers / layer_types).
#include <nlohmann/json.hpp>

#include "models/blocks.h"

namespace tessera::models::qwen3 {

namespace {

// Every key Transformers 5.24's configuration_qwen3.py / modeling_qwen3.py reads besides common_config_keys()
// and decoder_config_keys() (config.cpp), and what we do with it.
std::vector<ConfigKey> keys() {
  using enum KeyUse;
  return {
      {"num_key_value_heads", kImplemented, "",
       "absent: 32 (Qwen3Config's default); null: num_attention_heads"},
      {"head_dim", kImplemented, "", "absent: 128 (Qwen3Config's default, not hidden / heads)"},
      {"max_position_embeddings", kImplemented, "", "absent: 32768"},
      {"attention_bias", kImplemented, "", "biases on q/k/v and o_proj"},
      {"partial_rotary_factor", kImplemented, "",
       "ignored by Qwen3's default rope (as Transformers); refused with a scaled rope (Transformers fails)"},
      {"use_sliding_window", kImplemented, "", "sliding_window counts only when true"},
      {"sliding_window", kImplemented, "", "absent: 4096; null: no window"},
      {"max_window_layers", kImplemented, "", "without layer_types: layers >= this slide"},
      {"layer_types", kImplemented, "", "full_attention / sliding_attention per layer"},
      {"mlp_bias", kNoEffect, "", "Qwen3's MLP has no biases; Transformers never reads it"},
  };
}

// input_layernorm -> self-attention with q_norm / k_norm (sliding in the layers the config marks) -> residual
// -> post_attention_layernorm -> gated MLP (gate_proj, up_proj, down_proj) -> residual.
int layer(GraphBuilder& b, const StepNodes& in, int x, int l) {
  const DecoderConfig& c = b.config();
  const LayerNames n = layer_names(l);
  int h = b.norm(x, n.module + "input_layernorm", c.hidden_size, n.node + "attn_norm");
  const int attn = self_attention(b, in, n, h,
                                  {.qkv_bias = c.attention_bias,
                                   .o_bias = c.attention_bias,
                                   .qk_norm = true,
                                   .window = c.layer_is_sliding(l) ? c.sliding_window : 0});
  x = b.add(x, attn, n.node + "attn_residual");
  h = b.norm(x, n.module + "post_attention_layernorm", c.hidden_size, n.node + "mlp_norm");
  const int mlp = gated_mlp(b, n, h, {.act = graph_activation(c.hidden_act), .bias = c.mlp_bias});
  return b.add(x, mlp, n.node + "mlp_residual");
}

// Qwen3's base_model_tp_plan, plus the vocab-parallel LM head.
const TpPlan kTpPlan = {
    {"layers.*.self_attn.q_proj", "colwise"},
    {"layers.*.self_attn.k_proj", "colwise"},
    {"layers.*.self_attn.v_proj", "colwise"},
    {"layers.*.self_attn.o_proj", "rowwise"},
    {"layers.*.self_attn.q_norm", "replicated_with_grad_allreduce"},
    {"layers.*.self_attn.k_norm", "replicated_with_grad_allreduce"},
    {"layers.*.mlp.gate_proj", "colwise"},
    {"layers.*.mlp.up_proj", "colwise"},
    {"layers.*.mlp.down_proj", "rowwise"},
    {"lm_head", "colwise_gather_output"},
};

DecoderConfig parse(const nlohmann::json& j, const std::string& origin) {
  static const std::vector<ConfigKey> table = keys();
  const ConfigReader r = checked_config_reader(j, origin, table);
  DecoderConfig c;
  c.architecture = "Qwen3ForCausalLM";
  ConfigDefaults d;
  d.model_type = "qwen3";
  d.head_dim = 128;
  d.num_kv_heads = 32;
  d.max_position_embeddings = 32768;
  d.rms_norm_eps = 1e-6;
  parse_decoder_config(r, d, c);
  parse_qwen_sliding(r, c);
  c.mlp_bias = false;
  validate(c, origin);
  return c;
}

}  // namespace

Architecture architecture() {
  return causal_lm_architecture({.name = "Qwen3ForCausalLM",
                                 .layer = layer,
                                 .parse = parse,
                                 .config_keys = keys(),
                                 .tp_plan = kTpPlan});
}

}  // namespace tessera::models::qwen3
