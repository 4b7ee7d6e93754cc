// Phi3ForCausalLM (Phi-3 / Phi-3.5 / Phi-4 with the default rope): the Llama decoder layer without biases,
// with one fused self_attn.qkv_proj (q rows, then k, then v) and one fused mlp.gate_up_proj (gate rows
// first), both split into their blocks when loaded (graph::WeightView, also per rank under tensor
// parallelism); rotary embedding on the first head_dim * partial_rotary_factor dims of each head (rotate-half
// pairs within them); sliding-window attention in every layer when sliding_window is set (Phi-3-mini-4k:
// 2047). The longrope / su scaling of the 128k variants is refused by name.
#include <nlohmann/json.hpp>

#include "models/blocks.h"

namespace tessera::models::phi3 {

namespace {

constexpr int64_t kInt32Max = 2147483647;

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

// input_layernorm -> self-attention (fused qkv_proj; sliding when the config sets a window) -> residual ->
// post_attention_layernorm -> gated MLP (fused gate_up_proj, down_proj) -> residual.
int layer(GraphBuilder& b, const StepNodes& in, int x, int l) {
  const DecoderConfig& c = b.config();
  const LayerNames n = layer_names(l);
  int h = b.norm(x, n.module + "input_layernorm", c.hidden_size, n.node + "attn_norm");
  const int attn = self_attention(
      b, in, n, h, {.window = c.layer_is_sliding(l) ? c.sliding_window : 0, .fused_qkv = true});
  x = b.add(x, attn, n.node + "attn_residual");
  h = b.norm(x, n.module + "post_attention_layernorm", c.hidden_size, n.node + "mlp_norm");
  const int mlp = gated_mlp(b, n, h, {.act = graph_activation(c.hidden_act), .fused_gate_up = true});
  return b.add(x, mlp, n.node + "mlp_residual");
}

// Phi-3's base_model_tp_plan, plus the vocab-parallel LM head. We run qkv_proj as its q, k and v blocks each
// split by heads with o_proj row-wise, and gate_up_proj as its halves each split column-wise with down_proj
// row-wise: the same numbers with one all-reduce each and no gather.
const TpPlan kTpPlan = {
    {"layers.*.self_attn.qkv_proj", "colwise_gather_output"},
    {"layers.*.self_attn.o_proj", "rowwise_split_input"},
    {"layers.*.mlp.gate_up_proj", "colwise_gather_output"},
    {"layers.*.mlp.down_proj", "rowwise_split_input"},
    {"lm_head", "colwise_gather_output"},
};

// Phi3Config.convert_rope_params_to_dict / validate_rope: rope_scaling (else rope_parameters) must be of type
// default or longrope ("su" and "yarn" are read as longrope). longrope is refused by name; any other type
// Transformers itself refuses.
void check_rope_type(const ConfigReader& r) {
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    const auto d = r.optional_object(key);
    if (!d || d->json().empty()) continue;
    std::string type = "default";
    for (const char* k : {"rope_type", "type"})
      if (auto t = d->optional_string(k)) type = *t;
    if (type == "default") return;
    const std::string shown = ConfigReader::show(nlohmann::json(type));
    if (type == "longrope" || type == "su" || type == "yarn")
      r.fail_field(key, "has rope_type " + shown +
                            ", which is not supported (Phi-3's longrope scaling of the 128k variants, as "
                            "Transformers reads 'su' and 'yarn' for Phi-3, is not implemented; supported: "
                            "default)");
    r.fail_field(key, "has rope_type " + shown +
                          ", which Phi3ForCausalLM does not support (Phi3Config accepts only default and "
                          "longrope; supported here: default)");
  }
}

DecoderConfig parse(const nlohmann::json& j, const std::string& origin) {
  static const std::vector<ConfigKey> table = keys();
  const ConfigReader r = checked_config_reader(j, origin, table);
  // Phi3Attention reads getattr(config, "head_dim", ...): a null there is used as is (and fails).
  if (j.contains("head_dim") && j["head_dim"].is_null())
    r.fail_field("head_dim", "is null, which Phi3ForCausalLM does not support (Transformers fails on it)");
  check_rope_type(r);
  DecoderConfig c;
  c.architecture = "Phi3ForCausalLM";
  ConfigDefaults d;
  d.model_type = "phi3";
  d.max_position_embeddings = 4096;
  d.rms_norm_eps = 1e-5;
  d.partial_rotary_factor = 1.0;
  d.bos_token_id = 1;  // Phi3Config's defaults
  d.eos_token_ids = {32000};
  d.pad_token_id = 32000;
  parse_decoder_config(r, d, c);
  // A window of 0 leaves a query no key (Transformers fails on it); refused.
  c.sliding_window = r.int_or("sliding_window", 0, 1, kInt32Max);
  if (c.sliding_window > 0) c.layer_sliding.assign(static_cast<size_t>(c.num_layers), 1);
  c.attention_bias = false;
  c.mlp_bias = false;
  validate(c, origin);
  return c;
}

}  // namespace

Architecture architecture() {
  return causal_lm_architecture(
      {.name = "Phi3ForCausalLM", .layer = layer, .parse = parse, .config_keys = keys(), .tp_plan = kTpPlan});
}

}  // namespace tessera::models::phi3
