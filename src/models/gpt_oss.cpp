// GptOssForCausalLM (gpt-oss-20b, gpt-oss-120b): the pre-norm layer with q/k/v/o biases (attention_bias,
// default true), attention sinks (self_attn.sinks: a learned logit per head in the softmax's denominator),
// sliding (sliding_window, default 128) and full layers as layer_types says (default: even layers slide), the
// YaRN rope (absent: factor 32 over 4096 positions, beta_fast 32, beta_slow 1, no truncation; rope_theta
// 150000), and in every layer a mixture of experts: the router (mlp.router, with a bias) keeps the top
// num_experts_per_tok logits and soft-maxes them; each expert (of intermediate_size, with biases) applies the
// clamped SwiGLU (swiglu_alpha, swiglu_limit). The experts are read in the fused layout
// (io::with_fused_experts transposes and de-interleaves gpt-oss's x @ W tensors at load, and presents the
// hub's MXFP4 blocks and scales as MXFP4 block stacks, kept as stored by the loader).
#include <nlohmann/json.hpp>

#include "models/blocks.h"
#include "models/families.h"

namespace tessera::models::gpt_oss {

namespace {

std::vector<ConfigKey> keys() {
  using enum KeyUse;
  std::vector<ConfigKey> k = {
      {"num_key_value_heads", kImplemented, "",
       "absent: 8 (GptOssConfig's default); null: num_attention_heads"},
      {"head_dim", kImplemented, "", "absent: 64; null: hidden_size / num_attention_heads"},
      {"max_position_embeddings", kImplemented, "", "absent: 131072"},
      {"attention_bias", kImplemented, "", "absent: true; biases on q/k/v and o_proj"},
      {"sliding_window", kImplemented, "", "the sliding layers' window; absent: 128; null: none"},
      {"layer_types", kImplemented, "",
       "sliding_attention / full_attention per layer; absent or null: even layers slide"},
      {"swiglu_alpha", kImplemented, "", "the experts' clamped SwiGLU gain; absent: 1.702"},
      {"swiglu_limit", kImplemented, "", "the experts' clamp; absent: 7.0"},
  };
  const std::vector<ConfigKey> moe = moe_config_keys(false);
  k.insert(k.end(), moe.begin(), moe.end());
  return k;
}

int layer(GraphBuilder& b, const StepNodes& in, int x, int l) {
  const DecoderConfig& c = b.config();
  return pre_norm_layer(b, in, x, l,
                        {.qkv_bias = c.attention_bias, .o_bias = c.attention_bias, .sinks = true}, {},
                        {.routing = graph::Routing::TopKSoftmax,
                         .router = "router",
                         .bias = true,
                         .clamped_swiglu = true,
                         .alpha = static_cast<float>(c.swiglu_alpha),
                         .limit = static_cast<float>(c.swiglu_limit)});
}

bool has_rope_key(const ConfigReader& r, const char* key) {
  if (r.has(key)) return true;
  for (const char* dict : {"rope_parameters", "rope_scaling"})
    if (auto d = r.optional_object(dict); d && d->has(key)) return true;
  return false;
}

void finish(const ConfigReader& r, DecoderConfig& c) {
  // GptOssConfig: no rope settings at all means its YaRN; any rope settings without a theta mean 150000.
  if (!r.has("rope_parameters") && !r.has("rope_scaling") && !r.has("rope_theta")) {
    c.rope = RopeConfig{};
    c.rope.type = "yarn";
    c.rope.factor = 32.0;
    c.rope.beta_fast = 32.0;
    c.rope.beta_slow = 1.0;
    c.rope.truncate = false;
    c.rope.original_max_position_embeddings = 4096;
  }
  if (!has_rope_key(r, "rope_theta")) c.rope.theta = 150000.0;
  // null means the computed value here (GptOssConfig.__post_init__), not the class default.
  if (r.json().contains("head_dim") && r.json()["head_dim"].is_null())
    c.head_dim = c.hidden_size / c.num_heads;
  if (r.json().contains("num_key_value_heads") && r.json()["num_key_value_heads"].is_null())
    c.num_kv_heads = c.num_heads;
  c.attention_bias = r.bool_or("attention_bias", true);
  // Sliding layers: layer_types (absent or null: layer i slides when i is even), over sliding_window.
  const int64_t window =
      r.json().contains("sliding_window") ? r.int_or("sliding_window", 0, 1, INT32_MAX) : 128;
  std::vector<uint8_t> sliding(static_cast<size_t>(c.num_layers));
  if (const auto types = r.optional_string_list("layer_types")) {
    sliding = sliding_from_layer_types(r, *types, c.num_layers);
  } else {
    for (int64_t i = 0; i < c.num_layers; ++i) sliding[static_cast<size_t>(i)] = (i + 1) % 2 != 0 ? 1 : 0;
  }
  set_sliding_layers(c, window, std::move(sliding));
  parse_moe_experts(r, c, {.experts = 128, .per_token = 4, .intermediate = 0});
  c.layer_sparse.assign(static_cast<size_t>(c.num_layers), 1);
  c.swiglu_alpha = r.number_or("swiglu_alpha", 1.702, -1e6, 1e6);
  c.swiglu_limit = r.number_or("swiglu_limit", 7.0, 0.0, 1e30, true);
}

ConfigDefaults defaults() {
  ConfigDefaults d;
  d.model_type = "gpt_oss";
  d.head_dim = 64;
  d.num_kv_heads = 8;
  d.max_position_embeddings = 131072;
  d.rms_norm_eps = 1e-5;
  d.attention_bias = true;
  return d;
}

}  // namespace

Architecture architecture() {
  return causal_lm_architecture(
      {.name = "GptOssForCausalLM",
       .layer = layer,
       .defaults = defaults(),
       .finish = finish,
       .config_keys = keys(),
       // Attention split by heads (the sinks with their heads), the experts as the MoE plan splits them
       // (their gate_up biases with their rows, down's bias added by rank 0), the vocab-parallel LM head.
       .tp_plan = causal_lm_tp_plan({attention_tp_plan(), experts_tp_plan()})});
}

}  // namespace tessera::models::gpt_oss
