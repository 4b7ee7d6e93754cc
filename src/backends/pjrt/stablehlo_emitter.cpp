// Graph -> StableHLO text. One function per graph op, each a composition of StableHLO ops written in the
// generic MLIR form ("stablehlo.add"(%a, %b) : (types) -> type), which every StableHLO version parses
// the same way. The semantics follow the native CPU backend (src/backends/cpu/cpu_backend.cpp) op for op.
#include "backends/pjrt/stablehlo_emitter.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>

#include "backends/cpu/kernels.h"
#include "tessera/error.h"

namespace tessera::pjrt {
namespace {

using graph::Graph;
using graph::InputKind;
using graph::Node;
using graph::Op;

// An SSA value: its name and tensor type.
struct Val {
  std::string name;  // "%v12" or "%arg3"
  Shape shape;
  std::string et;  // element type: f32, bf16, f16, i32, i8, i1
};

// A block-quantised weight's scales and offsets (its integers are the weight's own value).
struct QuantParts {
  Val scale;
  std::optional<Val> offset;
};

constexpr const char* kQuantPartSuffix[3] = {"#q", "#scale", "#offset"};
// The chunk of the gated delta rule's chunked form; steps of at least this many tokens use it, shorter ones
// (decode) the token-by-token recurrence. Transformers' torch_chunk_gated_delta_rule uses 64; in float32 the
// triangular system of a 64-token chunk amplifies rounding more: on xla-cpu one position of the qwen3_5
// fixture's 150-token golden strays 2.4e-4 with 64 (the cpu kernel's recurrence: 6.1e-5) and 8.2e-5 with 32.
constexpr int64_t kDeltaChunk = 32;

std::string element_type(DType dt) {
  switch (dt) {
    case DType::F32:
      return "f32";
    case DType::BF16:
      return "bf16";
    case DType::F16:
      return "f16";
    case DType::I32:
      return "i32";
    case DType::I64:
      return "i64";
    case DType::I8:
      return "i8";
    case DType::F8_E4M3:
      return "f8E4M3FN";
    default:
      break;  // block-quantised: a weight's parts are their own arguments (declare_arguments)
  }
  fail("StableHLO has no element type for ", dtype_name(dt));
}

std::string tensor_type(const Shape& shape, const std::string& et) {
  std::string s = "tensor<";
  for (int64_t d : shape) s += std::to_string(d) + "x";
  return s + et + ">";
}
std::string type(const Val& v) { return tensor_type(v.shape, v.et); }

// `lead` followed by `tail`.
Shape with_tail(Shape lead, std::initializer_list<int64_t> tail) {
  lead.insert(lead.end(), tail);
  return lead;
}

// 0, 1, .., n - 1: the broadcast dimensions that keep an operand's n dimensions first.
std::vector<int64_t> first_dims(size_t n) {
  std::vector<int64_t> dims(n);
  for (size_t i = 0; i < n; ++i) dims[i] = static_cast<int64_t>(i);
  return dims;
}

std::string i64_list(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s;
}

// A float32 literal MLIR parses back to the same bits: always d.ddddddddde±xx (9 significant digits).
std::string f32_literal(float x) {
  if (x == -std::numeric_limits<float>::infinity()) return "0xFF800000";
  if (x == std::numeric_limits<float>::infinity()) return "0x7F800000";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.8e", static_cast<double>(x));
  return buf;
}

// The small SSA text builder.
class Builder {
 public:
  std::ostringstream body;

  void comment(const std::string& text) { body << "    // " << text << "\n"; }

  // `name` is a StableHLO op ("add") or a dialect-qualified one ("chlo.erf").
  Val op(const std::string& name, const std::vector<Val>& operands, const std::string& attrs, Shape shape,
         std::string et) {
    Val out{"%v" + std::to_string(next_++), std::move(shape), std::move(et)};
    body << "    " << out.name << " = \"" << (name.find('.') == std::string::npos ? "stablehlo." : "") << name
         << "\"(";
    for (size_t i = 0; i < operands.size(); ++i) body << (i ? ", " : "") << operands[i].name;
    body << ")";
    if (!attrs.empty()) body << " {" << attrs << "}";
    body << " : (";
    for (size_t i = 0; i < operands.size(); ++i) body << (i ? ", " : "") << type(operands[i]);
    body << ") -> " << type(out) << "\n";
    return out;
  }

  // Elementwise ops keep the first operand's shape and type.
  Val binary(const char* name, const Val& a, const Val& b) { return op(name, {a, b}, "", a.shape, a.et); }
  Val unary(const char* name, const Val& a) { return op(name, {a}, "", a.shape, a.et); }
  Val add(const Val& a, const Val& b) { return binary("add", a, b); }
  Val sub(const Val& a, const Val& b) { return binary("subtract", a, b); }
  Val mul(const Val& a, const Val& b) { return binary("multiply", a, b); }
  Val div(const Val& a, const Val& b) { return binary("divide", a, b); }
  Val max(const Val& a, const Val& b) { return binary("maximum", a, b); }

  Val splat_f32(float x, const Shape& shape) {
    return op("constant", {}, "value = dense<" + f32_literal(x) + "> : " + tensor_type(shape, "f32"), shape,
              "f32");
  }
  Val splat_u32(uint32_t x, const Shape& shape) {
    return op("constant", {}, "value = dense<" + std::to_string(x) + "> : " + tensor_type(shape, "ui32"),
              shape, "ui32");
  }
  Val bitcast(const Val& a, const std::string& et) { return op("bitcast_convert", {a}, "", a.shape, et); }
  Val splat_i32(int32_t x, const Shape& shape) {
    return op("constant", {}, "value = dense<" + std::to_string(x) + "> : " + tensor_type(shape, "i32"),
              shape, "i32");
  }
  Val vector_f32(const std::vector<float>& xs) {
    std::string lits;
    for (size_t i = 0; i < xs.size(); ++i) lits += (i ? ", " : "") + f32_literal(xs[i]);
    const Shape shape{static_cast<int64_t>(xs.size())};
    return op("constant", {}, "value = dense<[" + lits + "]> : " + tensor_type(shape, "f32"), shape, "f32");
  }

  Val convert(const Val& a, const std::string& et) {
    return a.et == et ? a : op("convert", {a}, "", a.shape, et);
  }
  Val reshape(const Val& a, const Shape& shape) {
    TS_ASSERT(shape_numel(shape) == shape_numel(a.shape), shape_str(a.shape), " -> ", shape_str(shape));
    return a.shape == shape ? a : op("reshape", {a}, "", shape, a.et);
  }
  Val transpose(const Val& a, const std::vector<int64_t>& perm) {
    Shape shape;
    for (int64_t p : perm) shape.push_back(a.shape[static_cast<size_t>(p)]);
    return op("transpose", {a}, "permutation = array<i64: " + i64_list(perm) + ">", shape, a.et);
  }
  // Broadcasts `a` to `shape`; operand dimension i becomes result dimension dims[i].
  Val broadcast(const Val& a, const std::vector<int64_t>& dims, const Shape& shape) {
    return op("broadcast_in_dim", {a}, "broadcast_dimensions = array<i64: " + i64_list(dims) + ">", shape,
              a.et);
  }
  Val slice(const Val& a, const std::vector<int64_t>& start, const std::vector<int64_t>& limit) {
    Shape shape;
    std::vector<int64_t> strides(start.size(), 1);
    for (size_t i = 0; i < start.size(); ++i) shape.push_back(limit[i] - start[i]);
    return op("slice", {a},
              "start_indices = array<i64: " + i64_list(start) + ">, limit_indices = array<i64: " +
                  i64_list(limit) + ">, strides = array<i64: " + i64_list(strides) + ">",
              shape, a.et);
  }
  Val concatenate(const std::vector<Val>& parts, int64_t dim) {
    if (parts.size() == 1) return parts[0];
    Shape shape = parts[0].shape;
    shape[static_cast<size_t>(dim)] = 0;
    for (const Val& p : parts) shape[static_cast<size_t>(dim)] += p.shape[static_cast<size_t>(dim)];
    return op("concatenate", parts, "dimension = " + std::to_string(dim) + " : i64", shape, parts[0].et);
  }
  Val iota(int64_t dim, const Shape& shape, const std::string& et) {
    return op("iota", {}, "iota_dimension = " + std::to_string(dim) + " : i64", shape, et);
  }
  Val compare(const Val& a, const Val& b, const char* dir, const char* kind) {
    return op("compare", {a, b},
              std::string("comparison_direction = #stablehlo<comparison_direction ") + dir +
                  ">, compare_type = #stablehlo<comparison_type " + kind + ">",
              a.shape, "i1");
  }
  Val select(const Val& pred, const Val& a, const Val& b) {
    return op("select", {pred, a, b}, "", a.shape, a.et);
  }

  // Reduces f32 (or i32) `a` over `dims` with add, maximum or minimum.
  Val reduce(const Val& a, const std::vector<int64_t>& dims, const char* combiner, float init) {
    Val init_v = a.et == "i32" ? splat_i32(static_cast<int32_t>(init), {}) : splat_f32(init, {});
    Shape shape;
    for (size_t i = 0; i < a.shape.size(); ++i) {
      bool reduced = false;
      for (int64_t d : dims) reduced = reduced || d == static_cast<int64_t>(i);
      if (!reduced) shape.push_back(a.shape[i]);
    }
    Val out{"%v" + std::to_string(next_++), shape, a.et};
    const std::string r = out.name.substr(2), scalar = tensor_type({}, a.et);
    body << "    " << out.name << " = \"stablehlo.reduce\"(" << a.name << ", " << init_v.name << ") ({\n"
         << "    ^bb0(%r" << r << "a: " << scalar << ", %r" << r << "b: " << scalar << "):\n"
         << "      %r" << r << "c = \"stablehlo." << combiner << "\"(%r" << r << "a, %r" << r << "b) : ("
         << scalar << ", " << scalar << ") -> " << scalar << "\n"
         << "      \"stablehlo.return\"(%r" << r << "c) : (" << scalar << ") -> ()\n"
         << "    }) {dimensions = array<i64: " << i64_list(dims) << ">} : (" << type(a) << ", " << scalar
         << ") -> " << type(out) << "\n";
    return out;
  }

  // all_reduce with an add region over `groups` (the replica_groups attribute text).
  Val all_reduce_sum(const Val& a, const std::string& groups) {
    Val out{"%v" + std::to_string(next_++), a.shape, a.et};
    const std::string r = out.name.substr(2), scalar = tensor_type({}, a.et);
    body << "    " << out.name << " = \"stablehlo.all_reduce\"(" << a.name << ") ({\n"
         << "    ^bb0(%r" << r << "a: " << scalar << ", %r" << r << "b: " << scalar << "):\n"
         << "      %r" << r << "c = \"stablehlo.add\"(%r" << r << "a, %r" << r << "b) : (" << scalar << ", "
         << scalar << ") -> " << scalar << "\n"
         << "      \"stablehlo.return\"(%r" << r << "c) : (" << scalar << ") -> ()\n"
         << "    }) {" << groups << "} : (" << type(a) << ") -> " << type(out) << "\n";
    return out;
  }

  // Stable ascending sort of (keys f32, payload i32) along `dim`; returns the sorted keys and payload.
  std::pair<Val, Val> sort_pairs(const Val& keys, const Val& payload, int64_t dim) {
    const std::string r = std::to_string(next_++);
    const std::string f = tensor_type({}, "f32"), i = tensor_type({}, "i32");
    body << "    %v" << r << ":2 = \"stablehlo.sort\"(" << keys.name << ", " << payload.name << ") ({\n"
         << "    ^bb0(%s" << r << "a: " << f << ", %s" << r << "b: " << f << ", %s" << r << "c: " << i
         << ", %s" << r << "d: " << i << "):\n"
         << "      %s" << r << "e = \"stablehlo.compare\"(%s" << r << "a, %s" << r
         << "b) {comparison_direction = #stablehlo<comparison_direction LT>, compare_type = "
            "#stablehlo<comparison_type FLOAT>} : ("
         << f << ", " << f << ") -> tensor<i1>\n"
         << "      \"stablehlo.return\"(%s" << r << "e) : (tensor<i1>) -> ()\n"
         << "    }) {dimension = " << dim << " : i64, is_stable = true} : (" << type(keys) << ", "
         << type(payload) << ") -> (" << type(keys) << ", " << type(payload) << ")\n";
    return {Val{"%v" + r + "#0", keys.shape, keys.et}, Val{"%v" + r + "#1", payload.shape, payload.et}};
  }

  // stablehlo.while over the carried values `init`: `cond` maps the loop's values to an i1 scalar, `body` to
  // their next values (same types). Both regions may read values defined before the loop. Returns the final
  // values.
  std::vector<Val> while_loop(const std::vector<Val>& init,
                              const std::function<Val(const std::vector<Val>&)>& cond,
                              const std::function<std::vector<Val>(const std::vector<Val>&)>& loop_body) {
    const std::string w = std::to_string(next_++);
    std::string types;
    for (size_t i = 0; i < init.size(); ++i) types += (i ? ", " : "") + type(init[i]);
    auto block_args = [&](const char* tag) {
      std::vector<Val> args;
      std::string decl;
      for (size_t i = 0; i < init.size(); ++i) {
        args.push_back(Val{"%w" + w + tag + std::to_string(i), init[i].shape, init[i].et});
        decl += (i ? ", " : "") + args.back().name + ": " + type(init[i]);
      }
      body << "    ^bb0(" << decl << "):\n";
      return args;
    };
    body << "    %v" << w << ":" << init.size() << " = \"stablehlo.while\"(";
    for (size_t i = 0; i < init.size(); ++i) body << (i ? ", " : "") << init[i].name;
    body << ") ({\n";
    const Val pred = cond(block_args("c"));
    body << "      \"stablehlo.return\"(" << pred.name << ") : (tensor<i1>) -> ()\n    }, {\n";
    const std::vector<Val> next = loop_body(block_args("b"));
    TS_ASSERT(next.size() == init.size(), "while_loop body returns ", next.size(), " of ", init.size());
    body << "      \"stablehlo.return\"(";
    for (size_t i = 0; i < next.size(); ++i) body << (i ? ", " : "") << next[i].name;
    body << ") : (" << types << ") -> ()\n    }) : (" << types << ") -> (" << types << ")\n";
    std::vector<Val> out;
    for (size_t i = 0; i < init.size(); ++i)
      out.push_back(Val{"%v" + w + "#" + std::to_string(i), init[i].shape, init[i].et});
    return out;
  }

  // a[starts...] of `sizes` (starts: i32 scalars, one per dimension).
  Val dynamic_slice(const Val& a, const std::vector<Val>& starts, const Shape& sizes) {
    std::vector<Val> operands{a};
    operands.insert(operands.end(), starts.begin(), starts.end());
    return op("dynamic_slice", operands, "slice_sizes = array<i64: " + i64_list(sizes) + ">", sizes, a.et);
  }
  // a with `update` written at starts... (i32 scalars).
  Val dynamic_update_slice(const Val& a, const Val& update, const std::vector<Val>& starts) {
    std::vector<Val> operands{a, update};
    operands.insert(operands.end(), starts.begin(), starts.end());
    return op("dynamic_update_slice", operands, "", a.shape, a.et);
  }

  // dot_general with explicit batch and contracting dimensions, float32 accumulation at full precision.
  Val dot(const Val& a, const Val& b, const std::vector<int64_t>& lb, const std::vector<int64_t>& rb,
          const std::vector<int64_t>& lc, const std::vector<int64_t>& rc, const Shape& shape) {
    return op("dot_general", {a, b},
              "dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [" + i64_list(lb) +
                  "], rhs_batching_dimensions = [" + i64_list(rb) + "], lhs_contracting_dimensions = [" +
                  i64_list(lc) + "], rhs_contracting_dimensions = [" + i64_list(rc) +
                  "]>, precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]",
              shape, "f32");
  }

 private:
  int next_ = 0;
};

class Lowering {
 public:
  Lowering(const Graph& g, const KernelSplice* kernels)
      : g_(g),
        vals_(g.nodes.size()),
        kernels_(kernels && kernels->set && !kernels->set->empty() ? kernels : nullptr) {
    if (kernels_) spliced_used_.assign(kernels_->texts.size(), false);
  }

  StablehloProgram run() {
    declare_arguments();
    for (size_t i = 0; i < g_.nodes.size(); ++i) lower(static_cast<int>(i));
    return finish();
  }

 private:
  const Val& val(int id) const { return vals_.at(static_cast<size_t>(id)); }
  int64_t batch() const { return g_.key.batch; }
  int64_t seq() const { return g_.key.seq; }

  Val add_arg(StablehloArg a) {
    Val v{"%arg" + std::to_string(prog_.args.size()), a.shape, element_type(a.dtype)};
    prog_.args.push_back(std::move(a));
    return v;
  }

  // Weights (node order, one argument per name), then step inputs (fixed kind order), then caches.
  void declare_arguments() {
    std::map<std::string, Val> weights;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& n = g_.nodes[i];
      if (n.op != Op::Weight) continue;
      const std::string key = graph::weight_key(n);
      auto it = weights.find(key);
      if (it == weights.end()) {
        if (is_quantized(n.dtype)) {
          std::vector<Val> parts;  // in part order: integers, scales, offsets
          // Stacked experts [E, N, K] are uploaded as their rows [E * N, K] (pjrt_backend.cpp).
          const Shape rows = n.shape.size() == 3 ? Shape{n.shape[0] * n.shape[1], n.shape[2]} : n.shape;
          for (const QuantPart& part : quant_parts_of(n.dtype, rows))
            parts.push_back(add_arg(
                {StablehloArg::Weight, quant_part_name(key, part.part), {}, -1, 0, part.shape, part.dtype}));
          QuantParts p{parts[1], std::nullopt};
          if (parts.size() > 2) p.offset = parts[2];
          it = weights.emplace(key, parts[0]).first;
          quant_parts_[parts[0].name] = std::move(p);
        } else {
          it = weights.emplace(key, add_arg({StablehloArg::Weight, key, {}, -1, 0, n.shape, n.dtype})).first;
        }
      }
      vals_[i] = it->second;
    }
    for (InputKind kind :
         {InputKind::TokenIds, InputKind::Positions, InputKind::Slots, InputKind::KvBegin,
          InputKind::CacheRows, InputKind::SeenFrom, InputKind::SampleParams, InputKind::TokenMask}) {
      for (size_t i = 0; i < g_.nodes.size(); ++i) {
        const Node& n = g_.nodes[i];
        if (n.op == Op::Input && n.input_kind == kind)
          vals_[i] = add_arg({StablehloArg::Input, n.name, kind, -1, 0, n.shape, DType::I32});
      }
    }
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& n = g_.nodes[i];
      if (n.op != Op::CacheState && n.op != Op::SamplerState) continue;
      cache_args_.push_back(static_cast<int>(i));
      const bool q8 = n.op == Op::CacheState && n.dtype == DType::Q8_0;  // bytes: q8_cache_shape
      vals_[i] = add_arg({n.op == Op::CacheState ? StablehloArg::Cache : StablehloArg::Seen,
                          n.name,
                          {},
                          n.layer,
                          n.which,
                          q8 ? q8_cache_shape(n.shape) : n.shape,
                          q8                       ? DType::I8
                          : n.op == Op::CacheState ? n.dtype
                                                   : DType::F32});
    }
    cache_final_ = cache_args_;  // each cache's latest value: the CacheState itself until updated
    // Each linear-attention layer's recurrent state, after every other state: f32 [cache_batch, W], a row's
    // [conv history (C channels x K - 1 inputs, channel-major) | S (Hv x dk x dv)], as the cpu cache keeps
    // it.
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& n = g_.nodes[i];
      if (n.op != Op::GatedDeltaNet) continue;
      linear_nodes_.push_back(static_cast<int>(i));
      linear_final_.push_back(add_arg({StablehloArg::Cache,
                                       "layers." + std::to_string(n.layer) + ".linear_state",
                                       {},
                                       n.layer,
                                       kLinearStateWhich,
                                       {g_.key.cache_batch(), linear_state_floats(n)},
                                       DType::F32}));
    }
  }

  // A node a kernel package accepts, as a call of its function with the node's signature; false: none fits.
  bool splice(const Node& n, int id) {
    if (!kernels_) return false;
    const kernels::KernelPackage* p = kernels_->set->for_node(g_, n);
    if (!p) return false;
    size_t k = 0;
    while (kernels_->set->packages[k].get() != p) ++k;
    const kernels::StablehloKernelText& text = kernels_->texts.at(k);
    if (text.tpu_custom_call && kernels_->platform != "tpu")
      fail("kernel package ", p->name,
           ": its StableHLO holds stablehlo.custom_call @tpu_custom_call (a Pallas TPU "
           "kernel), which runs only on a tpu platform, not ",
           kernels_->platform);
    std::vector<Val> operands;
    std::vector<std::string> arg_types;
    for (int in : n.inputs) {
      operands.push_back(val(in));
      arg_types.push_back(type(operands.back()));
    }
    const std::vector<std::string> result_types = {tensor_type(n.shape, "f32")};
    for (const kernels::StablehloFunction& f : text.functions) {
      if (!f.is_public || f.arg_types != arg_types || f.result_types != result_types) continue;
      b_.comment(n.name + ": " + graph::op_name(n.op) + " from kernel package " + p->name + " (@" + f.name +
                 ")");
      vals_[static_cast<size_t>(id)] =
          b_.op("func.call", operands, "callee = @" + text.prefix + f.name, n.shape, "f32");
      spliced_used_[k] = true;
      ++prog_.spliced;
      return true;
    }
    prog_.kernel_misses.push_back(p->name + ": " + graph::op_name(n.op) + " " +
                                  kernels::signature_text(arg_types, result_types));
    return false;
  }

  void lower(int id) {
    const Node& n = g_.at(id);
    if (splice(n, id)) {
      TS_ASSERT(vals_[static_cast<size_t>(id)].shape == n.shape, n.name);
      return;
    }
    switch (n.op) {
      case Op::Input:
      case Op::Weight:
      case Op::CacheState:
      case Op::SamplerState:
        return;  // arguments
      case Op::MarkSeen:
        vals_[static_cast<size_t>(id)] = mark_seen(n, id);
        break;
      case Op::Sample:
        vals_[static_cast<size_t>(id)] = sample(n);
        break;
      case Op::Embedding:
        vals_[static_cast<size_t>(id)] = embedding(n);
        break;
      case Op::RmsNorm:
        vals_[static_cast<size_t>(id)] = rms_norm(n);
        break;
      case Op::MatMul:
        vals_[static_cast<size_t>(id)] = matmul(n);
        break;
      case Op::Rope:
        vals_[static_cast<size_t>(id)] = rope(n);
        break;
      case Op::CacheUpdate:
        vals_[static_cast<size_t>(id)] = cache_update(n, id);
        break;
      case Op::Attention:
        vals_[static_cast<size_t>(id)] = attention(n);
        break;
      case Op::GatedAct:
        vals_[static_cast<size_t>(id)] = gated_act(n);
        break;
      case Op::Add:
        vals_[static_cast<size_t>(id)] = b_.add(val(n.inputs[0]), val(n.inputs[1]));
        break;
      case Op::LastRow:
        vals_[static_cast<size_t>(id)] = last_row(n);
        break;
      case Op::AllReduce:
        vals_[static_cast<size_t>(id)] = all_reduce(n);
        break;
      case Op::AllGather:
        vals_[static_cast<size_t>(id)] = all_gather(n);
        break;
      case Op::SoftCap:
        b_.comment(n.name + ": soft_cap");
        vals_[static_cast<size_t>(id)] = soft_cap(val(n.inputs[0]), n.softcap);
        break;
      case Op::MoeRoute:
        vals_[static_cast<size_t>(id)] = moe_route(n);
        break;
      case Op::MoeExperts:
        vals_[static_cast<size_t>(id)] = moe_experts(n);
        break;
      case Op::GatedDeltaNet:
        vals_[static_cast<size_t>(id)] = gated_delta_net(n, id);
        break;
      case Op::Scale:
        vals_[static_cast<size_t>(id)] = scale(n);
        break;
      case Op::Slice: {
        b_.comment(n.name + ": columns from " + std::to_string(n.begin));
        const Val& x = val(n.inputs[0]);
        vals_[static_cast<size_t>(id)] = b_.slice(x, {0, n.begin}, {x.shape[0], n.begin + n.shape[1]});
        break;
      }
      case Op::kCount:
        fail("stablehlo emitter: invalid op in graph node ", n.name);
    }
    const bool q8_cache = n.op == Op::CacheUpdate && vals_[static_cast<size_t>(id)].et == "i8";
    TS_ASSERT(vals_[static_cast<size_t>(id)].shape == (q8_cache ? q8_cache_shape(n.shape) : n.shape), n.name,
              ": lowered to ", shape_str(vals_[static_cast<size_t>(id)].shape), ", graph says ",
              shape_str(n.shape));
  }

  // The replica group of a tensor-parallel program: every one of the key's tp_size replicas, in rank order.
  std::string replica_groups() const {
    const int n = g_.key.tp_size;
    std::string ids;
    for (int r = 0; r < n; ++r) ids += (r ? ", " : "") + std::to_string(r);
    return "replica_groups = dense<[[" + ids + "]]> : tensor<1x" + std::to_string(n) + "xi64>";
  }

  // x -> the elementwise sum of x over all replicas (cross-replica: num_replicas = tp_size, no channel).
  Val all_reduce(const Node& n) {
    b_.comment(n.name + ": all_reduce (sum over " + std::to_string(g_.key.tp_size) + " replicas)");
    return b_.all_reduce_sum(val(n.inputs[0]), replica_groups());
  }

  // x [R, c] -> [R, c * tp_size]: replica r's columns at [r*c, (r+1)*c).
  Val all_gather(const Node& n) {
    b_.comment(n.name + ": all_gather (columns of " + std::to_string(g_.key.tp_size) + " replicas)");
    const Val& x = val(n.inputs[0]);
    return b_.op("all_gather", {x}, "all_gather_dim = 1 : i64, " + replica_groups(),
                 {x.shape[0], x.shape[1] * g_.key.tp_size}, x.et);
  }

  // A weight as f32 (converted once per program; tied embeddings are converted once for both uses).
  Val weight_f32(int id) {
    auto it = converted_.find(id);
    if (it != converted_.end()) return it->second;
    const Val& w = val(id);
    if (const QuantParts* p = quant_parts(w)) return converted_[id] = dequantize(w, p->scale, p->offset);
    return converted_[id] = b_.convert(w, "f32");
  }

  // The scales and offsets of a block-quantised weight's integers `q` (null for any other value).
  const QuantParts* quant_parts(const Val& q) const {
    auto it = quant_parts_.find(q.name);
    return it == quant_parts_.end() ? nullptr : &it->second;
  }

  // q i8 [R, K] -> f32 q * scale (+ offset): scale [R, K / group] (group = K / scale columns), offset
  // [R, K / 32] when the format has one.
  Val dequantize(const Val& q, const Val& scale, const std::optional<Val>& offset) {
    const int64_t rows = q.shape[0], cols = q.shape[1], groups = scale.shape[1];
    const Shape grouped{rows, groups, cols / groups};
    Val y = b_.mul(b_.reshape(b_.convert(q, "f32"), grouped), b_.broadcast(scale, {0, 1}, grouped));
    if (offset) {
      const Shape sub{rows, cols / 32, 32};
      y = b_.add(b_.reshape(y, sub), b_.broadcast(*offset, {0, 1}, sub));
    }
    return b_.reshape(y, {rows, cols});
  }

  // Rows `idx` [R, 1] of table [V, D] (a gather of whole rows); of a table [V, A, B], its [A, B] slices.
  Val gather_rows(const Val& table, const Val& idx) {
    Shape shape{idx.shape[0]};
    std::string offset_dims, sizes = "1";
    for (size_t d = 1; d < table.shape.size(); ++d) {
      shape.push_back(table.shape[d]);
      offset_dims += (d > 1 ? ", " : "") + std::to_string(d);
      sizes += ", " + std::to_string(table.shape[d]);
    }
    return b_.op("gather", {table, idx},
                 "dimension_numbers = #stablehlo.gather<offset_dims = [" + offset_dims +
                     "], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, "
                     "indices_are_sorted = false, slice_sizes = array<i64: " +
                     sizes + ">",
                 shape, table.et);
  }

  // tanh(x / cap) * cap elementwise (PyTorch's order: divide, tanh, multiply).
  Val soft_cap(const Val& x, float cap) {
    return b_.mul(b_.unary("tanh", b_.div(x, b_.splat_f32(cap, x.shape))), b_.splat_f32(cap, x.shape));
  }

  // (table [V, D], ids [R]) -> [R, D]: a gather of whole rows (times n.scale when set).
  Val embedding(const Node& n) {
    b_.comment(n.name + ": embedding");
    const Val& table = val(n.inputs[0]);
    const Val& ids = val(n.inputs[1]);
    Val idx = b_.reshape(ids, {ids.shape[0], 1});  // [R, 1]
    Val y;
    if (const QuantParts* p =
            quant_parts(table)) {  // the rows' integers, scales and offsets, then their values
      std::optional<Val> offset;
      if (p->offset) offset = gather_rows(*p->offset, idx);
      y = dequantize(gather_rows(table, idx), gather_rows(p->scale, idx), offset);
    } else {
      y = b_.convert(gather_rows(table, idx), "f32");  // [R, D]
    }
    return n.scale != 0.f ? b_.mul(y, b_.splat_f32(n.scale, y.shape)) : y;
  }

  // x [R, C] normalised over groups of n.dim: (x * (1 / sqrt(mean(x^2) + eps))) * w, in f32.
  Val rms_norm(const Node& n) {
    b_.comment(n.name + ": rms_norm over groups of " + std::to_string(n.dim));
    const Val& x = val(n.inputs[0]);
    const int64_t groups = shape_numel(x.shape) / n.dim;
    const Shape gd{groups, n.dim}, g1{groups};
    Val xg = b_.reshape(x, gd);                                           // [G, d]
    Val sum = b_.reduce(b_.mul(xg, xg), {1}, "add", 0.0f);                // [G]
    Val mean = b_.div(sum, b_.splat_f32(static_cast<float>(n.dim), g1));  // [G]
    Val sd = b_.unary("sqrt", b_.add(mean, b_.splat_f32(n.eps, g1)));
    Val inv = b_.div(b_.splat_f32(1.0f, g1), sd);  // [G]
    Val y = b_.mul(xg, b_.broadcast(inv, {0}, gd));
    if (n.inputs.size() > 1) y = b_.mul(y, b_.broadcast(val(n.inputs[1]), {1}, gd));  // else no weight
    return b_.reshape(y, x.shape);
  }

  // (x * w) * scale: w [C] per column or [1] for every element (absent: none); scale 1: none.
  Val scale(const Node& n) {
    b_.comment(n.name + ": scale");
    Val y = val(n.inputs[0]);
    if (n.inputs.size() > 1) {
      y = b_.mul(y, b_.broadcast(val(n.inputs[1]), {1}, y.shape));  // a [1] weight stretches
    }
    if (n.scale != 1.0f) y = b_.mul(y, b_.splat_f32(n.scale, y.shape));
    return y;
  }

  // x [R, in] · w[out, in]^T (+ bias) -> [R, out]
  Val matmul(const Node& n) {
    b_.comment(n.name + ": matmul");
    const Val& x = val(n.inputs[0]);
    Val w = weight_f32(n.inputs[1]);
    const Shape out{x.shape[0], w.shape[0]};
    Val y = b_.dot(x, w, {}, {}, {1}, {1}, out);
    if (n.inputs.size() > 2) y = b_.add(y, b_.broadcast(val(n.inputs[2]), {1}, out));
    return y;
  }

  // Rotate-half RoPE on the first rot_dim of each head; angle = f32(pos) * inv_freq[i].
  Val rope(const Node& n) {
    b_.comment(n.name + ": rope (rotate-half, rot_dim " + std::to_string(n.rot_dim) + ")");
    const Val& x = val(n.inputs[0]);
    const int64_t rows = x.shape[0], heads = n.heads, hd = n.head_dim, rot = n.rot_dim, half = rot / 2;
    if (half == 0) return x;
    const Shape rhh{rows, heads, half}, x3s{rows, heads, hd};
    const auto& [cos_v, sin_v] =
        rope_angles(n.inputs[1], n.rope_table, half, n.scale != 0.f ? n.scale : 1.0f);
    Val c = b_.broadcast(cos_v, {0, 2}, rhh);  // [R, H, half]
    Val s = b_.broadcast(sin_v, {0, 2}, rhh);
    Val x3 = b_.reshape(x, x3s);  // [R, H, hd]
    Val x1 = b_.slice(x3, {0, 0, 0}, {rows, heads, half});
    Val x2 = b_.slice(x3, {0, 0, half}, {rows, heads, rot});
    std::vector<Val> parts = {b_.sub(b_.mul(x1, c), b_.mul(x2, s)), b_.add(b_.mul(x2, c), b_.mul(x1, s))};
    if (rot < hd)
      parts.push_back(b_.slice(x3, {0, 0, rot}, {rows, heads, hd}));  // partial rotary: rest as is
    return b_.reshape(b_.concatenate(parts, 2), x.shape);
  }

  // cos and sin [R, half] of f32(pos) * inv_freq[i], computed once per (positions, rope table) and shared by
  // q, k and every layer.
  const std::pair<Val, Val>& rope_angles(int positions, int table_index, int64_t half, float scale) {
    const auto key = std::make_pair(positions, table_index);
    auto it = rope_cs_.find(key);
    if (it != rope_cs_.end()) return it->second;
    const graph::RopeTable& table = g_.rope_tables.at(static_cast<size_t>(table_index));
    TS_ASSERT(static_cast<int64_t>(table.inv_freq.size()) == half, "rope table of ", table.inv_freq.size(),
              " for half ", half);
    const std::optional<Val> fixed =
        table.varies() ? std::nullopt : std::optional<Val>(b_.vector_f32(table.inv_freq));  // [half]
    Val pos = b_.convert(val(positions), "f32");                                            // [R]
    const Shape rh{pos.shape[0], half};
    Val inv = fixed ? b_.broadcast(*fixed, {1}, rh) : row_frequencies(table, positions, half);
    Val angle = b_.mul(b_.broadcast(pos, {0}, rh), inv);  // [R, half]
    Val c = b_.unary("cosine", angle), s = b_.unary("sine", angle);
    if (scale != 1.0f) {  // yarn's attention factor, on cos and sin as Transformers applies it
      c = b_.mul(c, b_.splat_f32(scale, rh));
      s = b_.mul(s, b_.splat_f32(scale, rh));
    }
    return rope_cs_[key] = {c, s};
  }

  // [R, half]: the frequencies of each token's step row for a varying table (graph::RopeTable), chosen by
  // the length the row's sequence reaches (its last position + 1), as the cpu backend does.
  Val row_frequencies(const graph::RopeTable& t, int positions, int64_t half) {
    const int64_t B = batch(), S = seq();
    const Shape bh{B, half};
    Val last = b_.reduce(b_.reshape(val(positions), {B, S}), {1}, "maximum", -1.0f);  // [B] i32
    Val len = b_.add(last, b_.splat_i32(1, {B}));
    Val longer = b_.compare(len, b_.splat_i32(static_cast<int32_t>(t.switch_len), {B}), "GT", "SIGNED");
    Val base_freq = b_.broadcast(b_.vector_f32(t.inv_freq), {1}, bh);
    Val beyond;
    if (!t.dynamic) {
      beyond = b_.broadcast(b_.vector_f32(t.long_inv_freq), {1}, bh);
    } else {
      // theta * (factor * len / switch_len - (factor - 1)) ^ (dim / (dim - 2)), then 1 / base ^ (2i / dim)
      // (float32, as RopeTable::for_length; the power's last bits may differ from the host's).
      const Shape b1{B};
      Val ratio = b_.mul(b_.splat_f32(static_cast<float>(t.factor), b1), b_.convert(len, "f32"));
      ratio = b_.div(ratio, b_.splat_f32(static_cast<float>(t.switch_len), b1));
      ratio = b_.sub(ratio, b_.splat_f32(static_cast<float>(t.factor - 1.0), b1));
      const auto d = static_cast<double>(t.dim);
      Val stretch = b_.binary("power", ratio, b_.splat_f32(static_cast<float>(d / (d - 2.0)), b1));
      Val base = b_.mul(b_.splat_f32(static_cast<float>(t.theta), b1), stretch);
      std::vector<float> exps(static_cast<size_t>(half));
      for (int64_t i = 0; i < half; ++i)
        exps[static_cast<size_t>(i)] = static_cast<float>(2 * i) / static_cast<float>(t.dim);
      Val p = b_.binary("power", b_.broadcast(base, {0}, bh), b_.broadcast(b_.vector_f32(exps), {1}, bh));
      beyond = b_.div(b_.splat_f32(1.0f, bh), p);
    }
    Val rows = b_.select(b_.broadcast(longer, {0}, bh), beyond, base_freq);  // [B, half]
    return b_.reshape(b_.broadcast(rows, {0, 2}, {B, S, half}), {B * S, half});
  }

  // The scalar i32 at index i of a 1-D i32 value.
  Val element(const Val& v, int64_t i) { return b_.reshape(b_.slice(v, {i}, {i + 1}), {}); }

  // Writes new rows [B*S, KV*hd] into cache [CB, KV, L, hd]: step row b's S columns go to cache row rows[b]
  // (b when the step is not row-mapped) at slots slots[b*S] .. slots[b*S] + S - 1. Within a row the slots are
  // consecutive (every step the runtime builds: a prompt bucket or one decode slot), so each row is one
  // dynamic_update_slice at its first slot, done in place on the donated cache. The backend checks this at
  // run time (PjrtExecutable::run) before sending the step.
  Val cache_update(const Node& n, int id) {
    const Val& cache = val(n.inputs[0]);
    const Val& x = val(n.inputs[1]);
    const Val& slots = val(n.inputs[2]);
    const bool mapped = n.inputs.size() > 3;
    const int64_t B = batch(), S = seq(), kv = n.kv_heads, hd = n.head_dim;
    b_.comment(n.name + (B == 1 && !mapped ? std::string(": cache_update at slots[0]")
                                           : ": cache_update per row at its first slot"));
    Val upd = b_.transpose(b_.reshape(x, {B, S, kv, hd}), {0, 2, 1, 3});  // [B, KV, S, hd]
    if (cache.et == "i8") {
      upd = quantise_q8(upd);             // [B, KV, S, q8 bytes]
    } else if (cache.et == "f8E4M3FN") {  // fp8 e4m3fn has no infinity: clamp to its largest value, +-448
      const Val lim = b_.splat_f32(448.0f, upd.shape);
      upd = b_.op("clamp", {b_.unary("negate", lim), upd, lim}, "", upd.shape, "f32");
    }
    if (cache.et != "f32" && cache.et != "i8") upd = b_.convert(upd, cache.et);  // rounded once, when written
    Val out = cache;
    if (B == 1 && !mapped) {
      Val first = element(slots, 0);  // scalar slots[0]
      Val zero = b_.splat_i32(0, {});
      out = b_.op("dynamic_update_slice", {cache, upd, zero, zero, first, zero}, "", cache.shape, cache.et);
    } else {
      Val zero = b_.splat_i32(0, {});
      for (int64_t b = 0; b < B; ++b) {
        Val row_upd =
            B == 1 ? upd : b_.slice(upd, {b, 0, 0, 0}, {b + 1, kv, S, upd.shape[3]});  // [1, KV, S, hd]
        Val first = element(slots, b * S);
        Val row = mapped ? element(val(n.inputs[3]), b) : b_.splat_i32(static_cast<int32_t>(b), {});
        out =
            b_.op("dynamic_update_slice", {out, row_upd, row, zero, first, zero}, "", cache.shape, cache.et);
      }
    }
    for (size_t i = 0; i < cache_args_.size(); ++i)
      if (cache_final_[i] == n.inputs[0]) cache_final_[i] = id;
    return out;
  }

  // A q8_0 KV cache is int8 bytes [CB, KV, L, W]: each position's head of hd values as llama.cpp's Q8_0
  // blocks (hd padded with zeros to whole blocks of 32), per block the f16 scale's 2 bytes then 32 int8
  // quants, the native cpu cache's bytes. One buffer per cache, so it is donated, aliased and copied as the
  // others are.
  static Shape q8_cache_shape(Shape s) {
    s.back() = static_cast<int64_t>(kv_row_bytes(DType::Q8_0, s.back()));
    return s;
  }

  // f32 x [..., hd] -> its q8_0 bytes [..., W] as the cpu cache writes them (store_kv_row): per block
  // d = amax / 127, q = round_nearest_even(x * (1 / d)) (0 where d = 0), d rounded to f16; a row holding a
  // non-finite value gets NaN scales and zero quants (it reads back as NaN, as from a float32 cache).
  Val quantise_q8(const Val& x) {
    const Shape lead(x.shape.begin(), x.shape.end() - 1);
    const int64_t hd = x.shape.back(), nb = (hd + 31) / 32;
    auto with = [&](std::initializer_list<int64_t> tail) { return with_tail(lead, tail); };
    const std::vector<int64_t> lead_dims = first_dims(lead.size()), block_dims = first_dims(lead.size() + 1);
    const int64_t last = static_cast<int64_t>(lead.size());
    b_.comment("q8_0 cache blocks of " + std::to_string(hd) + " values");
    Val padded = hd % 32 == 0 ? x : b_.concatenate({x, b_.splat_f32(0.0f, with({nb * 32 - hd}))}, last);
    const Shape bs = with({nb, 32}), ds = with({nb});
    Val blocks = b_.reshape(padded, bs);
    Val amax = b_.reduce(b_.unary("abs", blocks), {last + 1}, "maximum", 0.0f);  // [..., nb]
    Val d = b_.div(amax, b_.splat_f32(127.0f, ds));
    Val nonzero = b_.compare(d, b_.splat_f32(0.0f, ds), "NE", "FLOAT");
    Val inv = b_.select(nonzero, b_.div(b_.splat_f32(1.0f, ds), d), b_.splat_f32(0.0f, ds));
    Val q = b_.unary("round_nearest_even", b_.mul(blocks, b_.broadcast(inv, block_dims, bs)));
    // Finite rows: the sum of x * 0 over the row is 0, NaN once any value is inf or NaN.
    Val probe = b_.reduce(b_.mul(x, b_.splat_f32(0.0f, x.shape)), {last}, "add", 0.0f);  // [...]
    Val finite_row = b_.op("is_finite", {probe}, "", probe.shape, "i1");
    Val finite = b_.broadcast(finite_row, lead_dims, ds);
    Val scale =
        b_.select(finite, b_.convert(d, "f16"),
                  b_.op("constant", {}, "value = dense<0x7E00> : " + tensor_type(ds, "f16"), ds, "f16"));
    q = b_.select(b_.broadcast(finite_row, lead_dims, bs), q, b_.splat_f32(0.0f, bs));
    Val scale_bytes = b_.op("bitcast_convert", {scale}, "", with({nb, 2}), "i8");   // [..., nb, 2]
    Val blocks_out = b_.concatenate({scale_bytes, b_.convert(q, "i8")}, last + 1);  // [..., nb, 34]
    return b_.reshape(blocks_out, with({nb * 34}));
  }

  // A cache's values as float32 [..., hd]: a float cache widened (no-op for float32), a q8_0 one dequantised
  // (f32(q) * f32(d) per block, as the cpu kernel reads it).
  Val cache_values(const Val& c, int64_t hd) {
    if (c.et != "i8") return b_.convert(c, "f32");
    const Shape lead(c.shape.begin(), c.shape.end() - 1);
    const int64_t nb = c.shape.back() / 34;
    auto with = [&](std::initializer_list<int64_t> tail) { return with_tail(lead, tail); };
    const std::vector<int64_t> block_dims = first_dims(lead.size() + 1);
    Val blocks = b_.reshape(c, with({nb, 34}));
    std::vector<int64_t> from(lead.size() + 2, 0), to = with({nb, 34});
    to.back() = 2;
    Val d = b_.convert(b_.op("bitcast_convert", {b_.slice(blocks, from, to)}, "", with({nb}), "f16"), "f32");
    from.back() = 2;
    to.back() = 34;
    Val q = b_.convert(b_.slice(blocks, from, to), "f32");  // [..., nb, 32]
    Val x = b_.reshape(b_.mul(q, b_.broadcast(d, block_dims, with({nb, 32}))), with({nb * 32}));
    if (nb * 32 == hd) return x;
    std::vector<int64_t> start(lead.size() + 1, 0), limit = with({hd});
    return b_.slice(x, start, limit);
  }

  // a with dimension `dim` indexed at i (an i32 scalar) and dropped; `only`: that dimension has size 1.
  Val index_dim(const Val& a, size_t dim, const Val& i, bool only) {
    Shape sizes = a.shape;
    sizes[dim] = 1;
    std::vector<Val> starts(a.shape.size(), b_.splat_i32(0, {}));
    starts[dim] = i;
    Shape out = sizes;
    out.erase(out.begin() + static_cast<long>(dim));
    return b_.reshape(only ? a : b_.dynamic_slice(a, starts, sizes), out);
  }

  // Rows rows[b] of x [CB, ...] -> [B, ...] (a row-mapped step reads the cache rows of its step rows).
  Val take_rows(const Val& x, const Val& rows) {
    const int64_t B = rows.shape[0];
    Shape out = x.shape, sizes = x.shape;
    out[0] = B;
    sizes[0] = 1;
    std::vector<int64_t> offset_dims;
    for (size_t d = 1; d < x.shape.size(); ++d) offset_dims.push_back(static_cast<int64_t>(d));
    return b_.op("gather", {x, b_.reshape(rows, {B, 1})},
                 "dimension_numbers = #stablehlo.gather<offset_dims = [" + i64_list(offset_dims) +
                     "], collapsed_slice_dims = [0], start_index_map = [0], index_vector_dim = 1>, "
                     "indices_are_sorted = false, slice_sizes = array<i64: " +
                     i64_list(sizes) + ">",
                 out, x.et);
  }

  // Causal GQA attention over the static cache: query column s of row b sees slots kv_begin[b] <= j <=
  // slots[b*S + s] (and, with a sliding window, j > slots[b*S + s] - window: the static cache stays full
  // length, keys outside the window are masked). q [B*S, H*hd], caches [CB, KV, L, hd] (row-mapped: step row
  // b reads cache row rows[b]) -> [B*S, H*hd]; a row that sees nothing gets zeros (as natively).
  Val attention(const Node& n) {
    b_.comment(n.name + ": attention (GQA " + std::to_string(n.heads) + "/" + std::to_string(n.kv_heads) +
               ")");
    const Val& q = val(n.inputs[0]);
    Val kc = val(n.inputs[1]);
    Val vc = val(n.inputs[2]);
    const Val& slots = val(n.inputs[3]);
    if (n.inputs.size() > 5 && g_.at(n.inputs[5]).op == Op::Input) {  // row-mapped: the step rows' cache rows
      kc = take_rows(kc, val(n.inputs[5]));
      vc = take_rows(vc, val(n.inputs[5]));
    }
    kc = cache_values(kc, n.head_dim);  // float32 [B, KV, L, hd] whatever the cache keeps
    vc = cache_values(vc, n.head_dim);
    const Val& kv_begin = val(n.inputs[4]);
    const int64_t B = batch(), S = seq(), KV = n.kv_heads, G = n.heads / n.kv_heads, hd = n.head_dim;
    const int64_t L = kc.shape[2];
    const Shape s5{B, KV, G, S, L}, s4{B, KV, G, S};
    Val q4 = b_.reshape(b_.transpose(b_.reshape(q, {B, S, KV, G, hd}), {0, 2, 3, 1, 4}), {B, KV, G * S, hd});
    Val scores = b_.dot(q4, kc, {0, 1}, {0, 1}, {3}, {3}, {B, KV, G * S, L});  // [B, KV, G*S, L]
    scores = b_.mul(scores, b_.splat_f32(n.scale, scores.shape));
    if (n.softcap > 0.f) scores = soft_cap(scores, n.softcap);  // before the mask, as Transformers
    scores = b_.reshape(scores, s5);

    // mask[b, s, j] = kv_begin[b] <= j && j <= slots[b*S + s]. One row: slots [S] broadcast along dim 1;
    // several: slots as [B, S].
    const Shape bsl{B, S, L};
    const Val qslots = B == 1 ? slots : b_.reshape(slots, {B, S});
    const std::vector<int64_t> qdims = B == 1 ? std::vector<int64_t>{1} : std::vector<int64_t>{0, 1};
    Val j = b_.iota(2, bsl, "i32");
    Val lo = b_.compare(j, b_.broadcast(kv_begin, {0}, bsl), "GE", "SIGNED");
    Val hi = b_.compare(j, b_.broadcast(qslots, qdims, bsl), "LE", "SIGNED");
    Val in_range = b_.binary("and", lo, hi);
    if (n.window > 0) {  // sliding window: also j > slots[b*S + s] - window
      Val w = b_.splat_i32(static_cast<int32_t>(n.window), {S});  // [S]
      Val start = b_.sub(qslots, B == 1 ? w : b_.broadcast(w, {1}, {B, S}));
      in_range = b_.binary("and", in_range, b_.compare(j, b_.broadcast(start, qdims, bsl), "GT", "SIGNED"));
    }
    Val mask = b_.broadcast(in_range, {0, 3, 4}, s5);  // [B, KV, G, S, L]
    scores = b_.select(mask, scores, b_.splat_f32(-std::numeric_limits<float>::infinity(), s5));

    // Softmax in f32. The max is floored at -FLT_MAX and the sum at FLT_MIN so that a fully masked row gives
    // exp(-inf) = 0 everywhere and a zero output instead of NaN.
    Val mx = b_.max(b_.reduce(scores, {4}, "maximum", -std::numeric_limits<float>::infinity()),
                    b_.splat_f32(-std::numeric_limits<float>::max(), s4));
    std::optional<Val> sink;  // gpt-oss: each head's sink logit [B, KV, G, S], in the max and the sum
    if (n.sinks) {
      sink = b_.broadcast(b_.reshape(val(n.inputs.back()), {KV, G}), {1, 2}, s4);
      mx = b_.max(mx, *sink);
    }
    Val e = b_.unary("exponential", b_.sub(scores, b_.broadcast(mx, {0, 1, 2, 3}, s5)));
    // (The expression as before sinks existed, so programs without them are the same text.)
    Val sum =
        sink ? b_.max(b_.add(b_.reduce(e, {4}, "add", 0.0f), b_.unary("exponential", b_.sub(*sink, mx))),
                      b_.splat_f32(std::numeric_limits<float>::min(), s4))
             : b_.max(b_.reduce(e, {4}, "add", 0.0f), b_.splat_f32(std::numeric_limits<float>::min(), s4));
    Val p = b_.reshape(b_.div(e, b_.broadcast(sum, {0, 1, 2, 3}, s5)), {B, KV, G * S, L});
    Val o = b_.dot(p, vc, {0, 1}, {0, 1}, {3}, {2}, {B, KV, G * S, hd});  // [B, KV, G*S, hd]
    o = b_.transpose(b_.reshape(o, {B, KV, G, S, hd}), {0, 3, 1, 2, 4});  // [B, S, KV, G, hd]
    return b_.reshape(o, {B * S, n.heads * hd});
  }

  // act(gate) * up, each activation as PyTorch writes it:
  //   silu(g) = g / (1 + exp(-g))                                   (as the native kernel)
  //   gelu(g) = 0.5 g (1 + erf(g / sqrt 2))                         (chlo.erf, which XLA expands to its f32
  //                                                                   polynomial)
  //   gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) (PyTorch's tanh GELU, op for op)
  //   relu(g) = max(g, 0)                                           (NaN-propagating maximum)
  // act(g) elementwise, as Op::GatedAct's activations; `what` names the node in the comment.
  Val activate(const Val& g, graph::Activation a, const std::string& what) {
    auto splat = [&](float x) { return b_.splat_f32(x, g.shape); };
    switch (a) {
      case graph::Activation::Silu: {
        b_.comment(what + ": swiglu");
        Val e = b_.unary("exponential", b_.unary("negate", g));
        return b_.div(g, b_.add(splat(1.0f), e));
      }
      case graph::Activation::Gelu: {
        b_.comment(what + ": gelu(gate) * up");
        Val erf = b_.unary("chlo.erf", b_.mul(g, splat(0.70710678118654752f)));
        return b_.mul(b_.mul(g, splat(0.5f)), b_.add(splat(1.0f), erf));
      }
      case graph::Activation::GeluTanh: {
        b_.comment(what + ": gelu_tanh(gate) * up");
        Val cube = b_.mul(b_.mul(g, g), g);
        Val inner = b_.mul(splat(0.79788456080286536f), b_.add(g, b_.mul(splat(0.044715f), cube)));
        return b_.mul(b_.mul(g, splat(0.5f)), b_.add(splat(1.0f), b_.unary("tanh", inner)));
      }
      case graph::Activation::Relu:
        b_.comment(what + ": relu(gate) * up");
        return b_.max(g, splat(0.0f));
      case graph::Activation::Sigmoid: {
        b_.comment(what + ": sigmoid(gate) * up");
        Val e = b_.unary("exponential", b_.unary("negate", g));
        return b_.div(splat(1.0f), b_.add(splat(1.0f), e));
      }
      case graph::Activation::ClampedSwiglu:
        break;  // gated(): it needs up too
    }
    fail("stablehlo emitter: unknown activation in ", what);
  }

  Val gated_act(const Node& n) { return gated(val(n.inputs[0]), val(n.inputs[1]), n); }

  // act(gate) * up for n.act; gpt-oss's clamped SwiGLU (Transformers' _apply_gate, op for op):
  // g = min(gate, limit), u = clamp(up, -limit, limit), (u + 1) * (g * sigmoid(alpha * g)).
  Val gated(const Val& gate, const Val& up, const Node& n) {
    if (gate.shape != up.shape) {  // one gate per row [R, 1] (a shared expert's gate): act(gate) per row
      TS_ASSERT(n.act != graph::Activation::ClampedSwiglu && gate.shape.size() == 2 && gate.shape[1] == 1,
                n.name);
      const Val g = b_.reshape(activate(gate, n.act, n.name), {gate.shape[0]});
      return b_.mul(b_.broadcast(g, {0}, up.shape), up);
    }
    if (n.act != graph::Activation::ClampedSwiglu) return b_.mul(activate(gate, n.act, n.name), up);
    b_.comment(n.name + ": clamped swiglu (alpha " + std::to_string(n.alpha) + ", limit " +
               std::to_string(n.limit) + ")");
    auto splat = [&](float x) { return b_.splat_f32(x, gate.shape); };
    Val g = b_.binary("minimum", gate, splat(n.limit));
    Val u = b_.max(b_.binary("minimum", up, splat(n.limit)), splat(-n.limit));
    Val sig =
        b_.div(splat(1.0f),
               b_.add(splat(1.0f), b_.unary("exponential", b_.unary("negate", b_.mul(g, splat(n.alpha))))));
    return b_.mul(b_.add(u, splat(1.0f)), b_.mul(g, sig));
  }

  // Op::GatedDeltaNet over the step's B rows of S tokens, as the native kernel computes it: the causal
  // depthwise convolution vectorised over the step (the row's history, zeroed for a row whose sequence starts
  // in the step, then its tokens; tokens below kv_begin, a prefix of the row, enter as zeros and leave the
  // history alone), silu, l2-normalised q and k; the gated delta rule token by token (a stablehlo.while
  // over the S columns when S > 1; a token at kv_begin starts from zero state, one below it changes nothing
  // and gives 0); then the gated RMSNorm of every output at once. The new state is written back to the
  // step's cache rows.
  Val gated_delta_net(const Node& n, int id) {
    const int64_t B = batch(), S = seq(), CB = g_.key.cache_batch(), hv = n.heads, hk = n.kv_heads;
    const int64_t dk = n.head_dim, dv = n.dim, K = n.window, keep = K - 1, r = hv / hk;
    const int64_t key_dim = hk * dk, C = 2 * key_dim + hv * dv, H = keep * C, W = linear_state_floats(n);
    b_.comment(n.name + ": gated_delta_net (layer " + std::to_string(n.layer) + ", " + std::to_string(hv) +
               " value heads)");
    size_t at = 0;
    while (linear_nodes_[at] != id) ++at;
    const Val state = linear_final_[at];  // [CB, W]
    const bool mapped = n.inputs.size() > 10;
    const Val zero = b_.splat_i32(0, {});
    Val cur = mapped    ? take_rows(state, val(n.inputs[10]))
              : CB == B ? state
                        : b_.slice(state, {0, 0}, {B, W});
    // Which tokens count: slot >= kv_begin; which start their sequence: slot == kv_begin.
    const Shape bs{B, S};
    const Val slots = b_.reshape(val(n.inputs[8]), bs), begin = b_.broadcast(val(n.inputs[9]), {0}, bs);
    const Val valid = b_.compare(slots, begin, "GE", "SIGNED"),
              first = b_.compare(slots, begin, "EQ", "SIGNED");
    auto as_f32 = [&](const Val& p) {
      return b_.select(p, b_.splat_f32(1.0f, p.shape), b_.splat_f32(0.0f, p.shape));
    };
    const Val valid_f = as_f32(valid);

    // 1. Convolution: xcat [B, keep + S, C] = the kept history (zero where the row starts here), then the
    // step's inputs (zero where not counted); output t = sum_j xcat[t + j] * w[j], oldest first.
    const Shape bsc{B, S, C};
    const Val x = b_.mul(b_.reshape(val(n.inputs[0]), bsc), b_.broadcast(valid_f, {0, 1}, bsc));
    const Val starts = b_.reduce(as_f32(first), {1}, "maximum", 0.0f);  // [B]
    const Val counted = b_.reduce(valid_f, {1}, "maximum", 0.0f);       // [B]
    Val hist, xcat = x;
    if (keep > 0) {
      hist =
          b_.transpose(b_.reshape(b_.slice(cur, {0, 0}, {B, H}), {B, C, keep}), {0, 2, 1});  // [B, keep, C]
      const Shape bkc{B, keep, C};
      const Val kept = b_.mul(hist, b_.broadcast(b_.sub(b_.splat_f32(1.0f, {B}), starts), {0}, bkc));
      xcat = b_.concatenate({kept, x}, 1);
    }
    const Val w = b_.reshape(val(n.inputs[4]), {C, K});
    Val acc;
    for (int64_t j = 0; j < K; ++j) {
      const Val term = b_.mul(b_.slice(xcat, {0, j, 0}, {B, j + S, C}),
                              b_.broadcast(b_.reshape(b_.slice(w, {0, j}, {C, j + 1}), {C}), {2}, bsc));
      acc = j == 0 ? term : b_.add(acc, term);
    }
    const Val conv = activate(acc, graph::Activation::Silu, n.name + " conv");  // [B, S, C]

    // 2. q, k (l2-normalised, q scaled by dk^-1/2, each key head repeated for its r value heads), v, the
    // decay exp(-exp(a_log) softplus(a + dt_bias)) and beta = sigmoid(b), all [B, S, Hv, ...].
    auto l2 = [&](const Val& t, float scale) {  // t [B, S, Hk, dk]
      const Shape s3{B, S, hk};
      const Val inv =
          b_.unary("rsqrt", b_.add(b_.reduce(b_.mul(t, t), {3}, "add", 0.0f), b_.splat_f32(1e-6f, s3)));
      Val y = b_.mul(t, b_.broadcast(inv, {0, 1, 2}, t.shape));
      if (scale != 1.0f) y = b_.mul(y, b_.splat_f32(scale, t.shape));
      if (n.tiled_heads)  // value head j * hk + g reads key head g
        return b_.reshape(b_.broadcast(y, {0, 1, 3, 4}, {B, S, r, hk, dk}), {B, S, hv, dk});
      return b_.reshape(b_.broadcast(y, {0, 1, 2, 4}, {B, S, hk, r, dk}), {B, S, hv, dk});
    };
    const Shape bshk{B, S, hk, dk};
    const Val q = l2(b_.reshape(b_.slice(conv, {0, 0, 0}, {B, S, key_dim}), bshk),
                     1.0f / std::sqrt(static_cast<float>(dk)));
    const Val k = l2(b_.reshape(b_.slice(conv, {0, 0, key_dim}, {B, S, 2 * key_dim}), bshk), 1.0f);
    const Val v = b_.reshape(b_.slice(conv, {0, 0, 2 * key_dim}, {B, S, C}), {B, S, hv, dv});
    const Shape bsh{B, S, hv};
    const Val one = b_.splat_f32(1.0f, bsh);
    const Val beta = b_.div(
        one, b_.add(one, b_.unary("exponential", b_.unary("negate", b_.reshape(val(n.inputs[2]), bsh)))));
    const Val pre = b_.add(b_.reshape(val(n.inputs[3]), bsh), b_.broadcast(val(n.inputs[6]), {2}, bsh));
    const Val softplus = b_.select(b_.compare(pre, b_.splat_f32(20.0f, bsh), "GT", "FLOAT"), pre,
                                   b_.unary("log_plus_one", b_.unary("exponential", pre)));
    const Val rate = b_.broadcast(b_.unary("exponential", val(n.inputs[5])), {2}, bsh);
    const Val log_decay = b_.unary("negate", b_.mul(rate, softplus));
    const Val decay = b_.unary("exponential", log_decay);

    // 3. The delta rule, token by token.
    const Shape sh{B, hv, dk, dv}, oh{B, hv, dv};
    Val s0 = b_.reshape(b_.slice(cur, {0, H}, {B, W}), sh);
    auto step = [&](const Val& st, const Val& t) {  // t: the column (i32 scalar) -> (new state, output)
      auto col = [&](const Val& a) { return index_dim(a, 1, t, S == 1); };  // a[:, t] of a [B, S, ...]
      const Val qt = col(q), kt = col(k), vt = col(v), bt = col(beta), dt = col(decay);
      const Val ft = col(first), ct = col(valid);
      Val s1 = b_.select(b_.broadcast(ft, {0}, sh), b_.splat_f32(0.0f, sh), st);
      s1 = b_.mul(s1, b_.broadcast(dt, {0, 1}, sh));
      const Val mem = b_.dot(s1, kt, {0, 1}, {0, 1}, {2}, {2}, oh);  // S^T k
      const Val delta = b_.mul(b_.sub(vt, mem), b_.broadcast(bt, {0, 1}, oh));
      const Val s2 = b_.add(s1, b_.mul(b_.broadcast(kt, {0, 1, 2}, sh), b_.broadcast(delta, {0, 1, 3}, sh)));
      const Val o = b_.dot(s2, qt, {0, 1}, {0, 1}, {2}, {2}, oh);  // S^T q
      return std::make_pair(b_.select(b_.broadcast(ct, {0}, sh), s2, st),
                            b_.select(b_.broadcast(ct, {0}, oh), o, b_.splat_f32(0.0f, oh)));
    };
    Val s_final, outs;       // outs [B, S, hv, dv]
    if (S >= kDeltaChunk) {  // a prompt: the chunked form (matmuls per chunk, a loop over chunks)
      const Val fresh = b_.compare(starts, b_.splat_f32(0.0f, {B}), "GT", "FLOAT");
      const Val init = b_.select(b_.broadcast(fresh, {0}, sh), b_.splat_f32(0.0f, sh), s0);
      std::tie(s_final, outs) = delta_rule_chunked(q, k, v, beta, log_decay, valid_f, init);
    } else if (S == 1) {
      auto [st, o] = step(s0, zero);
      s_final = st;
      outs = b_.reshape(o, {B, 1, hv, dv});
    } else {
      const Val out0 = b_.splat_f32(0.0f, {B, S, hv, dv});
      const std::vector<Val> done = b_.while_loop(
          {zero, s0, out0},
          [&](const std::vector<Val>& a) {
            return b_.compare(a[0], b_.splat_i32(static_cast<int32_t>(S), {}), "LT", "SIGNED");
          },
          [&](const std::vector<Val>& a) {
            auto [st, o] = step(a[1], a[0]);
            const Val written =
                b_.dynamic_update_slice(a[2], b_.reshape(o, {B, 1, hv, dv}), {zero, a[0], zero, zero});
            return std::vector<Val>{b_.add(a[0], b_.splat_i32(1, {})), st, written};
          });
      s_final = done[1];
      outs = done[2];
    }

    // 4. The gated RMSNorm per head (the plain weight), times silu(z).
    const Shape bsv{B, S, hv, dv};
    const Val ss = b_.reduce(b_.mul(outs, outs), {3}, "add", 0.0f);  // [B, S, hv]
    const Val inv = b_.unary(
        "rsqrt", b_.add(b_.div(ss, b_.splat_f32(static_cast<float>(dv), bsh)), b_.splat_f32(n.eps, bsh)));
    const Val normed =
        b_.mul(b_.broadcast(val(n.inputs[7]), {3}, bsv), b_.mul(outs, b_.broadcast(inv, {0, 1, 2}, bsv)));
    const Val y = b_.mul(
        normed, activate(b_.reshape(val(n.inputs[1]), bsv), graph::Activation::Silu, n.name + " gate"));

    // 5. The new state of each step row: the history after its counted tokens (unchanged when none counted)
    // and S.
    std::vector<Val> parts;
    if (keep > 0) {
      Val h = b_.slice(xcat, {0, S, 0}, {B, S + keep, C});
      h = b_.select(b_.broadcast(b_.compare(counted, b_.splat_f32(0.0f, {B}), "GT", "FLOAT"), {0}, h.shape),
                    h, hist);
      parts.push_back(b_.reshape(b_.transpose(h, {0, 2, 1}), {B, H}));
    }
    parts.push_back(b_.reshape(s_final, {B, hv * dk * dv}));
    const Val rows_new = b_.concatenate(parts, 1);  // [B, W]
    Val out = state;
    if (mapped) {
      for (int64_t bi = 0; bi < B; ++bi)
        out = b_.dynamic_update_slice(out, b_.slice(rows_new, {bi, 0}, {bi + 1, W}),
                                      {element(val(n.inputs[10]), bi), zero});
    } else {
      out = CB == B ? rows_new : b_.dynamic_update_slice(state, rows_new, {zero, zero});
    }
    linear_final_[at] = out;
    return b_.reshape(y, {B * S, hv * dv});
  }

  // The gated delta rule over a step's S tokens in chunks of kDeltaChunk, as Transformers'
  // torch_chunk_gated_delta_rule computes it: per chunk, the intra-chunk interactions as matmuls (the delta
  // rule's lower-triangular system solved by stablehlo.triangular_solve), then one loop over the chunks
  // carrying the state. q, k [B, S, hv, dk] (normalised, q scaled), v [B, S, hv, dv], beta and g (the log
  // decay) [B, S, hv], valid [B, S] (0: a token that leaves the state alone and outputs 0), init the state
  // [B, hv, dk, dv] before the step. Returns (the state after the step, outputs [B, S, hv, dv]).
  std::pair<Val, Val> delta_rule_chunked(const Val& q, const Val& k, const Val& v, const Val& beta,
                                         const Val& g, const Val& valid, const Val& init) {
    const int64_t B = q.shape[0], S = q.shape[1], hv = q.shape[2], dk = q.shape[3], dv = v.shape[3];
    const int64_t C = kDeltaChunk, N = (S + C - 1) / C, P = N * C;
    b_.comment("gated delta rule in " + std::to_string(N) + " chunks of " + std::to_string(C));
    const Val zero = b_.splat_i32(0, {});
    // [B, S, hv(, d)] -> [B, hv, N, C(, d)], padded with zeros past S (neutral tokens: beta 0, g 0).
    auto chunked = [&](const Val& x) {
      const bool vec = x.shape.size() == 4;
      Val t = b_.transpose(x, vec ? std::vector<int64_t>{0, 2, 1, 3} : std::vector<int64_t>{0, 2, 1});
      if (P > S) {
        Shape pad = t.shape;
        pad[2] = P - S;
        t = b_.concatenate({t, b_.splat_f32(0.0f, pad)}, 2);
      }
      return vec ? b_.reshape(t, {B, hv, N, C, x.shape[3]}) : b_.reshape(t, {B, hv, N, C});
    };
    const Shape bsh{B, S, hv};
    const Val valid_h = b_.broadcast(valid, {0, 1}, bsh);
    const Val qc = chunked(q), kc = chunked(k), vc = chunked(v);
    const Val bc = chunked(b_.mul(beta, valid_h)), gc = chunked(b_.mul(g, valid_h));
    const Shape bnc{B, hv, N, C}, bncc{B, hv, N, C, C}, bnck{B, hv, N, C, dk}, bncv{B, hv, N, C, dv};
    // The cumulative log decay within each chunk (a product with the lower-triangular ones), the pairwise
    // decays exp(cum_i - cum_j) for j <= i (0 above the diagonal).
    const Val row = b_.iota(0, {C, C}, "i32"), col = b_.iota(1, {C, C}, "i32");
    const Val lower = b_.compare(col, row, "LE", "SIGNED");  // [C, C]: j <= i
    const Val ones = b_.select(lower, b_.splat_f32(1.0f, {C, C}), b_.splat_f32(0.0f, {C, C}));
    const Val cum = b_.dot(gc, ones, {}, {}, {3}, {1}, bnc);  // cum[.., i] = sum_{j <= i} g[.., j]
    const Val diff = b_.sub(b_.broadcast(cum, {0, 1, 2, 3}, bncc), b_.broadcast(cum, {0, 1, 2, 4}, bncc));
    const Val decays =
        b_.unary("exponential", b_.select(b_.broadcast(lower, {3, 4}, bncc), diff,
                                          b_.splat_f32(-std::numeric_limits<float>::infinity(), bncc)));
    const Val kb = b_.mul(kc, b_.broadcast(bc, {0, 1, 2, 3}, bnck));
    const Val vb = b_.mul(vc, b_.broadcast(bc, {0, 1, 2, 3}, bncv));
    // The system (I + strictly lower part of (k_beta k^T) * decays), solved for v_beta and the decayed
    // k_beta.
    const Val system = b_.mul(b_.dot(kb, kc, {0, 1, 2}, {0, 1, 2}, {4}, {4}, bncc), decays);
    auto solve = [&](const Val& rhs) {
      return b_.op("triangular_solve", {system, rhs},
                   "left_side = true, lower = true, unit_diagonal = true, transpose_a = "
                   "#stablehlo<transpose NO_TRANSPOSE>",
                   rhs.shape, "f32");
    };
    const Val exp_cum = b_.unary("exponential", cum);
    const Val u = solve(vb);                                                     // [B, hv, N, C, dv]
    const Val w = solve(b_.mul(kb, b_.broadcast(exp_cum, {0, 1, 2, 3}, bnck)));  // [B, hv, N, C, dk]
    const Val intra = b_.mul(b_.dot(qc, kc, {0, 1, 2}, {0, 1, 2}, {4}, {4}, bncc), decays);
    const Val qd = b_.mul(qc, b_.broadcast(exp_cum, {0, 1, 2, 3}, bnck));
    const Val last = b_.reshape(b_.slice(cum, {0, 0, 0, C - 1}, {B, hv, N, C}), {B, hv, N});
    const Val kd =
        b_.mul(kc, b_.broadcast(b_.unary("exponential", b_.sub(b_.broadcast(last, {0, 1, 2}, bnc), cum)),
                                {0, 1, 2, 3}, bnck));
    const Val chunk_decay = b_.unary("exponential", last);  // [B, hv, N]
    const Shape sh{B, hv, dk, dv}, hc{B, hv, C, dv};
    // One chunk: its outputs from the state before it and its own tokens, then the state after it.
    auto step = [&](const Val& st, const Val& i) {
      auto at = [&](const Val& a) { return index_dim(a, 2, i, N == 1); };  // a[:, :, i] of a [B, hv, N, ...]
      const Val v_new = b_.sub(at(u), b_.dot(at(w), st, {0, 1}, {0, 1}, {3}, {2}, hc));  // [B, hv, C, dv]
      const Val o = b_.add(b_.dot(at(qd), st, {0, 1}, {0, 1}, {3}, {2}, hc),
                           b_.dot(at(intra), v_new, {0, 1}, {0, 1}, {3}, {2}, hc));
      const Val s1 = b_.add(b_.mul(st, b_.broadcast(at(chunk_decay), {0, 1}, sh)),
                            b_.dot(at(kd), v_new, {0, 1}, {0, 1}, {2}, {2}, sh));
      return std::make_pair(s1, o);
    };
    Val s_final, outs;  // outs [B, hv, N, C, dv]
    if (N == 1) {
      auto [st, o] = step(init, zero);
      s_final = st;
      outs = b_.reshape(o, bncv);
    } else {
      const std::vector<Val> done = b_.while_loop(
          {zero, init, b_.splat_f32(0.0f, bncv)},
          [&](const std::vector<Val>& a) {
            return b_.compare(a[0], b_.splat_i32(static_cast<int32_t>(N), {}), "LT", "SIGNED");
          },
          [&](const std::vector<Val>& a) {
            auto [st, o] = step(a[1], a[0]);
            const Val written = b_.dynamic_update_slice(a[2], b_.reshape(o, {B, hv, 1, C, dv}),
                                                        {zero, zero, a[0], zero, zero});
            return std::vector<Val>{b_.add(a[0], b_.splat_i32(1, {})), st, written};
          });
      s_final = done[1];
      outs = done[2];
    }
    Val y = b_.slice(b_.reshape(outs, {B, hv, P, dv}), {0, 0, 0, 0}, {B, hv, S, dv});
    y = b_.transpose(y, {0, 2, 1, 3});  // [B, S, hv, dv]
    y = b_.mul(y, b_.broadcast(valid, {0, 1}, y.shape));
    return {s_final, y};
  }

  // Router logits [R, E] -> weights [R, E] (0 for experts not chosen), as Op::MoeRoute: softmax in f32, then
  // top_k rounds of "the largest value left, the lowest index among equals" (so ties go to the lower expert),
  // each masking its pick; then the chosen weights renormalised or soft-maxed as the routing says.
  Val moe_route(const Node& n) {
    b_.comment(n.name + ": moe_route (" + graph::routing_name(n.routing) + ", top " +
               std::to_string(n.top_k) + ")");
    const Val& logits = val(n.inputs[0]);
    const int64_t R = logits.shape[0], E = logits.shape[1];
    const Shape re{R, E};
    const float inf = std::numeric_limits<float>::infinity();
    Val p = n.routing == graph::Routing::TopKSoftmax ? logits : softmax_rows(logits);
    Val idx = b_.iota(1, re, "i32");
    Val left = p;
    Val chosen = b_.compare(idx, b_.splat_i32(-1, re), "EQ", "SIGNED");  // all false
    Val first_max;                                                       // [R]: the largest value
    for (int64_t k = 0; k < n.top_k; ++k) {
      Val mx = b_.reduce(left, {1}, "maximum", -inf);
      if (k == 0) first_max = mx;
      Val at_max = b_.compare(left, b_.broadcast(mx, {0}, re), "EQ", "FLOAT");
      Val lowest = b_.reduce(b_.select(at_max, idx, b_.splat_i32(static_cast<int32_t>(E), re)), {1},
                             "minimum", static_cast<float>(E));
      Val pick = b_.compare(idx, b_.broadcast(lowest, {0}, re), "EQ", "SIGNED");
      chosen = b_.op("or", {chosen, pick}, "", re, "i1");
      left = b_.select(pick, b_.splat_f32(-inf, re), left);
    }
    Val zero = b_.splat_f32(0.0f, re);
    if (n.routing == graph::Routing::TopKSoftmax) {
      Val e = b_.unary("exponential", b_.sub(p, b_.broadcast(first_max, {0}, re)));
      e = b_.select(chosen, e, zero);
      return b_.div(e, b_.broadcast(b_.reduce(e, {1}, "add", 0.0f), {0}, re));
    }
    Val w = b_.select(chosen, p, zero);
    if (n.routing == graph::Routing::SoftmaxTopKNorm)
      w = b_.div(w, b_.broadcast(b_.reduce(w, {1}, "add", 0.0f), {0}, re));
    return w;
  }

  // The experts of a sparse block. Two forms, both compiled once per shape: gathered when the step's rows ×
  // top_k are fewer than the experts (decode: only the chosen experts' weights are read, one slice per
  // (row, choice)), else dense (every expert on every row: each expert's weights read once, E / top_k times
  // the chosen work; a prompt's rows choose most experts anyway). ARCHITECTURE.md has the measurement.
  Val moe_experts(const Node& n) {
    const int64_t R = val(n.inputs[0]).shape[0];
    if (n.top_k > 0 && R * n.top_k < n.experts) return moe_experts_gathered(n);
    return moe_experts_dense(n);
  }

  // Gathered form: the top_k experts of each row (k rounds of "largest route, lowest index"), their gate_up
  // and down slices gathered per (row, choice) [P = R * k], batched dots, weighted, summed over the k.
  Val moe_experts_gathered(const Node& n) {
    b_.comment(n.name + ": moe_experts (gathered: top " + std::to_string(n.top_k) + " of " +
               std::to_string(n.experts) + " experts per row)");
    const Val& x = val(n.inputs[0]);
    const Val& route = val(n.inputs[1]);
    const Shape& gs = g_.at(n.inputs[2]).shape;  // [E, 2I, H]
    const Shape& ds = g_.at(n.inputs[3]).shape;  // [E, H, I]
    const int64_t R = x.shape[0], H = x.shape[1], E = n.experts, I = ds[2], k = n.top_k, P = R * k;
    const Shape re{R, E};
    Val idx = b_.iota(1, re, "i32");
    Val left = route;
    std::vector<Val> picks, weights;
    for (int64_t j = 0; j < k; ++j) {
      Val mx = b_.reduce(left, {1}, "maximum", -std::numeric_limits<float>::infinity());
      Val at_max = b_.compare(left, b_.broadcast(mx, {0}, re), "EQ", "FLOAT");
      Val lowest = b_.reduce(b_.select(at_max, idx, b_.splat_i32(static_cast<int32_t>(E), re)), {1},
                             "minimum", static_cast<float>(E));
      picks.push_back(b_.reshape(lowest, {R, 1}));
      weights.push_back(b_.reshape(mx, {R, 1}));
      left = b_.select(b_.compare(idx, b_.broadcast(lowest, {0}, re), "EQ", "SIGNED"),
                       b_.splat_f32(-std::numeric_limits<float>::infinity(), re), left);
    }
    Val pick = b_.reshape(b_.concatenate(picks, 1), {P, 1});  // [P, 1]: row r's choice j at r * k + j
    Val w = b_.reshape(b_.concatenate(weights, 1), {P});
    Val gu = gather_rows(b_.reshape(weight_f32(n.inputs[2]), gs), pick);    // [P, 2I, H]
    Val down = gather_rows(b_.reshape(weight_f32(n.inputs[3]), ds), pick);  // [P, H, I]
    Val xp = b_.reshape(b_.broadcast(x, {0, 2}, {R, k, H}), {P, H});
    Val h = b_.dot(xp, gu, {0}, {0}, {1}, {2}, {P, 2 * I});
    if (n.inputs.size() > 5) h = b_.add(h, gather_rows(val(n.inputs[4]), pick));
    Val gate = b_.slice(h, {0, 0}, {P, I});
    Val up = b_.slice(h, {0, I}, {P, 2 * I});
    Val a = gated(gate, up, n);  // [P, I]
    Val y = b_.dot(a, down, {0}, {0}, {1}, {2}, {P, H});
    if (n.inputs.size() > 5) y = b_.add(y, gather_rows(val(n.inputs[5]), pick));
    y = b_.mul(y, b_.broadcast(w, {0}, {P, H}));
    return b_.reduce(b_.reshape(y, {R, k, H}), {1}, "add", 0.0f);
  }

  Val moe_experts_dense(const Node& n) {
    b_.comment(n.name + ": moe_experts (dense over " + std::to_string(n.experts) + " experts)");
    const Val& x = val(n.inputs[0]);
    const Val& route = val(n.inputs[1]);
    const Shape& gs = g_.at(n.inputs[2]).shape;        // [E, 2I, H]
    const Shape& ds = g_.at(n.inputs[3]).shape;        // [E, H, I]
    Val gu = b_.reshape(weight_f32(n.inputs[2]), gs);  // block-quantised stacks dequantise as [E * 2I, H]
    Val down = b_.reshape(weight_f32(n.inputs[3]), ds);
    const int64_t R = x.shape[0], H = x.shape[1], E = n.experts, I = ds[2];
    Val h = b_.dot(x, gu, {}, {}, {1}, {2}, {R, E, 2 * I});  // [R, E, 2I]
    if (n.inputs.size() > 5) h = b_.add(h, b_.broadcast(val(n.inputs[4]), {1, 2}, {R, E, 2 * I}));
    Val gate = b_.slice(h, {0, 0, 0}, {R, E, I});
    Val up = b_.slice(h, {0, 0, I}, {R, E, 2 * I});
    Val a = b_.transpose(gated(gate, up, n), {1, 0, 2});     // [E, R, I]
    Val y = b_.dot(a, down, {0}, {0}, {2}, {2}, {E, R, H});  // [E, R, H]
    if (n.inputs.size() > 5) y = b_.add(y, b_.broadcast(val(n.inputs[5]), {0, 2}, {E, R, H}));
    Val w = b_.broadcast(b_.transpose(route, {1, 0}), {0, 1}, {E, R, H});
    return b_.reduce(b_.mul(y, w), {0}, "add", 0.0f);
  }

  // x [B*S, D] -> [B, D]: the last position of each row.
  Val last_row(const Node& n) {
    b_.comment(n.name + ": last_row");
    const Val& x = val(n.inputs[0]);
    const int64_t B = batch(), S = seq(), D = x.shape[1];
    Val x3 = b_.reshape(x, {B, S, D});
    return b_.reshape(b_.slice(x3, {0, S - 1, 0}, {B, S, D}), {B, D});
  }

  // The seen mask of the step's rows: seen [B, V] |= onehot(ids[b, s]) for s >= seen_from[b] (prefill) or
  // every s (decode). A prefill starts its rows' sequences, so their masks are cleared first. Row-mapped:
  // step row b's mask is row rows[b] of the state [CB, V]; the other rows are left as they are.
  Val mark_seen(const Node& n, int id) {
    const bool prefill = n.inputs.size() > 2 && g_.at(n.inputs[2]).op == Op::Input &&
                         g_.at(n.inputs[2]).input_kind == InputKind::SeenFrom;
    const bool mapped = n.inputs.size() > (prefill ? 3u : 2u);
    b_.comment(n.name + ": mark the step's ids as seen" + (prefill ? " (masks cleared first)" : ""));
    const Val& state = val(n.inputs[0]);
    const int64_t B = batch(), S = seq(), V = state.shape[1];
    const Shape bsv{B, S, V};
    Val ids = b_.broadcast(b_.reshape(val(n.inputs[1]), {B, S}), {0, 1}, bsv);  // [B, S, V]
    Val hit = b_.compare(ids, b_.iota(2, bsv, "i32"), "EQ", "SIGNED");
    if (prefill) {
      Val col = b_.iota(1, {B, S}, "i32");
      Val valid = b_.compare(col, b_.broadcast(val(n.inputs[2]), {0}, {B, S}), "GE", "SIGNED");  // [B, S]
      hit = b_.binary("and", hit, b_.broadcast(valid, {0, 1}, bsv));
    }
    Val any = b_.reduce(b_.convert(hit, "f32"), {1}, "maximum", 0.0f);  // [B, V]
    for (size_t i = 0; i < cache_args_.size(); ++i)
      if (cache_final_[i] == n.inputs[0]) cache_final_[i] = id;
    if (!mapped) return prefill ? any : b_.max(state, any);
    const Val& rows = val(n.inputs.back());
    Val out = state;
    Val zero = b_.splat_i32(0, {});
    for (int64_t b = 0; b < B; ++b) {
      Val row = element(rows, b);
      Val mark = B == 1 ? any : b_.slice(any, {b, 0}, {b + 1, V});  // [1, V]
      if (!prefill)
        mark = b_.max(b_.op("dynamic_slice", {out, row, zero},
                            "slice_sizes = array<i64: 1, " + std::to_string(V) + ">", {1, V}, out.et),
                      mark);
      out = b_.op("dynamic_update_slice", {out, mark, row, zero}, "", state.shape, state.et);
    }
    return out;
  }

  // Per-row softmax over dim 1 of [B, V] (exp(-inf) = 0 for filtered entries).
  Val softmax_rows(const Val& x) {
    const int64_t B = x.shape[0], V = x.shape[1];
    Val mx = b_.reduce(x, {1}, "maximum", -std::numeric_limits<float>::infinity());
    Val e = b_.unary("exponential", b_.sub(x, b_.broadcast(mx, {0}, {B, V})));
    return b_.div(e, b_.broadcast(b_.reduce(e, {1}, "add", 0.0f), {0}, {B, V}));
  }

  // Inclusive prefix sum along dim 1 of [B, V]: log2(V) shifted adds (Hillis-Steele), O(V log V).
  Val prefix_sum(Val x) {
    const int64_t B = x.shape[0], V = x.shape[1];
    for (int64_t k = 1; k < V; k *= 2) {
      Val shifted = b_.concatenate({b_.splat_f32(0.0f, {B, k}), b_.slice(x, {0, 0}, {B, V - k})}, 1);
      x = b_.add(x, shifted);
    }
    return x;
  }

  // x[b, idx[b]] for x [B, V] and idx [B] (a one-hot select and a reduce: no gather needed).
  Val pick(const Val& x, const Val& idx, float none) {
    const int64_t B = x.shape[0], V = x.shape[1];
    Val at = b_.compare(b_.iota(1, {B, V}, "i32"), b_.broadcast(idx, {0}, {B, V}), "EQ", "SIGNED");
    if (x.et == "i32")
      return b_.reduce(b_.select(at, x, b_.splat_i32(static_cast<int32_t>(none), {B, V})), {1}, "maximum",
                       none);
    return b_.reduce(b_.select(at, x, b_.splat_f32(none, {B, V})), {1}, "maximum", none);
  }

  // The counter-based uniform of sampling::counter_uniform: lowbias32 rounds over (a constant, step, seed
  // lo, seed hi). The row is not in the key: a sequence draws by its own seed and token index (kStep)
  // whatever step row or cache row it occupies.
  Val uniform(const Val& p) {
    const int64_t B = p.shape[0];
    auto mix = [&](Val x) {
      auto shr = [&](const Val& v, uint32_t k) {
        return b_.binary("shift_right_logical", v, b_.splat_u32(k, {B}));
      };
      x = b_.binary("xor", x, shr(x, 16));
      x = b_.mul(x, b_.splat_u32(0x7feb352du, {B}));
      x = b_.binary("xor", x, shr(x, 15));
      x = b_.mul(x, b_.splat_u32(0x846ca68bu, {B}));
      return b_.binary("xor", x, shr(x, 16));
    };
    auto col = [&](int j) { return b_.bitcast(b_.reshape(b_.slice(p, {0, j}, {B, j + 1}), {B}), "ui32"); };
    Val h = mix(b_.splat_u32(0x9e3779b9u, {B}));
    h = mix(b_.binary("xor", h, col(graph::kStep)));
    h = mix(b_.binary("xor", h, col(graph::kSeedLo)));
    h = mix(b_.binary("xor", h, col(graph::kSeedHi)));
    Val top24 = b_.convert(b_.binary("shift_right_logical", h, b_.splat_u32(8, {B})), "f32");
    return b_.mul(top24, b_.splat_f32(0x1.0p-24f, {B}));
  }

  // The logits processors and the draw, with the semantics of src/sampling/sampler.cpp:
  // repetition penalty over the seen mask; Greedy: first argmax. Sample: temperature, top-k (ties at the k-th
  // value survive), top-p (stable ascending sort, drop the prefix whose cumulative mass <= 1 - top_p, keep at
  // least one), min-p, softmax, inverse-CDF draw with u = counter_uniform(seed, step). A row whose
  // logits hold a NaN or inf gets -1.
  Val sample(const Node& n) {
    b_.comment(n.name + ": in-step sampling (" + graph::sampling_name(g_.key.sampling) + ")");
    const Val& logits = val(n.inputs[0]);
    int rows_in = -1, mask_in = -1;  // the optional inputs, by kind
    for (size_t i = 3; i < n.inputs.size(); ++i) {
      const graph::Node& in = g_.at(n.inputs[i]);
      if (in.op == Op::Input && in.input_kind == InputKind::CacheRows) rows_in = n.inputs[i];
      if (in.op == Op::Input && in.input_kind == InputKind::TokenMask) mask_in = n.inputs[i];
    }
    const Val seen = rows_in >= 0 ? take_rows(val(n.inputs[1]), val(rows_in)) : val(n.inputs[1]);
    const int64_t B = logits.shape[0], V = logits.shape[1];
    const Shape bv{B, V}, b1{B};
    const float kNegInf = -std::numeric_limits<float>::infinity();
    Val p = b_.reshape(val(n.inputs[2]), {B, graph::kSampleParams});                    // [B, P] i32
    auto col = [&](int j) { return b_.reshape(b_.slice(p, {0, j}, {B, j + 1}), b1); };  // i32 [B]
    auto colf = [&](int j) { return b_.bitcast(col(j), "f32"); };                       // f32 [B]
    auto rows = [&](const Val& v) { return b_.broadcast(v, {0}, bv); };
    Val neg_inf = b_.splat_f32(kNegInf, bv);
    Val jj = b_.iota(1, bv, "i32");

    // A row with a non-finite logit (NaN or inf: the model overflowed) returns token id -1 instead of a
    // token, so the host can stop with an error naming the step (the logits never leave the device).
    Val finite =
        b_.reduce(b_.convert(b_.op("is_finite", {logits}, "", bv, "i1"), "f32"), {1}, "minimum", 1.0f);
    Val bad = b_.compare(finite, b_.splat_f32(1.0f, b1), "LT", "FLOAT");  // [B]
    auto flag_bad = [&](const Val& tok) { return b_.select(bad, b_.splat_i32(-1, b1), tok); };

    Val pen = rows(colf(graph::kRepetitionPenalty));
    Val s = logits;
    Val penalised =
        b_.select(b_.compare(s, b_.splat_f32(0.0f, bv), "LT", "FLOAT"), b_.mul(s, pen), b_.div(s, pen));
    s = b_.select(b_.compare(seen, b_.splat_f32(0.0f, bv), "NE", "FLOAT"), penalised, s);
    if (mask_in >= 0) {
      // Constrained decoding: token t of row b is allowed when bit t % 32 of word t / 32 is set; the others
      // go to -inf before greedy or sampling, as in the host sampler.
      const int64_t W = graph::mask_words(V);
      const Shape bw32{B, W, 32};
      Val words = b_.bitcast(b_.reshape(val(mask_in), {B, W}), "ui32");
      Val bits =
          b_.binary("shift_right_logical", b_.broadcast(words, {0, 1}, bw32), b_.iota(2, bw32, "ui32"));
      bits = b_.binary("and", bits, b_.splat_u32(1u, bw32));
      Val allowed = b_.slice(b_.reshape(bits, {B, W * 32}), {0, 0}, {B, V});
      s = b_.select(b_.compare(allowed, b_.splat_u32(0u, bv), "NE", "UNSIGNED"), s, neg_inf);
    }

    // Greedy: the first index of the largest penalised logit.
    Val mx = b_.reduce(s, {1}, "maximum", kNegInf);
    Val at_max = b_.compare(s, rows(mx), "EQ", "FLOAT");
    Val greedy = b_.reduce(b_.select(at_max, jj, b_.splat_i32(static_cast<int32_t>(V), bv)), {1}, "minimum",
                           static_cast<float>(V));
    if (g_.key.sampling == graph::Sampling::Greedy) return b_.reshape(flag_bad(greedy), {B, 1});
    Val token;
    s = b_.div(s, rows(colf(graph::kTemperature)));
    auto [sv, si] = b_.sort_pairs(s, jj, 1);  // ascending, ties by index (std::stable_sort's order)

    // top-k: keep s >= the k-th largest (sv[V - k]) when 0 < k < V.
    Val k = col(graph::kTopK);
    Val k_on = b_.binary("and", b_.compare(k, b_.splat_i32(0, b1), "GT", "SIGNED"),
                         b_.compare(k, b_.splat_i32(static_cast<int32_t>(V), b1), "LT", "SIGNED"));
    Val kth = b_.select(k_on, pick(sv, b_.sub(b_.splat_i32(static_cast<int32_t>(V), b1), k), kNegInf),
                        b_.splat_f32(kNegInf, b1));
    s = b_.select(b_.compare(s, rows(kth), "LT", "FLOAT"), neg_inf, s);
    sv = b_.select(b_.compare(sv, rows(kth), "LT", "FLOAT"), neg_inf, sv);  // still ascending

    // top-p: r = number of leading sorted entries (of the first V - 1) with cumulative mass <= 1 - top_p.
    Val top_p = colf(graph::kTopP);
    Val cum = prefix_sum(softmax_rows(sv));
    Val low = b_.compare(cum, rows(b_.sub(b_.splat_f32(1.0f, b1), top_p)), "LE", "FLOAT");
    low =
        b_.binary("and", low, b_.compare(jj, b_.splat_i32(static_cast<int32_t>(V - 1), bv), "LT", "SIGNED"));
    Val r = b_.convert(b_.reduce(b_.convert(low, "f32"), {1}, "add", 0.0f), "i32");  // [B]
    r = b_.select(b_.compare(top_p, b_.splat_f32(1.0f, b1), "LT", "FLOAT"), r, b_.splat_i32(0, b1));
    // Keep the entries at or after sorted position r: (value, index) >= (sv[r], si[r]).
    Val vr = rows(pick(sv, r, kNegInf)), ir = rows(pick(si, r, -1.0f));
    Val keep =
        b_.binary("or", b_.compare(s, vr, "GT", "FLOAT"),
                  b_.binary("and", b_.compare(s, vr, "EQ", "FLOAT"), b_.compare(jj, ir, "GE", "SIGNED")));
    s = b_.select(keep, s, neg_inf);

    // min-p: drop probabilities below min_p x the largest.
    Val probs = softmax_rows(s);
    Val floor_p = b_.mul(colf(graph::kMinP), b_.reduce(probs, {1}, "maximum", 0.0f));
    s = b_.select(b_.compare(probs, rows(floor_p), "LT", "FLOAT"), neg_inf, s);

    // Draw: the first index whose cumulative probability exceeds u; the last non-zero one if rounding left u
    // above the total.
    probs = softmax_rows(s);
    Val below = b_.compare(prefix_sum(probs), rows(uniform(p)), "LE", "FLOAT");
    Val first = b_.convert(b_.reduce(b_.convert(below, "f32"), {1}, "add", 0.0f), "i32");
    Val nonzero = b_.compare(probs, b_.splat_f32(0.0f, bv), "GT", "FLOAT");
    Val last = b_.reduce(b_.select(nonzero, jj, b_.splat_i32(0, bv)), {1}, "maximum", 0.0f);
    token =
        b_.select(b_.compare(first, b_.splat_i32(static_cast<int32_t>(V), b1), "LT", "SIGNED"), first, last);
    // kDoSample = 0: this row decodes greedily (so sampled and greedy rows share one program).
    token = b_.select(b_.compare(col(graph::kDoSample), b_.splat_i32(0, b1), "NE", "SIGNED"), token, greedy);
    return b_.reshape(flag_bad(token), {B, 1});
  }

  StablehloProgram finish() {
    TS_ASSERT(!g_.outputs.empty(), "graph without outputs");
    const Val& logits = val(g_.outputs[0]);
    prog_.logits_shape = logits.shape;
    prog_.tokens = logits.et == "i32";
    std::vector<Val> results;
    for (int o : g_.outputs) results.push_back(val(o));
    prog_.num_outputs = static_cast<int>(results.size());
    for (int c : cache_final_) results.push_back(val(c));
    for (const Val& v : linear_final_) results.push_back(v);
    prog_.num_results = static_cast<int>(results.size());

    std::ostringstream os;
    os << "// StableHLO emitted by tessera (src/backends/pjrt/stablehlo_emitter.cpp) for " << g_.key.str()
       << "\n";
    std::string spliced;  // the used packages' functions, after @main
    if (kernels_) {
      os << "// kernel packages: " << kernels_->set->identity() << "\n";
      for (size_t k = 0; k < spliced_used_.size(); ++k) {
        if (!spliced_used_[k]) continue;
        for (const std::string& a : kernels_->texts[k].aliases) os << a << "\n";
        for (const kernels::StablehloFunction& f : kernels_->texts[k].functions)
          spliced += "  " + f.text + "\n";
      }
    }
    os << "module @tessera attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = "
       << std::max(1, g_.key.tp_size) << " : i32} {\n"
       << "  func.func public @main(\n";
    size_t cache_index = 0;
    for (size_t i = 0; i < prog_.args.size(); ++i) {
      const StablehloArg& a = prog_.args[i];
      os << "      %arg" << i << ": " << tensor_type(a.shape, element_type(a.dtype));
      if (a.kind == StablehloArg::Cache || a.kind == StablehloArg::Seen)
        os << " {tf.aliasing_output = " << prog_.num_outputs + static_cast<int>(cache_index++) << " : i32}";
      os << (i + 1 < prog_.args.size() ? "," : "") << "  // " << a.name << "\n";
    }
    os << "  ) -> (";
    for (size_t i = 0; i < results.size(); ++i) os << (i ? ", " : "") << type(results[i]);
    os << ") {\n" << b_.body.str() << "    func.return ";
    for (size_t i = 0; i < results.size(); ++i) os << (i ? ", " : "") << results[i].name;
    os << " : ";
    for (size_t i = 0; i < results.size(); ++i) os << (i ? ", " : "") << type(results[i]);
    os << "\n  }\n" << spliced << "}\n";
    prog_.text = os.str();
    return std::move(prog_);
  }

  const Graph& g_;
  std::vector<Val> vals_;                          // per node
  std::map<int, Val> converted_;                   // weight node -> f32 value
  std::map<std::string, QuantParts> quant_parts_;  // a block-quantised weight's integers' name -> the rest
  std::map<std::pair<int, int>, std::pair<Val, Val>> rope_cs_;  // (positions, table) -> cos, sin [R, half]
  std::vector<int> cache_args_;                                 // CacheState node ids, argument order
  std::vector<int> cache_final_;                                // latest node holding each cache
  std::vector<int> linear_nodes_;  // GatedDeltaNet node ids, in the order of their state arguments
  std::vector<Val> linear_final_;  // each one's state: its argument, then the value the node writes
  Builder b_;
  StablehloProgram prog_;
  const KernelSplice* kernels_ = nullptr;  // packages to splice (null: none)
  std::vector<bool> spliced_used_;         // per package: a node called one of its functions
};

}  // namespace

KernelSplice make_kernel_splice(std::shared_ptr<const kernels::KernelSet> set, const std::string& platform) {
  KernelSplice splice;
  splice.platform = platform;
  for (size_t i = 0; i < set->packages.size(); ++i) {
    const kernels::KernelPackage& p = *set->packages[i];
    const kernels::Implementation* impl = p.implementation("pjrt", platform);
    if (!impl) fail("kernel package ", p.name, ": no pjrt implementation for platform ", platform);
    splice.texts.push_back(kernels::read_stablehlo_implementation(p, *impl, "k" + std::to_string(i) + "_"));
  }
  splice.set = std::move(set);
  return splice;
}

StablehloProgram lower_to_stablehlo(const graph::Graph& g, const KernelSplice* kernels) {
  return Lowering(g, kernels).run();
}

int64_t linear_state_floats(const graph::Node& n) {
  TS_ASSERT(n.op == graph::Op::GatedDeltaNet, n.name);
  const int64_t channels = 2 * n.kv_heads * n.head_dim + n.heads * n.dim;
  return (n.window - 1) * channels + n.heads * n.head_dim * n.dim;
}

std::vector<QuantPart> quant_parts_of(DType dtype, const Shape& shape) {
  TS_ASSERT(is_quantized(dtype) && shape.size() == 2, "quant_parts_of ", dtype_name(dtype), " ",
            shape_str(shape));
  const int64_t rows = shape[0], cols = shape[1];
  std::vector<QuantPart> parts{{0, DType::I8, shape},
                               {1, DType::F32, {rows, cols / cpu::quant_scale_group(dtype)}}};
  if (cpu::quant_has_offset(dtype)) parts.push_back({2, DType::F32, {rows, cols / 32}});
  return parts;
}

std::string quant_part_name(const std::string& weight, int part) {
  TS_ASSERT(part >= 0 && part < 3, "quant_part_name part ", part);
  return weight + kQuantPartSuffix[part];
}

std::string quant_part_owner(const std::string& arg_name) {
  for (const char* suffix : kQuantPartSuffix) {
    const std::string sfx = suffix;
    if (arg_name.size() > sfx.size() && arg_name.compare(arg_name.size() - sfx.size(), sfx.size(), sfx) == 0)
      return arg_name.substr(0, arg_name.size() - sfx.size());
  }
  return "";
}

}  // namespace tessera::pjrt
