// Phi3ForCausalLM (Phi-3 / Phi-3.5 / Phi-4 with the default rope): the Llama decoder layer without biases,
// with one fused self_attn.qkv_proj (q rows, then k, then v) and one fused mlp.gate_up_proj (gate rows
// first), both split into their blocks when loaded (graph::WeightView, also per rank under tensor
// parallelism); rotary embedding on the first head_dim * partial_rotary_factor dims of each head (rotate-half
// pairs within them); sliding-window attention in every layer when sliding_window is set (Phi-3-mini-4k:
// 2047); the longrope scaling of the 128k variants ('su' and 'yarn' read as longrope, as Phi3Config does).
#include <nlohmann/json.hpp>

#include "models/blocks.h"

namespace tessera::models::phi3 {

namespace {

// Every key Transformers 5.24's configuration_phi3.py / modeling_phi3.py reads besides common_config_keys()
// and decoder_config_keys() (config.cpp), and what we do with it.
std::vector<ConfigKey> keys() {
  using enum KeyUse;
  return {
      {"num_key_value_heads", kImplemented, "", "absent or null: num_attention_heads"},
      {"head_dim", kImplemented, "",
       "absent: hidden_size / num_attention_heads (modeling_phi3's getattr); null: refused (Transformers "
       "fails)"},
      {"max_position_embeddings", kImplemented, "", "absent: 4096"},
      {"partial_rotary_factor", kImplemented, "",
       "rotary on the first head_dim * factor dims (top level or in rope_parameters); absent: 1"},
      {"sliding_window", kImplemented, "", "every layer slides; absent or null: no window"},
      {"resid_pdrop", kNoEffect, "", "dropout is off at inference"},
      {"embd_pdrop", kNoEffect, "", "dropout is off at inference"},
      {"attention_bias", kNoEffect, "", "not read: Phi-3 has no biases (hub configs carry false)"},
      {"layer_types", kNoEffect, "", "not read by modeling_phi3 (every layer alike)"},
  };
}

// The pre-norm layer without biases, with the fused qkv_proj and gate_up_proj; sliding when the config sets
// a window.
int layer(GraphBuilder& b, const StepNodes& in, int x, int l) {
  return pre_norm_layer(b, in, x, l, {.fused_qkv = true}, {.fused_gate_up = true});
}

// Phi3Config.convert_rope_params_to_dict / validate_rope: rope_scaling (else rope_parameters) must be of type
// default or longrope ('su' and 'yarn' are read as longrope, by parse_rope); any other type Transformers
// itself refuses.
void check_rope_type(const ConfigReader& r) {
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    const auto d = r.optional_object(key);
    if (!d || d->json().empty()) continue;
    std::string type = "default";
    for (const char* k : {"rope_type", "type"})
      if (auto t = d->optional_string(k)) type = *t;
    if (type == "default" || type == "longrope" || type == "su" || type == "yarn") return;
    r.fail_field(key, "has rope_type " + ConfigReader::show(nlohmann::json(type)) +
                          ", which Phi3ForCausalLM does not support (Phi3Config accepts only default and "
                          "longrope, reading 'su' and 'yarn' as longrope)");
  }
}

void finish(const ConfigReader& r, DecoderConfig& c) {
  parse_sliding_every_layer(r, c, 0);
  c.attention_bias = false;
}

// Phi3Config's defaults.
ConfigDefaults defaults() {
  ConfigDefaults d;
  d.model_type = "phi3";
  d.max_position_embeddings = 4096;
  d.rms_norm_eps = 1e-5;
  d.partial_rotary_factor = 1.0;
  d.bos_token_id = 1;
  d.pad_token_id = 32000;
  d.eos_token_ids = {32000};
  d.longrope_aliases = true;
  d.original_max_position_embeddings = 4096;
  return d;
}

}  // namespace

Architecture architecture() {
  return causal_lm_architecture(
      {.name = "Phi3ForCausalLM",
       .layer = layer,
       .defaults = defaults(),
       // Phi3Attention reads getattr(config, "head_dim", ...): a null there is used as is (and fails).
       .null_refused = {{"head_dim", "Transformers fails on it"}},
       .check = check_rope_type,
       .finish = finish,
       .config_keys = keys(),
       // Phi-3's base_model_tp_plan, plus the vocab-parallel LM head. We run qkv_proj as its q, k and v
       // blocks each split by heads with o_proj row-wise (the same numbers with one all-reduce and no
       // gather).
       .tp_plan = causal_lm_tp_plan({{{"layers.*.self_attn.qkv_proj", "colwise_gather_output"},
                                      {"layers.*.self_attn.o_proj", "rowwise_split_input"}},
                                     fused_gate_up_tp_plan()})});
}

}  // namespace tessera::models::phi3
