// MixtralForCausalLM (Mixtral 8x7B, 8x22B): Mistral's attention (no biases, GQA, sliding_window in every
// layer when set) and a mixture of experts in every layer: the router's softmax in float32 over
// num_local_experts, the top num_experts_per_tok (2) kept and divided by their sum; each expert a SwiGLU MLP
// of intermediate_size. Checkpoints store the experts one tensor each (block_sparse_moe.experts.N.w1 / w3 /
// w2, as the hub's files and save_pretrained write them) or fused (mlp.experts.gate_up_proj / down_proj);
// io presents both as the fused layout.
#include <nlohmann/json.hpp>

#include "models/blocks.h"
#include "models/families.h"

namespace tessera::models::mixtral {

namespace {

std::vector<ConfigKey> keys() {
  using enum KeyUse;
  std::vector<ConfigKey> k = {
      {"num_key_value_heads", kImplemented, "", "absent: 8 (MixtralConfig's default); null: refused"},
      {"head_dim", kImplemented, "", "absent or null: hidden_size / num_attention_heads"},
      {"max_position_embeddings", kImplemented, "", "absent: 131072"},
      {"sliding_window", kImplemented, "", "every layer slides; absent or null: no window"},
      {"router_jitter_noise", kNoEffect, "", "training only (multiplicative noise on the router's input)"},
      {"partial_rotary_factor", kImplemented, "",
       "ignored by the default rope (as Transformers); refused with a scaled rope (Transformers fails)"},
  };
  const std::vector<ConfigKey> moe = moe_config_keys(false);
  k.insert(k.end(), moe.begin(), moe.end());
  return k;
}

int layer(GraphBuilder& b, const StepNodes& in, int x, int l) {
  return pre_norm_layer(b, in, x, l, {}, {}, {.routing = graph::Routing::SoftmaxTopKNorm});
}

void finish(const ConfigReader& r, DecoderConfig& c) {
  if (r.has("sliding_window")) parse_sliding_every_layer(r, c, 0);
  c.attention_bias = false;
  parse_moe_experts(r, c, {.experts = 8, .per_token = 2, .intermediate = 0});
  c.moe_norm_topk = true;
  c.layer_sparse.assign(static_cast<size_t>(c.num_layers), 1);
}

ConfigDefaults defaults() {
  ConfigDefaults d;
  d.model_type = "mixtral";
  d.num_kv_heads = 8;
  d.max_position_embeddings = 131072;
  d.rms_norm_eps = 1e-5;
  d.bos_token_id = 1;
  d.eos_token_ids = {2};
  return d;
}

}  // namespace

Architecture architecture() {
  return causal_lm_architecture(
      {.name = "MixtralForCausalLM",
       .layer = layer,
       .defaults = defaults(),
       .null_refused = {{"num_key_value_heads", "MixtralConfig's field is an integer"}},
       .finish = finish,
       .config_keys = keys(),
       // Mixtral's base_model_tp_plan (attention, the experts), plus the vocab-parallel LM head.
       .tp_plan = causal_lm_tp_plan({attention_tp_plan(), experts_tp_plan()})});
}

}  // namespace tessera::models::mixtral
