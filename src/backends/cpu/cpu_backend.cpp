// The native CPU backend. "Compiling" a graph means: resolve every weight to a
// pointer, pick the kernel for each node, and plan one arena for all
// activations by liveness (buffers reused once their last reader has run).
// A run then walks the plan with no allocation.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <span>

#include "backends/backend.h"
#include "backends/communicator.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/thread_pool.h"
#include "backends/step_checks.h"
#include "io/mapped_file.h"
#include "kernels/package.h"
#include "sampling/sampler.h"
#include "tessera/error.h"

namespace tessera::backends {
namespace {

using graph::Graph;
using graph::InputKind;
using graph::Node;
using graph::Op;

// Arenas of caches that are gone, kept for the next caches: generate() makes a cache per call, and a fresh
// arena would be allocated, zeroed and faulted in by its prefill (megabytes for a long prompt) where the
// executable's own arena used to be warm. Shared by a backend's caches; the lock is taken only when a cache
// gets or drops an arena, never per step.
class ArenaPool {
 public:
  // A spare arena of at least `floats` (the smallest that fits), or an empty tensor.
  Tensor take(size_t floats) {
    std::lock_guard<std::mutex> lock(mu_);
    size_t best = spare_.size();
    for (size_t i = 0; i < spare_.size(); ++i)
      if (static_cast<size_t>(spare_[i].numel()) >= floats &&
          (best == spare_.size() || spare_[i].numel() < spare_[best].numel()))
        best = i;
    if (best == spare_.size()) return {};
    Tensor t = std::move(spare_[best]);
    spare_.erase(spare_.begin() + static_cast<std::ptrdiff_t>(best));
    return t;
  }
  // Keeps the kSpare largest arenas given back.
  void give(Tensor t) {
    if (t.data == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    spare_.push_back(std::move(t));
    if (spare_.size() > kSpare) {
      auto smallest = std::min_element(spare_.begin(), spare_.end(), [](const Tensor& a, const Tensor& b) {
        return a.numel() < b.numel();
      });
      spare_.erase(smallest);
    }
  }

 private:
  static constexpr size_t kSpare = 4;
  std::mutex mu_;
  std::vector<Tensor> spare_;
};

// Everything a step writes besides its outputs: the KV cache, the sampler state and the scratch the step runs
// in. Executables keep nothing per run, so any number of threads may run one executable, each with its own
// cache.
class CpuCache : public DeviceCache {
 public:
  // k[l], v[l]: [batch, kv_heads, cache_len, cpu::kv_row_values(head_dim)] in CpuBackendOptions::kv_dtype
  // (a head's row of a Q8_0 cache is whole blocks of 32)
  std::vector<Tensor> k, v;
  std::vector<float> seen;  // sampler state [batch, vocab] (1 = id seen in the row); empty until first used
  // Recurrent state of each linear-attention layer (Op::GatedDeltaNet) [batch rows,
  // DeltaNet::state_floats()], by layer; created zeroed on the layer's first step.
  std::vector<std::vector<float>> lin_state;
  std::vector<std::vector<float>> lin_snapshot;  // Backend::snapshot_state: per layer, one state per row
  // Scratch of the steps run with this cache, grown to the largest plan run with it and then reused (a warm
  // step allocates nothing): the activation arena, the AllGather staging buffer, one row of logits for
  // Sample.
  Tensor arena;
  std::vector<float> gather, sample_row;
  std::shared_ptr<ArenaPool> pool;  // where the arena goes when the cache does (and where it came from)

  // Slot 0 of cache row `row`, kv head `h`, in one layer's keys or values `t`; the row's slots of that head
  // follow it, slot_bytes(t) each.
  uint8_t* head_slots(const Tensor& t, int64_t row, int64_t h) const {
    return t.ptr<uint8_t>() + static_cast<size_t>((row * t.shape[1] + h) * cache_len) * slot_bytes(t);
  }
  static size_t slot_bytes(const Tensor& t) { return dtype_bytes(t.dtype, t.shape[3]); }
  // f(t, h) for every layer's keys and values t and every kv head h.
  template <typename F>
  void each_head(F f) {
    for (size_t l = 0; l < k.size(); ++l)
      for (Tensor* t : {&k[l], &v[l]})
        for (int64_t h = 0; h < t->shape[1]; ++h) f(*t, h);
  }

  CpuCache() = default;
  CpuCache(const CpuCache&) = delete;
  CpuCache& operator=(const CpuCache&) = delete;
  ~CpuCache() override {
    if (pool) pool->give(std::move(arena));
  }
};

// One run: its inputs, its cache and the cache's arena (an executable's plan is fixed; this is all that
// varies).
struct Run {
  const StepInputs& in;
  CpuCache& cache;
  float* arena;
  // Per rope table that varies with the sequence's length (longrope, dynamic): each step row's frequencies
  // [batch, rot_dim / 2], computed once per step (empty until the first Rope node needs them).
  mutable std::vector<std::vector<float>> rope_rows = {};
};

// Where a node's output lives at run time.
struct Slot {
  enum Kind { Arena, Weight, Input, Cache, Seen } kind = Arena;
  size_t offset = 0;  // Arena: float offset
  const void* weight = nullptr;
  DType dtype = DType::F32;  // Weight: as bound (a quantised matrix may be in its _R8 form)
  InputKind input = InputKind::TokenIds;
  int layer = -1, which = 0;  // Cache
};

// TesseraKernelIsa of an instruction set.
int kernel_isa(cpu::Isa isa) {
  switch (isa) {
    case cpu::Isa::Scalar:
      return TESSERA_KERNEL_ISA_SCALAR;
    case cpu::Isa::Avx2:
      return TESSERA_KERNEL_ISA_AVX2;
    case cpu::Isa::Avx512:
      return TESSERA_KERNEL_ISA_AVX512;
    case cpu::Isa::Avx512Bf16:
      return TESSERA_KERNEL_ISA_AVX512BF16;
  }
  return TESSERA_KERNEL_ISA_SCALAR;
}

cpu::GateAct gate_act(graph::Activation a) {
  switch (a) {
    case graph::Activation::Silu:
      return cpu::GateAct::Silu;
    case graph::Activation::Gelu:
      return cpu::GateAct::Gelu;
    case graph::Activation::GeluTanh:
      return cpu::GateAct::GeluTanh;
    case graph::Activation::Relu:
      return cpu::GateAct::Relu;
    case graph::Activation::Sigmoid:
      return cpu::GateAct::Sigmoid;
    case graph::Activation::ClampedSwiglu:  // MoeExperts reads it itself (MoeWeights::clamped_swiglu)
      return cpu::GateAct::Silu;
  }
  fail("unknown activation ", static_cast<int>(a));
}

cpu::MoeRouting moe_routing(graph::Routing r) {
  switch (r) {
    case graph::Routing::SoftmaxTopK:
      return cpu::MoeRouting::SoftmaxTopK;
    case graph::Routing::SoftmaxTopKNorm:
      return cpu::MoeRouting::SoftmaxTopKNorm;
    case graph::Routing::TopKSoftmax:
      return cpu::MoeRouting::TopKSoftmax;
  }
  fail("unknown routing ", static_cast<int>(r));
}

class CpuExecutable : public Executable {
 public:
  CpuExecutable(const Graph& g, const WeightMap& weights, Communicator* comm, std::atomic<bool>* comm_busy,
                cpu::Bf16Dot bf16_dot, const kernels::KernelSet* loaded)
      : g_(g), comm_(comm), comm_busy_(comm_busy), bf16_dot_(bf16_dot) {
    if (g.key.tp_size > 1 && (!comm_ || comm_->size() != g.key.tp_size || comm_->rank() != g.key.tp_rank))
      fail("cpu step ", g.key.str(), ": tensor parallelism needs a communicator of ", g.key.tp_size,
           " ranks (got ", comm_ ? comm_->size() : 1, ")");
    checks_ = step_checks_of(g_, "cpu step");
    checks_.shared_rows =
        true;  // CacheUpdate and Attention loop over step rows (Capabilities::shared_cache_rows)
    if (loaded && !loaded->empty()) pick_loaded_kernels(*loaded);  // before plan: no sibling groups for them
    plan(weights);
  }

  void run(const StepInputs& in, DeviceCache& cache_base, std::vector<float>& logits) const override {
    const Node& out = g_.at(g_.outputs[0]);
    if (out.op == Op::Sample)
      fail("cpu step ", g_.key.str(), ": this step samples in the graph; use run_tokens()");
    CpuCache& cache = cpu_cache(cache_base);
    validate(in, cache);
    const CommTurn turn(*this);
    const Run r = begin(in, cache);
    for (size_t i = 0; i < g_.nodes.size(); ++i) exec(r, static_cast<int>(i));
    logits.resize(static_cast<size_t>(out.shape[0] * out.shape[1]));
    std::memcpy(logits.data(), f32(r, g_.outputs[0]), logits.size() * sizeof(float));
  }

  void run_tokens(const StepInputs& in, DeviceCache& cache_base,
                  std::vector<int32_t>& tokens) const override {
    const Node& out = g_.at(g_.outputs[0]);
    if (out.op != Op::Sample)
      fail("cpu step ", g_.key.str(), ": run_tokens() needs a graph with in-step sampling");
    CpuCache& cache = cpu_cache(cache_base);
    validate(in, cache);
    const size_t state = static_cast<size_t>(cache.batch) * static_cast<size_t>(vocab_);
    if (cache.seen.size() != state) cache.seen.assign(state, 0.0f);
    if (cache.sample_row.size() < static_cast<size_t>(vocab_))
      cache.sample_row.resize(static_cast<size_t>(vocab_));
    const CommTurn turn(*this);
    const Run r = begin(in, cache);
    for (size_t i = 0; i < g_.nodes.size(); ++i) exec(r, static_cast<int>(i));
    tokens.resize(static_cast<size_t>(out.shape[0]));
    std::memcpy(tokens.data(), f32(r, g_.outputs[0]),
                tokens.size() * sizeof(int32_t));  // int32 bits in the arena
  }

 private:
  CpuCache& cpu_cache(DeviceCache& c) const {
    auto* cache = dynamic_cast<CpuCache*>(&c);
    if (!cache) fail("cpu step ", g_.key.str(), ": the cache was not made by the cpu backend");
    return *cache;
  }
  // The run's context; the cache's arena grows (once) to this plan's size.
  Run begin(const StepInputs& in, CpuCache& cache) const {
    if (cache.arena.data == nullptr || cache.arena.numel() < static_cast<int64_t>(arena_floats_)) {
      Tensor bigger = cache.pool ? cache.pool->take(arena_floats_) : Tensor{};
      if (bigger.data == nullptr) bigger = Tensor::empty(DType::F32, {static_cast<int64_t>(arena_floats_)});
      if (cache.pool) cache.pool->give(std::move(cache.arena));
      cache.arena = std::move(bigger);
    }
    return Run{in, cache, cache.arena.ptr<float>()};
  }
  // Tensor-parallel steps exchange activations with the other ranks in program order, so a rank runs one at a
  // time (several threads of one rank would interleave their collectives); a second concurrent one is
  // refused.
  struct CommTurn {
    std::atomic<bool>* busy = nullptr;
    explicit CommTurn(const CpuExecutable& e) {
      if (e.g_.key.tp_size <= 1 || !e.comm_busy_) return;
      if (e.comm_busy_->exchange(true, std::memory_order_acquire))
        fail("cpu step ", e.g_.key.str(),
             ": another tensor-parallel step is running on this rank; tensor-parallel "
             "steps run one at a time per rank (from one thread)");
      busy = e.comm_busy_;
    }
    ~CommTurn() {
      if (busy) busy->store(false, std::memory_order_release);
    }
    CommTurn(const CommTurn&) = delete;
    CommTurn& operator=(const CommTurn&) = delete;
  };

  // Refuses step inputs and caches that do not fit this step (sizes and values), before anything is read or
  // written: every index a kernel uses comes from here (backends/step_checks.h, and the cache's layers).
  void validate(const StepInputs& in, const CpuCache& cache) const {
    check_step_cache(cache, checks_);
    const graph::ShapeKey& k = g_.key;
    if (static_cast<int>(cache.k.size()) < layers_)
      fail("cpu step ", k.str(), ": the cache has ", cache.k.size(), " layers, the step needs ", layers_);
    for (int id : cache_nodes_) {
      const Node& n = g_.at(id);
      const Tensor& t =
          n.which == 0 ? cache.k[static_cast<size_t>(n.layer)] : cache.v[static_cast<size_t>(n.layer)];
      Shape want = n.shape;  // a q8_0 cache holds whole blocks of 32 per head
      if (want.size() == 4) want[3] = cpu::kv_row_values(t.dtype, want[3]);
      if (t.shape != want)
        fail("cpu step ", k.str(), ": ", n.name, " is ", shape_str(t.shape), " in the cache, the step needs ",
             shape_str(want));
    }
    check_step_inputs(in, checks_);
  }

  // The CacheRows input of a node (-1: none) and its SeenFrom input, found by kind (they follow the fixed
  // inputs in either order).
  int input_of(const Node& n, InputKind kind, size_t from) const {
    for (size_t i = from; i < n.inputs.size(); ++i) {
      const Slot& s = slots_[static_cast<size_t>(n.inputs[i])];
      if (s.kind == Slot::Input && s.input == kind) return n.inputs[i];
    }
    return -1;
  }
  const int32_t* cache_rows(const Run& r, const Node& n, size_t from) const {
    const int id = input_of(n, InputKind::CacheRows, from);
    return id >= 0 ? ints(r, id) : nullptr;
  }
  // Row b's slots: its own (StepInputs::slots of batch * seq values) or the shared [seq] ones.
  const int32_t* row_slots(const Run& r, const int32_t* slots, int64_t b) const {
    return static_cast<int64_t>(r.in.slots.size()) == g_.key.batch * g_.key.seq ? slots + b * g_.key.seq
                                                                                : slots;
  }

  void plan(const WeightMap& weights) {
    const size_t n = g_.nodes.size();
    slots_.resize(n);
    // Last reader of each node; graph outputs live to the end.
    std::vector<size_t> last_use(n, 0);
    for (size_t i = 0; i < n; ++i)
      for (int in : g_.nodes[i].inputs) last_use[static_cast<size_t>(in)] = i;
    for (int o : g_.outputs) last_use[static_cast<size_t>(o)] = n;

    std::map<size_t, size_t> free_blocks;  // offset -> size (floats)
    size_t arena = 0;
    auto alloc = [&](size_t size) {
      size = (size + 15) / 16 * 16;  // 64-byte granules
      for (auto it = free_blocks.begin(); it != free_blocks.end(); ++it) {
        if (it->second < size) continue;
        size_t off = it->first, rest = it->second - size;
        free_blocks.erase(it);
        if (rest) free_blocks[off + size] = rest;
        return off;
      }
      size_t off = arena;
      arena += size;
      return off;
    };
    auto release = [&](size_t off, size_t size) {
      size = (size + 15) / 16 * 16;
      auto next = free_blocks.lower_bound(off);
      if (next != free_blocks.end() && next->first == off + size) {
        size += next->second;
        free_blocks.erase(next);
      }
      auto it = free_blocks.emplace(off, size).first;
      if (it != free_blocks.begin()) {
        auto prev = std::prev(it);
        if (prev->first + prev->second == off) {
          prev->second += size;
          free_blocks.erase(it);
        }
      }
    };

    // Pass 1: which arena buffer each node writes. Rope, RmsNorm, Add, SoftCap and Scale reuse their
    // first input's buffer when they are its last reader.
    std::vector<int> buffer(n, -1);
    std::vector<size_t> buffer_size, buffer_last;
    for (size_t i = 0; i < n; ++i) {
      const Node& node = g_.nodes[i];
      if (node.op == Op::Weight || node.op == Op::Input || node.op == Op::CacheState ||
          node.op == Op::CacheUpdate || node.op == Op::SamplerState || node.op == Op::MarkSeen)
        continue;
      int src = node.inputs.empty() ? -1 : node.inputs[0];
      bool in_place = (node.op == Op::Rope || node.op == Op::RmsNorm || node.op == Op::Add ||
                       node.op == Op::AllReduce || node.op == Op::SoftCap || node.op == Op::Scale) &&
                      src >= 0 && buffer[static_cast<size_t>(src)] >= 0 &&
                      last_use[static_cast<size_t>(src)] == i;
      if (in_place) {
        buffer[i] = buffer[static_cast<size_t>(src)];
      } else {
        buffer[i] = static_cast<int>(buffer_size.size());
        buffer_size.push_back(static_cast<size_t>(node.shape[0] * node.shape[1]));
        buffer_last.push_back(0);
      }
      auto& bl = buffer_last[static_cast<size_t>(buffer[i])];
      bl = std::max(bl, last_use[i]);
    }
    // Decode steps: sibling matmuls (the same x and weight dtype, e.g. q/k/v or gate/up) run as one
    // matmul_multi at the first one's position, one fork-join instead of several; their outputs are
    // therefore allocated there (pass 2), and the others are skipped at run time.
    siblings_.assign(n, {});
    fused_away_.assign(n, false);
    if (g_.key.phase == graph::Phase::Decode) {
      const auto bound_dtype =
          [&](int w) {  // a weight node's tensor as bound (a matrix may be in an _R8 form)
            const auto it = weights.find(graph::weight_key(g_.at(w)));
            return it != weights.end() ? it->second.dtype : g_.at(w).dtype;
          };
      std::map<int, size_t> first_reader;  // x -> first matmul reading it
      for (size_t i = 0; i < n; ++i) {
        const Node& node = g_.nodes[i];
        if (node.op != Op::MatMul || loaded_matmul(static_cast<int>(i)))
          continue;  // a loaded kernel runs alone
        auto [it, fresh] = first_reader.emplace(node.inputs[0], i);
        auto& group = siblings_[it->second];
        if (fresh) {
          group.push_back(static_cast<int>(i));
        } else if (group.size() < 8 &&
                   bound_dtype(node.inputs[1]) == bound_dtype(g_.nodes[it->second].inputs[1])) {
          group.push_back(static_cast<int>(i));
          fused_away_[i] = true;
        }
      }
      for (auto& group : siblings_) {
        if (group.size() == 1) group.clear();
      }
    }
    // Pass 2: bind slots; first-fit allocation, freeing each buffer after its last reader.
    std::vector<size_t> buffer_offset(buffer_size.size(), 0);
    std::vector<std::vector<int>> frees(n + 1);
    for (size_t b = 0; b < buffer_size.size(); ++b) frees[buffer_last[b]].push_back(static_cast<int>(b));
    for (size_t i = 0; i < n; ++i) {
      const Node& node = g_.nodes[i];
      Slot& s = slots_[i];
      switch (node.op) {
        case Op::Weight: {
          auto it = weights.find(graph::weight_key(node));
          TS_ASSERT(it != weights.end(), "weight not bound: ", graph::weight_key(node));
          TS_ASSERT(it->second.shape == node.shape, graph::weight_key(node), " bound as ",
                    shape_str(it->second.shape));
          TS_ASSERT(cpu::stored_dtype(it->second.dtype) == node.dtype, node.name, " bound as ",
                    dtype_name(it->second.dtype));
          s.kind = Slot::Weight;
          s.weight = it->second.data;
          s.dtype = it->second.dtype;
          break;
        }
        case Op::Input:
          s.kind = Slot::Input;
          s.input = node.input_kind;
          break;
        case Op::CacheState:
          s.kind = Slot::Cache;
          s.layer = node.layer;
          s.which = node.which;
          cache_nodes_.push_back(static_cast<int>(i));
          layers_ = std::max(layers_, node.layer + 1);
          break;
        case Op::CacheUpdate:
        case Op::MarkSeen:
          s = slots_[static_cast<size_t>(node.inputs[0])];  // updated in place
          break;
        case Op::SamplerState:
          s.kind = Slot::Seen;
          vocab_ = node.shape[1];
          break;
        default: {
          size_t b = static_cast<size_t>(buffer[i]);
          int src = node.inputs.empty() ? -1 : node.inputs[0];
          bool fresh = !(src >= 0 && buffer[static_cast<size_t>(src)] == buffer[i]);
          if (!siblings_[i].empty()) {  // the whole sibling group's outputs, live from here
            for (int m : siblings_[i]) {
              const size_t mb = static_cast<size_t>(buffer[static_cast<size_t>(m)]);
              buffer_offset[mb] = alloc(buffer_size[mb]);
            }
          } else if (fresh && !fused_away_[i]) {
            buffer_offset[b] = alloc(buffer_size[b]);
          }
          s.kind = Slot::Arena;
          s.offset = buffer_offset[b];
        }
      }
      for (int b : frees[i])
        release(buffer_offset[static_cast<size_t>(b)], buffer_size[static_cast<size_t>(b)]);
    }
    arena_floats_ = std::max<size_t>(arena, 16);
  }

  // The frequencies of each step row of `table` (a varying one), by the length its sequence reaches: its
  // last position + 1 (a prompt is padded on the left, and its padding sits at position 1).
  const std::vector<float>& row_frequencies(const Run& r, int table, const int32_t* positions) const {
    if (r.rope_rows.size() <= static_cast<size_t>(table)) r.rope_rows.resize(static_cast<size_t>(table) + 1);
    std::vector<float>& out = r.rope_rows[static_cast<size_t>(table)];
    if (!out.empty()) return out;
    const graph::RopeTable& t = g_.rope_tables[static_cast<size_t>(table)];
    const int64_t batch = g_.key.batch, seq = g_.key.seq, half = static_cast<int64_t>(t.inv_freq.size());
    out.resize(static_cast<size_t>(batch * half));
    for (int64_t b = 0; b < batch; ++b) {
      int32_t last = 0;
      for (int64_t s = 0; s < seq; ++s) last = std::max(last, positions[b * seq + s]);
      t.for_length(int64_t{last} + 1, out.data() + b * half);
    }
    return out;
  }

  float* f32(const Run& r, int id) const {
    const Slot& s = slots_[static_cast<size_t>(id)];
    TS_ASSERT(s.kind == Slot::Arena, g_.at(id).name);
    return r.arena + s.offset;
  }
  const int32_t* ints(const Run& r, int id) const {
    const Slot& s = slots_[static_cast<size_t>(id)];
    TS_ASSERT(s.kind == Slot::Input, g_.at(id).name);
    switch (s.input) {
      case InputKind::TokenIds:
        return r.in.ids.data();
      case InputKind::Positions:
        return r.in.positions.data();
      case InputKind::Slots:
        return r.in.slots.data();
      case InputKind::KvBegin:
        return r.in.kv_begin.data();
      case InputKind::SeenFrom:
        return r.in.seen_from.data();
      case InputKind::SampleParams:
        return r.in.sample_params.data();
      case InputKind::CacheRows:
        return r.in.cache_rows.data();
      case InputKind::TokenMask:
        return r.in.token_mask.empty() ? nullptr : r.in.token_mask.data();
    }
    return nullptr;
  }
  const void* weight(int id) const {
    const Slot& s = slots_[static_cast<size_t>(id)];
    TS_ASSERT(s.kind == Slot::Weight, g_.at(id).name);
    return s.weight;
  }
  DType weight_dtype(int id) const {
    const Slot& s = slots_[static_cast<size_t>(id)];
    TS_ASSERT(s.kind == Slot::Weight, g_.at(id).name);
    return s.dtype;
  }
  Tensor& cache(const Run& r, int id) const {
    const Slot& s = slots_[static_cast<size_t>(id)];
    TS_ASSERT(s.kind == Slot::Cache, g_.at(id).name);
    return s.which == 0 ? r.cache.k[static_cast<size_t>(s.layer)] : r.cache.v[static_cast<size_t>(s.layer)];
  }

  void exec(const Run& r, int id) const {
    const Node& n = g_.at(id);
    const auto& in = n.inputs;
    const int64_t rows = n.shape.empty() ? 0 : n.shape[0];
    const int64_t cols = n.shape.size() > 1 ? n.shape[1] : 0;
    switch (n.op) {
      case Op::Input:
      case Op::Weight:
      case Op::CacheState:
        return;
      case Op::Embedding: {
        const Node& t = g_.at(in[0]);
        cpu::embedding(ints(r, in[1]), rows, weight(in[0]), weight_dtype(in[0]), t.shape[0], t.shape[1],
                       f32(r, id), n.scale != 0.f ? n.scale : 1.0f);
        return;
      }
      case Op::RmsNorm:
        if (!loaded_rms_norm_.empty() && loaded_rms_norm_[static_cast<size_t>(id)]) {
          loaded_rms_norm_[static_cast<size_t>(id)](f32(r, in[0]), static_cast<const float*>(weight(in[1])),
                                                    rows * cols / n.dim, n.dim, n.eps, f32(r, id));
          return;
        }
        cpu::rms_norm(f32(r, in[0]), in.size() > 1 ? static_cast<const float*>(weight(in[1])) : nullptr,
                      rows * cols / n.dim, n.dim, n.eps, f32(r, id));
        return;
      case Op::Scale: {
        const float* w = in.size() > 1 ? static_cast<const float*>(weight(in[1])) : nullptr;
        cpu::scale_rows(f32(r, in[0]), rows, cols, w, w ? g_.at(in[1]).shape[0] : 0, n.scale, f32(r, id));
        return;
      }
      case Op::Slice: {
        const int64_t width = g_.at(in[0]).shape[1];
        const float* x = f32(r, in[0]);
        float* y = f32(r, id);
        for (int64_t i = 0; i < rows; ++i)
          std::memcpy(y + i * cols, x + i * width + n.begin, static_cast<size_t>(cols) * sizeof(float));
        return;
      }
      case Op::MatMul: {
        if (const TesseraMatmulFn fn = loaded_matmul(id)) {
          const Node& w = g_.at(in[1]);
          const float* bias = in.size() > 2 ? static_cast<const float*>(weight(in[2])) : nullptr;
          const int64_t K = w.shape[1], N = w.shape[0];
          // A decode step calls the kernel once per row: the ABI does not ask a kernel to sum a row the same
          // way at every row count, and a decode row's logits must not depend on how many rows share the
          // step.
          if (g_.key.phase == graph::Phase::Decode) {
            for (int64_t i = 0; i < rows; ++i)
              fn(f32(r, in[0]) + i * K, weight(in[1]), bias, 1, K, N, f32(r, id) + i * N);
          } else {
            fn(f32(r, in[0]), weight(in[1]), bias, rows, K, N, f32(r, id));
          }
          return;
        }
        if (fused_away_[static_cast<size_t>(id)]) return;  // computed with its first sibling
        if (!siblings_[static_cast<size_t>(id)].empty()) {
          run_siblings(r, id, rows);
          return;
        }
        const Node& w = g_.at(in[1]);
        const float* bias = in.size() > 2 ? static_cast<const float*>(weight(in[2])) : nullptr;
        if (g_.key.phase == graph::Phase::Decode) {  // each row as it would be alone, at any batch size
          const cpu::MatmulOut out{weight(in[1]), w.shape[0], bias, f32(r, id)};
          cpu::matmul_rows(f32(r, in[0]), rows, w.shape[1], weight_dtype(in[1]), &out, 1, bf16_dot_);
          return;
        }
        cpu::matmul(f32(r, in[0]), rows, w.shape[1], weight(in[1]), weight_dtype(in[1]), w.shape[0], bias,
                    f32(r, id), bf16_dot_);
        return;
      }
      case Op::Rope: {
        float* y = f32(r, id);
        const float* x = f32(r, in[0]);
        if (y != x) std::memcpy(y, x, static_cast<size_t>(rows * cols) * sizeof(float));
        const graph::RopeTable& table = g_.rope_tables[static_cast<size_t>(n.rope_table)];
        const int32_t* pos = ints(r, in[1]);
        const float scale = n.scale != 0.f ? n.scale : 1.0f;
        if (!table.varies()) {
          cpu::rope(y, rows, n.heads, n.head_dim, n.rot_dim, pos, table.inv_freq.data(), scale);
          return;
        }
        cpu::rope(y, rows, n.heads, n.head_dim, n.rot_dim, pos, row_frequencies(r, n.rope_table, pos).data(),
                  scale, g_.key.seq);
        return;
      }
      case Op::CacheUpdate: {
        // new rows [batch * seq, kv_heads * head_dim] -> cache[rows[b], h, slots[b, s], :] (rounded or
        // quantised to the cache's dtype)
        Tensor& c = cache(r, in[0]);
        const float* x = f32(r, in[1]);
        const int32_t* slots = ints(r, in[2]);
        const int32_t* map = cache_rows(r, n, 3);
        const int64_t batch = g_.key.batch, seq = g_.key.seq, len = c.shape[2], hd = n.head_dim;
        const size_t slot = CpuCache::slot_bytes(c);
        for (int64_t b = 0; b < batch; ++b) {
          const int64_t cb = map ? map[b] : b;
          const int32_t* sl = row_slots(r, slots, b);
          for (int64_t s = 0; s < seq; ++s)
            for (int64_t h = 0; h < n.kv_heads; ++h)
              cpu::store_kv_row(
                  c.dtype, x + (b * seq + s) * n.kv_heads * hd + h * hd, hd,
                  c.ptr<uint8_t>() + static_cast<size_t>((cb * n.kv_heads + h) * len + sl[s]) * slot);
        }
        return;
      }
      case Op::Attention: {
        Tensor& kc = cache(r, in[1]);
        Tensor& vc = cache(r, in[2]);
        const int64_t batch = g_.key.batch, seq = g_.key.seq, len = kc.shape[2];
        const size_t per_row = static_cast<size_t>(n.kv_heads * len) * CpuCache::slot_bytes(kc);
        const int32_t* kv_begin = ints(r, in[4]);
        const int32_t* slots = ints(r, in[3]);
        const int32_t* map = cache_rows(r, n, 5);
        const float* sinks = n.sinks ? static_cast<const float*>(weight(in.back())) : nullptr;
        for (int64_t b = 0; b < batch; ++b) {
          const size_t cb = static_cast<size_t>(map ? map[b] : b);
          cpu::attention(f32(r, in[0]) + b * seq * n.heads * n.head_dim, seq, n.heads, n.head_dim,
                         kc.ptr<uint8_t>() + cb * per_row, vc.ptr<uint8_t>() + cb * per_row, kc.dtype,
                         n.kv_heads, len, row_slots(r, slots, b), kv_begin[b], n.scale,
                         f32(r, id) + b * seq * cols, n.window, n.softcap, sinks);
        }
        return;
      }
      case Op::GatedAct:
        if (g_.at(in[0]).shape != n.shape) {  // one gate per row [rows, 1]
          cpu::row_gated_act(gate_act(n.act), f32(r, in[0]), f32(r, in[1]), rows, cols, f32(r, id));
          return;
        }
        cpu::gated_act(gate_act(n.act), f32(r, in[0]), f32(r, in[1]), rows * cols, f32(r, id));
        return;
      case Op::Add:
        cpu::add(f32(r, in[0]), f32(r, in[1]), rows * cols, f32(r, id));
        return;
      case Op::LastRow: {
        const int64_t seq = g_.key.seq;
        for (int64_t b = 0; b < rows; ++b)
          std::memcpy(f32(r, id) + b * cols, f32(r, in[0]) + (b * seq + seq - 1) * cols,
                      static_cast<size_t>(cols) * 4);
        return;
      }
      case Op::SamplerState:
        return;
      case Op::MarkSeen:
        mark_seen(r, n);
        return;
      case Op::Sample:
        sample(r, n, id);
        return;
      case Op::AllReduce: {
        float* y = f32(r, id);
        const float* x = f32(r, in[0]);
        if (y != x) std::memcpy(y, x, static_cast<size_t>(rows * cols) * sizeof(float));
        comm_->all_reduce_sum(y, static_cast<size_t>(rows * cols));
        return;
      }
      case Op::AllGather: {
        // Gathered rank-major ([tp][rows][c]), then interleaved into [rows][tp * c].
        const int64_t c = g_.at(in[0]).shape[1], tp = g_.key.tp_size;
        std::vector<float>& gather = r.cache.gather;  // grows once
        if (gather.size() < static_cast<size_t>(rows * cols)) gather.resize(static_cast<size_t>(rows * cols));
        comm_->all_gather(f32(r, in[0]), static_cast<size_t>(rows * c), gather.data());
        float* y = f32(r, id);
        for (int64_t t = 0; t < tp; ++t)
          for (int64_t i = 0; i < rows; ++i)
            std::memcpy(y + i * cols + t * c, gather.data() + (t * rows + i) * c, static_cast<size_t>(c) * 4);
        return;
      }
      case Op::SoftCap:
        cpu::softcap(f32(r, in[0]), rows * cols, n.softcap, f32(r, id));
        return;
      case Op::MoeRoute:
        cpu::moe_route(f32(r, in[0]), rows, n.experts, n.top_k, moe_routing(n.routing), f32(r, id));
        return;
      case Op::MoeExperts: {
        const Node& down = g_.at(in[3]);
        const bool bias = in.size() > 5;
        const cpu::MoeWeights w{weight(in[2]),
                                weight(in[3]),
                                weight_dtype(in[2]),
                                weight_dtype(in[3]),
                                bias ? static_cast<const float*>(weight(in[4])) : nullptr,
                                bias ? static_cast<const float*>(weight(in[5])) : nullptr,
                                n.experts,
                                cols,
                                down.shape[2],
                                n.act == graph::Activation::ClampedSwiglu,
                                n.alpha,
                                n.limit};
        cpu::moe_experts(f32(r, in[0]), rows, f32(r, in[1]), w, gate_act(n.act),
                         g_.key.phase == graph::Phase::Decode, bf16_dot_, f32(r, id));
        return;
      }
      case Op::GatedDeltaNet:
        gated_delta_net(r, n, id);
        return;
      case Op::kCount:
        break;
    }
    TS_ASSERT(false, "unhandled op ", graph::op_name(n.op));
  }

  // Op::GatedDeltaNet over the cache's recurrent state of the node's layer (created zeroed on first use).
  void gated_delta_net(const Run& r, const Node& n, int id) const {
    const auto& in = n.inputs;
    cpu::DeltaNet w;
    w.hk = n.kv_heads;
    w.hv = n.heads;
    w.dk = n.head_dim;
    w.dv = n.dim;
    w.kernel = n.window;
    w.eps = n.eps;
    w.tiled = n.tiled_heads;
    w.conv = static_cast<const float*>(weight(in[4]));
    w.a_log = static_cast<const float*>(weight(in[5]));
    w.dt_bias = static_cast<const float*>(weight(in[6]));
    w.norm = static_cast<const float*>(weight(in[7]));
    const int64_t batch = g_.key.batch, seq = g_.key.seq, per_row = w.state_floats();
    std::vector<std::vector<float>>& states = r.cache.lin_state;
    if (states.size() <= static_cast<size_t>(n.layer)) states.resize(static_cast<size_t>(n.layer) + 1);
    std::vector<float>& st = states[static_cast<size_t>(n.layer)];
    if (st.empty()) st.assign(static_cast<size_t>(r.cache.batch * per_row), 0.f);
    const int32_t* slots = ints(r, in[8]);
    const int32_t* map = cache_rows(r, n, 10);
    std::vector<int64_t> rows(static_cast<size_t>(batch));
    std::vector<const int32_t*> row_slot(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) {
      rows[static_cast<size_t>(b)] = map ? map[b] : b;
      row_slot[static_cast<size_t>(b)] = row_slots(r, slots, b);
    }
    cpu::gated_delta_net(w, f32(r, in[0]), f32(r, in[1]), f32(r, in[2]), f32(r, in[3]), batch, seq,
                         rows.data(), row_slot.data(), ints(r, in[9]), st.data(), f32(r, id));
  }

  // Kernels loaded at run time: the one each node takes (the first package accepting it, its best kernel for
  // the node's dtype on the active instruction set); the built-in kernel for the others.
  void pick_loaded_kernels(const kernels::KernelSet& loaded) {
    const int isa = kernel_isa(cpu::active_isa());
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& n = g_.nodes[i];
      if (n.op != Op::RmsNorm && n.op != Op::MatMul) continue;   // the ops with a C signature (ABI 2)
      if (n.op == Op::RmsNorm && n.inputs.size() < 2) continue;  // no weight: no C signature for it
      const kernels::KernelPackage* p = loaded.for_node(g_, n);
      // The node's weight dtype picks the kernel: a quantised or other-dtype matrix keeps the built-in one.
      const kernels::CpuKernel* k =
          p ? kernels::best_cpu_kernel(*p, kernels::node_dtype(g_, n), isa) : nullptr;
      if (!k) continue;
      if (n.op == Op::RmsNorm) {
        loaded_rms_norm_.resize(g_.nodes.size(), nullptr);
        loaded_rms_norm_[i] = reinterpret_cast<TesseraRmsNormFn>(k->fn);
      } else {
        loaded_matmul_.resize(g_.nodes.size(), nullptr);
        loaded_matmul_[i] = reinterpret_cast<TesseraMatmulFn>(k->fn);
      }
    }
  }
  TesseraMatmulFn loaded_matmul(int id) const {
    return loaded_matmul_.empty() ? nullptr : loaded_matmul_[static_cast<size_t>(id)];
  }

  // The sibling matmuls planned at `id` (decode steps), in one kernel call.
  void run_siblings(const Run& r, int id, int64_t rows) const {
    const auto& group = siblings_[static_cast<size_t>(id)];
    cpu::MatmulOut outs[8];
    const Node& w0 = g_.at(g_.at(id).inputs[1]);
    for (size_t i = 0; i < group.size(); ++i) {
      const Node& m = g_.at(group[i]);
      const Node& w = g_.at(m.inputs[1]);
      outs[i] = {weight(m.inputs[1]), w.shape[0],
                 m.inputs.size() > 2 ? static_cast<const float*>(weight(m.inputs[2])) : nullptr,
                 f32(r, group[i])};
    }
    cpu::matmul_rows(f32(r, g_.at(id).inputs[0]), rows, w0.shape[1], weight_dtype(g_.at(id).inputs[1]), outs,
                     static_cast<int>(group.size()), bf16_dot_);
  }

  // Marks ids[b, s] (s >= seen_from[b] in a prefill) in the seen mask [cache rows, vocab] of the row's cache
  // row; a prefill (seen_from present) starts the row's sequence, so its mask is cleared first.
  void mark_seen(const Run& r, const Node& n) const {
    const int64_t batch = g_.key.batch, seq = g_.key.seq;
    const int32_t* ids = ints(r, n.inputs[1]);
    const int f = input_of(n, InputKind::SeenFrom, 2);
    const int32_t* from = f >= 0 ? ints(r, f) : nullptr;
    const int32_t* map = cache_rows(r, n, 2);
    for (int64_t b = 0; b < batch; ++b) {
      float* seen = r.cache.seen.data() + (map ? map[b] : b) * vocab_;
      if (from) std::fill(seen, seen + vocab_, 0.0f);
      for (int64_t s = from ? from[b] : 0; s < seq; ++s) {
        const int32_t id = ids[b * seq + s];
        if (id >= 0 && id < vocab_) seen[id] = 1.0f;
      }
    }
  }

  // The host sampler (src/sampling/sampler.cpp) on each row: penalty, then argmax or warpers + draw. The
  // row's seen mask is that of its cache row (the step row in unmapped steps); its draw is keyed by its
  // parameters' seed and step only (as the host and the PJRT lowering), so a sequence draws the same numbers
  // whichever cache row it is in and whichever rows it shares a step with.
  void sample(const Run& r, const Node& n, int id) const {
    const float* logits = f32(r, n.inputs[0]);
    const int32_t* params = ints(r, n.inputs[2]);
    const int32_t* map = cache_rows(r, n, 3);
    const int mask_id = input_of(n, InputKind::TokenMask, 3);
    const int32_t* mask = mask_id >= 0 ? ints(r, mask_id) : nullptr;  // null: no row constrained
    int32_t* out = reinterpret_cast<int32_t*>(f32(r, id));  // [batch] int32 stored in the float arena
    const std::span<float> row(r.cache.sample_row.data(), static_cast<size_t>(vocab_));  // [vocab] scratch
    for (int64_t b = 0; b < g_.key.batch; ++b) {
      const int64_t cb = map ? map[b] : b;
      const int32_t* p = params + b * graph::kSampleParams;
      auto as_float = [](int32_t bits) {
        float f;
        std::memcpy(&f, &bits, sizeof f);
        return f;
      };
      std::memcpy(row.data(), logits + b * vocab_, row.size() * sizeof(float));
      bool finite = true;
      for (float x : row) finite = finite && std::isfinite(x);
      if (!finite) {  // the model overflowed: no token (-1) for the host to report, as the PJRT lowering
        out[b] = -1;
        continue;
      }
      sampling::apply_repetition_penalty_mask(row.data(), vocab_, r.cache.seen.data() + cb * vocab_,
                                              as_float(p[graph::kRepetitionPenalty]));
      if (mask) {  // constrained rows: disallowed tokens to -inf, as the host sampler does
        const int32_t* words = mask + b * graph::mask_words(vocab_);
        for (int64_t t = 0; t < vocab_; ++t)
          if (!((static_cast<uint32_t>(words[t >> 5]) >> (t & 31)) & 1u))
            row[static_cast<size_t>(t)] = -std::numeric_limits<float>::infinity();
      }
      if (g_.key.sampling == graph::Sampling::Greedy || p[graph::kDoSample] == 0) {
        out[b] = sampling::argmax(row.data(), vocab_);
        continue;
      }
      GenerationConfig cfg;
      cfg.temperature = as_float(p[graph::kTemperature]);
      cfg.top_k = p[graph::kTopK];
      cfg.top_p = as_float(p[graph::kTopP]);
      cfg.min_p = as_float(p[graph::kMinP]);
      sampling::apply_warpers(row.data(), vocab_, cfg);
      const uint64_t seed =
          static_cast<uint32_t>(p[graph::kSeedLo]) | uint64_t{static_cast<uint32_t>(p[graph::kSeedHi])} << 32;
      out[b] = sampling::sample_from_logits(
          row.data(), vocab_, sampling::counter_uniform(seed, static_cast<uint32_t>(p[graph::kStep])));
    }
  }

  // The plan: fixed once compiled (no member changes after the constructor).
  Graph g_;
  Communicator* comm_ = nullptr;            // tensor-parallel group (tp_size > 1), owned by the backend
  std::atomic<bool>* comm_busy_ = nullptr;  // set while a tensor-parallel step of this rank runs (backend's)
  cpu::Bf16Dot bf16_dot_;                   // what matmuls with bf16 weights may do with their inputs
  size_t arena_floats_ = 0;                 // activation arena a run needs (CpuCache::arena)
  int64_t vocab_ = 0;                       // sampler state width (graphs with in-step sampling)
  int layers_ = 0;                          // KV cache layers the step reads
  std::vector<int> cache_nodes_;            // CacheState nodes (their shapes are checked against the cache)
  StepChecks checks_;                       // what the step's inputs must fit (its key, inputs, vocabulary)
  std::vector<Slot> slots_;
  std::vector<std::vector<int>> siblings_;  // MatMul node -> its sibling group (first member only; see plan)
  std::vector<bool> fused_away_;            // MatMul nodes computed by their group's first member
  std::vector<TesseraRmsNormFn> loaded_rms_norm_;  // per node: a loaded kernel (empty: none loaded)
  std::vector<TesseraMatmulFn> loaded_matmul_;     // per node: a loaded kernel (empty: none loaded)
};

// Copies the weights that are not already on 2 MiB pages into one arena (Tensor::empty: 2 MiB pages where
// granted). Decode reads every weight once per token, and most matrices of a small model are under 2 MiB, so
// on their own (heap blocks, file mappings) they sit on 4 KiB pages: measured on the 2-core EPYC, SmolLM2's
// layer matmuls streamed 20-26 GB/s from those and its 56 MB LM head 39 GB/s from huge pages. Owned tensors
// of 2 MiB and more (converted or dequantised ones) already are on huge pages and stay where they are.
// Tensors that share memory (a tied table and the row blocks that alias it; neighbours in one file mapping)
// are copied as one range, so they still share it. The sources go once their tensors point into the arena.

WeightMap pack_weights(WeightMap weights) {
  struct Use {
    Tensor* t;
    uintptr_t begin, end;
  };
  std::vector<Use> uses;
  for (auto& [key, t] : weights) {
    if (t.data == nullptr || t.nbytes() == 0) continue;  // never read (zeros), nothing to move
    if (t.huge_page_backed()) continue;                  // already where packing would put it
    const auto b = reinterpret_cast<uintptr_t>(t.data);
    uses.push_back({&t, b, b + t.nbytes()});
  }
  // Ranges: uses of one owner whose bytes overlap or touch, merged.
  std::sort(uses.begin(), uses.end(), [](const Use& a, const Use& b) {
    const void* oa = a.t->owner.get();
    const void* ob = b.t->owner.get();
    return oa != ob ? std::less<const void*>()(oa, ob) : a.begin < b.begin;
  });
  struct Range {
    uintptr_t begin, end;
    size_t first, last;  // uses[first, last)
    size_t offset = 0;   // in the arena
  };
  std::vector<Range> ranges;
  for (size_t i = 0; i < uses.size(); ++i) {
    const bool joins = !ranges.empty() &&
                       uses[i].t->owner.get() == uses[ranges.back().first].t->owner.get() &&
                       uses[i].begin <= ranges.back().end;
    if (joins) {
      ranges.back().end = std::max(ranges.back().end, uses[i].end);
      ranges.back().last = i + 1;
    } else {
      ranges.push_back({uses[i].begin, uses[i].end, i, i + 1});
    }
  }
  size_t total = 0;
  for (Range& r : ranges) {
    r.offset = total;
    total += (r.end - r.begin + 63) / 64 * 64;
  }
  if (total == 0) return weights;
  const Tensor arena = Tensor::empty(DType::BF16, {static_cast<int64_t>(total / 2)});
  auto* base = static_cast<uint8_t*>(arena.data);
  // The copy, in 4 MiB pieces over the threads (first touch of fresh pages is most of its cost).
  constexpr size_t kPiece = size_t{4} << 20;
  std::vector<std::pair<size_t, size_t>> pieces;  // (range, byte offset in it)
  for (size_t r = 0; r < ranges.size(); ++r)
    for (size_t off = 0; off < ranges[r].end - ranges[r].begin; off += kPiece) pieces.emplace_back(r, off);
  cpu::ThreadPool::instance().parallel_chunks(
      static_cast<int64_t>(pieces.size()), 1, [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
          const Range& r = ranges[pieces[static_cast<size_t>(p)].first];
          const size_t off = pieces[static_cast<size_t>(p)].second;
          const size_t n = std::min(kPiece, r.end - r.begin - off);
          std::memcpy(base + r.offset + off, reinterpret_cast<const uint8_t*>(r.begin) + off, n);
          io::release_pages(reinterpret_cast<const void*>(r.begin + off), n);
        }
      });
  for (const Range& r : ranges) {
    for (size_t i = r.first; i < r.last; ++i) {
      Tensor& t = *uses[i].t;
      t.data = base + r.offset + (uses[i].begin - r.begin);
      t.owner = arena.owner;  // the last use of a source range lets it go
    }
  }
  return weights;
}

}  // namespace

// Q4_K, Q6_K, Q4_0 and Q4_1 matrices (rows a multiple of 8) rewritten in place into their _R8 forms, rows
// interleaved by 8 (kernels_quant.cpp), which the decode kernel reads 8 rows per vector lane; the tensor's
// dtype says which form it is in. Only memory that this map alone holds is rewritten (the arena of
// pack_weights, or owned tensors nobody else shares), and only a matrix no other weight overlaps but its
// exact aliases (a tied table and its lm_head: rewritten once, both relabelled); any other stays as stored
// and keeps the stored kernel.
WeightMap cpu_interleave_weights(WeightMap weights) {
  std::map<const void*, long> holders;  // owner -> entries of the map holding it
  for (auto& [key, t] : weights)
    if (t.owner) ++holders[t.owner.get()];
  std::vector<Tensor*> all;
  for (auto& [key, t] : weights)
    if (t.data != nullptr && t.nbytes() > 0) all.push_back(&t);
  std::sort(all.begin(), all.end(),
            [](const Tensor* a, const Tensor* b) { return std::less<const void*>()(a->data, b->data); });
  const auto same = [](const Tensor* a, const Tensor* b) {
    return a->data == b->data && a->dtype == b->dtype && a->shape == b->shape;
  };
  for (size_t i = 0; i < all.size();) {
    size_t j = i + 1;  // all[i, j): exact aliases of all[i]
    while (j < all.size() && same(all[i], all[j])) ++j;
    Tensor& t = *all[i];
    const auto begin = reinterpret_cast<uintptr_t>(t.data), end = begin + t.nbytes();
    const bool overlapped =
        (i > 0 && reinterpret_cast<uintptr_t>(all[i - 1]->data) + all[i - 1]->nbytes() > begin) ||
        (j < all.size() && reinterpret_cast<uintptr_t>(all[j]->data) < end);
    const bool ours = t.owner && t.owner.use_count() == holders[t.owner.get()];
    const DType r8 = cpu::rows8_dtype(t.dtype);
    // A matrix [N, K], or stacked experts [E, N, K] whose every expert's halves of rows are whole groups of 8
    // (gate_up [E, 2I, H]: each half whole groups, so 2I a multiple of 16).
    const bool matrix =
        (t.shape.size() == 2 && t.shape[0] % 8 == 0) || (t.shape.size() == 3 && t.shape[1] % 16 == 0);
    if (r8 != t.dtype && matrix && !overlapped && ours) {
      cpu::interleave_rows8(t.dtype, t.data, t.numel() / t.shape.back(), t.shape.back());
      for (size_t k = i; k < j; ++k) all[k]->dtype = r8;
    }
    i = j;
  }
  return weights;
}

namespace {

constexpr size_t kPage = 4096;

// A KV cache tensor whose memory is taken page by page as it is first written (zeros until then) and given
// back by give_back(): address space only at first, 4 KiB pages (never huge ones, which would take 2 MiB for
// the first key written), so a row's memory follows the slots it holds.
Tensor paged_tensor(DType dt, Shape shape) {
  Tensor probe;
  probe.dtype = dt;
  probe.shape = shape;
  const size_t bytes = std::max<size_t>(kPage, (probe.nbytes() + kPage - 1) / kPage * kPage);
  void* p =
      ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    fail("cpu create_cache: cannot reserve ", bytes, " bytes of address space for a layer's KV cache");
  ::madvise(p, bytes, MADV_NOHUGEPAGE);  // advisory
  return Tensor::view(dt, std::move(shape), p,
                      std::shared_ptr<void>(p, [bytes](void* q) { ::munmap(q, bytes); }));
}

// Gives back the whole pages inside [begin, end) (they read as zeros afterwards).
void give_back(uint8_t* begin, uint8_t* end) {
  const uintptr_t b = (reinterpret_cast<uintptr_t>(begin) + kPage - 1) / kPage * kPage;
  const uintptr_t e = reinterpret_cast<uintptr_t>(end) / kPage * kPage;
  if (e > b) ::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

class CpuBackend : public Backend {
 public:
  CpuBackend(std::shared_ptr<Communicator> comm, const CpuBackendOptions& o)
      : comm_(std::move(comm)),
        bf16_dot_(o.exact_bf16_matmul ? cpu::Bf16Dot::Exact : cpu::Bf16Dot::RoundX),
        kv_dtype_(o.kv_dtype) {
    if (kv_dtype_ != DType::F32 && kv_dtype_ != DType::BF16 && kv_dtype_ != DType::Q8_0 &&
        kv_dtype_ != DType::F8_E4M3)
      fail("cpu backend: KV cache dtype ", dtype_name(kv_dtype_), " (float32, bfloat16, q8_0 or fp8)");
  }
  std::string name() const override { return "cpu"; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.in_step_sampling = true;  // Op::Sample runs the host sampler inside the step
    c.block_quantized_weights = true;
    c.shared_cache_rows = true;
    c.copies_cache_rows = true;
    c.state_snapshots = true;
    return c;
  }
  bool supports_op(graph::Op op) const override { return op != Op::kCount; }
  void bind_weights(WeightMap weights) override {
    weights_ = cpu_interleave_weights(pack_weights(std::move(weights)));
  }
  std::unique_ptr<Executable> compile(const Graph& g) override {
    return std::make_unique<CpuExecutable>(g, weights_, comm_.get(), &comm_busy_, bf16_dot_, kernels_.get());
  }
  kernels::KernelTarget kernel_target() const override {
    return {"cpu", kernels::host_platform(), kernel_isa(cpu::active_isa())};
  }
  void use_kernels(std::shared_ptr<const kernels::KernelSet> k) override { kernels_ = std::move(k); }
  using Backend::create_cache;
  std::unique_ptr<DeviceCache> create_cache(const CacheGeometry& layers, int64_t batch,
                                            int64_t cache_len) override {
    for (const CacheLayer& l : layers)
      if (l.kv_heads < 0 || (l.kv_heads > 0 && l.head_dim < 1))
        fail("cpu create_cache: a layer of ", l.kv_heads, " kv heads of head_dim ", l.head_dim);
    if (layers.empty() || batch < 1 || cache_len < 1)
      fail("cpu create_cache: layers ", layers.size(), ", rows ", batch, ", slots ", cache_len,
           ": each must be at least 1");
    auto c = std::make_unique<CpuCache>();
    c->pool = arenas_;
    c->batch = batch;
    c->cache_len = cache_len;
    for (const CacheLayer& l : layers) {
      if (l.kv_heads == 0) {  // no keys or values: an empty tensor (no heads) keeps the layer's index
        Tensor none;
        none.dtype = kv_dtype_;
        none.shape = {batch, 0, cache_len, 0};
        c->k.push_back(none);
        c->v.push_back(none);
        continue;
      }
      const int64_t width = cpu::kv_row_values(kv_dtype_, l.head_dim);  // q8_0: whole blocks
      c->k.push_back(paged_tensor(kv_dtype_, {batch, l.kv_heads, cache_len, width}));
      c->v.push_back(paged_tensor(kv_dtype_, {batch, l.kv_heads, cache_len, width}));
    }
    return c;
  }
  void copy_cache(const DeviceCache& from_base, DeviceCache& to_base) override {
    const auto* fp = dynamic_cast<const CpuCache*>(&from_base);
    auto* tp = dynamic_cast<CpuCache*>(&to_base);
    if (!fp || !tp) fail("cpu copy_cache: a cache that the cpu backend did not make");
    const CpuCache& from = *fp;
    CpuCache& to = *tp;
    bool fits = from.k.size() == to.k.size() && from.batch == to.batch && to.cache_len >= from.cache_len;
    for (size_t l = 0; fits && l < from.k.size(); ++l)
      fits = from.k[l].shape[1] == to.k[l].shape[1] && from.k[l].shape[3] == to.k[l].shape[3];
    if (!fits)
      fail("cpu copy_cache: from ", from.k.size(), " layers x ", from.batch, " rows x ", from.cache_len,
           " slots into ", to.k.size(), " layers x ", to.batch, " rows x ", to.cache_len,
           " slots (layers, rows and heads must match; the target needs at least as many slots)");
    auto copy = [&](const Tensor& a, Tensor& b) {
      TS_ASSERT(a.dtype == b.dtype);
      const int64_t rows = a.shape[0] * a.shape[1];
      const size_t slot = CpuCache::slot_bytes(a);
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(b.ptr<uint8_t>() + static_cast<size_t>(r * to.cache_len) * slot,
                    a.ptr<uint8_t>() + static_cast<size_t>(r * from.cache_len) * slot,
                    static_cast<size_t>(from.cache_len) * slot);
    };
    for (size_t l = 0; l < from.k.size(); ++l) {
      copy(from.k[l], to.k[l]);
      copy(from.v[l], to.v[l]);
    }
    to.seen = from.seen;
    to.lin_state = from.lin_state;
    to.lin_snapshot = from.lin_snapshot;
  }
  static CpuCache& recurrent_rows(DeviceCache& base, int a, int b, const char* what) {
    auto* cp = dynamic_cast<CpuCache*>(&base);
    if (!cp) fail("cpu ", what, ": a cache that the cpu backend did not make");
    if (a < 0 || a >= cp->batch || b < 0 || b >= cp->batch)
      fail("cpu ", what, ": rows ", a, ", ", b, " in a cache of ", cp->batch, " rows");
    return *cp;
  }
  // Blocks of the fewest slots (a multiple of 16) whose keys of one head fill whole pages (256 slots at most;
  // past that, 16 and the pages a block straddles are shared with its neighbours).
  DType cache_dtype() const override { return kv_dtype_; }
  CachePaging cache_paging(int64_t head_dim) const override {
    const auto slot = static_cast<int64_t>(cpu::kv_row_bytes(kv_dtype_, head_dim));
    int tokens = 16;
    while (tokens < 256 && (tokens * slot) % static_cast<int64_t>(kPage) != 0) tokens += 16;
    if ((tokens * slot) % static_cast<int64_t>(kPage) != 0) tokens = 16;
    return {tokens, tokens * slot};
  }
  void release_cache_slots(DeviceCache& base, int row, int from) override {
    auto* cp = dynamic_cast<CpuCache*>(&base);
    if (!cp) fail("cpu release_cache_slots: a cache that the cpu backend did not make");
    CpuCache& c = *cp;
    if (row < 0 || row >= c.batch || from < 0 || from > c.cache_len)
      fail("cpu release_cache_slots: row ", row, ", slots from ", from, ", in a cache of ", c.batch,
           " rows x ", c.cache_len, " slots");
    c.each_head([&](const Tensor& t, int64_t h) {
      uint8_t* slots = c.head_slots(t, row, h);
      const size_t slot = CpuCache::slot_bytes(t);
      give_back(slots + static_cast<size_t>(from) * slot, slots + static_cast<size_t>(c.cache_len) * slot);
    });
  }
  void snapshot_state(DeviceCache& base, int row) override {
    CpuCache& c = recurrent_rows(base, row, row, "snapshot_state");
    c.lin_snapshot.resize(c.lin_state.size());
    for (size_t l = 0; l < c.lin_state.size(); ++l) {
      const std::vector<float>& live = c.lin_state[l];
      if (live.empty()) continue;
      std::vector<float>& snap = c.lin_snapshot[l];
      if (snap.empty()) snap.assign(live.size(), 0.f);
      const size_t per_row = live.size() / static_cast<size_t>(c.batch);
      std::copy_n(live.begin() + static_cast<long>(per_row * static_cast<size_t>(row)), per_row,
                  snap.begin() + static_cast<long>(per_row * static_cast<size_t>(row)));
    }
  }
  void restore_state(DeviceCache& base, int from_row, int to_row) override {
    CpuCache& c = recurrent_rows(base, from_row, to_row, "restore_state");
    for (size_t l = 0; l < c.lin_state.size(); ++l) {
      std::vector<float>& live = c.lin_state[l];
      if (live.empty()) continue;
      if (l >= c.lin_snapshot.size() || c.lin_snapshot[l].empty())
        fail("cpu restore_state: row ", from_row, " has no snapshot");
      const size_t per_row = live.size() / static_cast<size_t>(c.batch);
      std::copy_n(c.lin_snapshot[l].begin() + static_cast<long>(per_row * static_cast<size_t>(from_row)),
                  per_row, live.begin() + static_cast<long>(per_row * static_cast<size_t>(to_row)));
    }
  }
  void copy_cache_row_prefix(DeviceCache& base, int from_row, int to_row, int count) override {
    auto* cp = dynamic_cast<CpuCache*>(&base);
    if (!cp) fail("cpu copy_cache_row_prefix: a cache that the cpu backend did not make");
    CpuCache& c = *cp;
    if (from_row < 0 || from_row >= c.batch || to_row < 0 || to_row >= c.batch || count < 0 ||
        count > c.cache_len)
      fail("cpu copy_cache_row_prefix: rows ", from_row, " -> ", to_row, ", ", count,
           " slots, in a cache of ", c.batch, " rows x ", c.cache_len, " slots");
    if (from_row == to_row || count == 0) return;
    c.each_head([&](const Tensor& t, int64_t h) {
      std::memcpy(c.head_slots(t, to_row, h), c.head_slots(t, from_row, h),
                  static_cast<size_t>(count) * CpuCache::slot_bytes(t));
    });
  }

 private:
  WeightMap weights_;
  std::shared_ptr<ArenaPool> arenas_ = std::make_shared<ArenaPool>();  // scratch of caches that are gone
  std::shared_ptr<Communicator> comm_;
  std::atomic<bool> comm_busy_{false};  // a tensor-parallel step is running (CpuExecutable::CommTurn)
  cpu::Bf16Dot bf16_dot_;
  DType kv_dtype_;
  std::shared_ptr<const kernels::KernelSet> kernels_;  // loaded at run time (LoadOptions::kernels), or null
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(std::shared_ptr<Communicator> comm,
                                          const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(std::move(comm), options);
}

}  // namespace tessera::backends
