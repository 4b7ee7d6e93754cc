// Shared building blocks for decoder-only transformers: a GraphBuilder that appends nodes with their shapes
// worked out, and blocks every architecture composes its decoder layer from (self-attention, the gated MLP,
// norms, the token embedding and the LM head, the Llama family's pre-norm layer), the pieces of their
// tensor-parallel plans, and the shared config parser. Each block takes its options explicitly and reads the
// sizes, the activation and the sliding layers from the config; an architecture's file (qwen3.cpp,
// llama.cpp, glm4.cpp, ...) says which it uses and how, in one short layer function.
// Every activation is [rows, features] float32 with rows = batch * seq.
#pragma once
#include <initializer_list>
#include <map>
#include <string>
#include <unordered_set>
#include <vector>

#include "graph/graph.h"
#include "models/architecture.h"
#include "models/config.h"

namespace tessera::models {

// Appends nodes to a Graph with the shapes worked out, and records the modules it reads with their roles.
class GraphBuilder {
 public:
  GraphBuilder(const DecoderConfig& c, const graph::ShapeKey& key);
  graph::Graph finish(int logits);

  int rows() const { return rows_; }
  const graph::ShapeKey& key() const { return g_.key; }
  const DecoderConfig& config() const { return c_; }

  int input(graph::InputKind kind, Shape shape, const char* name);
  // A weight node reading `view` (default: all) of the stored tensor `name` of shape `stored`. Its module
  // (`name` up to its last '.') is recorded with Role::kOther unless already recorded.
  // never_quantize: float32 when the graph's dtype is a block format (quantised at load). as_vector: float32
  // whatever its rank (biases of stacked experts [E, N]).
  int weight(const std::string& name, Shape stored, graph::WeightView view = {}, bool never_quantize = false,
             bool as_vector = false);
  int cache_state(int layer, int which);
  int embedding(int table, int ids, const std::string& name, float scale = 0.0f);  // scale 0: none
  int rms_norm(int x, int w, int64_t dim, const std::string& name);  // w -1: no weight
  // rms_norm over groups of `dim` with the weight `module`.weight [dim] (plus 1 when config().norm_plus_one).
  int norm(int x, const std::string& module, int64_t dim, const std::string& name);
  int matmul(int x, int w, int bias, const std::string& name);  // bias = -1 for none

  struct Linear {
    std::string module;        // Hugging Face module path, e.g. "model.layers.0.self_attn.q_proj"
    Role role = Role::kOther;  // decides the tensor-parallel split (TpLayout::split); a linear role
    int64_t layer = -1;        // the decoder layer (the MLP's split is per layer)
    int64_t out = 0, in = 0;   // unsplit features of this (part of the) layer
    bool bias = false;
    int64_t part_begin = 0,
            stored_out = 0;               // a block of rows of a fused tensor with stored_out rows (0: out)
    int64_t rope_head = 0, rope_rot = 0;  // rows holding interleaved rotary pairs (graph::WeightView)
    int64_t group = 0;  // > 0: of every `group` rows only the parts `takes` (graph::WeightView)
    std::array<graph::WeightView::Take, graph::WeightView::kMaxTakes> takes{};
  };
  // x @ W^T + b on this rank's share: the split is the layout's for the role (config().tp.split), applied
  // only when the key's tp_size > 1. The one place splits happen.
  int linear(int x, const Linear& l, const std::string& name);
  int all_reduce(int x, const std::string& name);
  int all_gather(int x, const std::string& name);
  int rope(int x, int positions, int64_t heads, const std::string& name, int table = 0);  // table 1: local
  int cache_update(int cache, int x, int slots, const std::string& name);
  // The last cache_update of `layer`'s keys (which 0) or values (1): what a later layer sharing them reads.
  int updated_cache(int layer, int which) const;
  // window > 0: sliding-window attention (a query sees the last `window` positions, itself included). The
  // scale and the score soft-capping come from the config (query_pre_attn_scalar, attn_logit_softcapping).
  // sinks >= 0: a weight [local heads] whose exp joins each head's softmax denominator (gpt-oss).
  int attention(int q, int k_cache, int v_cache, int slots, int kv_begin, int64_t window,
                const std::string& name, int sinks = -1);
  int gated_act(int gate, int up, graph::Activation act, const std::string& name);  // act(gate) * up
  // Op::GatedDeltaNet of `layer` (sizes from the config's linear_* fields): qkv, z, b, a are the input
  // projections' outputs; conv [C, 1, K], a_log, dt_bias [Hv] and norm [dv] weight nodes.
  int gated_delta_net(int qkv, int z, int b, int a, int conv, int a_log, int dt_bias, int norm, int slots,
                      int kv_begin, int layer, const std::string& name);
  int add(int a, int b, const std::string& name);
  // Op::Scale: (x * w) * s, w a weight node [cols] or [1] (-1: none).
  int scale(int x, int w, float s, const std::string& name);
  // Op::Slice: columns [begin, begin + width) of x.
  int slice(int x, int64_t begin, int64_t width, const std::string& name);
  int last_row(int x, const std::string& name);
  int soft_cap(int x, double cap, const std::string& name);  // tanh(x / cap) * cap
  // Op::MoeRoute over router logits [rows, experts].
  int moe_route(int logits, graph::Routing routing, int64_t top_k, const std::string& name);
  // Op::MoeExperts: gate_up [E, 2I, H] and down [E, H, I], biases -1 for none; top_k: the experts each row
  // chose (its route has that many nonzero weights).
  int moe_experts(int x, int route, int gate_up, int down, int gate_up_bias, int down_bias, int64_t experts,
                  int64_t top_k, graph::Activation act, const std::string& name, float alpha = 0.f,
                  float limit = 0.f);

  // Records `module` with `role` unless already recorded (the first role stays: a tied LM head reads the
  // embedding module).
  void record_module(const std::string& module, Role role, int64_t layer = -1);
  // The modules read so far, in order, each once.
  const std::vector<ModuleSpec>& modules() const { return modules_; }

 private:
  int64_t cols(int node) const { return g_.at(node).shape.back(); }
  const DecoderConfig& c_;
  graph::Graph g_;
  int rows_;
  int cache_rows_ = -1;  // the CacheRows input (row-mapped steps), else -1
  std::vector<ModuleSpec> modules_;
  std::unordered_set<std::string> module_names_;
  std::map<std::pair<int, int>, int> updated_;  // (layer, which) -> its last CacheUpdate node
};

// Step inputs every decoder graph reads.
struct StepNodes {
  int ids, positions, slots, kv_begin;
  int cache_rows = -1;        // ShapeKey::row_mapped() steps only
  int per_layer_inputs = -1;  // Gemma 4: every layer's per-layer input [rows, layers * P] (-1: none)
};
StepNodes add_step_inputs(GraphBuilder& b);

// The names of decoder layer `layer`: Hugging Face module prefix and graph node prefix.
struct LayerNames {
  int layer;
  std::string module;  // "model.layers.<layer>."
  std::string node;    // "layers.<layer>."
};
LayerNames layer_names(int layer);

// How the rotary dims of each q/k head are paired.
enum class RopePairs : uint8_t {
  kHalves,       // (i, i + rot/2): Llama, Qwen3
  kInterleaved,  // (2i, 2i+1): GLM-4. The q/k rows are reordered to halves when loaded (graph::WeightView),
                 // so the one Rope op serves both (q . k is unchanged when q and k are permuted alike)
};

struct SelfAttention {
  bool qkv_bias = false;       // biases on q_proj, k_proj, v_proj
  bool o_bias = false;         // a bias on o_proj
  bool qk_norm = false;        // q_norm / k_norm: RMSNorm over each head of q and k before RoPE
  bool qk_norm_whole = false;  // q_norm / k_norm: RMSNorm over the whole q and k projections before RoPE
                               // (OLMo 2 / 3); attention is then never split by heads
  RopePairs rope = RopePairs::kHalves;
  bool sinks = false;      // self_attn.sinks [heads]: a learned logit per head in the softmax denominator
  bool fused_qkv = false;  // one self_attn.qkv_proj [(heads + 2 * kv_heads) * head_dim, hidden] (q rows, then
                           // k, then v) instead of q_proj, k_proj and v_proj
};
// `self_attn.{q,k,v,o}_proj` (or qkv_proj and o_proj) of layer n on the normed input h [rows, hidden]: GQA
// over the static KV cache (cache update, then attention) with RoPE on the first config().rot_dim() dims of
// each head, split by heads when the plan says so; sliding-window attention (over the last
// config().sliding_window positions) in the layers the config marks (DecoderConfig::layer_is_sliding).
// Returns o_proj's output [rows, hidden] (before any residual).
int self_attention(GraphBuilder& b, const StepNodes& in, const LayerNames& n, int h, const SelfAttention& a);

struct GatedMlp {
  bool bias = false;            // biases on every projection
  bool fused_gate_up = false;   // one mlp.gate_up_proj [2I, H] (gate rows [0, I), up rows [I, 2I)) instead of
                                // mlp.gate_proj and mlp.up_proj
  const char* module = "mlp.";  // the block's module under the layer (a shared expert: "mlp.shared_expert.")
  int64_t intermediate = 0;     // I; 0: config().intermediate_size
};
// `mlp.*` of layer n on the normed input h [rows, hidden]: down(act(gate(h)) * up(h)) with the config's
// hidden_act, split per layer when the plan says so. Returns down_proj's output [rows, hidden].
int gated_mlp(GraphBuilder& b, const LayerNames& n, int h, const GatedMlp& m);

struct SparseMoe {
  graph::Routing routing = graph::Routing::SoftmaxTopKNorm;
  const char* router = "gate";  // mlp.<router>.weight (gpt-oss: "router")
  bool bias = false;  // biases on the router and the experts (mlp.experts.gate_up_proj_bias [E, 2I],
                      // down_proj_bias [E, H])
  bool clamped_swiglu = false;  // the experts' activation is gpt-oss's clamped SwiGLU (alpha, limit)
  float alpha = 0.f, limit = 0.f;
  // With config().shared_expert_intermediate_size > 0, the shared expert:
  // mlp.shared_expert.{gate,up,down}_proj (split as the experts are, under the MLP's roles) times
  // sigmoid(mlp.shared_expert_gate [1, H] . h), added.
};
// `mlp.*` of layer n as a mixture of experts (config().num_experts of them, config().num_experts_per_tok per
// token): the router mlp.gate.weight [E, H] -> Op::MoeRoute -> Op::MoeExperts over mlp.experts.gate_up_proj
// [E, 2I, H] and mlp.experts.down_proj [E, H, I] (I = moe_intermediate_size; Transformers 5's fused layout,
// which io presents for every layout a checkpoint stores). Returns [rows, hidden] (before any residual).
int sparse_moe(GraphBuilder& b, const LayerNames& n, int h, const SparseMoe& m);
// The experts of a sparse block on h routed by `route` [rows, E]: <prefix>gate_up_proj [E, 2I, H] and
// <prefix>down_proj [E, H, I] (biases as m.bias says), split as Transformers' MoE plans split them.
int stacked_experts(GraphBuilder& b, const LayerNames& n, int h, int route, const std::string& prefix,
                    const SparseMoe& m);

// The Llama family's pre-norm decoder layer (Llama, Qwen2, Qwen3, Mistral, Phi-3; Qwen3-MoE, Mixtral,
// gpt-oss): input_layernorm -> self_attention -> residual -> post_attention_layernorm -> gated_mlp (or
// sparse_moe with `moe` in the layers config().layer_is_sparse marks) -> residual. x [rows, hidden].
int pre_norm_layer(GraphBuilder& b, const StepNodes& in, int x, int layer, const SelfAttention& a,
                   const GatedMlp& m, const SparseMoe& moe = {});

// The OLMo 2 / OLMo 3 post-norm decoder layer: self_attention -> post_attention_layernorm -> residual ->
// gated_mlp -> post_feedforward_layernorm -> residual (no norm before either block).
int post_norm_layer(GraphBuilder& b, const StepNodes& in, int x, int layer, const SelfAttention& a,
                    const GatedMlp& m);

// The Gemma 2 / Gemma 3 decoder layer: input_layernorm -> self_attention -> post_attention_layernorm ->
// residual -> pre_feedforward_layernorm -> gated_mlp -> post_feedforward_layernorm -> residual.
int pre_post_norm_layer(GraphBuilder& b, const StepNodes& in, int x, int layer, const SelfAttention& a);

// The factor of config().scale_embeddings: sqrt(hidden_size) as an f32, rounded to `dtype` (Transformers
// multiplies by a tensor of that dtype).
float embedding_scale(const DecoderConfig& c, DType dtype);
float embedding_scale(double dim, DType dtype);  // sqrt(dim) as an f32 rounded to `dtype`
// model.embed_tokens: the token embeddings [rows, hidden] of the step's ids (scaled when the config says).
int token_embedding(GraphBuilder& b, const StepNodes& in);
// model.norm, the last position of each row (unless the key wants every position's logits), and the LM head
// (lm_head, or the embedding table when tied; vocab-parallel when the plan says so): the logits, soft-capped
// when config().final_logit_softcapping is set.
int causal_lm_head(GraphBuilder& b, int x);

// One decoder layer: x [rows, hidden] -> [rows, hidden].
using DecoderLayer = int (*)(GraphBuilder& b, const StepNodes& in, int x, int layer);
// The decoder's input [rows, hidden] from the step's ids; may add inputs every layer reads to `in` (Gemma 4's
// per-layer inputs).
using InputEmbedding = int (*)(GraphBuilder& b, StepNodes& in);
// Step inputs, the embedding (token_embedding unless `embed`), every layer, causal_lm_head. `modules`: if
// given, receives the modules read.
graph::Graph build_causal_lm(const DecoderConfig& c, const graph::ShapeKey& key, DecoderLayer layer,
                             std::vector<ModuleSpec>* modules = nullptr, InputEmbedding embed = nullptr);

graph::Activation graph_activation(Activation a);

// Pieces of the default tensor-parallel plans, as Transformers' base_model_tp_plan writes them for the
// blocks.
TpPlan attention_tp_plan();  // self_attn.{q,k,v}_proj colwise, self_attn.o_proj rowwise
TpPlan gated_mlp_tp_plan();  // mlp.{gate,up}_proj colwise, mlp.down_proj rowwise
// mlp.experts.gate_up_proj packed_colwise, mlp.experts.down_proj rowwise (Transformers' MoE plans; the router
// stays replicated).
TpPlan experts_tp_plan();
// mlp.gate_up_proj colwise_gather_output, mlp.down_proj rowwise_split_input. We run gate_up_proj as its gate
// and up halves each split column-wise and down_proj row-wise: the same numbers with one all-reduce and no
// gather.
TpPlan fused_gate_up_tp_plan();
// `parts` in order, then the vocab-parallel LM head (lm_head colwise_gather_output) every default plan ends
// with.
TpPlan causal_lm_tp_plan(std::initializer_list<TpPlan> parts);

// A key the architecture's Transformers code reads without a fallback for null (refused when config.json
// sets it to null: "field '<key>' is null, which <architecture> does not support (<why>)").
struct NullRefused {
  const char* key;
  const char* why;
};

// What an architecture's file provides; causal_lm_architecture makes the registry entry (weights and modules
// derived from the graph, so they can never drift from what is read).
struct CausalLmSpec {
  const char* name = nullptr;    // config.json architectures[0]
  DecoderLayer layer = nullptr;  // its decoder layer, built from the blocks above
  InputEmbedding embed = nullptr;  // its input embedding (nullptr: token_embedding)
  // The config parser. Empty: the shared one: checked_config_reader (with config_keys), the null_refused
  // keys, `check`, parse_decoder_config with `defaults` into a DecoderConfig of architecture `name`, `finish`
  // (its own fields and rules), validate.
  std::function<DecoderConfig(const nlohmann::json&, const std::string&)> parse = {};
  ConfigDefaults defaults = {};  // its config class's defaults
  std::vector<NullRefused> null_refused = {};
  std::function<void(const ConfigReader&)> check = {};                   // refusals before any field is read
  std::function<void(const ConfigReader&, DecoderConfig&)> finish = {};  // after parse_decoder_config
  std::vector<ConfigKey> config_keys = {};           // its own keys, besides decoder_config_keys()
  TpPlan tp_plan = {};                               // Transformers' base_model_tp_plan for it, plus lm_head
  const char* unsplit_attention = nullptr;           // Architecture::unsplit_attention
  std::vector<std::string> ignorable_prefixes = {};  // Architecture::ignorable_prefixes
};
Architecture causal_lm_architecture(CausalLmSpec spec);

}  // namespace tessera::models
