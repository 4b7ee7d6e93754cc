// The graph IR: a list of high-level ops built by a model for one ShapeKey.
// Values are 2-D float32 activations [rows, cols] (batch and sequence folded
// into rows), int32 step inputs, weights, and the per-layer KV cache state.
// Nodes are stored in execution order; an op only reads earlier nodes.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/tensor.h"

namespace tessera::graph {

enum class Phase : uint8_t { Prefill, Decode };

// What a generate step returns. Off: logits (the host samples). Greedy / Sample: the step applies the
// logits processors itself and returns only the chosen token ids (Greedy: repetition penalty + argmax;
// Sample: + temperature, top-k, top-p, min-p and a counter-based draw). See Op::Sample.
enum class Sampling : uint8_t { Off, Greedy, Sample };
const char* sampling_name(Sampling s);

// Everything that fixes the shapes of a compiled step.
struct ShapeKey {
  Phase phase = Phase::Prefill;
  int batch = 1;
  int seq = 1;               // query tokens per row in this step (the prompt bucket, or 1 for decode)
  int cache_len = 0;         // slots in the static KV cache
  DType dtype = DType::F32;  // weight dtype
  bool all_logits = false;   // logits for every position (forward) or only the last (generate)
  int tp_rank = 0, tp_size = 1;
  Sampling sampling = Sampling::Off;
  // Rows of the KV cache (and sampler state) the step works on. 0: `batch` (step row b is cache row b).
  // Otherwise: a step over rows of a multi-slot cache, e.g. the prefill of one sequence (batch 1) into a
  // chosen row of an N-row cache, or (Capabilities::shared_cache_rows) a decode step giving one cache row
  // several step rows; the CacheRows input names the cache row of each step row.
  int cache_rows = 0;

  int cache_batch() const { return cache_rows > 0 ? cache_rows : batch; }
  bool row_mapped() const { return cache_rows > 0; }
  bool operator==(const ShapeKey&) const = default;
  std::string str() const;
  // Human-readable list of the fields that differ, e.g. "cache_len 96 -> 160".
  std::string diff(const ShapeKey& other) const;
};

struct ShapeKeyHash {
  size_t operator()(const ShapeKey& k) const;
};

enum class Op : uint8_t {
  Input,       // step input bound at run time (ids, positions, slots, kv_begin, cache rows, ...)
  Weight,      // a named model weight
  CacheState,  // KV cache of one layer, [cache_batch, kv_heads, cache_len, head_dim]
  Embedding,   // (table, ids) -> [rows, dim], times Node::scale when it is not 0 (Gemma's sqrt(hidden))
  RmsNorm,     // (x, weight?) -> x normalised over groups of `dim` (times weight [dim] when given)
  MatMul,      // (x [rows, in], weight [out, in], bias? [out]) -> [rows, out]
  Rope,        // (x [rows, heads*head_dim], positions [rows]) -> rotated
  // Slots are per step row: slots[b * seq + s] is the cache slot of row b's column s (within a row, columns
  // occupy consecutive slots). `rows` (present only when ShapeKey::row_mapped()) maps step row b to its cache
  // row rows[b]; otherwise step row b is cache row b.
  CacheUpdate,  // (cache, new [batch*seq, kv_heads*head_dim], slots [batch*seq], rows? [batch]) -> cache with
                // cache[rows[b], :, slots[b*seq+s], :] = new[b*seq+s]
  Attention,    // (q, k_cache, v_cache, slots [batch*seq], kv_begin [batch], rows? [batch]) -> [rows, heads*
                // head_dim]: row b's query in slot q sees cache row rows[b]'s keys j with kv_begin[b] <= j <=
                // q; `window` > 0: only keys j > q - window (sliding-window attention); `softcap` > 0: the
                // scaled scores s become tanh(s / softcap) * softcap before the mask and softmax (Gemma 2);
                // Node::sinks: a last input sinks [heads] whose exp joins each head's softmax denominator
  GatedAct,     // (gate, up) -> act(gate) * up, act = Node::act (silu: SwiGLU, gelu: GeGLU, ...); a gate
                // [rows, 1] applies to each row's every column (a shared expert's sigmoid gate)
  Add,          // (a, b) -> a + b
  LastRow,      // (x [batch*seq, d]) -> [batch, d]: the last position of each batch row
  // In-step sampling (ShapeKey::sampling != Off; appended by graph::append_sampling):
  SamplerState,  // per-cache-row "seen" mask [cache_batch, vocab] f32 (1 = id occurred in the row), device
                 // state kept with the KV cache
  MarkSeen,      // (state, ids [batch*seq], seen_from? [batch], rows? [batch]) -> state with ids[b, s] marked
                 // in cache row rows[b] for s >= seen_from[b]. Prefill (seen_from present): the row's mask is
                 // cleared first (a prefill starts a sequence).
  Sample,        // (logits [batch, vocab], state, params [batch*kSampleParams], rows? [batch]) -> token ids
                 // [batch, 1] i32; -1 for a row whose logits hold a NaN or inf (the host must check and fail)
  // Tensor parallelism (ShapeKey::tp_size > 1): collectives over the tp_size ranks.
  AllReduce,  // (x) -> elementwise sum of x over all ranks (after a row-parallel matmul)
  AllGather,  // (x [rows, c]) -> [rows, c * tp_size]: rank r's columns at [r*c, (r+1)*c) (vocab-parallel
              // lm_head)
  SoftCap,    // (x) -> tanh(x / softcap) * softcap elementwise, in f32 (Gemma's final logit soft-capping)
  // Mixture of experts (one sparse MLP block = MatMul (router) -> MoeRoute -> MoeExperts):
  MoeRoute,    // (logits [rows, experts]) -> [rows, experts] f32: each row's weight for the top_k experts the
               // `routing` rule picks, 0 for the others. Ties pick the lower expert index.
  MoeExperts,  // (x [rows, H], route [rows, E], gate_up [E, 2I, H], down [E, H, I], gate_up_bias? [E, 2I],
               // down_bias? [E, H]) -> [rows, H]: for each row the sum, over its experts e (route != 0) in
               // ascending e, of route[row, e] * down_e(act(gate_e x) * up_e x); gate_up[e] holds expert e's
               // gate rows [0, I), then its up rows [I, 2I)
  // Linear attention with a recurrent state (Qwen3.5 / Qwen3-Next's Gated DeltaNet), one whole token mixer:
  // (qkv [rows, 2*Hk*dk + Hv*dv], z [rows, Hv*dv], b [rows, Hv], a [rows, Hv], conv [C, 1, K] (C = qkv's
  // width), a_log [Hv], dt_bias [Hv], norm [dv], slots [rows], kv_begin [batch], rows? [batch]) ->
  // [rows, Hv*dv]. Per token of each step row, in order: qkv through a causal depthwise convolution of width
  // K over the row's previous inputs, then silu; q and k (per head of dk) l2-normalised, q times dk^-1/2; the
  // state S [Hv, dk, dv] of the cache row decays by exp(g), g = -exp(a_log) * softplus(a + dt_bias), takes
  // the delta rule S += k (x) (v - S^T k) * sigmoid(b) (k head h / (Hv / Hk) for value head h), and
  // o = S^T q; o RMS-normalised per head (eps), times norm, times silu(z). The convolution's last K - 1
  // inputs and S live in the cache row (DeviceCache), not in CacheState nodes. A token at slot kv_begin[b]
  // (a sequence's first) starts from zero state; tokens at slots below it (left padding) leave the state
  // alone and give 0. Node: layer, heads = Hv, kv_heads = Hk, head_dim = dk, dim = dv, window = K, eps.
  GatedDeltaNet,
  Scale,  // (x [rows, d], w?) -> x * w * Node::scale: w [d] per column or [1] for every element (absent: 1);
          // scale 1: none (Gemma 4's per-layer-input scales, layer_scalar, router scale)
  Slice,  // (x [rows, d]) -> x[:, begin : begin + width] (columns; width = the node's shape[1])
  kCount
};
const char* op_name(Op op);

// The gate activation of Op::GatedAct, with PyTorch's definitions:
//   Silu:     x * sigmoid(x)
//   Gelu:     x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))                    (F.gelu, approximate="none")
//   GeluTanh: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))          (F.gelu, approximate="tanh")
//   Relu:     max(x, 0)
//   ClampedSwiglu (gpt-oss's experts, Op::MoeExperts only; Node::alpha / Node::limit): with g = min(gate,
//   limit),
//             u = clamp(up, -limit, limit): (u + 1) * g * sigmoid(alpha * g)
//   Sigmoid:  1 / (1 + exp(-x))  (Qwen3.5's gated attention output: attn * sigmoid(gate))
enum class Activation : uint8_t { Silu, Gelu, GeluTanh, Relu, ClampedSwiglu, Sigmoid };
const char* activation_name(Activation a);  // "silu", "gelu", "gelu_tanh", "relu"

// How Op::MoeRoute turns router logits into expert weights (softmax in f32 over the dims named).
enum class Routing : uint8_t {
  SoftmaxTopK,      // softmax over every expert, then the top_k largest kept (Qwen3-MoE, norm_topk_prob off)
  SoftmaxTopKNorm,  // ... then divided by their sum (Qwen3-MoE with norm_topk_prob, Mixtral)
  TopKSoftmax,      // the top_k largest logits, then a softmax over those k (gpt-oss)
};
const char* routing_name(Routing r);

enum class InputKind : uint8_t {
  TokenIds,
  Positions,
  Slots,
  KvBegin,
  SeenFrom,      // [batch] prefill only: first column of the row whose ids count for the repetition penalty
  SampleParams,  // [batch * kSampleParams] per-row sampling parameters (layout: SampleParam)
  CacheRows,     // [batch] cache row of each step row (only when ShapeKey::row_mapped())
  TokenMask,     // [batch * mask_words(vocab)] in-step sampling: bit t of row b's word t / 32 allows token t
                 // (constrained decoding; all ones for an unconstrained row)
};
// 32-bit words of a token mask over `vocab` ids.
inline int64_t mask_words(int64_t vocab) { return (vocab + 31) / 32; }

// Per-row sampling parameters, int32 (floats bit-cast), in this order.
enum SampleParam : int {
  kTemperature,        // f32 bits
  kTopP,               // f32 bits
  kMinP,               // f32 bits
  kRepetitionPenalty,  // f32 bits
  kTopK,               // 0 = off
  kSeedLo,
  kSeedHi,    // 64-bit seed
  kStep,      // generation step (0 = the token chosen from the prefill)
  kDoSample,  // Sampling::Sample programs: 1 = sample this row, 0 = greedy (penalty + argmax); so rows with
              // and without sampling share one program. Sampling::Greedy programs ignore it.
  kSampleParams  // count
};

// Op::Weight: the part of the stored (Hugging Face) tensor a node reads, and how it is rearranged. A view is
// the same on every tensor-parallel rank (so every rank runs the same program); the rank picks its shard when
// the weight is loaded. Rows/columns count in the stored tensor's [out, in] layout; of stacked experts
// [E, out, in], in each expert's [out, in] matrix (the view applies to every expert alike).
struct WeightView {
  Shape stored;                      // the stored tensor's shape (what the checkpoint must hold)
  int64_t row_begin = 0, rows = -1;  // a block of rows (a part of a fused tensor); -1: all rows
  int split_dim = -1;                // 0: the rows above split into `shards` equal blocks, one per rank;
  int shards = 1;                    // 1: the columns split likewise (-1: not split)
  int packed = 1;           // split_dim 0: the rows form `packed` equal parts (a fused gate/up), each
                            // split into `shards` blocks; a rank takes its block of every part
  bool rank0_only = false;  // rank 0 holds the tensor, the others zeros (a row-parallel bias)
  // An [E, N] stack of expert vectors (gpt-oss's gate_up_proj_bias): the view applies to each expert's [N],
  // as it does to each matrix of an [E, out, in] stack.
  bool stacked = false;
  // > 0: rows form heads of `rope_head` rows whose first `rope_rot` rows hold interleaved rotary pairs
  // (0,1), (2,3), ...; they are reordered to the rotate-half layout (0,2,4,...,1,3,5,...) so one Rope op
  // serves both conventions (q . k is unchanged when q and k are permuted alike).
  int64_t rope_head = 0, rope_rot = 0;
  // Added to every element when loaded (float32 vectors only): Gemma's RMSNorm scales by (1 + weight), which
  // in float32 is exactly the stored weight plus 1 computed once at load.
  float offset = 0.f;
  // group > 0: the rows (after the block above) form groups of `group` rows; the view reads, for each part
  // of `takes` in order (parts with rows 0 unused), rows [begin, begin + rows) of every group: Qwen3.5's
  // q_proj holds each head's query rows then its gate rows (one part); Qwen3-Next's in_proj_qkvz holds per
  // key head its q, k, v and z rows (q, k and v read as three parts: all q rows, then all k, then all v).
  // Not with a split.
  struct Take {
    int64_t begin = 0, rows = 0;
    bool operator==(const Take&) const = default;
  };
  static constexpr size_t kMaxTakes = 3;
  int64_t group = 0;
  std::array<Take, kMaxTakes> takes{};
  int64_t taken_per_group() const {  // the rows read of each group
    int64_t n = 0;
    for (const Take& t : takes) n += t.rows;
    return n;
  }
  // The row of the viewed tensor that row r of the view reads (group > 0), for `groups` groups.
  int64_t grouped_row(int64_t r, int64_t groups) const {
    for (const Take& t : takes) {
      const int64_t n = groups * t.rows;
      if (r < n) return (r / t.rows) * group + t.begin + r % t.rows;
      r -= n;
    }
    return -1;
  }

  bool whole() const {
    return rows < 0 && split_dim < 0 && !rank0_only && rope_head == 0 && offset == 0.f && group == 0;
  }
  bool operator==(const WeightView&) const = default;
};

struct Node {
  Op op;
  std::string name;         // e.g. "layers.3.attn.q" (weights: the HF tensor name)
  std::vector<int> inputs;  // node ids
  Shape shape;              // output shape
  DType dtype = DType::F32;
  // Attributes (meaning depends on op).
  InputKind input_kind = InputKind::TokenIds;
  int layer = -1;  // CacheState: layer; which = 0 (K) / 1 (V)
  int which = 0;
  int64_t dim = 0;                                             // RmsNorm: normalised group size
  float eps = 0.f;                                             // RmsNorm
  int64_t heads = 0, kv_heads = 0, head_dim = 0, rot_dim = 0;  // Rope / Attention / CacheUpdate
  float scale = 0.f;  // Attention; Embedding (0: none); Rope: the factor on cos and sin (yarn; 0 or 1: none)
  bool tiled_heads = false;  // GatedDeltaNet: value head h reads key head h % kv_heads (else h / (heads /
                             // kv_heads)); its value-head rows, a, b, a_log and dt_bias in that order
  float softcap = 0.f;       // Attention (0: none), SoftCap
  int64_t window = 0;        // Attention: sliding window in keys (0: the whole prefix)
  int64_t begin = 0;         // Slice: the first column taken
  Activation act = Activation::Silu;           // GatedAct
  int rope_table = -1;                         // Rope: index into Graph::rope_tables
  int64_t experts = 0, top_k = 0;              // MoeRoute (both), MoeExperts (experts)
  Routing routing = Routing::SoftmaxTopKNorm;  // MoeRoute
  float alpha = 0.f, limit = 0.f;              // MoeExperts with Activation::ClampedSwiglu
  bool sinks = false;  // Attention: its last input is sinks [heads] f32, a learned logit per head that joins
                       // the softmax's denominator (gpt-oss's attention sinks)
  WeightView view{};   // Weight: the part of the stored tensor `name` that is read
};

// The name a backend binds a weight node's tensor under: the stored name, plus the view when it is not the
// whole tensor (e.g. "model.layers.0.mlp.down_proj.weight[:, 64:128]").
std::string weight_key(const Node& weight);

// The rotary frequencies of one rope variant. Most are fixed. longrope and dynamic (NTK) pick them per step
// row by the length its sequence reaches in that step (its last position + 1), as Transformers'
// dynamic_rope_update does per forward: a row reaching at most `switch_len` positions uses `inv_freq`; a
// longer one `long_inv_freq` (longrope) or the frequencies recomputed for its length (dynamic). Keys already
// cached keep the rotation they were written with, as in Transformers.
struct RopeTable {
  std::vector<float> inv_freq;       // [rot_dim / 2]
  int64_t switch_len = 0;            // 0: fixed
  std::vector<float> long_inv_freq;  // longrope: beyond switch_len
  // dynamic: beyond switch_len, base = theta * (factor * len / switch_len - (factor - 1)) ^ (dim / (dim - 2))
  bool dynamic = false;
  double theta = 0, factor = 0;
  int64_t dim = 0;  // rotary dims

  bool varies() const { return switch_len > 0; }
  // The frequencies [inv_freq.size()] of a step row whose sequence reaches `len` positions.
  void for_length(int64_t len, float* out) const;
};

struct Graph {
  ShapeKey key;
  std::vector<Node> nodes;
  std::vector<int> outputs;            // logits first
  std::vector<RopeTable> rope_tables;  // per rope variant (Node::rope_table)

  int add(Node n);
  const Node& at(int id) const { return nodes.at(static_cast<size_t>(id)); }
  std::string dump() const;  // one line per node, for debugging and fixtures
};

// For g.key.sampling != Off: appends SamplerState -> MarkSeen -> Sample after the logits (outputs[0],
// [batch, vocab]) and makes the token ids the only output. Off: no change.
void append_sampling(Graph& g, int64_t vocab);

}  // namespace tessera::graph
