// Qwen3MoeForCausalLM (Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder-30B-A3B, ...): Qwen3's attention (q_norm /
// k_norm, head_dim from the config, attention_bias) and, in the layers Qwen3MoeConfig marks sparse, a
// mixture of experts in place of the MLP: the router's softmax in float32 over num_experts, the top
// num_experts_per_tok kept and, with norm_topk_prob, divided by their sum; each expert a SwiGLU MLP of
// moe_intermediate_size. A layer is sparse unless mlp_only_layers lists it or (layer + 1) is not a multiple
// of decoder_sparse_step; the others keep the dense MLP of intermediate_size. Every layer slides when
// use_sliding_window is set (over sliding_window, absent: 4096).
#include <nlohmann/json.hpp>

#include "models/blocks.h"
#include "models/families.h"

namespace tessera::models::qwen3_moe {

namespace {

std::vector<ConfigKey> keys() {
  using enum KeyUse;
  std::vector<ConfigKey> k = {
      {"num_key_value_heads", kImplemented, "", "absent: 4 (Qwen3MoeConfig's default); null: refused"},
      {"head_dim", kImplemented, "",
       "absent: hidden_size / num_attention_heads (modeling_qwen3_moe's getattr); null: refused"},
      {"max_position_embeddings", kImplemented, "", "absent: 32768"},
      {"attention_bias", kImplemented, "", "biases on q/k/v and o_proj"},
      {"use_sliding_window", kImplemented, "", "true: every layer slides over sliding_window"},
      {"sliding_window", kImplemented, "", "read only with use_sliding_window; absent: 4096"},
      {"partial_rotary_factor", kImplemented, "",
       "ignored by the default rope (as Transformers); refused with a scaled rope (Transformers fails)"},
      {"mlp_bias", kNoEffect, "", "not read: Qwen3-MoE's MLPs have no biases"},
  };
  const std::vector<ConfigKey> moe = moe_config_keys(true);
  k.insert(k.end(), moe.begin(), moe.end());
  k.push_back(
      {"decoder_sparse_step", kImplemented, "", "absent: 1; layer l is sparse when (l + 1) % step == 0"});
  k.push_back({"mlp_only_layers", kImplemented, "", "absent or null: none; these layers keep the dense MLP"});
  k.push_back(
      {"norm_topk_prob", kImplemented, "", "absent: false; true: the kept weights divided by their sum"});
  return k;
}

int layer(GraphBuilder& b, const StepNodes& in, int x, int l) {
  const DecoderConfig& c = b.config();
  return pre_norm_layer(
      b, in, x, l, {.qkv_bias = c.attention_bias, .o_bias = c.attention_bias, .qk_norm = true}, {},
      {.routing = c.moe_norm_topk ? graph::Routing::SoftmaxTopKNorm : graph::Routing::SoftmaxTopK});
}

void finish(const ConfigReader& r, DecoderConfig& c) {
  if (r.bool_or("use_sliding_window", false)) parse_sliding_every_layer(r, c, 4096);
  parse_moe_experts(r, c, {.experts = 128, .per_token = 8, .intermediate = 768});
  c.moe_norm_topk = r.bool_or("norm_topk_prob", false);
  parse_sparse_layers(r, c);
}

ConfigDefaults defaults() {
  ConfigDefaults d = qwen_defaults("qwen3_moe");
  d.num_kv_heads = 4;
  return d;
}

}  // namespace

Architecture architecture() {
  return causal_lm_architecture(
      {.name = "Qwen3MoeForCausalLM",
       .layer = layer,
       .defaults = defaults(),
       .null_refused = {{"head_dim", "Transformers fails on it"},
                        {"num_key_value_heads", "Qwen3MoeConfig's field is an integer"}},
       .finish = finish,
       .config_keys = keys(),
       // Qwen3-MoE's base_model_tp_plan (attention, the dense layers' MLP, the experts), plus the
       // vocab-parallel LM head.
       .tp_plan = causal_lm_tp_plan(
           {attention_tp_plan(), qk_norm_tp_plan(), gated_mlp_tp_plan(), experts_tp_plan()})});
}

}  // namespace tessera::models::qwen3_moe

namespace tessera::models {

std::vector<ConfigKey> moe_config_keys(bool own_intermediate) {
  using enum KeyUse;
  std::vector<ConfigKey> k = {
      {"num_local_experts", kImplemented, "", "the number of experts (also read as num_experts)"},
      {"num_experts", kImplemented, "", "the number of experts (also read as num_local_experts)"},
      {"num_experts_per_tok", kImplemented, "", "experts per token (top-k)"},
      {"output_router_logits", kNoEffect, "", "training output (the auxiliary loss)"},
      {"router_aux_loss_coef", kNoEffect, "", "training loss weight"},
  };
  if (own_intermediate)
    k.push_back({"moe_intermediate_size", kImplemented, "", "each expert's intermediate size"});
  return k;
}

void parse_moe_experts(const ConfigReader& r, DecoderConfig& c, const MoeDefaults& d) {
  constexpr int64_t kMaxExperts = 1 << 16;
  const auto local = r.optional_int("num_local_experts", 1, kMaxExperts);
  const auto named = r.optional_int("num_experts", 1, kMaxExperts);
  if (local && named && *local != *named)
    r.fail_field("num_experts", "is " + std::to_string(*named) + " but num_local_experts is " +
                                    std::to_string(*local) + " (the same setting under two names)");
  c.num_experts = local ? *local : named ? *named : d.experts;
  c.num_experts_per_tok = r.int_or("num_experts_per_tok", d.per_token, 1, kMaxExperts);
  if (c.num_experts_per_tok > c.num_experts)
    r.fail_field("num_experts_per_tok", "is " + std::to_string(c.num_experts_per_tok) + ", more than the " +
                                            std::to_string(c.num_experts) + " experts");
  c.moe_intermediate_size = d.intermediate > 0 ? r.int_or("moe_intermediate_size", d.intermediate, 1, 1 << 20)
                                               : c.intermediate_size;
}

void parse_sparse_layers(const ConfigReader& r, DecoderConfig& c) {
  const int64_t step = r.int_or("decoder_sparse_step", 1, 1);
  std::vector<uint8_t> sparse(static_cast<size_t>(c.num_layers), 0);
  for (int64_t l = 0; l < c.num_layers; ++l) sparse[static_cast<size_t>(l)] = (l + 1) % step == 0 ? 1 : 0;
  if (r.has("mlp_only_layers") && !r.find("mlp_only_layers")->is_null()) {
    const nlohmann::json& list = *r.find("mlp_only_layers");
    if (!list.is_array())
      r.fail_field("mlp_only_layers", "must be a list of layer indices, got " + ConfigReader::show(list));
    for (const nlohmann::json& v : list) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= c.num_layers)
        r.fail_field("mlp_only_layers", "has " + ConfigReader::show(v) +
                                            ", not a layer index below num_hidden_layers " +
                                            std::to_string(c.num_layers));
      sparse[static_cast<size_t>(v.get<int64_t>())] = 0;
    }
  }
  c.layer_sparse = std::move(sparse);
}

}  // namespace tessera::models
