// Gemma4ForCausalLM (Gemma 4, text: model_type gemma4_text; the language model of the hub's
// Gemma4ForConditionalGeneration files, io/text_model.cpp). Gemma 3's pre- and post-normed layer with:
//   - every RMSNorm scaling by its plain weight (not 1 + weight); attention scale 1 (q_norm / k_norm carry
//     it); values RMS-normalised without a weight (v_norm);
//   - per-layer-type attention geometry: the full-attention layers' heads of global_head_dim and
//     num_global_key_value_heads (config.json's per_layer_config, as Transformers 5.24 saves it, or the
//     global_* keys of the released files), each layer type its own rope (the full layers' usually
//     "proportional": a quarter of the rotary pairs turning, the rest still);
//   - attention_k_eq_v: the full layers' values are their key projection (no v_proj);
//   - num_kv_shared_layers: the last layers compute no keys or values and attend over those of the last
//     earlier layer of their type (the cache holds only the others); use_double_wide_mlp doubles their MLP;
//   - per-layer inputs (hidden_size_per_layer_input P > 0): a second embedding table [vocab, layers * P] plus
//     a projection of the token embeddings, combined once (norm, sum, 1/sqrt 2), and in every layer after the
//     MLP a gated residual branch reading that layer's P columns;
//   - enable_moe_block: experts beside the dense MLP in every layer (router: unweighted RMSNorm, times
//     router.scale and hidden^-0.5, softmax top-k renormalised, times router.per_expert_scale), each branch
//     post-normed, summed;
//   - layer_scalar: each layer's output times a stored scalar; final_logit_softcapping.
// Tensor parallelism: Transformers' plan (attention by heads where the heads divide, the MLP and the experts
// split); the per-layer-input projections and routers replicated.
#include <cmath>
#include <nlohmann/json.hpp>

#include "models/blocks.h"
#include "models/families.h"
#include "tessera/error.h"

namespace tessera::models::gemma4 {

namespace {

using nlohmann::json;

// Every key Transformers 5.24's configuration_gemma4.py (Gemma4TextConfig) / modeling_gemma4.py reads besides
// common_config_keys() and decoder_config_keys() (config.cpp), and what we do with it.
std::vector<ConfigKey> keys() {
  using enum KeyUse;
  return {
      {"num_key_value_heads", kImplemented, "", "the sliding layers' kv heads; absent: 4"},
      {"head_dim", kImplemented, "", "the sliding layers' head size; absent: 256"},
      {"hidden_activation", kImplemented, "", "the MLP's and the experts' gate activation"},
      {"max_position_embeddings", kImplemented, "", "absent: 131072"},
      {"attention_bias", kImplemented, "", "biases on q/k/v and o_proj; absent: false"},
      {"sliding_window", kImplemented, "", "the sliding layers' window; absent: 512"},
      {"layer_types", kImplemented, "",
       "full_attention / sliding_attention per layer (absent: every 6th full); the last layer is full "
       "attention whatever it says, as Transformers forces it"},
      {"final_logit_softcapping", kImplemented, "", "logits x -> tanh(x / cap) * cap; absent or null: none"},
      {"use_bidirectional_attention", kImplemented, "",
       "null or \"vision\" (text tokens attend causally): causal; \"all\" is refused by name"},
      {"per_layer_config", kImplemented, "",
       "per-layer head_dim / num_key_value_heads (one value per layer type); other overrides are refused"},
      {"global_head_dim", kImplemented, "",
       "without per_layer_config: the full layers' head_dim; absent: 512"},
      {"num_global_key_value_heads", kImplemented, "",
       "without per_layer_config and with attention_k_eq_v: the full layers' kv heads"},
      {"attention_k_eq_v", kImplemented, "", "the full layers' values are their keys' projection"},
      {"num_kv_shared_layers", kImplemented, "",
       "the last layers reuse the keys and values of the last earlier layer of their type; absent: 0"},
      {"use_double_wide_mlp", kImplemented, "", "those layers' MLP of 2 x intermediate_size"},
      {"hidden_size_per_layer_input", kImplemented, "", "per-layer input width (0 or null: none); absent: 256"},
      {"vocab_size_per_layer_input", kImplemented, "",
       "rows of the per-layer embedding table (at least vocab_size); absent: 262144"},
      {"enable_moe_block", kImplemented, "", "experts beside the dense MLP in every layer"},
      {"num_experts", kImplemented, "", "with enable_moe_block"},
      {"top_k_experts", kImplemented, "", "experts per token, with enable_moe_block"},
      {"moe_intermediate_size", kImplemented, "", "each expert's intermediate size, with enable_moe_block"},
      {"rope_theta", kRefused, "null",
       "Gemma 4 reads its ropes from rope_parameters.<layer type> only, so a top-level value is ambiguous"},
      {"rope_scaling", kRefused, "null", "Gemma 4 reads rope_parameters.<layer type> only"},
      {"partial_rotary_factor", kRefused, "null", "Gemma 4 reads it inside rope_parameters.<layer type>"},
      {"query_pre_attn_scalar", kRefused, "null", "Gemma 4's attention scale is 1; the key is not read"},
      {"attn_logit_softcapping", kRefused, "null", "Gemma 4 applies no attention soft-capping"},
      {"mlp_bias", kNoEffect, "", "not read: Gemma's MLP has no biases"},
      {"cache_implementation", kNoEffect, "", "a generation setting"},
  };
}

// ---- the graph ----

// Self-attention of layer l (its own keys and values, or those of the layer it shares them with).
int attention(GraphBuilder& b, const StepNodes& in, const LayerNames& n, int h) {
  const DecoderConfig& c = b.config();
  const std::string m = n.module + "self_attn.";
  const int l = n.layer;
  const int64_t H = c.hidden_size, hd = c.head_dim_of(l), q_dim = c.num_heads * hd;
  const int64_t kv_dim = c.kv_heads_of(l) * hd;
  const bool sliding = c.layer_is_sliding(l), bias = c.attention_bias;
  const int table = c.layer_uses_local_rope(l) ? 1 : 0;
  int q = b.linear(h, {m + "q_proj", Role::kAttnQ, l, q_dim, H, bias}, n.node + "q");
  q = b.norm(q, m + "q_norm", hd, n.node + "q_norm");
  q = b.rope(q, in.positions, c.local_heads(), n.node + "q_rope", table);
  int kc, vc;
  if (const int src = static_cast<int>(c.kv_source(l)); src != l) {
    kc = b.updated_cache(src, 0);
    vc = b.updated_cache(src, 1);
  } else {
    int k = b.linear(h, {m + "k_proj", Role::kAttnK, l, kv_dim, H, bias}, n.node + "k");
    // attention_k_eq_v: the full layers' values are the key projection (before k_norm and rope).
    int v = c.k_eq_v && !sliding ? k : b.linear(h, {m + "v_proj", Role::kAttnV, l, kv_dim, H, bias}, n.node + "v");
    k = b.norm(k, m + "k_norm", hd, n.node + "k_norm");
    k = b.rope(k, in.positions, c.local_kv_heads_of(l), n.node + "k_rope", table);
    v = b.rms_norm(v, -1, hd, n.node + "v_norm");
    kc = b.cache_update(b.cache_state(l, 0), k, in.slots, n.node + "k_cache_update");
    vc = b.cache_update(b.cache_state(l, 1), v, in.slots, n.node + "v_cache_update");
  }
  const int attn = b.attention(q, kc, vc, in.slots, in.kv_begin, sliding ? c.sliding_window : 0, n.node + "attn");
  return b.linear(attn, {m + "o_proj", Role::kAttnO, l, H, q_dim, bias}, n.node + "attn_out");
}

// The experts beside the dense MLP, on the layer's input x (before pre_feedforward_layernorm).
int experts(GraphBuilder& b, const LayerNames& n, int x) {
  const DecoderConfig& c = b.config();
  const int64_t H = c.hidden_size, E = c.num_experts;
  const std::string r = n.module + "router.";
  int h = b.rms_norm(x, -1, H, n.node + "router_norm");
  h = b.scale(h, b.weight(r + "scale", {H}), static_cast<float>(std::pow(static_cast<double>(H), -0.5)),
              n.node + "router_scale");
  // The router's matrix is never quantised at load (its logits choose the experts); replicated.
  const int logits = b.matmul(h, b.weight(r + "proj.weight", {E, H}, {}, true), -1, n.node + "router");
  int route = b.moe_route(logits, graph::Routing::SoftmaxTopKNorm, c.num_experts_per_tok, n.node + "route");
  route = b.scale(route, b.weight(r + "per_expert_scale", {E}), 1.0f, n.node + "route_scale");
  const int in = b.norm(x, n.module + "pre_feedforward_layernorm_2", H, n.node + "experts_norm");
  return stacked_experts(b, n, in, route, n.module + "experts.", {});
}

int layer(GraphBuilder& b, const StepNodes& in, int x, int l) {
  const DecoderConfig& c = b.config();
  const LayerNames n = layer_names(l);
  const int64_t H = c.hidden_size;
  int h = b.norm(x, n.module + "input_layernorm", H, n.node + "attn_norm");
  h = b.norm(attention(b, in, n, h), n.module + "post_attention_layernorm", H, n.node + "attn_post_norm");
  x = b.add(x, h, n.node + "attn_residual");
  h = b.norm(x, n.module + "pre_feedforward_layernorm", H, n.node + "mlp_norm");
  const bool wide = c.double_wide_shared_mlp && c.kv_source(l) != l;
  h = gated_mlp(b, n, h, {.intermediate = wide ? 2 * c.intermediate_size : c.intermediate_size});
  if (c.moe_beside_mlp) {
    h = b.norm(h, n.module + "post_feedforward_layernorm_1", H, n.node + "mlp_post_norm_1");
    const int e = b.norm(experts(b, n, x), n.module + "post_feedforward_layernorm_2", H,
                         n.node + "experts_post_norm");
    h = b.add(h, e, n.node + "mlp_and_experts");
  }
  h = b.norm(h, n.module + "post_feedforward_layernorm", H, n.node + "mlp_post_norm");
  x = b.add(x, h, n.node + "mlp_residual");
  if (const int64_t P = c.per_layer_input_size; P > 0) {
    // x + norm(per_layer_projection(act(per_layer_input_gate(x)) * this layer's per-layer input)).
    const int mine = b.slice(in.per_layer_inputs, l * P, P, n.node + "per_layer_input");
    int g = b.matmul(x, b.weight(n.module + "per_layer_input_gate.weight", {P, H}), -1, n.node + "ple_gate");
    g = b.gated_act(g, mine, graph_activation(c.hidden_act), n.node + "ple_act");
    g = b.matmul(g, b.weight(n.module + "per_layer_projection.weight", {H, P}), -1, n.node + "ple_proj");
    g = b.norm(g, n.module + "post_per_layer_input_norm", H, n.node + "ple_norm");
    x = b.add(x, g, n.node + "ple_residual");
  }
  return b.scale(x, b.weight(n.module + "layer_scalar", {1}), 1.0f, n.node + "layer_scalar");
}

// The token embeddings, and with per-layer inputs every layer's [rows, layers * P] into in.per_layer_inputs:
// (norm(per_layer_model_projection(e) * hidden^-0.5) per layer + embed_tokens_per_layer(ids) * sqrt(P)) *
// 2^-0.5, as Transformers' project_per_layer_inputs.
int embed(GraphBuilder& b, StepNodes& in) {
  const DecoderConfig& c = b.config();
  const int e = token_embedding(b, in);
  const int64_t P = c.per_layer_input_size, LP = c.num_layers * P, H = c.hidden_size;
  if (P == 0) return e;
  const int table = b.weight("model.embed_tokens_per_layer.weight", {c.per_layer_vocab, LP});
  const int tokens = b.embedding(table, in.ids, "per_layer_embed", embedding_scale(static_cast<double>(P),
                                                                                    b.key().dtype));
  int proj = b.matmul(e, b.weight("model.per_layer_model_projection.weight", {LP, H}), -1, "per_layer_proj");
  proj = b.scale(proj, -1, static_cast<float>(std::pow(static_cast<double>(H), -0.5)), "per_layer_proj_scale");
  proj = b.norm(proj, "model.per_layer_projection_norm", P, "per_layer_proj_norm");
  const int sum = b.add(proj, tokens, "per_layer_sum");
  in.per_layer_inputs = b.scale(sum, -1, static_cast<float>(std::pow(2.0, -0.5)), "per_layer_inputs");
  return e;
}

// ---- the config ----

// Gemma4TextConfig's per-layer geometry: per_layer_config {"<layer>": {"head_dim": .., "num_key_value_heads":
// ..}} (Transformers 5.24's layout) or, without it, global_head_dim (absent: 512) on every full layer and,
// with attention_k_eq_v, num_global_key_value_heads (the released files' layout). Each layer type must have
// one geometry (Transformers builds one rope per type from its first layer and refuses a mismatch).
void parse_geometry(const ConfigReader& r, DecoderConfig& c, const std::vector<uint8_t>& sliding) {
  const size_t L = static_cast<size_t>(c.num_layers);
  c.layer_head_dim.assign(L, c.head_dim);
  c.layer_kv_heads.assign(L, c.num_kv_heads);
  const json& j = r.json();
  constexpr int64_t kMaxDim = 4096, kMaxHeads = 4096;
  if (const json* p = r.find("per_layer_config")) {
    if (!p->is_object()) r.fail_field("per_layer_config", "must be an object, got " + ConfigReader::show(*p));
    for (const char* k : {"global_head_dim", "num_global_key_value_heads"})
      if (r.has(k))
        r.fail_field(k, "is set beside per_layer_config; Transformers then ignores it, so the checkpoint is "
                        "ambiguous");
    for (const auto& [key, v] : p->items()) {
      size_t used = 0;
      int64_t idx = -1;
      try {
        idx = std::stoll(key, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != key.size() || idx < 0 || idx >= c.num_layers)
        r.fail_field("per_layer_config", "has key '" + key.substr(0, 40) + "', which is not a layer index in [0, " +
                                             std::to_string(c.num_layers) + ")");
      if (!v.is_object()) r.fail_field("per_layer_config", "[" + key + "] must be an object");
      const ConfigReader o(v, r.origin() + ": per_layer_config[" + key + "]");
      for (const auto& [k, x] : v.items())
        if (k != "head_dim" && k != "num_key_value_heads")
          o.fail_field(k.c_str(), "is overridden per layer, which is not supported (only head_dim and "
                                  "num_key_value_heads are)");
      const size_t i = static_cast<size_t>(idx);
      c.layer_head_dim[i] = o.int_or("head_dim", c.head_dim, 1, kMaxDim);
      c.layer_kv_heads[i] = o.int_or("num_key_value_heads", c.num_kv_heads, 1, kMaxHeads);
    }
  } else {
    const int64_t global_hd = j.contains("global_head_dim") ? r.int_or("global_head_dim", 512, 1, kMaxDim) : 512;
    const auto global_kv = r.optional_int("num_global_key_value_heads", 1, kMaxHeads);
    for (size_t i = 0; i < L; ++i) {
      if (sliding[i]) continue;
      c.layer_head_dim[i] = global_hd;
      if (c.k_eq_v && global_kv) c.layer_kv_heads[i] = *global_kv;
    }
  }
  for (int type = 0; type < 2; ++type) {
    int64_t first = -1;
    for (size_t i = 0; i < L; ++i) {
      if (sliding[i] != type) continue;
      if (first < 0) first = static_cast<int64_t>(i);
      const size_t f = static_cast<size_t>(first);
      if (c.layer_head_dim[i] != c.layer_head_dim[f] || c.layer_kv_heads[i] != c.layer_kv_heads[f])
        r.fail_field("per_layer_config",
                     "gives layers " + std::to_string(first) + " and " + std::to_string(i) + " (both " +
                         (type ? "sliding" : "full") +
                         " attention) different head_dim / num_key_value_heads; Transformers needs one per "
                         "layer type");
    }
  }
  for (size_t i = 0; i < L; ++i)
    if (c.num_heads % c.layer_kv_heads[i] != 0)
      r.fail_field("num_attention_heads", "(" + std::to_string(c.num_heads) + ") is not a multiple of layer " +
                                              std::to_string(i) + "'s " + std::to_string(c.layer_kv_heads[i]) +
                                              " key-value heads");
}

// num_kv_shared_layers: layers from L - n on read the keys and values of the last earlier layer of their type
// (Gemma4TextConfig.kv_sharing_modes).
void parse_kv_sharing(const ConfigReader& r, DecoderConfig& c, const std::vector<uint8_t>& sliding) {
  const int64_t shared = r.int_or("num_kv_shared_layers", 0, 0, c.num_layers);
  if (shared == 0) return;
  const int64_t first = c.num_layers - shared;
  if (first == 0)
    r.fail_field("num_kv_shared_layers", "(" + std::to_string(shared) +
                                             ") shares every layer's keys and values, so no layer computes them");
  c.layer_kv_source.resize(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    c.layer_kv_source[static_cast<size_t>(l)] = static_cast<int32_t>(l);
    if (l < first) continue;
    int64_t src = -1;
    for (int64_t p = first - 1; p >= 0 && src < 0; --p)
      if (sliding[static_cast<size_t>(p)] == sliding[static_cast<size_t>(l)]) src = p;
    if (src < 0)
      r.fail_field("num_kv_shared_layers",
                   "(" + std::to_string(shared) + ") leaves no earlier " +
                       (sliding[static_cast<size_t>(l)] ? "sliding" : "full") + " attention layer for layer " +
                       std::to_string(l) + " to share keys and values with (Transformers refuses it)");
    c.layer_kv_source[static_cast<size_t>(l)] = static_cast<int32_t>(src);
  }
}

// rope_parameters.{full_attention, sliding_attention} (absent: Transformers' defaults, proportional 0.25 at
// 1e6 and default at 1e4), each read as one rope for its layer type's heads.
void parse_ropes(const ConfigReader& r, DecoderConfig& c, const std::vector<uint8_t>& sliding) {
  json full = json::object(), local = json::object();
  if (!r.has("rope_parameters")) {
    full = {{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1000000.0}};
    local = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
  } else {
    rope_parameters_by_layer_type(r, "Gemma 4", full, local);
  }
  bool any_sliding = false, any_full = false;
  for (uint8_t s : sliding) (s ? any_sliding : any_full) = true;
  auto one = [&](json d, bool is_sliding) {
    const char* type = is_sliding ? "sliding_attention" : "full_attention";
    if (d.empty())
      r.fail_field("rope_parameters", std::string("has no '") + type + "' entry, which Transformers needs");
    if (!d.contains("rope_theta") || d["rope_theta"].is_null())
      r.fail_field("rope_parameters", std::string("'") + type + "' has no rope_theta, which Transformers needs");
    // The default rope of Gemma 4 turns the whole head whatever partial_rotary_factor says.
    const bool plain = !d.contains("rope_type") || d["rope_type"] == "default";
    if (plain) d.erase("partial_rotary_factor");
    json g = {{"rope_parameters", d}};
    RopeConfig rope = parse_rope(
        ConfigReader(g, r.origin() + " (the " + type + " layers' rope: rope_parameters." + type + ")"),
        std::nullopt, c.max_position_embeddings);
    int64_t hd = 0;
    for (size_t i = 0; i < sliding.size(); ++i)
      if (static_cast<bool>(sliding[i]) == is_sliding) hd = c.layer_head_dim[i];
    rope.head_dim = hd;
    return rope;
  };
  if (any_full) c.rope = one(full, false);
  if (any_sliding) {
    c.local_rope = one(local, true);
    c.layer_local_rope = sliding;
  }
  if (!any_full) c.rope = c.local_rope;
}

void finish(const ConfigReader& r, DecoderConfig& c) {
  const json& j = r.json();
  c.scale_embeddings = true;
  c.norm_plus_one = false;
  c.query_pre_attn_scalar = 1.0;  // Gemma4TextAttention.scaling
  c.final_logit_softcapping = r.optional_number("final_logit_softcapping", 0.0, ConfigReader::kInf, true).value_or(0.0);
  if (r.has("hidden_act") && parse_activation(r, "hidden_act") != c.hidden_act)
    r.fail_field("hidden_act", "names another function than hidden_activation, which Gemma 4 reads; the "
                               "checkpoint is ambiguous");
  if (const auto bidi = r.optional_string("use_bidirectional_attention")) {
    if (*bidi == "all")
      r.fail_field("use_bidirectional_attention",
                   "is \"all\", which is not supported (bidirectional attention; text runs causally)");
    if (*bidi != "vision")
      r.fail_field("use_bidirectional_attention",
                   "is " + ConfigReader::show(json(*bidi)) + ", which Transformers does not define (null, \"vision\" or \"all\")");
  }
  // Layer types: the last layer full attention whatever layer_types says (Transformers forces it).
  std::vector<uint8_t> sliding(static_cast<size_t>(c.num_layers));
  if (const auto types = r.optional_string_list("layer_types"))
    sliding = sliding_from_layer_types(r, *types, c.num_layers);
  else
    for (int64_t i = 0; i < c.num_layers; ++i) sliding[static_cast<size_t>(i)] = (i + 1) % 6 != 0;
  sliding.back() = 0;
  const int64_t window = j.contains("sliding_window") ? r.int_or("sliding_window", 512, 1, INT32_MAX) : 512;
  set_sliding_layers(c, window, sliding);

  c.k_eq_v = r.bool_or("attention_k_eq_v", false);
  parse_geometry(r, c, sliding);
  parse_kv_sharing(r, c, sliding);
  c.double_wide_shared_mlp = r.bool_or("use_double_wide_mlp", false);
  parse_ropes(r, c, sliding);

  // Per-layer inputs: hidden_size_per_layer_input (absent: 256; 0 or null: none).
  const int64_t P = j.contains("hidden_size_per_layer_input")
                        ? r.optional_int("hidden_size_per_layer_input", 0, 1 << 16).value_or(0)
                        : 256;
  c.per_layer_input_size = P;
  if (P > 0) {
    c.per_layer_vocab = r.int_or("vocab_size_per_layer_input", 262144, 1, 1 << 24);
    if (c.per_layer_vocab < c.vocab_size)
      r.fail_field("vocab_size_per_layer_input",
                   "(" + std::to_string(c.per_layer_vocab) + ") is below vocab_size (" +
                       std::to_string(c.vocab_size) + "): ids past it have no per-layer input (Transformers fails on them)");
  }
  c.moe_beside_mlp = r.bool_or("enable_moe_block", false);
  if (c.moe_beside_mlp) {
    c.num_experts = r.required_int("num_experts", 1, 1 << 16);
    c.num_experts_per_tok = r.required_int("top_k_experts", 1, c.num_experts);
    c.moe_intermediate_size = r.required_int("moe_intermediate_size", 1, 1 << 20);
    c.layer_sparse.assign(static_cast<size_t>(c.num_layers), 1);
  }
}

ConfigDefaults defaults() {
  ConfigDefaults d = gemma_defaults("gemma4_text", 131072);
  d.own_rope = true;
  return d;
}

}  // namespace

Architecture architecture() {
  TpPlan experts = {{"layers.*.experts.gate_up_proj", "packed_colwise"},
                    {"layers.*.experts.down_proj", "rowwise"}};
  return causal_lm_architecture(
      {.name = "Gemma4ForCausalLM",
       .layer = layer,
       .embed = embed,
       .defaults = defaults(),
       .null_refused = {{"num_key_value_heads", "Gemma4TextConfig's field is an integer"},
                        {"head_dim", "Gemma4Attention reads it as given"}},
       .finish = finish,
       .config_keys = keys(),
       // Gemma 4's base_model_tp_plan, plus the vocab-parallel LM head.
       .tp_plan = causal_lm_tp_plan({attention_tp_plan(), qk_norm_tp_plan(), gated_mlp_tp_plan(), experts})});
}

}  // namespace tessera::models::gemma4
