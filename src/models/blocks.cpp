#include "models/blocks.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "tessera/error.h"

namespace tessera::models {

using graph::InputKind;
using graph::Node;
using graph::Op;

LayerNames layer_names(int layer) {
  const std::string i = std::to_string(layer);
  return {layer, "model.layers." + i + ".", "layers." + i + "."};
}

graph::Activation graph_activation(Activation a) {
  switch (a) {
    case Activation::kSilu:
      return graph::Activation::Silu;
    case Activation::kGelu:
      return graph::Activation::Gelu;
    case Activation::kGeluTanh:
      return graph::Activation::GeluTanh;
    case Activation::kRelu:
      return graph::Activation::Relu;
  }
  fail("unknown activation ", static_cast<int>(a));
}

// The frequencies of `rope` over the config's rotary dims; longrope and dynamic pick them by the length a
// step row's sequence reaches (graph::RopeTable).
namespace {
graph::RopeTable rope_table(const DecoderConfig& c, const RopeConfig& rope) {
  graph::RopeTable t;
  t.inv_freq = rope_inv_freq(c, rope);
  if (rope.type == "longrope") {
    t.switch_len = rope.original_max_position_embeddings;
    t.long_inv_freq = rope_inv_freq(c, rope, true);
  } else if (rope.type == "dynamic") {
    t.switch_len = rope.max_position_embeddings;
    t.dynamic = true;
    t.theta = rope.theta;
    t.factor = rope.factor;
    t.dim = c.rot_dim_of(rope);
  }
  return t;
}
}  // namespace

GraphBuilder::GraphBuilder(const DecoderConfig& c, const graph::ShapeKey& key) : c_(c) {
  g_.key = key;
  rows_ = key.batch * key.seq;
  g_.rope_tables.push_back(rope_table(c, c.rope));
  if (!c.layer_local_rope.empty()) g_.rope_tables.push_back(rope_table(c, c.local_rope));  // table 1
}

graph::Graph GraphBuilder::finish(int logits) {
  g_.outputs = {logits};
  return std::move(g_);
}

int GraphBuilder::input(InputKind kind, Shape shape, const char* name) {
  Node n{.op = Op::Input, .name = name, .inputs = {}, .shape = std::move(shape), .dtype = DType::I32};
  n.input_kind = kind;
  const int id = g_.add(std::move(n));
  if (kind == InputKind::CacheRows) cache_rows_ = id;  // read by every cache update and attention
  return id;
}

void GraphBuilder::record_module(const std::string& module, Role role, int64_t layer) {
  if (module_names_.insert(module).second) modules_.push_back(ModuleSpec{module, role, layer});
}

int GraphBuilder::weight(const std::string& name, Shape stored, graph::WeightView view, bool never_quantize,
                         bool as_vector) {
  const size_t dot = name.rfind('.');
  record_module(dot == std::string::npos ? name : name.substr(0, dot), Role::kOther);
  // Matrices in the model dtype; vectors (norms, biases) stay float32.
  DType dt = stored.size() == 1 || as_vector ? DType::F32 : g_.key.dtype;
  // A matrix [out, in], or stacked experts [E, out, in] (the view applies to each expert's matrix).
  const int64_t cols =
      stored.size() >= 2 ? (view.split_dim == 1 ? stored.back() / view.shards : stored.back()) : 0;
  bool as_stored = false;  // kept in the block format the checkpoint stores
  if (auto q = c_.quantized_weights.find(name);
      q != c_.quantized_weights.end() && stored.size() >= 2 && !as_vector) {
    as_stored = cols % dtype_block(q->second) == 0;
    if (as_stored) dt = q->second;
  }
  // Quantised at load (the graph's dtype is a block format): rows that are not whole blocks stay float32.
  if (is_quantized(dt) && !as_stored && (cols % dtype_block(dt) != 0 || never_quantize)) dt = DType::F32;
  Shape local = stored;
  const size_t out_dim = stored.size() == 3 || view.stacked ? 1 : 0;
  if (view.rows >= 0) local[out_dim] = view.rows;
  if (view.group > 0) {
    TS_ASSERT(view.split_dim < 0 && local[out_dim] % view.group == 0, name, " grouped view");
    local[out_dim] = local[out_dim] / view.group * view.taken_per_group();
  }
  if (view.split_dim >= 0) {
    const size_t d = out_dim + static_cast<size_t>(view.split_dim);
    TS_ASSERT(local[d] % (view.shards * view.packed) == 0, name, " ", shape_str(local), " over ", view.shards,
              " in ", view.packed, " parts");
    local[d] /= view.shards;
  }
  view.stored = std::move(stored);
  Node n{.op = Op::Weight, .name = name, .inputs = {}, .shape = std::move(local), .dtype = dt};
  n.view = std::move(view);
  return g_.add(std::move(n));
}

int GraphBuilder::cache_state(int layer, int which) {
  TS_ASSERT(c_.layer_has_cache(layer), "layer ", layer, " keeps no keys and values of its own");
  const int64_t kv = c_.local_kv_heads_of(layer), hd = c_.head_dim_of(layer);
  Node n{.op = Op::CacheState,
         .name = "layers." + std::to_string(layer) + (which == 0 ? ".k_cache" : ".v_cache"),
         .inputs = {},
         .shape = {g_.key.cache_batch(), kv, g_.key.cache_len, hd}};
  n.layer = layer;
  n.which = which;
  n.kv_heads = kv;
  n.head_dim = hd;
  return g_.add(std::move(n));
}

int GraphBuilder::updated_cache(int layer, int which) const {
  const auto it = updated_.find({layer, which});
  TS_ASSERT(it != updated_.end(), "layer ", layer, "'s ", which == 0 ? "keys" : "values",
            " are read before that layer writes them");
  return it->second;
}

int GraphBuilder::embedding(int table, int ids, const std::string& name, float scale) {
  Node n{.op = Op::Embedding, .name = name, .inputs = {table, ids}, .shape = {rows_, cols(table)}};
  n.scale = scale;
  return g_.add(std::move(n));
}

int GraphBuilder::rms_norm(int x, int w, int64_t dim, const std::string& name) {
  TS_ASSERT(cols(x) % dim == 0, name);
  Node n{.op = Op::RmsNorm, .name = name, .inputs = {x}, .shape = g_.at(x).shape};
  if (w >= 0) n.inputs.push_back(w);
  n.dim = dim;
  n.eps = static_cast<float>(c_.rms_norm_eps);
  return g_.add(std::move(n));
}

int GraphBuilder::norm(int x, const std::string& module, int64_t dim, const std::string& name) {
  graph::WeightView v;
  if (c_.norm_plus_one) v.offset = 1.0f;  // Gemma: x_normed * (1 + weight)
  return rms_norm(x, weight(module + ".weight", {dim}, v), dim, name);
}

int GraphBuilder::matmul(int x, int w, int bias, const std::string& name) {
  const Shape& ws = g_.at(w).shape;
  TS_ASSERT(ws.size() == 2 && ws[1] == cols(x), name, ": weight ", shape_str(ws), " vs input ",
            shape_str(g_.at(x).shape));
  std::vector<int> ins{x, w};
  if (bias >= 0) ins.push_back(bias);
  return g_.add(Node{.op = Op::MatMul, .name = name, .inputs = ins, .shape = {g_.at(x).shape[0], ws[0]}});
}

int GraphBuilder::linear(int x, const Linear& l, const std::string& name) {
  TS_ASSERT(is_linear(l.role), name, ": ", l.module, " has no linear role");
  record_module(l.module, l.role, l.layer);
  const int tp = g_.key.tp_size;
  const int64_t stored_out = l.stored_out > 0 ? l.stored_out : l.out;
  graph::WeightView wv, bv;
  wv.rope_head = bv.rope_head = l.rope_head;
  wv.rope_rot = bv.rope_rot = l.rope_rot;
  wv.group = bv.group = l.group;
  wv.takes = bv.takes = l.takes;
  if ((l.part_begin != 0 || l.out != stored_out) && l.group == 0) {
    wv.row_begin = bv.row_begin = l.part_begin;
    wv.rows = bv.rows = l.out;
  }
  const TpSplit split = tp > 1 ? c_.tp.split(l.role, l.layer) : TpSplit::kNone;
  if (split == TpSplit::kCol || split == TpSplit::kColGather) {
    wv.split_dim = bv.split_dim = 0;
    wv.shards = bv.shards = tp;
  } else if (split == TpSplit::kRow) {
    wv.split_dim = 1;
    wv.shards = tp;
    bv.rank0_only = true;  // the bias is added once: by rank 0's partial sum
  }
  const int w = weight(l.module + ".weight", {stored_out, l.in}, wv);
  const int b = l.bias ? weight(l.module + ".bias", {stored_out}, bv) : -1;
  int y = matmul(x, w, b, name);
  if (split == TpSplit::kRow) y = all_reduce(y, name + ".all_reduce");
  if (split == TpSplit::kColGather) y = all_gather(y, name + ".all_gather");
  return y;
}

int GraphBuilder::all_reduce(int x, const std::string& name) {
  return g_.add(Node{.op = Op::AllReduce, .name = name, .inputs = {x}, .shape = g_.at(x).shape});
}

int GraphBuilder::all_gather(int x, const std::string& name) {
  const Shape& s = g_.at(x).shape;
  return g_.add(
      Node{.op = Op::AllGather, .name = name, .inputs = {x}, .shape = {s[0], s[1] * g_.key.tp_size}});
}

int GraphBuilder::rope(int x, int positions, int64_t heads, const std::string& name, int table) {
  TS_ASSERT(table >= 0 && table < static_cast<int>(g_.rope_tables.size()), name, " rope table ", table);
  TS_ASSERT(heads > 0 && cols(x) % heads == 0, name, ": ", cols(x), " columns in ", heads, " heads");
  Node n{.op = Op::Rope, .name = name, .inputs = {x, positions}, .shape = g_.at(x).shape};
  n.heads = heads;
  n.head_dim = cols(x) / heads;
  n.rot_dim = 2 * static_cast<int64_t>(g_.rope_tables[static_cast<size_t>(table)].inv_freq.size());
  TS_ASSERT(n.rot_dim <= n.head_dim, name, ": rotary dims ", n.rot_dim, " in heads of ", n.head_dim);
  n.rope_table = table;
  // yarn's factor on cos and sin; 0 (none) otherwise.
  if (const double f = rope_attention_factor(table == 1 ? c_.local_rope : c_.rope); f != 1.0)
    n.scale = static_cast<float>(f);
  return g_.add(std::move(n));
}

int GraphBuilder::cache_update(int cache, int x, int slots, const std::string& name) {
  const Node& state = g_.at(cache);
  Node n{.op = Op::CacheUpdate, .name = name, .inputs = {cache, x, slots}, .shape = state.shape};
  if (cache_rows_ >= 0) n.inputs.push_back(cache_rows_);
  n.kv_heads = state.shape[1];
  n.head_dim = state.shape[3];
  TS_ASSERT(cols(x) == n.kv_heads * n.head_dim, name, ": ", cols(x), " columns into a cache of ", n.kv_heads,
            " x ", n.head_dim);
  // The layer and K/V of the cache written: a CacheState's own, or those of the update it continues.
  std::pair<int, int> of{state.layer, state.which};
  if (state.op == Op::CacheUpdate)
    for (const auto& [k, v] : updated_)
      if (v == cache) of = k;
  const int id = g_.add(std::move(n));
  updated_[of] = id;
  return id;
}

int GraphBuilder::attention(int q, int k_cache, int v_cache, int slots, int kv_begin, int64_t window,
                            const std::string& name, int sinks) {
  const Shape& ks = g_.at(k_cache).shape;  // [cache rows, kv heads, slots, head_dim]
  const int64_t hd = ks[3];
  TS_ASSERT(g_.at(v_cache).shape == ks && cols(q) == c_.local_heads() * hd, name, ": q ",
            shape_str(g_.at(q).shape), ", keys ", shape_str(ks), ", values ",
            shape_str(g_.at(v_cache).shape));
  Node n{.op = Op::Attention,
         .name = name,
         .inputs = {q, k_cache, v_cache, slots, kv_begin},
         .shape = {rows_, c_.local_heads() * hd}};
  if (cache_rows_ >= 0) n.inputs.push_back(cache_rows_);
  if (sinks >= 0) {
    TS_ASSERT(g_.at(sinks).shape == Shape{c_.local_heads()}, name, ": sinks ", shape_str(g_.at(sinks).shape));
    n.inputs.push_back(sinks);
    n.sinks = true;
  }
  n.heads = c_.local_heads();
  n.kv_heads = ks[1];
  n.head_dim = hd;
  // Transformers: head_dim**-0.5, or query_pre_attn_scalar**-0.5 (Gemma), as an f32 multiplier.
  n.scale = c_.query_pre_attn_scalar > 0 ? static_cast<float>(std::pow(c_.query_pre_attn_scalar, -0.5))
                                         : 1.0f / std::sqrt(static_cast<float>(hd));
  n.softcap = static_cast<float>(c_.attn_logit_softcapping);
  TS_ASSERT(window >= 0, name, " window ", window);
  n.window = window;
  return g_.add(std::move(n));
}

int GraphBuilder::gated_delta_net(int qkv, int z, int b, int a, int conv, int a_log, int dt_bias, int norm,
                                  int slots, int kv_begin, int layer, const std::string& name) {
  const int64_t hv = c_.linear_num_value_heads, dv = c_.linear_value_head_dim;
  Node n{.op = Op::GatedDeltaNet,
         .name = name,
         .inputs = {qkv, z, b, a, conv, a_log, dt_bias, norm, slots, kv_begin},
         .shape = {rows_, hv * dv}};
  if (cache_rows_ >= 0) n.inputs.push_back(cache_rows_);
  n.layer = layer;
  n.heads = hv;
  n.kv_heads = c_.linear_num_key_heads;
  n.head_dim = c_.linear_key_head_dim;
  n.dim = dv;
  n.window = c_.linear_conv_kernel_dim;
  n.eps = static_cast<float>(c_.rms_norm_eps);
  n.tiled_heads = c_.linear_tiled_value_heads;
  return g_.add(std::move(n));
}

int GraphBuilder::gated_act(int gate, int up, graph::Activation act, const std::string& name) {
  const Shape &gs = g_.at(gate).shape, &us = g_.at(up).shape;
  TS_ASSERT(gs == us || (gs.size() == 2 && us.size() == 2 && gs[0] == us[0] && gs[1] == 1 &&
                         act != graph::Activation::ClampedSwiglu),
            name);
  Node n{.op = Op::GatedAct, .name = name, .inputs = {gate, up}, .shape = us};
  n.act = act;
  return g_.add(std::move(n));
}

int GraphBuilder::scale(int x, int w, float s, const std::string& name) {
  TS_ASSERT(w < 0 || (g_.at(w).shape.size() == 1 && (g_.at(w).shape[0] == 1 || g_.at(w).shape[0] == cols(x))),
            name, ": weight ", w < 0 ? "" : shape_str(g_.at(w).shape), " for ", shape_str(g_.at(x).shape));
  Node n{.op = Op::Scale, .name = name, .inputs = {x}, .shape = g_.at(x).shape};
  if (w >= 0) n.inputs.push_back(w);
  n.scale = s;
  return g_.add(std::move(n));
}

int GraphBuilder::slice(int x, int64_t begin, int64_t width, const std::string& name) {
  TS_ASSERT(begin >= 0 && width > 0 && begin + width <= cols(x), name, ": columns [", begin, ", ",
            begin + width, ") of ", cols(x));
  Node n{.op = Op::Slice, .name = name, .inputs = {x}, .shape = {g_.at(x).shape[0], width}};
  n.begin = begin;
  return g_.add(std::move(n));
}

int GraphBuilder::add(int a, int b, const std::string& name) {
  return g_.add(Node{.op = Op::Add, .name = name, .inputs = {a, b}, .shape = g_.at(a).shape});
}

int GraphBuilder::soft_cap(int x, double cap, const std::string& name) {
  TS_ASSERT(cap > 0, name, " cap ", cap);
  Node n{.op = Op::SoftCap, .name = name, .inputs = {x}, .shape = g_.at(x).shape};
  n.softcap = static_cast<float>(cap);
  return g_.add(std::move(n));
}

int GraphBuilder::moe_route(int logits, graph::Routing routing, int64_t top_k, const std::string& name) {
  const int64_t experts = cols(logits);
  TS_ASSERT(top_k >= 1 && top_k <= experts, name, ": top ", top_k, " of ", experts);
  Node n{.op = Op::MoeRoute, .name = name, .inputs = {logits}, .shape = g_.at(logits).shape};
  n.experts = experts;
  n.top_k = top_k;
  n.routing = routing;
  return g_.add(std::move(n));
}

int GraphBuilder::moe_experts(int x, int route, int gate_up, int down, int gate_up_bias, int down_bias,
                              int64_t experts, int64_t top_k, graph::Activation act, const std::string& name,
                              float alpha, float limit) {
  const int64_t H = cols(x), I = g_.at(down).shape.back();
  TS_ASSERT(cols(route) == experts && g_.at(gate_up).shape == Shape({experts, 2 * I, H}) &&
                g_.at(down).shape == Shape({experts, H, I}),
            name, ": experts ", experts, ", gate_up ", shape_str(g_.at(gate_up).shape), ", down ",
            shape_str(g_.at(down).shape), ", x ", shape_str(g_.at(x).shape));
  std::vector<int> ins{x, route, gate_up, down};
  if (gate_up_bias >= 0 || down_bias >= 0) {
    TS_ASSERT(gate_up_bias >= 0 && down_bias >= 0, name, ": both expert biases or none");
    ins.push_back(gate_up_bias);
    ins.push_back(down_bias);
  }
  Node n{.op = Op::MoeExperts, .name = name, .inputs = ins, .shape = g_.at(x).shape};
  n.experts = experts;
  n.top_k = top_k;
  n.act = act;
  n.alpha = alpha;
  n.limit = limit;
  return g_.add(std::move(n));
}

int GraphBuilder::last_row(int x, const std::string& name) {
  return g_.add(Node{.op = Op::LastRow, .name = name, .inputs = {x}, .shape = {g_.key.batch, cols(x)}});
}

StepNodes add_step_inputs(GraphBuilder& b) {
  StepNodes s{};
  s.ids = b.input(InputKind::TokenIds, {b.rows()}, "input_ids");         // [batch * seq]
  s.positions = b.input(InputKind::Positions, {b.rows()}, "positions");  // [batch * seq]
  s.slots = b.input(InputKind::Slots, {b.rows()}, "slots");  // [batch * seq] cache slot per column
  s.kv_begin = b.input(InputKind::KvBegin, {b.key().batch}, "kv_begin");  // [batch] first valid slot
  // A step over some rows of a multi-slot cache: the cache row of each step row.
  s.cache_rows = b.key().row_mapped() ? b.input(InputKind::CacheRows, {b.key().batch}, "cache_rows") : -1;
  return s;
}

int self_attention(GraphBuilder& b, const StepNodes& in, const LayerNames& n, int h, const SelfAttention& a) {
  const DecoderConfig& c = b.config();
  const std::string m = n.module + "self_attn.";
  const int64_t H = c.hidden_size, q_dim = c.num_heads * c.head_dim, kv_dim = c.num_kv_heads * c.head_dim;
  const bool pairs = a.rope == RopePairs::kInterleaved;
  const int64_t rope_head = pairs ? c.head_dim : 0, rope_rot = pairs ? c.rot_dim() : 0;
  const int l = n.layer;
  // q, k, v, attn: [rows, local heads * head_dim] (split by heads when the plan says so)
  int q, k, v;
  if (a.fused_qkv) {
    // Three blocks of rows of one tensor, each split by heads on its own (graph::WeightView).
    const std::string qkv = m + "qkv_proj";
    const int64_t all = q_dim + 2 * kv_dim;
    q = b.linear(h, {qkv, Role::kAttnQkv, l, q_dim, H, a.qkv_bias, 0, all, rope_head, rope_rot},
                 n.node + "q");
    k = b.linear(h, {qkv, Role::kAttnQkv, l, kv_dim, H, a.qkv_bias, q_dim, all, rope_head, rope_rot},
                 n.node + "k");
    v = b.linear(h, {qkv, Role::kAttnQkv, l, kv_dim, H, a.qkv_bias, q_dim + kv_dim, all}, n.node + "v");
  } else {
    q = b.linear(h, {m + "q_proj", Role::kAttnQ, l, q_dim, H, a.qkv_bias, 0, 0, rope_head, rope_rot},
                 n.node + "q");
    k = b.linear(h, {m + "k_proj", Role::kAttnK, l, kv_dim, H, a.qkv_bias, 0, 0, rope_head, rope_rot},
                 n.node + "k");
    v = b.linear(h, {m + "v_proj", Role::kAttnV, l, kv_dim, H, a.qkv_bias}, n.node + "v");
  }
  if (a.qk_norm) {
    q = b.norm(q, m + "q_norm", c.head_dim, n.node + "q_norm");
    k = b.norm(k, m + "k_norm", c.head_dim, n.node + "k_norm");
  }
  if (a.qk_norm_whole) {
    if (c.tp.attn_split && b.key().tp_size > 1)  // resolve_tp_plan refuses such a plan first
      throw Error(c.architecture +
                  ": q_norm / k_norm normalise the whole projection, so attention cannot be "
                  "split by heads");
    q = b.norm(q, m + "q_norm", q_dim, n.node + "q_norm");
    k = b.norm(k, m + "k_norm", kv_dim, n.node + "k_norm");
  }
  if (c.layer_uses_rope(l)) {                              // SmolLM3's NoPE layers rotate nothing
    const int table = c.layer_uses_local_rope(l) ? 1 : 0;  // Gemma 3's sliding layers: the local rope
    q = b.rope(q, in.positions, c.local_heads(), n.node + "q_rope", table);
    k = b.rope(k, in.positions, c.local_kv_heads(), n.node + "k_rope", table);
  }
  int kc = b.cache_update(b.cache_state(l, 0), k, in.slots, n.node + "k_cache_update");
  int vc = b.cache_update(b.cache_state(l, 1), v, in.slots, n.node + "v_cache_update");
  const int64_t window = c.layer_is_sliding(l) ? c.sliding_window : 0;
  int sinks = -1;
  if (a.sinks) {  // one per query head: split by heads with them
    graph::WeightView v;
    if (c.tp.attn_split && b.key().tp_size > 1) {
      v.split_dim = 0;
      v.shards = b.key().tp_size;
    }
    sinks = b.weight(m + "sinks", {c.num_heads}, v);
  }
  int attn = b.attention(q, kc, vc, in.slots, in.kv_begin, window, n.node + "attn", sinks);
  return b.linear(attn, {m + "o_proj", Role::kAttnO, l, H, q_dim, a.o_bias}, n.node + "attn_out");
}

int gated_mlp(GraphBuilder& b, const LayerNames& n, int h, const GatedMlp& mlp) {
  const DecoderConfig& c = b.config();
  const std::string m = n.module + mlp.module;
  const int64_t H = c.hidden_size, I = mlp.intermediate > 0 ? mlp.intermediate : c.intermediate_size;
  const int l = n.layer;
  // gate, up, act: [rows, local intermediate] (split per layer when the plan says so)
  int gate, up;
  if (mlp.fused_gate_up) {
    gate = b.linear(h, {m + "gate_up_proj", Role::kMlpGateUp, l, I, H, mlp.bias, 0, 2 * I}, n.node + "gate");
    up = b.linear(h, {m + "gate_up_proj", Role::kMlpGateUp, l, I, H, mlp.bias, I, 2 * I}, n.node + "up");
  } else {
    gate = b.linear(h, {m + "gate_proj", Role::kMlpGate, l, I, H, mlp.bias}, n.node + "gate");
    up = b.linear(h, {m + "up_proj", Role::kMlpUp, l, I, H, mlp.bias}, n.node + "up");
  }
  // Node names keep the usual name of each gated unit (SwiGLU, GeGLU, ReGLU).
  const graph::Activation f = graph_activation(c.hidden_act);
  const char* unit = f == graph::Activation::Silu       ? "swiglu"
                     : f == graph::Activation::Relu     ? "reglu"
                     : f == graph::Activation::GeluTanh ? "geglu_tanh"
                                                        : "geglu";
  int act = b.gated_act(gate, up, f, n.node + unit);
  return b.linear(act, {m + "down_proj", Role::kMlpDown, l, H, I, mlp.bias}, n.node + "down");
}

int post_norm_layer(GraphBuilder& b, const StepNodes& in, int x, int layer, const SelfAttention& a,
                    const GatedMlp& m) {
  const DecoderConfig& c = b.config();
  const LayerNames n = layer_names(layer);
  int h = b.norm(self_attention(b, in, n, x, a), n.module + "post_attention_layernorm", c.hidden_size,
                 n.node + "attn_post_norm");
  x = b.add(x, h, n.node + "attn_residual");
  h = b.norm(gated_mlp(b, n, x, m), n.module + "post_feedforward_layernorm", c.hidden_size,
             n.node + "mlp_post_norm");
  return b.add(x, h, n.node + "mlp_residual");
}

int pre_norm_layer(GraphBuilder& b, const StepNodes& in, int x, int layer, const SelfAttention& a,
                   const GatedMlp& m, const SparseMoe& moe) {
  const DecoderConfig& c = b.config();
  const LayerNames n = layer_names(layer);
  int h = b.norm(x, n.module + "input_layernorm", c.hidden_size, n.node + "attn_norm");
  x = b.add(x, self_attention(b, in, n, h, a), n.node + "attn_residual");
  h = b.norm(x, n.module + "post_attention_layernorm", c.hidden_size, n.node + "mlp_norm");
  const int mlp = c.layer_is_sparse(layer) ? sparse_moe(b, n, h, moe) : gated_mlp(b, n, h, m);
  return b.add(x, mlp, n.node + "mlp_residual");
}

int sparse_moe(GraphBuilder& b, const LayerNames& n, int h, const SparseMoe& m) {
  const DecoderConfig& c = b.config();
  const std::string mlp = n.module + "mlp.";
  const int64_t H = c.hidden_size, E = c.num_experts;
  // The router: never quantised at load (as llama.cpp's quantiser keeps ffn_gate_inp), since its logits
  // choose the experts; a checkpoint that stores it quantised is read as stored. Replicated on every rank.
  const std::string router = mlp + m.router;
  const int router_bias = m.bias ? b.weight(router + ".bias", {E}) : -1;
  const int logits =
      b.matmul(h, b.weight(router + ".weight", {E, H}, {}, true), router_bias, n.node + "router");
  const int route = b.moe_route(logits, m.routing, c.num_experts_per_tok, n.node + "route");
  const int y = stacked_experts(b, n, h, route, mlp + "experts.", m);
  if (c.shared_expert_intermediate_size <= 0) return y;
  // The shared expert: a gated MLP under the MLP's roles (split with the experts, its own all-reduce), scaled
  // per token by its gate's sigmoid (a [1, H] row kept in float32 like the router; replicated).
  LayerNames sn = n;
  sn.node += "shared_expert.";
  const int shared = gated_mlp(
      b, sn, h, {.module = "mlp.shared_expert.", .intermediate = c.shared_expert_intermediate_size});
  const int gate = b.matmul(h, b.weight(mlp + "shared_expert_gate.weight", {1, H}, {}, true), -1,
                            n.node + "shared_expert_gate");
  const int scaled = b.gated_act(gate, shared, graph::Activation::Sigmoid, n.node + "shared_expert_scaled");
  return b.add(y, scaled, n.node + "moe_out");
}

int stacked_experts(GraphBuilder& b, const LayerNames& n, int h, int route, const std::string& prefix,
                    const SparseMoe& m) {
  const DecoderConfig& c = b.config();
  const int64_t H = c.hidden_size, I = c.moe_intermediate_size, E = c.num_experts;
  const int l = n.layer;
  // Tensor parallelism as Transformers' MoE plans (packed_colwise gate_up, rowwise down): each rank holds a
  // slice of every expert's intermediate dimension, its partial sums added by one all-reduce.
  const std::string gate_up_name = prefix + "gate_up_proj", down_name = prefix + "down_proj";
  b.record_module(gate_up_name, Role::kExpertsGateUp, l);
  b.record_module(down_name, Role::kExpertsDown, l);
  // Biases (gpt-oss): gate_up's [E, 2I] split as its rows (each expert's gate and up halves), down's [E, H]
  // added once, by rank 0's partial sum (y = sum_k w_k (down_k(act_k) + b_k) is linear in down_k's sum).
  const bool split = b.key().tp_size > 1 && c.tp.split(Role::kExpertsGateUp, l) == TpSplit::kCol;
  graph::WeightView gu_view, down_view, gu_bias_view, down_bias_view;
  if (split) {
    gu_view.split_dim = 0;
    gu_view.shards = b.key().tp_size;
    gu_view.packed = 2;  // the gate half and the up half each split
    down_view.split_dim = 1;
    down_view.shards = b.key().tp_size;
    gu_bias_view = gu_view;
    gu_bias_view.stacked = true;
    down_bias_view.rank0_only = true;
  }
  const int gate_up = b.weight(gate_up_name, {E, 2 * I, H}, gu_view);
  const int down = b.weight(down_name, {E, H, I}, down_view);
  const int gate_up_bias =
      m.bias ? b.weight(gate_up_name + "_bias", {E, 2 * I}, gu_bias_view, false, true) : -1;
  const int down_bias = m.bias ? b.weight(down_name + "_bias", {E, H}, down_bias_view, false, true) : -1;
  const graph::Activation act =
      m.clamped_swiglu ? graph::Activation::ClampedSwiglu : graph_activation(c.hidden_act);
  int y = b.moe_experts(h, route, gate_up, down, gate_up_bias, down_bias, E, c.num_experts_per_tok, act,
                        n.node + "experts", m.alpha, m.limit);
  if (split) y = b.all_reduce(y, n.node + "experts.all_reduce");
  return y;
}

int pre_post_norm_layer(GraphBuilder& b, const StepNodes& in, int x, int layer, const SelfAttention& a) {
  const DecoderConfig& c = b.config();
  const LayerNames n = layer_names(layer);
  const int64_t H = c.hidden_size;
  int h = b.norm(x, n.module + "input_layernorm", H, n.node + "attn_norm");
  int attn = self_attention(b, in, n, h, a);
  attn = b.norm(attn, n.module + "post_attention_layernorm", H, n.node + "attn_post_norm");
  x = b.add(x, attn, n.node + "attn_residual");
  h = b.norm(x, n.module + "pre_feedforward_layernorm", H, n.node + "mlp_norm");
  int mlp = gated_mlp(b, n, h, {});
  mlp = b.norm(mlp, n.module + "post_feedforward_layernorm", H, n.node + "mlp_post_norm");
  return b.add(x, mlp, n.node + "mlp_residual");
}

float embedding_scale(const DecoderConfig& c, DType dtype) {
  return embedding_scale(static_cast<double>(c.hidden_size), dtype);
}

float embedding_scale(double dim, DType dtype) {
  // Transformers multiplies by a tensor of sqrt(dim) in the weights' dtype.
  const float s = static_cast<float>(std::sqrt(dim));
  if (dtype == DType::BF16) return bf16_to_f32(f32_to_bf16(s));
  if (dtype == DType::F16) return f16_to_f32(f32_to_f16(s));
  return s;
}

int token_embedding(GraphBuilder& b, const StepNodes& in) {
  const DecoderConfig& c = b.config();
  b.record_module("model.embed_tokens", Role::kEmbed);
  int table = b.weight("model.embed_tokens.weight", {c.vocab_size, c.hidden_size});
  const float scale = c.scale_embeddings ? embedding_scale(c, b.key().dtype) : 0.0f;
  return b.embedding(table, in.ids, "embed", scale);  // [rows, hidden]
}

int causal_lm_head(GraphBuilder& b, int x) {
  const DecoderConfig& c = b.config();
  x = b.norm(x, "model.norm", c.hidden_size, "final_norm");
  if (!b.key().all_logits) x = b.last_row(x, "last_position");  // [batch, hidden]
  // Tied embeddings: the LM head reads the embedding table (a block of its rows when vocab-parallel).
  const std::string head = c.tie_word_embeddings ? "model.embed_tokens" : "lm_head";
  const int logits = b.linear(x, {head, Role::kLmHead, -1, c.vocab_size, c.hidden_size, false},
                              "logits");  // [rows, vocab]
  if (c.final_logit_softcapping > 0) return b.soft_cap(logits, c.final_logit_softcapping, "logits_softcap");
  return logits;
}

graph::Graph build_causal_lm(const DecoderConfig& c, const graph::ShapeKey& key, DecoderLayer layer,
                             std::vector<ModuleSpec>* modules, InputEmbedding embed) {
  TS_ASSERT(key.tp_size == c.tp.size && key.tp_rank == c.tp.rank, "key ", key.str(), " vs tp layout ",
            c.tp.rank, "/", c.tp.size);
  GraphBuilder b(c, key);
  StepNodes in = add_step_inputs(b);
  int x = embed ? embed(b, in) : token_embedding(b, in);
  for (int l = 0; l < c.num_layers; ++l) x = layer(b, in, x, l);
  const int logits = causal_lm_head(b, x);
  if (modules) *modules = b.modules();
  return b.finish(logits);
}

TpPlan attention_tp_plan() {
  return {{"layers.*.self_attn.q_proj", "colwise"},
          {"layers.*.self_attn.k_proj", "colwise"},
          {"layers.*.self_attn.v_proj", "colwise"},
          {"layers.*.self_attn.o_proj", "rowwise"}};
}

TpPlan gated_mlp_tp_plan() {
  return {{"layers.*.mlp.gate_proj", "colwise"},
          {"layers.*.mlp.up_proj", "colwise"},
          {"layers.*.mlp.down_proj", "rowwise"}};
}

TpPlan experts_tp_plan() {
  return {{"layers.*.mlp.experts.gate_up_proj", "packed_colwise"},
          {"layers.*.mlp.experts.down_proj", "rowwise"}};
}

TpPlan fused_gate_up_tp_plan() {
  return {{"layers.*.mlp.gate_up_proj", "colwise_gather_output"},
          {"layers.*.mlp.down_proj", "rowwise_split_input"}};
}

TpPlan causal_lm_tp_plan(std::initializer_list<TpPlan> parts) {
  TpPlan plan;
  for (const TpPlan& p : parts) plan.insert(plan.end(), p.begin(), p.end());
  plan.emplace_back("lm_head", "colwise_gather_output");
  return plan;
}

namespace {

// The whole model (every stored tensor, whatever a rank's share) at the smallest key.
graph::Graph whole_graph(const DecoderConfig& c, DecoderLayer layer, InputEmbedding embed,
                         std::vector<ModuleSpec>* modules) {
  graph::ShapeKey key{
      .phase = graph::Phase::Decode, .batch = 1, .seq = 1, .cache_len = 1, .dtype = DType::F32};
  DecoderConfig whole = c;
  whole.tp = {};
  return build_causal_lm(whole, key, layer, modules, embed);
}

// The shared config parser (CausalLmSpec::parse).
std::function<DecoderConfig(const nlohmann::json&, const std::string&)> shared_parser(
    const CausalLmSpec& spec) {
  return [name = std::string(spec.name), defaults = spec.defaults, null_refused = spec.null_refused,
          check = spec.check, finish = spec.finish,
          own_keys = spec.config_keys](const nlohmann::json& j, const std::string& origin) {
    const ConfigReader r = checked_config_reader(j, origin, own_keys);
    for (const NullRefused& k : null_refused)
      if (j.contains(k.key) && j[k.key].is_null())
        r.fail_field(k.key, "is null, which " + name + " does not support (" + k.why + ")");
    if (check) check(r);
    DecoderConfig c;
    c.architecture = name;
    parse_decoder_config(r, defaults, c);
    if (finish) finish(r, c);
    validate(c, origin);
    return c;
  };
}

}  // namespace

Architecture causal_lm_architecture(CausalLmSpec spec) {
  const DecoderLayer layer = spec.layer;
  const InputEmbedding embed = spec.embed;
  std::vector<ConfigKey> keys = merge_config_keys(decoder_config_keys(), spec.config_keys);
  auto parse = spec.parse ? std::move(spec.parse) : shared_parser(spec);
  return Architecture{
      .name = spec.name,
      .parse_config = std::move(parse),
      // Derived from the graph so the list can never drift from what is read (linear in the graph's nodes).
      .weights =
          [layer, embed](const DecoderConfig& c) {
            return weight_specs_of(whole_graph(c, layer, embed, nullptr));
          },
      .build_graph = [layer, embed](
                         const DecoderConfig& c,
                         const graph::ShapeKey& k) { return build_causal_lm(c, k, layer, nullptr, embed); },
      .modules =
          [layer, embed](const DecoderConfig& c) {
            std::vector<ModuleSpec> m;
            whole_graph(c, layer, embed, &m);
            return m;
          },
      .ignorable_suffixes = {"rotary_emb.inv_freq"},
      .ignorable_prefixes = std::move(spec.ignorable_prefixes),
      .tp_plan = std::move(spec.tp_plan),
      .config_keys = std::move(keys),
      .unsplit_attention = spec.unsplit_attention,
  };
}

}  // namespace tessera::models
