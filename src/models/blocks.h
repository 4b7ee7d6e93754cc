// Shared building blocks for decoder-only transformers in the Llama family.
// Every activation is [rows, features] float32 with rows = batch * seq.
#pragma once
#include <string>
#include <vector>

#include "graph/graph.h"
#include "models/architecture.h"
#include "models/config.h"

namespace tessera::models {

// Appends nodes to a Graph with the shapes worked out.
class GraphBuilder {
 public:
  GraphBuilder(const DecoderConfig& c, const graph::ShapeKey& key);
  graph::Graph finish(int logits);

  int rows() const { return rows_; }
  const graph::ShapeKey& key() const { return g_.key; }
  int input(graph::InputKind kind, Shape shape, const char* name);
  int weight(const std::string& name, Shape shape);
  int cache_state(int layer, int which);
  int embedding(int table, int ids, const std::string& name);
  int rms_norm(int x, int w, int64_t dim, const std::string& name);
  int matmul(int x, int w, int bias, const std::string& name);  // bias = -1 for none
  int rope(int x, int positions, int64_t heads, const std::string& name);
  int cache_update(int cache, int x, int slots, const std::string& name);
  int attention(int q, int k_cache, int v_cache, int slots, int kv_begin, const std::string& name);
  int swiglu(int gate, int up, const std::string& name);
  int add(int a, int b, const std::string& name);
  int last_row(int x, const std::string& name);

  const DecoderConfig& config() const { return c_; }

 private:
  int64_t cols(int node) const { return g_.at(node).shape.back(); }
  const DecoderConfig& c_;
  graph::Graph g_;
  int rows_;
};

// Step inputs every decoder graph reads.
struct StepNodes {
  int ids, positions, slots, kv_begin;
};
StepNodes add_step_inputs(GraphBuilder& b);

// Options that distinguish architectures inside the shared decoder layer.
struct LayerStyle {
  bool qk_norm = false;  // Qwen3: RMSNorm over each head of q and k before RoPE
};

// input_layernorm -> self-attention (GQA, RoPE, static cache) -> residual ->
// post_attention_layernorm -> SwiGLU MLP -> residual.
int build_decoder_layer(GraphBuilder& b, const StepNodes& in, int x, int layer, const LayerStyle& style);
// Embedding, all layers, final norm, (last row,) LM head. Returns the graph.
graph::Graph build_causal_lm(const DecoderConfig& c, const graph::ShapeKey& key, const LayerStyle& style);
// Weight list for the same structure.
std::vector<WeightSpec> causal_lm_weights(const DecoderConfig& c, const LayerStyle& style);

std::string layer_prefix(int layer);  // "model.layers.<i>."

// An architecture of the Llama family: config.json read by parse_common (head_dim from the config, else
// hidden / heads), the shared decoder layer in `style`, weights derived from the graph.
Architecture llama_family_architecture(const char* name, LayerStyle style);

}  // namespace tessera::models
