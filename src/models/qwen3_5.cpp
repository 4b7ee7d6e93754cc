// The Qwen3.5 / Qwen3-Next hybrids (text): Gated DeltaNet linear attention (layer_types "linear_attention":
// a causal depthwise convolution and a gated delta-rule recurrent state per sequence,
// graph::Op::GatedDeltaNet) interleaved with gated full attention (q_proj holds each head's query rows then
// its gate rows; the attention output times sigmoid(gate) before o_proj; per-head q/k norms; rotary embedding
// on the first partial_rotary_factor (default 0.25) of each head, the text positions of its mrope), every
// RMSNorm but the linear attention's output norm scaling by (1 + weight). Text positions only: the rope's
// mrope_section / mrope_interleaved change nothing when the three position streams are equal.
//   Qwen3_5ForCausalLM (model_type qwen3_5_text): the dense MLP in every layer.
//   Qwen3_5MoeForCausalLM (qwen3_5_moe_text): every layer a sparse block: softmax top-k renormalised over
//     num_experts experts plus a shared expert scaled by sigmoid(shared_expert_gate).
//   Qwen3NextForCausalLM (qwen3_next): the same, its linear attention's projections fused per key head
//     (in_proj_qkvz: q, k, v, z rows of each key head's group; in_proj_ba: b, a), read through grouped
//     weight views; sparse layers as Qwen3-MoE picks them (decoder_sparse_step, mlp_only_layers), the others
//     the dense MLP; the multi-token-prediction layers (mtp.*) never read.
// Tensor parallelism splits the MLP (experts and shared expert) and the LM head; attention and the
// linear-attention layers run whole on every rank (Transformers' plan gathers the latter; a head split of
// the interleaved query/gate rows is not written).
#include <nlohmann/json.hpp>

#include "models/blocks.h"
#include "models/families.h"
#include "tessera/error.h"

namespace tessera::models::qwen3_5 {

namespace {

std::vector<ConfigKey> keys() {
  using enum KeyUse;
  return {
      {"num_key_value_heads", kImplemented, "", "absent: 4"},
      {"head_dim", kImplemented, "", "absent: 256"},
      {"max_position_embeddings", kImplemented, "", "absent: 32768"},
      {"attention_bias", kImplemented, "", "biases on q/k/v and o_proj of the full-attention layers"},
      {"partial_rotary_factor", kImplemented, "", "the rotated share of each head; absent: 0.25"},
      {"layer_types", kImplemented, "", "linear_attention / full_attention per layer"},
      {"full_attention_interval", kImplemented, "",
       "without layer_types: layer i is full attention when (i + 1) % interval == 0; absent: 4"},
      {"linear_conv_kernel_dim", kImplemented, "", "the linear attention's convolution width; absent: 4"},
      {"linear_key_head_dim", kImplemented, "", "absent: 128"},
      {"linear_value_head_dim", kImplemented, "", "absent: 128"},
      {"linear_num_key_heads", kImplemented, "", "absent: 16"},
      {"linear_num_value_heads", kImplemented, "", "absent: 32; a multiple of linear_num_key_heads"},
  };
}

constexpr const char* kUnsplit =
    "interleaves each head's query and gate rows in q_proj (a head split of them is not written yet)";

int gated_attention(GraphBuilder& b, const StepNodes& in, const LayerNames& n, int h) {
  const DecoderConfig& c = b.config();
  const std::string m = n.module + "self_attn.";
  const int64_t H = c.hidden_size, hd = c.head_dim, q_dim = c.num_heads * hd, kv_dim = c.num_kv_heads * hd;
  const int l = n.layer;
  const bool bias = c.attention_bias;
  // q_proj [2 * q_dim, H]: head j's query rows [2j hd, 2j hd + hd), then its gate rows.
  int q =
      b.linear(h, {m + "q_proj", Role::kAttnQ, l, q_dim, H, bias, 0, 2 * q_dim, 0, 0, 2 * hd, {{{0, hd}}}},
               n.node + "q");
  int gate =
      b.linear(h, {m + "q_proj", Role::kAttnQ, l, q_dim, H, bias, 0, 2 * q_dim, 0, 0, 2 * hd, {{{hd, hd}}}},
               n.node + "gate");
  int k = b.linear(h, {m + "k_proj", Role::kAttnK, l, kv_dim, H, bias}, n.node + "k");
  int v = b.linear(h, {m + "v_proj", Role::kAttnV, l, kv_dim, H, bias}, n.node + "v");
  q = b.norm(q, m + "q_norm", hd, n.node + "q_norm");
  k = b.norm(k, m + "k_norm", hd, n.node + "k_norm");
  q = b.rope(q, in.positions, c.local_heads(), n.node + "q_rope");
  k = b.rope(k, in.positions, c.local_kv_heads(), n.node + "k_rope");
  int kc = b.cache_update(b.cache_state(l, 0), k, in.slots, n.node + "k_cache_update");
  int vc = b.cache_update(b.cache_state(l, 1), v, in.slots, n.node + "v_cache_update");
  int attn = b.attention(q, kc, vc, in.slots, in.kv_begin, 0, n.node + "attn");
  attn = b.gated_act(gate, attn, graph::Activation::Sigmoid, n.node + "attn_gate");
  return b.linear(attn, {m + "o_proj", Role::kAttnO, l, H, q_dim, bias}, n.node + "attn_out");
}

// The Gated DeltaNet mixer. fused: Qwen3-Next's in_proj_qkvz [Hk * (2 dk + 2 r dv), H] (per key head its
// q rows, k rows, then the v and z rows of its r = Hv / Hk value heads) and in_proj_ba [Hk * 2r, H] (per key
// head its r b rows, then its r a rows), read as Qwen3.5's separate projections through grouped views: the
// same rows in the op's order (all q, all k, all v; value heads key-head-major, as Transformers reshapes).
int linear_attention(GraphBuilder& b, const StepNodes& in, const LayerNames& n, int h, bool fused) {
  const DecoderConfig& c = b.config();
  const std::string m = n.module + "linear_attn.";
  const int64_t H = c.hidden_size, hk = c.linear_num_key_heads, hv = c.linear_num_value_heads;
  const int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim, r = hv / hk;
  const int64_t key_dim = hk * dk, value_dim = hv * dv;
  const int64_t C = 2 * key_dim + value_dim, K = c.linear_conv_kernel_dim;
  const int l = n.layer;
  int qkv, z, beta, a;
  if (fused) {
    const int64_t G = 2 * dk + 2 * r * dv, qkvz = hk * G;
    const std::string p = m + "in_proj_qkvz", ba = m + "in_proj_ba";
    const Role mix = Role::kLinearMixer;
    if (c.linear_split_qkvz) {  // llama.cpp's qwen3next: in_proj_qkvz as Qwen3.5's two tensors
      qkv = b.linear(h, {m + "in_proj_qkv", mix, l, C, H}, n.node + "in_qkv");
      z = b.linear(h, {m + "in_proj_z", mix, l, value_dim, H}, n.node + "in_z");
    } else {
      qkv = b.linear(h, {p, mix, l, C, H, false, 0, qkvz, 0, 0, G, {{{0, dk}, {dk, dk}, {2 * dk, r * dv}}}},
                     n.node + "in_qkv");
      z = b.linear(h, {p, mix, l, value_dim, H, false, 0, qkvz, 0, 0, G, {{{2 * dk + r * dv, r * dv}}}},
                   n.node + "in_z");
    }
    beta = b.linear(h, {ba, mix, l, hv, H, false, 0, 2 * hv, 0, 0, 2 * r, {{{0, r}}}}, n.node + "in_b");
    a = b.linear(h, {ba, mix, l, hv, H, false, 0, 2 * hv, 0, 0, 2 * r, {{{r, r}}}}, n.node + "in_a");
  } else {
    qkv = b.linear(h, {m + "in_proj_qkv", Role::kLinearMixer, l, C, H}, n.node + "in_qkv");
    z = b.linear(h, {m + "in_proj_z", Role::kLinearMixer, l, value_dim, H}, n.node + "in_z");
    beta = b.linear(h, {m + "in_proj_b", Role::kLinearMixer, l, hv, H}, n.node + "in_b");
    a = b.linear(h, {m + "in_proj_a", Role::kLinearMixer, l, hv, H}, n.node + "in_a");
  }
  const int conv = b.weight(m + "conv1d.weight", {C, 1, K}, {}, true, true);
  const int a_log = b.weight(m + "A_log", {hv}, {}, true, true);
  const int dt_bias = b.weight(m + "dt_bias", {hv}, {}, true, true);
  const int norm = b.weight(m + "norm.weight", {dv}, {}, true, true);  // the plain weight (no 1 +)
  const int y = b.gated_delta_net(qkv, z, beta, a, conv, a_log, dt_bias, norm, in.slots, in.kv_begin, l,
                                  n.node + "delta_net");
  return b.linear(y, {m + "out_proj", Role::kLinearMixer, l, H, value_dim}, n.node + "linear_out");
}

// input_layernorm -> the layer's token mixer -> residual -> post_attention_layernorm -> the dense MLP or, in
// the sparse layers, the experts with the shared expert -> residual.
int hybrid_layer(GraphBuilder& b, const StepNodes& in, int x, int l, bool fused) {
  const DecoderConfig& c = b.config();
  const LayerNames n = layer_names(l);
  int h = b.norm(x, n.module + "input_layernorm", c.hidden_size, n.node + "attn_norm");
  h = c.layer_is_linear(l) ? linear_attention(b, in, n, h, fused) : gated_attention(b, in, n, h);
  x = b.add(x, h, n.node + "attn_residual");
  h = b.norm(x, n.module + "post_attention_layernorm", c.hidden_size, n.node + "mlp_norm");
  const int mlp = c.layer_is_sparse(l)
                      ? sparse_moe(b, n, h,
                                   {.routing = c.moe_norm_topk ? graph::Routing::SoftmaxTopKNorm
                                                               : graph::Routing::SoftmaxTopK})
                      : gated_mlp(b, n, h, {});
  return b.add(x, mlp, n.node + "mlp_residual");
}

int layer(GraphBuilder& b, const StepNodes& in, int x, int l) { return hybrid_layer(b, in, x, l, false); }
int next_layer(GraphBuilder& b, const StepNodes& in, int x, int l) { return hybrid_layer(b, in, x, l, true); }

// Qwen3_5TextConfig: layer_types (else full_attention_interval), the linear attention's sizes; every norm
// (1 + weight). Its convolution's activation is hidden_act, which the kernel computes as silu (every
// released checkpoint's).
void finish(const ConfigReader& r, DecoderConfig& c) {
  c.norm_plus_one = true;
  const int64_t kMaxHeads = 4096, kMaxDim = 4096;
  c.linear_num_key_heads = r.int_or("linear_num_key_heads", 16, 1, kMaxHeads);
  c.linear_num_value_heads = r.int_or("linear_num_value_heads", 32, 1, kMaxHeads);
  c.linear_key_head_dim = r.int_or("linear_key_head_dim", 128, 1, kMaxDim);
  c.linear_value_head_dim = r.int_or("linear_value_head_dim", 128, 1, kMaxDim);
  c.linear_conv_kernel_dim = r.int_or("linear_conv_kernel_dim", 4, 1, 64);
  if (c.linear_num_value_heads % c.linear_num_key_heads != 0)
    r.fail_field("linear_num_value_heads", "(" + std::to_string(c.linear_num_value_heads) +
                                               ") must be a multiple of linear_num_key_heads (" +
                                               std::to_string(c.linear_num_key_heads) + ")");
  if (c.hidden_act != Activation::kSilu)
    r.fail_field("hidden_act",
                 "must be silu for Qwen3.5 (its linear attention's convolution uses it; the "
                 "kernel computes silu)");
  const size_t n = static_cast<size_t>(c.num_layers);
  c.layer_linear.assign(n, 0);
  if (auto types = r.optional_string_list("layer_types")) {
    if (types->size() != n)
      r.fail_field("layer_types", "has " + std::to_string(types->size()) + " entries, num_hidden_layers is " +
                                      std::to_string(n));
    for (size_t i = 0; i < n; ++i) {
      const std::string& t = (*types)[i];
      if (t == "linear_attention")
        c.layer_linear[i] = 1;
      else if (t != "full_attention")
        r.fail_field("layer_types",
                     "has " + ConfigReader::show(nlohmann::json(t)) + " at index " + std::to_string(i) +
                         ", which Qwen3.5 does not support (linear_attention, full_attention)");
    }
  } else {
    const int64_t interval = r.int_or("full_attention_interval", 4, 1, ConfigReader::kIntMax);
    for (size_t i = 0; i < n; ++i) c.layer_linear[i] = (static_cast<int64_t>(i) + 1) % interval != 0;
  }
}

// Qwen3_5MoeTextConfig: every layer sparse, top-k always renormalised; no intermediate_size (no dense MLP).
void finish_moe(const ConfigReader& r, DecoderConfig& c) {
  finish(r, c);
  parse_moe_experts(r, c, {.experts = 256, .per_token = 8, .intermediate = 512});
  c.shared_expert_intermediate_size = r.int_or("shared_expert_intermediate_size", 512, 1, 1 << 20);
  c.moe_norm_topk = true;
  if (c.intermediate_size == 0) c.intermediate_size = c.moe_intermediate_size;  // read by no layer
  c.layer_sparse.assign(static_cast<size_t>(c.num_layers), 1);
}

// Qwen3NextConfig: sparse layers as Qwen3-MoE's (num_experts 0: every layer dense), norm_topk_prob (absent:
// true).
void finish_next(const ConfigReader& r, DecoderConfig& c) {
  finish(r, c);
  if (r.has("num_experts") && r.find("num_experts")->is_number_integer() &&
      r.find("num_experts")->get<int64_t>() == 0)
    return;  // Transformers builds the dense MLP in every layer
  parse_moe_experts(r, c, {.experts = 512, .per_token = 10, .intermediate = 512});
  c.shared_expert_intermediate_size = r.int_or("shared_expert_intermediate_size", 512, 1, 1 << 20);
  c.moe_norm_topk = r.bool_or("norm_topk_prob", true);
  parse_sparse_layers(r, c);
}

ConfigDefaults defaults(const char* model_type, int64_t kv_heads) {
  ConfigDefaults d;
  d.model_type = model_type;
  d.head_dim = 256;
  d.num_kv_heads = kv_heads;
  d.max_position_embeddings = 32768;
  d.rms_norm_eps = 1e-6;
  d.partial_rotary_factor = 0.25;
  return d;
}

std::vector<ConfigKey> moe_keys(bool next) {
  using enum KeyUse;
  std::vector<ConfigKey> k = keys();
  const std::vector<ConfigKey> moe = moe_config_keys(true);
  k.insert(k.end(), moe.begin(), moe.end());
  k.push_back({"shared_expert_intermediate_size", kImplemented, "", "the shared expert's; absent: 512"});
  if (next) {
    k.push_back({"decoder_sparse_step", kImplemented, "",
                 "absent: 1; layer l is sparse when (l + 1) % step == 0 (num_experts 0: none)"});
    k.push_back(
        {"mlp_only_layers", kImplemented, "", "absent or null: none; these layers keep the dense MLP"});
    k.push_back(
        {"norm_topk_prob", kImplemented, "", "absent: true; true: the kept weights divided by their sum"});
  }
  return k;
}

// The MLP split with the experts and the shared expert (Transformers' plans), the vocab-parallel LM head;
// attention and linear attention whole on every rank.
TpPlan moe_tp_plan() {
  return causal_lm_tp_plan({gated_mlp_tp_plan(),
                            experts_tp_plan(),
                            {{"layers.*.mlp.shared_expert.gate_proj", "colwise"},
                             {"layers.*.mlp.shared_expert.up_proj", "colwise"},
                             {"layers.*.mlp.shared_expert.down_proj", "rowwise"}}});
}

}  // namespace

Architecture architecture() {
  return causal_lm_architecture(
      {.name = "Qwen3_5ForCausalLM",
       .layer = layer,
       .defaults = defaults("qwen3_5_text", 4),
       .null_refused = {{"head_dim", "Qwen3_5Attention reads it as given"}},
       .finish = finish,
       .config_keys = keys(),
       // The MLP split and the vocab-parallel LM head; attention and linear attention whole on every rank.
       .tp_plan = causal_lm_tp_plan({gated_mlp_tp_plan()}),
       .unsplit_attention = kUnsplit});
}

Architecture moe_architecture() {
  ConfigDefaults d = defaults("qwen3_5_moe_text", 2);
  d.intermediate_size = 0;
  return causal_lm_architecture({.name = "Qwen3_5MoeForCausalLM",
                                 .layer = layer,
                                 .defaults = d,
                                 .null_refused = {{"head_dim", "Qwen3_5MoeAttention reads it as given"}},
                                 .finish = finish_moe,
                                 .config_keys = moe_keys(false),
                                 .tp_plan = moe_tp_plan(),
                                 .unsplit_attention = kUnsplit});
}

Architecture next_architecture() {
  return causal_lm_architecture({.name = "Qwen3NextForCausalLM",
                                 .layer = next_layer,
                                 .defaults = defaults("qwen3_next", 2),
                                 .null_refused = {{"head_dim", "Qwen3NextAttention reads it as given"}},
                                 .finish = finish_next,
                                 .config_keys = moe_keys(true),
                                 .tp_plan = moe_tp_plan(),
                                 .unsplit_attention = kUnsplit,
                                 .ignorable_prefixes = {"mtp."}});
}

}  // namespace tessera::models::qwen3_5
