#include "models/blocks.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "tessera/error.h"

namespace tessera::models {

using graph::InputKind;
using graph::Node;
using graph::Op;

std::string layer_prefix(int layer) { return "model.layers." + std::to_string(layer) + "."; }

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
  return g_.add(std::move(n));
}

int GraphBuilder::weight(const std::string& name, Shape shape) {
  // Matrices in the model dtype; vectors (norms, biases) stay float32.
  DType dt = shape.size() == 1 ? DType::F32 : g_.key.dtype;
  Node n{.op = Op::Weight, .name = name, .inputs = {}, .shape = std::move(shape), .dtype = dt};
  return g_.add(std::move(n));
}

int GraphBuilder::cache_state(int layer, int which) {
  Node n{.op = Op::CacheState,
         .name = "layers." + std::to_string(layer) + (which == 0 ? ".k_cache" : ".v_cache"),
         .inputs = {},
         .shape = {g_.key.batch, c_.num_kv_heads, g_.key.cache_len, c_.head_dim}};
  n.layer = layer;
  n.which = which;
  n.kv_heads = c_.num_kv_heads;
  n.head_dim = c_.head_dim;
  return g_.add(std::move(n));
}

int GraphBuilder::embedding(int table, int ids, const std::string& name) {
  return g_.add(Node{.op = Op::Embedding, .name = name, .inputs = {table, ids}, .shape = {rows_, c_.hidden_size}});
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
  TS_ASSERT(ws.size() == 2 && ws[1] == cols(x), name, ": weight ", shape_str(ws), " vs input ", shape_str(g_.at(x).shape));
  std::vector<int> ins{x, w};
  if (bias >= 0) ins.push_back(bias);
  return g_.add(Node{.op = Op::MatMul, .name = name, .inputs = ins, .shape = {g_.at(x).shape[0], ws[0]}});
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
  n.kv_heads = c_.num_kv_heads;
  n.head_dim = c_.head_dim;
  return g_.add(std::move(n));
}

int GraphBuilder::attention(int q, int k_cache, int v_cache, int slots, int kv_begin, const std::string& name) {
  Node n{.op = Op::Attention,
         .name = name,
         .inputs = {q, k_cache, v_cache, slots, kv_begin},
         .shape = {rows_, c_.num_heads * c_.head_dim}};
  n.heads = c_.num_heads;
  n.kv_heads = c_.num_kv_heads;
  n.head_dim = c_.head_dim;
  n.scale = 1.0f / std::sqrt(static_cast<float>(c_.head_dim));
  return g_.add(std::move(n));
}

int GraphBuilder::swiglu(int gate, int up, const std::string& name) {
  return g_.add(Node{.op = Op::SwiGlu, .name = name, .inputs = {gate, up}, .shape = g_.at(gate).shape});
}

int GraphBuilder::add(int a, int b, const std::string& name) {
  return g_.add(Node{.op = Op::Add, .name = name, .inputs = {a, b}, .shape = g_.at(a).shape});
}

int GraphBuilder::last_row(int x, const std::string& name) {
  return g_.add(Node{.op = Op::LastRow, .name = name, .inputs = {x}, .shape = {g_.key.batch, cols(x)}});
}

StepNodes add_step_inputs(GraphBuilder& b) {
  StepNodes s{};
  s.ids = b.input(InputKind::TokenIds, {b.rows()}, "input_ids");         // [batch * seq]
  s.positions = b.input(InputKind::Positions, {b.rows()}, "positions");  // [batch * seq]
  s.slots = b.input(InputKind::Slots, {b.key().seq}, "slots");           // [seq] cache slot per query column
  s.kv_begin = b.input(InputKind::KvBegin, {b.key().batch}, "kv_begin");  // [batch] first valid slot
  return s;
}

int build_decoder_layer(GraphBuilder& b, const StepNodes& in, int x, int layer, const LayerStyle& style) {
  const DecoderConfig& c = b.config();
  const std::string p = layer_prefix(layer);
  const std::string n = "layers." + std::to_string(layer) + ".";
  const int64_t q_dim = c.num_heads * c.head_dim, kv_dim = c.num_kv_heads * c.head_dim;
  auto bias = [&](const std::string& name, int64_t size, bool present) {
    return present ? b.weight(name, {size}) : -1;
  };

  // Attention. h, q, k, v, attn: [rows, *]
  int h = b.rms_norm(x, b.weight(p + "input_layernorm.weight", {c.hidden_size}), c.hidden_size, n + "attn_norm");
  int q = b.matmul(h, b.weight(p + "self_attn.q_proj.weight", {q_dim, c.hidden_size}),
                   bias(p + "self_attn.q_proj.bias", q_dim, c.attention_bias), n + "q");
  int k = b.matmul(h, b.weight(p + "self_attn.k_proj.weight", {kv_dim, c.hidden_size}),
                   bias(p + "self_attn.k_proj.bias", kv_dim, c.attention_bias), n + "k");
  int v = b.matmul(h, b.weight(p + "self_attn.v_proj.weight", {kv_dim, c.hidden_size}),
                   bias(p + "self_attn.v_proj.bias", kv_dim, c.attention_bias), n + "v");
  if (style.qk_norm) {
    q = b.rms_norm(q, b.weight(p + "self_attn.q_norm.weight", {c.head_dim}), c.head_dim, n + "q_norm");
    k = b.rms_norm(k, b.weight(p + "self_attn.k_norm.weight", {c.head_dim}), c.head_dim, n + "k_norm");
  }
  q = b.rope(q, in.positions, c.num_heads, n + "q_rope");
  k = b.rope(k, in.positions, c.num_kv_heads, n + "k_rope");
  int kc = b.cache_update(b.cache_state(layer, 0), k, in.slots, n + "k_cache_update");
  int vc = b.cache_update(b.cache_state(layer, 1), v, in.slots, n + "v_cache_update");
  int attn = b.attention(q, kc, vc, in.slots, in.kv_begin, n + "attn");
  int o = b.matmul(attn, b.weight(p + "self_attn.o_proj.weight", {c.hidden_size, q_dim}),
                   bias(p + "self_attn.o_proj.bias", c.hidden_size, c.attention_bias), n + "attn_out");
  x = b.add(x, o, n + "attn_residual");

  // MLP. h2: [rows, hidden]; gate, up, act: [rows, intermediate]
  int h2 = b.rms_norm(x, b.weight(p + "post_attention_layernorm.weight", {c.hidden_size}), c.hidden_size,
                      n + "mlp_norm");
  const int64_t I = c.intermediate_size;
  int gate = b.matmul(h2, b.weight(p + "mlp.gate_proj.weight", {I, c.hidden_size}),
                      bias(p + "mlp.gate_proj.bias", I, c.mlp_bias), n + "gate");
  int up = b.matmul(h2, b.weight(p + "mlp.up_proj.weight", {I, c.hidden_size}),
                    bias(p + "mlp.up_proj.bias", I, c.mlp_bias), n + "up");
  int act = b.swiglu(gate, up, n + "swiglu");
  int down = b.matmul(act, b.weight(p + "mlp.down_proj.weight", {c.hidden_size, I}),
                      bias(p + "mlp.down_proj.bias", c.hidden_size, c.mlp_bias), n + "down");
  return b.add(x, down, n + "mlp_residual");
}

graph::Graph build_causal_lm(const DecoderConfig& c, const graph::ShapeKey& key, const LayerStyle& style) {
  GraphBuilder b(c, key);
  StepNodes in = add_step_inputs(b);
  int table = b.weight("model.embed_tokens.weight", {c.vocab_size, c.hidden_size});
  int x = b.embedding(table, in.ids, "embed");  // [rows, hidden]
  for (int l = 0; l < c.num_layers; ++l) x = build_decoder_layer(b, in, x, l, style);
  x = b.rms_norm(x, b.weight("model.norm.weight", {c.hidden_size}), c.hidden_size, "final_norm");
  if (!key.all_logits) x = b.last_row(x, "last_position");  // [batch, hidden]
  int head = c.tie_word_embeddings ? table : b.weight("lm_head.weight", {c.vocab_size, c.hidden_size});
  return b.finish(b.matmul(x, head, -1, "logits"));  // [rows or batch, vocab]
}

std::vector<WeightSpec> causal_lm_weights(const DecoderConfig& c, const LayerStyle& style) {
  // Derived from the graph so the list can never drift from what is read.
  graph::ShapeKey key{.phase = graph::Phase::Decode, .batch = 1, .seq = 1, .cache_len = 1, .dtype = DType::F32};
  graph::Graph g = build_causal_lm(c, key, style);
  std::vector<WeightSpec> out;
  for (const auto& n : g.nodes) {
    if (n.op != Op::Weight) continue;
    bool dup = false;
    for (const auto& w : out) dup = dup || w.name == n.name;
    if (!dup) out.push_back(WeightSpec{n.name, n.shape, n.shape.size() == 1});
  }
  return out;
}

Architecture llama_family_architecture(const char* name, LayerStyle style) {
  return Architecture{
      .name = name,
      .parse_config =
          [name, style](const nlohmann::json& j, const std::string& origin) {
            ConfigReader r(j, origin);
            DecoderConfig c;
            c.architecture = name;
            parse_common(r, c);
            c.head_dim = r.int_or("head_dim", c.num_heads > 0 ? c.hidden_size / c.num_heads : 0);
            c.qk_norm = style.qk_norm;
            validate(c, origin);
            return c;
          },
      .weights = [style](const DecoderConfig& c) { return causal_lm_weights(c, style); },
      .build_graph = [style](const DecoderConfig& c, const graph::ShapeKey& k) { return build_causal_lm(c, k, style); },
      .ignorable_suffixes = {"rotary_emb.inv_freq"},
  };
}

}  // namespace tessera::models
