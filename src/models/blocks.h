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
  // A weight node reading `view` (default: all) of the stored tensor `name` of shape `stored`.
  int weight(const std::string& name, Shape stored, graph::WeightView view = {});
  int cache_state(int layer, int which);
  int embedding(int table, int ids, const std::string& name);
  int rms_norm(int x, int w, int64_t dim, const std::string& name);
  int matmul(int x, int w, int bias, const std::string& name);  // bias = -1 for none

  // How a linear layer is split over the tensor-parallel ranks.
  enum class Split : uint8_t {
    None,       // every rank holds the whole weight
    Col,        // rows of W (output features) split; the output stays split
    Row,        // columns of W (input features) split; partial outputs summed by an all-reduce
    ColGather,  // Col, then the outputs all-gathered (vocab-parallel LM head)
  };
  struct Linear {
    std::string module;       // Hugging Face module path, e.g. "model.layers.0.self_attn.q_proj"
    int64_t out = 0, in = 0;  // unsplit features of this (part of the) layer
    bool bias = false;
    Split split = Split::None;
    int64_t part_begin = 0,
            stored_out = 0;               // a block of rows of a fused tensor with stored_out rows (0: out)
    int64_t rope_head = 0, rope_rot = 0;  // rows holding interleaved rotary pairs (graph::WeightView)
  };
  // x @ W^T + b on this rank's share; splits apply only when the key's tp_size > 1.
  int linear(int x, const Linear& l, const std::string& name);
  int all_reduce(int x, const std::string& name);
  int all_gather(int x, const std::string& name);
  int rope(int x, int positions, int64_t heads, const std::string& name);
  int cache_update(int cache, int x, int slots, const std::string& name);
  // window > 0: sliding-window attention (a query sees the last `window` positions, itself included).
  int attention(int q, int k_cache, int v_cache, int slots, int kv_begin, int64_t window,
                const std::string& name);
  int gated_act(int gate, int up, graph::Activation act, const std::string& name);  // act(gate) * up
  int add(int a, int b, const std::string& name);
  int last_row(int x, const std::string& name);

  const DecoderConfig& config() const { return c_; }

 private:
  int64_t cols(int node) const { return g_.at(node).shape.back(); }
  const DecoderConfig& c_;
  graph::Graph g_;
  int rows_;
  int cache_rows_ = -1;  // the CacheRows input (row-mapped steps), else -1
};

// Step inputs every decoder graph reads.
struct StepNodes {
  int ids, positions, slots, kv_begin;
  int cache_rows = -1;  // ShapeKey::row_mapped() steps only
};
StepNodes add_step_inputs(GraphBuilder& b);

// Options that distinguish architectures inside the shared decoder layer.
struct LayerStyle {
  bool qk_norm = false;  // Qwen3: RMSNorm over each head of q and k before RoPE
  bool sandwich_norms =
      false;  // GLM-4: post_self_attn_layernorm / post_mlp_layernorm on each sublayer's output
  bool fused_gate_up = false;     // GLM-4: mlp.gate_up_proj [2I, H], gate = rows [0, I), up = rows [I, 2I)
  bool rope_interleaved = false;  // GLM-4: rotary pairs (2i, 2i+1) of the first rot_dim dims of each head
  bool o_proj_bias = true;        // o_proj has a bias when attention_bias is set (GLM-4: never)
};

// input_layernorm -> self-attention (GQA, RoPE, static cache) -> residual ->
// post_attention_layernorm -> gated MLP (act(gate) * up, act = config.hidden_act) -> residual.
// Sliding layers (config.layer_is_sliding) attend within config.sliding_window.
int build_decoder_layer(GraphBuilder& b, const StepNodes& in, int x, int layer, const LayerStyle& style);
// Embedding, all layers, final norm, (last row,) LM head. Returns the graph.
graph::Graph build_causal_lm(const DecoderConfig& c, const graph::ShapeKey& key, const LayerStyle& style);
// Weight list for the same structure.
std::vector<WeightSpec> causal_lm_weights(const DecoderConfig& c, const LayerStyle& style);

std::string layer_prefix(int layer);
graph::Activation graph_activation(Activation a);
// Transformers' base_model_tp_plan for a Llama-family layer in `style`, plus lm_head.
std::vector<std::pair<std::string, std::string>> default_tp_plan(
    const LayerStyle& style);  // "model.layers.<i>."

// An architecture of the Llama family without its config parser (models::llama_family_with adds the
// architecture's own parser and key table): the shared decoder layer in `style`, weights derived from the
// graph, and its default tensor-parallel plan (Transformers' base_model_tp_plan form; lm_head
// vocab-parallel).
Architecture llama_family_architecture(const char* name, LayerStyle style);

}  // namespace tessera::models
