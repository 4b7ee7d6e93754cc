// LlamaForCausalLM: Llama 2/3 (rope "llama3" or "linear"), SmolLM2, GQA,
// optional attention/MLP biases (attention_bias, mlp_bias) and tied
// embeddings. No sliding window: LlamaConfig and modeling_llama never read
// sliding_window / layer_types, so (as in Transformers) they change nothing.
#include <nlohmann/json.hpp>

#include "models/blocks.h"

namespace tessera::models::llama {

namespace {

// Every key Transformers 5.24's configuration_llama.py / modeling_llama.py reads besides common_config_keys()
// and decoder_config_keys() (config.cpp), and what we do with it.
std::vector<ConfigKey> keys() {
  using enum KeyUse;
  return {
      {"num_key_value_heads", kImplemented, "", "absent or null: num_attention_heads"},
      {"head_dim", kImplemented, "", "absent or null: hidden_size / num_attention_heads"},
      {"max_position_embeddings", kImplemented, "", "absent: 2048"},
      {"attention_bias", kImplemented, "", "biases on q/k/v and o_proj"},
      {"mlp_bias", kImplemented, "", "biases on gate/up/down"},
      {"partial_rotary_factor", kImplemented, "",
       "ignored by Llama's default rope (as Transformers); refused with a scaled rope (Transformers fails)"},
      {"pretraining_tp", kNoEffect, "",
       "Transformers 5 never reads it (4.x's tp > 1 split the same matmuls into slices: same result)"},
      {"sliding_window", kNoEffect, "", "not read by LlamaConfig / modeling_llama"},
      {"use_sliding_window", kNoEffect, "", "not read by LlamaConfig / modeling_llama"},
      {"layer_types", kNoEffect, "", "not read by modeling_llama (every layer is full attention)"},
  };
}

// The pre-norm layer with attention biases on q/k/v and o_proj (attention_bias) and MLP biases (mlp_bias).
int layer(GraphBuilder& b, const StepNodes& in, int x, int l) {
  const DecoderConfig& c = b.config();
  return pre_norm_layer(b, in, x, l, {.qkv_bias = c.attention_bias, .o_bias = c.attention_bias},
                        {.bias = c.mlp_bias});
}

void finish(const ConfigReader& r, DecoderConfig& c) {
  if (c.hidden_size % c.num_heads != 0)  // LlamaConfig.validate_architecture raises on this
    r.fail_field("hidden_size", "(" + std::to_string(c.hidden_size) +
                                    ") must be a multiple of num_attention_heads (" +
                                    std::to_string(c.num_heads) + ")");
  c.mlp_bias = r.bool_or("mlp_bias", false);
}

// LlamaConfig's defaults.
ConfigDefaults defaults() {
  ConfigDefaults d;
  d.model_type = "llama";
  d.max_position_embeddings = 2048;
  d.rms_norm_eps = 1e-6;
  d.bos_token_id = 1;
  d.eos_token_ids = {2};
  return d;
}

}  // namespace

Architecture architecture() {
  return causal_lm_architecture({.name = "LlamaForCausalLM",
                                 .layer = layer,
                                 .defaults = defaults(),
                                 .finish = finish,
                                 .config_keys = keys(),
                                 // Llama's base_model_tp_plan, plus the vocab-parallel LM head.
                                 .tp_plan = causal_lm_tp_plan({attention_tp_plan(), gated_mlp_tp_plan()})});
}

}  // namespace tessera::models::llama
