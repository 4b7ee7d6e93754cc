#include "models/blocks.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "tessera/error.h"

namespace tessera::models {

using graph::InputKind;
using graph::Node;
using graph::Op;

std::string layer_prefix(int layer) { return "model.layers." + std::to_string(layer) + "."; }

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

GraphBuilder::GraphBuilder(const DecoderConfig& c, const graph::ShapeKey& key) : c_(c) {
  g_.key = key;
  rows_ = key.batch * key.seq;
  g_.rope_tables.push_back(rope_inv_freq(c));
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

int GraphBuilder::weight(const std::string& name, Shape stored, graph::WeightView view) {
  // Matrices in the model dtype; vectors (norms, biases) stay float32.
  DType dt = stored.size() == 1 ? DType::F32 : g_.key.dtype;
  Shape local = stored;
  if (view.rows >= 0) local[0] = view.rows;
  if (view.split_dim >= 0) {
    TS_ASSERT(local[static_cast<size_t>(view.split_dim)] % view.shards == 0, name, " ", shape_str(local),
              " over ", view.shards);
    local[static_cast<size_t>(view.split_dim)] /= view.shards;
  }
  view.stored = std::move(stored);
  Node n{.op = Op::Weight, .name = name, .inputs = {}, .shape = std::move(local), .dtype = dt};
  n.view = std::move(view);
  return g_.add(std::move(n));
}

int GraphBuilder::cache_state(int layer, int which) {
  Node n{.op = Op::CacheState,
         .name = "layers." + std::to_string(layer) + (which == 0 ? ".k_cache" : ".v_cache"),
         .inputs = {},
         .shape = {g_.key.cache_batch(), c_.local_kv_heads(), g_.key.cache_len, c_.head_dim}};
  n.layer = layer;
  n.which = which;
  n.kv_heads = c_.local_kv_heads();
  n.head_dim = c_.head_dim;
  return g_.add(std::move(n));
}

int GraphBuilder::embedding(int table, int ids, const std::string& name) {
  return g_.add(
      Node{.op = Op::Embedding, .name = name, .inputs = {table, ids}, .shape = {rows_, c_.hidden_size}});
}

int GraphBuilder::rms_norm(int x, int w, int64_t dim, const std::string& name) {
  TS_ASSERT(cols(x) % dim == 0, name);
  Node n{.op = Op::RmsNorm, .name = name, .inputs = {x, w}, .shape = g_.at(x).shape};
  n.dim = dim;
  n.eps = static_cast<float>(c_.rms_norm_eps);
  return g_.add(std::move(n));
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
  const int tp = g_.key.tp_size;
  const int64_t stored_out = l.stored_out > 0 ? l.stored_out : l.out;
  graph::WeightView wv, bv;
  wv.rope_head = bv.rope_head = l.rope_head;
  wv.rope_rot = bv.rope_rot = l.rope_rot;
  if (l.part_begin != 0 || l.out != stored_out) {
    wv.row_begin = bv.row_begin = l.part_begin;
    wv.rows = bv.rows = l.out;
  }
  const bool split = tp > 1 && l.split != Split::None;
  if (split && (l.split == Split::Col || l.split == Split::ColGather)) {
    wv.split_dim = bv.split_dim = 0;
    wv.shards = bv.shards = tp;
  } else if (split && l.split == Split::Row) {
    wv.split_dim = 1;
    wv.shards = tp;
    bv.rank0_only = true;  // the bias is added once: by rank 0's partial sum
  }
  const int w = weight(l.module + ".weight", {stored_out, l.in}, wv);
  const int b = l.bias ? weight(l.module + ".bias", {stored_out}, bv) : -1;
  int y = matmul(x, w, b, name);
  if (split && l.split == Split::Row) y = all_reduce(y, name + ".all_reduce");
  if (split && l.split == Split::ColGather) y = all_gather(y, name + ".all_gather");
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

int GraphBuilder::rope(int x, int positions, int64_t heads, const std::string& name) {
  Node n{.op = Op::Rope, .name = name, .inputs = {x, positions}, .shape = g_.at(x).shape};
  n.heads = heads;
  n.head_dim = c_.head_dim;
  n.rot_dim = c_.rot_dim();
  n.rope_table = 0;
  return g_.add(std::move(n));
}

int GraphBuilder::cache_update(int cache, int x, int slots, const std::string& name) {
  Node n{.op = Op::CacheUpdate, .name = name, .inputs = {cache, x, slots}, .shape = g_.at(cache).shape};
  if (cache_rows_ >= 0) n.inputs.push_back(cache_rows_);
  n.kv_heads = c_.local_kv_heads();
  n.head_dim = c_.head_dim;
  return g_.add(std::move(n));
}

int GraphBuilder::attention(int q, int k_cache, int v_cache, int slots, int kv_begin, int64_t window,
                            const std::string& name) {
  Node n{.op = Op::Attention,
         .name = name,
         .inputs = {q, k_cache, v_cache, slots, kv_begin},
         .shape = {rows_, c_.local_heads() * c_.head_dim}};
  if (cache_rows_ >= 0) n.inputs.push_back(cache_rows_);
  n.heads = c_.local_heads();
  n.kv_heads = c_.local_kv_heads();
  n.head_dim = c_.head_dim;
  n.scale = 1.0f / std::sqrt(static_cast<float>(c_.head_dim));
  TS_ASSERT(window >= 0, name, " window ", window);
  n.window = window;
  return g_.add(std::move(n));
}

int GraphBuilder::gated_act(int gate, int up, graph::Activation act, const std::string& name) {
  TS_ASSERT(g_.at(gate).shape == g_.at(up).shape, name);
  Node n{.op = Op::GatedAct, .name = name, .inputs = {gate, up}, .shape = g_.at(gate).shape};
  n.act = act;
  return g_.add(std::move(n));
}

int GraphBuilder::add(int a, int b, const std::string& name) {
  return g_.add(Node{.op = Op::Add, .name = name, .inputs = {a, b}, .shape = g_.at(a).shape});
}

int GraphBuilder::last_row(int x, const std::string& name) {
  return g_.add(Node{.op = Op::LastRow, .name = name, .inputs = {x}, .shape = {g_.key.batch, cols(x)}});
}

StepNodes add_step_inputs(GraphBuilder& b) {
  StepNodes s{};
  s.ids = b.input(InputKind::TokenIds, {b.rows()}, "input_ids");          // [batch * seq]
  s.positions = b.input(InputKind::Positions, {b.rows()}, "positions");   // [batch * seq]
  s.slots = b.input(InputKind::Slots, {b.rows()}, "slots");               // [batch * seq] cache slot per column
  s.kv_begin = b.input(InputKind::KvBegin, {b.key().batch}, "kv_begin");  // [batch] first valid slot
  // A step over some rows of a multi-slot cache: the cache row of each step row.
  s.cache_rows = b.key().row_mapped() ? b.input(InputKind::CacheRows, {b.key().batch}, "cache_rows") : -1;
  return s;
}

int build_decoder_layer(GraphBuilder& b, const StepNodes& in, int x, int layer, const LayerStyle& style) {
  using Split = GraphBuilder::Split;
  const DecoderConfig& c = b.config();
  const std::string p = layer_prefix(layer);
  const std::string n = "layers." + std::to_string(layer) + ".";
  const int64_t H = c.hidden_size, q_dim = c.num_heads * c.head_dim, kv_dim = c.num_kv_heads * c.head_dim;
  auto norm = [&](int v, const std::string& weight, int64_t dim, const std::string& name) {
    return b.rms_norm(v, b.weight(p + weight, {dim}), dim, n + name);
  };

  // Attention, split by heads when the plan says so. h: [rows, H]; q, k, v, attn: [rows, local heads *
  // head_dim]
  const Split col = c.tp.attn_split ? Split::Col : Split::None,
              row = c.tp.attn_split ? Split::Row : Split::None;
  const int64_t rope_head = style.rope_interleaved ? c.head_dim : 0,
                rope_rot = style.rope_interleaved ? c.rot_dim() : 0;
  int h = norm(x, "input_layernorm.weight", H, "attn_norm");
  int q = b.linear(h, {p + "self_attn.q_proj", q_dim, H, c.attention_bias, col, 0, 0, rope_head, rope_rot},
                   n + "q");
  int k = b.linear(h, {p + "self_attn.k_proj", kv_dim, H, c.attention_bias, col, 0, 0, rope_head, rope_rot},
                   n + "k");
  int v = b.linear(h, {p + "self_attn.v_proj", kv_dim, H, c.attention_bias, col}, n + "v");
  if (style.qk_norm) {
    q = norm(q, "self_attn.q_norm.weight", c.head_dim, "q_norm");
    k = norm(k, "self_attn.k_norm.weight", c.head_dim, "k_norm");
  }
  q = b.rope(q, in.positions, c.local_heads(), n + "q_rope");
  k = b.rope(k, in.positions, c.local_kv_heads(), n + "k_rope");
  int kc = b.cache_update(b.cache_state(layer, 0), k, in.slots, n + "k_cache_update");
  int vc = b.cache_update(b.cache_state(layer, 1), v, in.slots, n + "v_cache_update");
  const int64_t window = c.layer_is_sliding(layer) ? c.sliding_window : 0;
  int attn = b.attention(q, kc, vc, in.slots, in.kv_begin, window, n + "attn");
  int o = b.linear(attn, {p + "self_attn.o_proj", H, q_dim, c.attention_bias && style.o_proj_bias, row},
                   n + "attn_out");
  if (style.sandwich_norms) o = norm(o, "post_self_attn_layernorm.weight", H, "attn_post_norm");
  x = b.add(x, o, n + "attn_residual");

  // MLP. h2: [rows, H]; gate, up, act: [rows, local intermediate]
  const Split mcol = c.tp.mlp_split_at(layer) ? Split::Col : Split::None;
  const Split mrow = c.tp.mlp_split_at(layer) ? Split::Row : Split::None;
  const int64_t I = c.intermediate_size;
  int h2 = norm(x, "post_attention_layernorm.weight", H, "mlp_norm");
  int gate, up;
  if (style.fused_gate_up) {
    gate = b.linear(h2, {p + "mlp.gate_up_proj", I, H, c.mlp_bias, mcol, 0, 2 * I}, n + "gate");
    up = b.linear(h2, {p + "mlp.gate_up_proj", I, H, c.mlp_bias, mcol, I, 2 * I}, n + "up");
  } else {
    gate = b.linear(h2, {p + "mlp.gate_proj", I, H, c.mlp_bias, mcol}, n + "gate");
    up = b.linear(h2, {p + "mlp.up_proj", I, H, c.mlp_bias, mcol}, n + "up");
  }
  // Node names keep the usual name of each gated unit (SwiGLU, GeGLU, ReGLU).
  const graph::Activation act_kind = graph_activation(c.hidden_act);
  const char* unit = act_kind == graph::Activation::Silu       ? "swiglu"
                     : act_kind == graph::Activation::Relu     ? "reglu"
                     : act_kind == graph::Activation::GeluTanh ? "geglu_tanh"
                                                               : "geglu";
  int act = b.gated_act(gate, up, act_kind, n + unit);
  int down = b.linear(act, {p + "mlp.down_proj", H, I, c.mlp_bias, mrow}, n + "down");
  if (style.sandwich_norms) down = norm(down, "post_mlp_layernorm.weight", H, "mlp_post_norm");
  return b.add(x, down, n + "mlp_residual");
}

graph::Graph build_causal_lm(const DecoderConfig& c, const graph::ShapeKey& key, const LayerStyle& style) {
  TS_ASSERT(key.tp_size == c.tp.size && key.tp_rank == c.tp.rank, "key ", key.str(), " vs tp layout ",
            c.tp.rank, "/", c.tp.size);
  GraphBuilder b(c, key);
  StepNodes in = add_step_inputs(b);
  int table = b.weight("model.embed_tokens.weight", {c.vocab_size, c.hidden_size});
  int x = b.embedding(table, in.ids, "embed");  // [rows, hidden]
  for (int l = 0; l < c.num_layers; ++l) x = build_decoder_layer(b, in, x, l, style);
  x = b.rms_norm(x, b.weight("model.norm.weight", {c.hidden_size}), c.hidden_size, "final_norm");
  if (!key.all_logits) x = b.last_row(x, "last_position");  // [batch, hidden]
  // Tied embeddings: the LM head reads the embedding table (a block of its rows when vocab-parallel).
  const std::string head = c.tie_word_embeddings ? "model.embed_tokens" : "lm_head";
  const auto split = c.tp.lm_head_split ? GraphBuilder::Split::ColGather : GraphBuilder::Split::None;
  return b.finish(b.linear(x, {head, c.vocab_size, c.hidden_size, false, split}, "logits"));  // [rows, vocab]
}

std::vector<WeightSpec> causal_lm_weights(const DecoderConfig& c, const LayerStyle& style) {
  // Derived from the graph so the list can never drift from what is read (linear in the graph's nodes).
  graph::ShapeKey key{
      .phase = graph::Phase::Decode, .batch = 1, .seq = 1, .cache_len = 1, .dtype = DType::F32};
  DecoderConfig whole = c;
  whole.tp = {};  // the stored tensors, whatever this rank's share
  return weight_specs_of(build_causal_lm(whole, key, style));
}

std::vector<std::pair<std::string, std::string>> default_tp_plan(const LayerStyle& style) {
  std::vector<std::pair<std::string, std::string>> plan = {
      {"layers.*.self_attn.q_proj", "colwise"},
      {"layers.*.self_attn.k_proj", "colwise"},
      {"layers.*.self_attn.v_proj", "colwise"},
      {"layers.*.self_attn.o_proj", "rowwise"},
  };
  if (style.qk_norm) {
    plan.emplace_back("layers.*.self_attn.q_norm", "replicated_with_grad_allreduce");
    plan.emplace_back("layers.*.self_attn.k_norm", "replicated_with_grad_allreduce");
  }
  if (style.fused_gate_up) {
    // Transformers' GLM-4 plan; we split gate and up halves column-wise, so nothing is gathered (same
    // result).
    plan.emplace_back("layers.*.mlp.gate_up_proj", "colwise_gather_output");
    plan.emplace_back("layers.*.mlp.down_proj", "rowwise_split_input");
  } else {
    plan.emplace_back("layers.*.mlp.gate_proj", "colwise");
    plan.emplace_back("layers.*.mlp.up_proj", "colwise");
    plan.emplace_back("layers.*.mlp.down_proj", "rowwise");
  }
  plan.emplace_back("lm_head", "colwise_gather_output");
  return plan;
}

Architecture llama_family_architecture(const char* name, LayerStyle style) {
  return Architecture{
      .name = name,
      .parse_config = {},  // set by llama_family_with
      .weights = [style](const DecoderConfig& c) { return causal_lm_weights(c, style); },
      .build_graph = [style](const DecoderConfig& c,
                             const graph::ShapeKey& k) { return build_causal_lm(c, k, style); },
      .ignorable_suffixes = {"rotary_emb.inv_freq"},
      .tp_plan = default_tp_plan(style),
      .config_keys = {},
  };
}

}  // namespace tessera::models
