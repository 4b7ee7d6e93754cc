#include "graph/graph.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>

#include "tessera/error.h"

namespace tessera::graph {

namespace {
const char* phase_name(Phase p) { return p == Phase::Prefill ? "prefill" : "decode"; }

constexpr const char* kOpNames[] = {
    "input",         "weight",       "cache_state",     "embedding",  "rms_norm",   "matmul",
    "rope",          "cache_update", "attention",       "gated_act",  "add",        "last_row",
    "sampler_state", "mark_seen",    "sample",          "all_reduce", "all_gather", "soft_cap",
    "moe_route",     "moe_experts",  "gated_delta_net", "scale",      "slice"};
static_assert(sizeof(kOpNames) / sizeof(kOpNames[0]) == static_cast<size_t>(Op::kCount),
              "kOpNames must list every Op");
}  // namespace

const char* op_name(Op op) { return kOpNames[static_cast<size_t>(op)]; }

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::Silu:
      return "silu";
    case Activation::Gelu:
      return "gelu";
    case Activation::GeluTanh:
      return "gelu_tanh";
    case Activation::Relu:
      return "relu";
    case Activation::ClampedSwiglu:
      return "clamped_swiglu";
    case Activation::Sigmoid:
      return "sigmoid";
  }
  return "?";
}

const char* routing_name(Routing r) {
  switch (r) {
    case Routing::SoftmaxTopK:
      return "softmax_topk";
    case Routing::SoftmaxTopKNorm:
      return "softmax_topk_norm";
    case Routing::TopKSoftmax:
      return "topk_softmax";
  }
  return "?";
}

const char* sampling_name(Sampling s) {
  switch (s) {
    case Sampling::Off:
      return "off";
    case Sampling::Greedy:
      return "greedy";
    case Sampling::Sample:
      return "sample";
  }
  return "?";
}

std::string ShapeKey::str() const {
  std::ostringstream os;
  os << phase_name(phase) << "(batch=" << batch << ", seq=" << seq << ", cache_len=" << cache_len
     << ", dtype=" << dtype_name(dtype) << ", logits=" << (all_logits ? "all" : "last");
  if (tp_size > 1) os << ", tp=" << tp_rank << "/" << tp_size;
  if (sampling != Sampling::Off) os << ", sampling=" << sampling_name(sampling);
  if (row_mapped()) os << ", cache_rows=" << cache_rows;
  os << ")";
  return os.str();
}

std::string ShapeKey::diff(const ShapeKey& o) const {
  std::ostringstream os;
  auto field = [&](const char* name, auto a, auto b) {
    if (a == b) return;
    if (os.tellp() > 0) os << ", ";
    os << name << " " << a << " -> " << b;
  };
  field("phase", phase_name(phase), phase_name(o.phase));
  field("batch", batch, o.batch);
  field("seq", seq, o.seq);
  field("cache_len", cache_len, o.cache_len);
  field("dtype", dtype_name(dtype), dtype_name(o.dtype));
  field("all_logits", all_logits, o.all_logits);
  field("tp_rank", tp_rank, o.tp_rank);
  field("tp_size", tp_size, o.tp_size);
  field("sampling", sampling_name(sampling), sampling_name(o.sampling));
  field("cache_rows", cache_batch(), o.cache_batch());
  return os.str();
}

size_t ShapeKeyHash::operator()(const ShapeKey& k) const {
  size_t h = 0;
  auto mix = [&](uint64_t v) { h ^= std::hash<uint64_t>()(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  mix(static_cast<uint64_t>(k.phase));
  mix(static_cast<uint64_t>(k.batch));
  mix(static_cast<uint64_t>(k.seq));
  mix(static_cast<uint64_t>(k.cache_len));
  mix(static_cast<uint64_t>(k.dtype));
  mix(static_cast<uint64_t>(k.all_logits));
  mix(static_cast<uint64_t>(k.tp_rank));
  mix(static_cast<uint64_t>(k.tp_size));
  mix(static_cast<uint64_t>(k.sampling));
  mix(static_cast<uint64_t>(k.cache_batch()));
  return h;
}

std::string weight_key(const Node& n) {
  const WeightView& v = n.view;
  if (v.whole()) return n.name;
  std::ostringstream os;
  os << n.name;
  if (v.rows >= 0) os << "[rows " << v.row_begin << ":" << v.row_begin + v.rows << "]";
  if (v.split_dim >= 0) os << "[" << (v.split_dim == 0 ? "rows" : "cols") << " split " << v.shards << "]";
  if (v.packed > 1) os << "[" << v.packed << " parts]";
  if (v.rank0_only) os << "[rank 0 only]";
  if (v.stacked) os << "[per expert]";
  if (v.rope_head > 0) os << "[rotary pairs " << v.rope_head << "/" << v.rope_rot << "]";
  if (v.group > 0) {
    os << "[rows";
    for (const WeightView::Take& t : v.takes)
      if (t.rows > 0) os << " " << t.begin << ":" << t.begin + t.rows;
    os << " of every " << v.group << "]";
  }
  if (v.offset != 0.f) os << "[+" << v.offset << "]";
  return os.str();
}

void RopeTable::for_length(int64_t len, float* out) const {
  const size_t half = inv_freq.size();
  if (!varies() || len <= switch_len) {
    std::copy(inv_freq.begin(), inv_freq.end(), out);
    return;
  }
  if (!dynamic) {
    std::copy(long_inv_freq.begin(), long_inv_freq.end(), out);
    return;
  }
  // Transformers' _compute_dynamic_ntk_parameters with the length as a tensor: float32 arithmetic (each
  // Python scalar rounded to float32), the power's exponent a double.
  float ratio = static_cast<float>(factor) * static_cast<float>(len);
  ratio = ratio / static_cast<float>(switch_len);
  ratio = ratio - static_cast<float>(factor - 1.0);
  const auto stretch = static_cast<float>(
      std::pow(static_cast<double>(ratio), static_cast<double>(dim) / static_cast<double>(dim - 2)));
  const float base = static_cast<float>(theta) * stretch;
  for (size_t i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    out[i] = 1.0f / std::pow(base, e);
  }
}

int Graph::add(Node n) {
  for (int in : n.inputs)
    TS_ASSERT(in >= 0 && in < static_cast<int>(nodes.size()), "node ", n.name, " input ", in);
  nodes.push_back(std::move(n));
  return static_cast<int>(nodes.size()) - 1;
}

void append_sampling(Graph& g, int64_t vocab) {
  const ShapeKey& k = g.key;
  if (k.sampling == Sampling::Off) return;
  TS_ASSERT(!g.outputs.empty() && !k.all_logits, "in-step sampling needs last-row logits");
  const int logits = g.outputs[0];
  TS_ASSERT(g.at(logits).shape == (Shape{k.batch, vocab}), "logits ", shape_str(g.at(logits).shape));
  int ids = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].op == Op::Input && g.nodes[i].input_kind == InputKind::TokenIds) ids = static_cast<int>(i);
  TS_ASSERT(ids >= 0, "graph without token ids");
  auto input = [&](InputKind kind, const char* name, int64_t n) {
    Node in{.op = Op::Input, .name = name, .inputs = {}, .shape = {n}, .dtype = DType::I32};
    in.input_kind = kind;
    return g.add(std::move(in));
  };
  int rows = -1;  // the CacheRows input of a row-mapped step (added by the model's step inputs)
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].op == Op::Input && g.nodes[i].input_kind == InputKind::CacheRows)
      rows = static_cast<int>(i);
  TS_ASSERT(k.row_mapped() == (rows >= 0), "cache rows input and ShapeKey ", k.str(), " disagree");
  Node state{.op = Op::SamplerState, .name = "sampler.seen", .inputs = {}, .shape = {k.cache_batch(), vocab}};
  std::vector<int> mark_inputs = {g.add(std::move(state)), ids};
  if (k.phase == Phase::Prefill) mark_inputs.push_back(input(InputKind::SeenFrom, "seen_from", k.batch));
  if (rows >= 0) mark_inputs.push_back(rows);
  const int seen = g.add(Node{.op = Op::MarkSeen,
                              .name = "sampler.mark_seen",
                              .inputs = mark_inputs,
                              .shape = {k.cache_batch(), vocab}});
  const int params = input(InputKind::SampleParams, "sample_params", int64_t{k.batch} * kSampleParams);
  std::vector<int> sample_inputs = {logits, seen, params};
  if (rows >= 0) sample_inputs.push_back(rows);
  // Every sampling program takes the rows' token masks, so a constrained row needs no other program.
  sample_inputs.push_back(input(InputKind::TokenMask, "token_mask", int64_t{k.batch} * mask_words(vocab)));
  const int tokens = g.add(Node{.op = Op::Sample,
                                .name = "sampler.sample",
                                .inputs = sample_inputs,
                                .shape = {k.batch, 1},
                                .dtype = DType::I32});
  g.outputs = {tokens};
}

std::string Graph::dump() const {
  std::ostringstream os;
  os << "graph " << key.str() << "\n";
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    os << "%" << i << " = " << op_name(n.op) << "(";
    for (size_t j = 0; j < n.inputs.size(); ++j) os << (j ? ", " : "") << "%" << n.inputs[j];
    os << ") " << shape_str(n.shape) << " " << dtype_name(n.dtype) << "  # "
       << (n.op == Op::Weight ? weight_key(n) : n.name);
    if (n.op == Op::GatedAct) os << " (" << activation_name(n.act) << ")";
    if (n.op == Op::Attention && n.window > 0) os << " (window " << n.window << ")";
    if (n.op == Op::Attention && n.sinks) os << " (sinks)";
    if ((n.op == Op::Attention || n.op == Op::SoftCap) && n.softcap > 0)
      os << " (softcap " << n.softcap << ")";
    if (n.op == Op::Embedding && n.scale != 0.f) os << " (scale " << n.scale << ")";
    if (n.op == Op::MoeRoute)
      os << " (" << routing_name(n.routing) << ", top " << n.top_k << " of " << n.experts << ")";
    if (n.op == Op::Scale && n.scale != 1.f) os << " (scale " << n.scale << ")";
    if (n.op == Op::Slice) os << " (from column " << n.begin << ")";
    if (n.op == Op::MoeExperts) os << " (" << n.experts << " experts, " << activation_name(n.act) << ")";
    os << "\n";
  }
  os << "outputs:";
  for (int o : outputs) os << " %" << o;
  os << "\n";
  return os.str();
}

}  // namespace tessera::graph
