// backends::Backend on a PJRT plugin. Per step: upload the four small step inputs, execute with the KV
// caches donated (they come back as the aliased outputs, same device memory), download the logits. Weights
// and caches never cross to the host during a step; TransferStats counts what does.
#include "backends/pjrt/pjrt_backend.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include "backends/cpu/kernels.h"
#include "backends/pjrt/pjrt_api.h"
#include "backends/pjrt/stablehlo_emitter.h"
#include "backends/step_checks.h"
#include "tessera/error.h"
#include "tessera/log.h"

namespace tessera::backends {

bool is_pjrt_device(const std::string& device) {
  return device == "xla-cpu" || device == "tpu" || device == "cuda" || device.rfind("pjrt:", 0) == 0;
}

#if TESSERA_HAVE_PJRT
namespace {

using pjrt::BufferHandle;
using pjrt::Client;
using pjrt::KernelSplice;
using pjrt::Plugin;
using pjrt::StablehloArg;
using pjrt::StablehloProgram;
using clock_type = std::chrono::steady_clock;

PJRT_Buffer_Type buffer_type(DType dt) {
  switch (dt) {
    case DType::F32:
      return PJRT_Buffer_Type_F32;
    case DType::BF16:
      return PJRT_Buffer_Type_BF16;
    case DType::F16:
      return PJRT_Buffer_Type_F16;
    case DType::I32:
      return PJRT_Buffer_Type_S32;
    case DType::I64:
      return PJRT_Buffer_Type_S64;
    case DType::I8:
      return PJRT_Buffer_Type_S8;
    case DType::F8_E4M3:
      return PJRT_Buffer_Type_F8E4M3FN;
    default:
      break;  // block-quantised: bound as their parts (bind_replica_weights)
  }
  return PJRT_Buffer_Type_INVALID;
}

// The source of argument `arg` of a program lowered over placeholder weights: the placeholder's own, or for a
// part of a block-quantised weight (stablehlo_emitter.h), that part of the weight the placeholder stands for.
template <typename Source>
Source placeholder_source(const std::unordered_map<std::string, Source>& sources, const std::string& arg) {
  if (auto it = sources.find(arg); it != sources.end()) return it->second;
  const std::string owner = pjrt::quant_part_owner(arg);
  auto it = sources.find(owner);
  TS_ASSERT(!owner.empty() && it != sources.end() && it->second.kind == Source::Weight,
            "PJRT backend: no source for program argument ", arg);
  Source s = it->second;
  s.weight += arg.substr(owner.size());
  return s;
}

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// TransferStats as counters that concurrent runs (of any executables, with their own caches) add to.
struct TransferCounters {
  std::atomic<uint64_t> h2d_bytes{0}, d2h_bytes{0}, runs{0}, setup_h2d_bytes{0}, cache_copy_bytes{0},
      collective_bytes{0};
  TransferStats load() const {
    return {h2d_bytes.load(),       d2h_bytes.load(),        runs.load(),
            setup_h2d_bytes.load(), cache_copy_bytes.load(), collective_bytes.load()};
  }
  void reset() {
    for (auto* c : {&h2d_bytes, &d2h_bytes, &runs, &setup_h2d_bytes, &cache_copy_bytes, &collective_bytes})
      c->store(0);
  }
};

class PjrtCache : public DeviceCache {
 public:
  // k[r][l], v[r][l]: replica r's (device r's) buffers [batch, kv_heads, cache_len, head_dim] of layer
  // l's geometry (no buffer for a layer without keys and values)
  std::vector<std::vector<BufferHandle>> k, v;
  std::vector<BufferHandle>
      seen;  // per replica: sampler state f32 [batch, vocab]; zeroed by the first sampling step
  // per replica, by layer: a linear-attention layer's recurrent state f32 [batch, W]
  // (pjrt::kLinearStateWhich), created zeroed by the first step that reads it
  struct LinearState {
    BufferHandle buffer;
    Shape shape;
  };
  std::vector<std::map<int, LinearState>> linear;
  CacheGeometry layers;
  const void* owner = nullptr;  // the backend that created it

  BufferHandle& at(int replica, int layer, int which) {
    auto& lists = which == 0 ? k : v;
    TS_ASSERT(replica >= 0 && static_cast<size_t>(replica) < lists.size(), "cache replica ", replica);
    auto& list = lists[static_cast<size_t>(replica)];
    TS_ASSERT(layer >= 0 && static_cast<size_t>(layer) < list.size() && list[static_cast<size_t>(layer)],
              "cache layer ", layer, " of ", list.size(), " (a layer without keys and values has no buffer)");
    return list[static_cast<size_t>(layer)];
  }
};

struct WeightBuffer {
  BufferHandle buffer;
  DType dtype;
  Shape shape;
};

class PjrtBackendImpl;

// The checks of a step of graph `g` (backends/step_checks.h); size errors name the program's input.
StepChecks pjrt_step_checks(const graph::Graph& g, const char* what) {
  StepChecks c = step_checks_of(g, what);
  c.program_names = true;
  return c;
}

// A step's inputs as they are uploaded (after check_step_inputs): slots given per column ([seq], the same for
// every row) are expanded to every row ([batch * seq]).
class StepView {
 public:
  // `mask_values`: the program's token mask size, filled with all ones when the step gives none.
  StepView(const StepInputs& in, const graph::ShapeKey& key, int64_t mask_values) : in_(in) {
    if (in.token_mask.empty() && mask_values > 0) ones_.assign(static_cast<size_t>(mask_values), -1);
    const int64_t B = key.batch, S = key.seq;
    if (static_cast<int64_t>(in.slots.size()) != B * S) {
      slots_.reserve(static_cast<size_t>(B * S));
      for (int64_t b = 0; b < B; ++b) slots_.insert(slots_.end(), in.slots.begin(), in.slots.end());
    }
  }

  const std::vector<int32_t>& operator[](graph::InputKind kind) const {
    switch (kind) {
      case graph::InputKind::TokenIds:
        return in_.ids;
      case graph::InputKind::Positions:
        return in_.positions;
      case graph::InputKind::Slots:
        return slots();
      case graph::InputKind::KvBegin:
        return in_.kv_begin;
      case graph::InputKind::SeenFrom:
        return in_.seen_from;
      case graph::InputKind::SampleParams:
        return in_.sample_params;
      case graph::InputKind::CacheRows:
        return in_.cache_rows;
      case graph::InputKind::TokenMask:
        return in_.token_mask.empty() ? ones_ : in_.token_mask;
    }
    return in_.ids;
  }

 private:
  const std::vector<int32_t>& slots() const { return slots_.empty() ? in_.slots : slots_; }
  const StepInputs& in_;
  std::vector<int32_t> slots_;  // expanded from [seq], else empty
  std::vector<int32_t> ones_;   // the token mask of a step that gives none
};

// Executes `exe` on args.size() devices; the buffers in donated[d] (device d's arguments aliased to results
// num_outputs, num_outputs + 1, ...) are replaced by those results. Returns device 0's results 0 ..
// num_outputs-1.
std::vector<BufferHandle> execute_loaded(const Plugin& p, PJRT_LoadedExecutable* exe,
                                         const std::vector<std::vector<PJRT_Buffer*>>& args,
                                         const std::vector<std::vector<BufferHandle*>>& donated,
                                         int num_outputs, int num_results) {
  auto results = pjrt::execute(p, exe, args, num_results);
  for (size_t d = 0; d < results.size(); ++d)
    for (size_t i = 0; i < donated[d].size(); ++i)
      *donated[d][i] = std::move(results[d][static_cast<size_t>(num_outputs) + i]);
  results[0].resize(static_cast<size_t>(num_outputs));
  return std::move(results[0]);
}

class PjrtExecutable : public Executable {
 public:
  PjrtExecutable(PjrtBackendImpl& be, const graph::Graph& g, StablehloProgram prog,
                 pjrt::LoadedExecutableHandle exe, std::vector<std::vector<PJRT_Buffer*>> weight_args)
      : be_(be),
        key_(g.key),
        checks_(pjrt_step_checks(g, "PJRT step")),
        prog_(std::move(prog)),
        exe_(std::move(exe)),
        weight_args_(std::move(weight_args)) {}

  void run(const StepInputs& in, DeviceCache& cache, std::vector<float>& logits) const override;
  void run_tokens(const StepInputs& in, DeviceCache& cache, std::vector<int32_t>& tokens) const override;
  PJRT_LoadedExecutable* loaded() const { return exe_.get(); }
  const PjrtBackendImpl* backend() const { return &be_; }

 private:
  void check_inputs(const StepView& in) const;
  // Uploads the inputs, executes with the states donated, and returns result 0 (logits or token ids).
  BufferHandle execute(const StepInputs& in, DeviceCache& cache) const;
  // Device d's token mask allowing every token (uploaded once, then an argument of every step without a
  // constrained row, never donated), so unconstrained steps move no mask.
  PJRT_Buffer* all_allowed(size_t d, const StablehloArg& a) const;

  PjrtBackendImpl& be_;
  graph::ShapeKey key_;
  StepChecks checks_;
  StablehloProgram prog_;
  pjrt::LoadedExecutableHandle exe_;
  // [replica][argument]: the weight buffer, or null for inputs/caches; one row per device the program runs on
  std::vector<std::vector<PJRT_Buffer*>> weight_args_;
  mutable std::mutex ones_mu_;
  mutable std::vector<BufferHandle> ones_;  // all_allowed(), per device
};

class PjrtSegmentedExecutable;

class PjrtBackendImpl : public PjrtBackend {
 public:
  PjrtBackendImpl(const std::string& device, const PjrtOptions& opt)
      : settings_(opt.settings ? *opt.settings : pjrt::default_pjrt_settings()),
        plugin_(Plugin::load(pjrt::find_plugin(device, settings_), settings_)),
        client_(plugin_, device == "xla-cpu" ? std::max(opt.device_count, opt.replicas) : 0,
                settings_.start_timeout_s),
        replicas_(std::max(1, opt.replicas)),
        comm_(opt.comm),
        kv_dtype_(opt.kv_dtype) {
    if (kv_dtype_ != DType::F32 && kv_dtype_ != DType::BF16 && kv_dtype_ != DType::F8_E4M3 &&
        kv_dtype_ != DType::Q8_0)
      fail("kv_cache_dtype '", dtype_name(kv_dtype_), "': device ", device,
           " keeps float32, bfloat16, q8_0 or fp8 KV caches");
    info_.device = device;
    info_.plugin_path = plugin_.path();
    info_.api_version = plugin_.api_version();
    info_.header_api_version = std::to_string(PJRT_API_MAJOR) + "." + std::to_string(PJRT_API_MINOR);
    info_.platform_name = client_.platform_name();
    info_.platform_version = client_.platform_version();
    info_.attributes = plugin_.attributes();
    info_.devices = client_.describe_devices();
    if (static_cast<int>(client_.devices().size()) < replicas_)
      fail("device ", device, ": tensor parallelism over ", replicas_, " devices, but the plugin has ",
           client_.devices().size(), " (", info_.platform_name, ")");
    weights_.resize(static_cast<size_t>(replicas_));
  }

  std::string name() const override { return info_.device; }
  DType cache_dtype() const override { return kv_dtype_; }
  // The device buffer of one layer's keys (or values): [B, KV, L, hd] of the cache dtype, for q8_0 int8 bytes
  // [B, KV, L, cache_row_bytes(hd)].
  std::vector<int64_t> cache_dims(int64_t batch, const CacheLayer& l, int64_t len) const {
    return {batch, l.kv_heads, len,
            kv_dtype_ == DType::Q8_0 ? static_cast<int64_t>(cache_row_bytes(l.head_dim)) : l.head_dim};
  }
  PJRT_Buffer_Type cache_buffer_type() const {
    return buffer_type(kv_dtype_ == DType::Q8_0 ? DType::I8 : kv_dtype_);
  }
  Capabilities capabilities() const override {
    Capabilities c;
    c.in_step_sampling = true;
    c.prefers_buckets = true;
    c.serializable = true;
    c.op_by_op = true;
    c.replicas = replicas_;
    c.counts_transfers = true;
    c.block_quantized_weights = true;  // uploaded as integers and scales, dequantised in the program
    return c;
  }
  bool supports_op(graph::Op op) const override { return op != graph::Op::kCount; }
  const pjrt::PlatformInfo& platform() const override { return info_; }
  TransferStats transfer_stats() const override { return stats_.load(); }
  void reset_transfer_stats() override { stats_.reset(); }
  CompileTiming compile_timing() const override {
    std::lock_guard<std::mutex> lock(timing_mu_);
    return timing_;
  }
  int replicas() const override { return replicas_; }

  void bind_weights(WeightMap weights) override { bind_replica_weights(0, std::move(weights)); }

  void bind_replica_weights(int replica, WeightMap weights) override {
    if (replica < 0 || replica >= replicas_)
      fail("PJRT backend: weights for replica ", replica, " of ", replicas_);
    auto& map = weights_[static_cast<size_t>(replica)];
    map.clear();
    auto upload = [&](const std::string& name, const void* data, DType dt, const Shape& shape, size_t bytes) {
      BufferHandle b = client_.upload(data, buffer_type(dt), shape, static_cast<size_t>(replica));
      stats_.setup_h2d_bytes += bytes;
      map.emplace(name, WeightBuffer{std::move(b), dt, shape});
    };
    for (auto& [name, t] : weights) {
      if (is_quantized(
              t.dtype)) {  // GGML blocks: their integers, scales and offsets as the program reads them
        if (t.shape.size() != 2 && t.shape.size() != 3)
          fail("weight ", name, ": ", dtype_name(t.dtype), " blocks of shape ", shape_str(t.shape),
               " (PJRT devices take block-quantised matrices and stacked experts only)");
        // Stacked experts [E, N, K] as the matrix of their rows [E * N, K] (the program reshapes them back).
        const Shape rows{t.numel() / t.shape.back(), t.shape.back()};
        const std::vector<pjrt::QuantPart> parts = pjrt::quant_parts_of(t.dtype, rows);
        std::vector<Tensor> arrays;
        for (const pjrt::QuantPart& part : parts) arrays.push_back(Tensor::empty(part.dtype, part.shape));
        cpu::split_quant_rows(t.dtype, t.data, rows[1], rows[0], arrays[0].ptr<int8_t>(),
                              arrays[1].ptr<float>(), arrays.size() > 2 ? arrays[2].ptr<float>() : nullptr);
        for (size_t i = 0; i < parts.size(); ++i)
          upload(pjrt::quant_part_name(name, parts[i].part), arrays[i].data, parts[i].dtype, parts[i].shape,
                 arrays[i].nbytes());
        continue;
      }
      if (buffer_type(t.dtype) == PJRT_Buffer_Type_INVALID) fail("weight ", name, ": unsupported dtype");
      upload(name, t.data, t.dtype, t.shape, t.nbytes());
    }
    // The host tensors are dropped here: the device copies are the only ones kept.
  }

  // How a graph runs: on `replicas_` devices as one program (tp_size == replicas_), in segments with host
  // collectives (tp_size > 1 and a communicator), or on device 0.
  bool segmented(const graph::Graph& g) const {
    if (g.key.tp_size <= 1 || g.key.tp_size == replicas_) return false;
    if (!comm_)
      fail("PJRT backend: the graph for ", g.key.str(), " is one of ", g.key.tp_size,
           " tensor-parallel ranks; this backend drives ", replicas_,
           " device(s) and has no communicator (load with distributed.tp_size on a PJRT device)");
    if (comm_->size() != g.key.tp_size || comm_->rank() != g.key.tp_rank)
      fail("PJRT backend: the graph for ", g.key.str(), " needs rank ", g.key.tp_rank, " of ", g.key.tp_size,
           "; the communicator is rank ", comm_->rank(), " of ", comm_->size());
    return true;
  }
  int program_replicas(const graph::Graph& g) const { return g.key.tp_size > 1 ? g.key.tp_size : 1; }
  std::string options_for(int replicas) const {
    if (replicas == 1) return pjrt::compile_options_proto(1, 1);
    std::vector<int64_t> ids;
    for (int r = 0; r < replicas; ++r) ids.push_back(info_.devices[static_cast<size_t>(r)].id);
    return pjrt::compile_options_proto(replicas, 1, ids);
  }

  std::unique_ptr<Executable> compile(const graph::Graph& g) override;

  std::string serialize(const Executable& base) const override;

  // The program text and the compile options; the compiler is compiler_identity().
  std::string program_identity(const graph::Graph& g) override;
  std::string compiler_identity() const override {
    return "platform " + info_.platform_name + " " + info_.platform_version + "; PJRT API " +
           info_.api_version + "; device " +
           (info_.devices.empty() ? std::string("?") : info_.devices[0].kind);
  }

  std::unique_ptr<Executable> load_serialized(const graph::Graph& g, const std::string& bytes) override;

  // Per replica the program runs on, per argument of `prog`: the bound weight's buffer, or null for step
  // inputs and caches.
  std::vector<std::vector<PJRT_Buffer*>> bind_weight_args(const StablehloProgram& prog, const graph::Graph& g,
                                                          int replicas) const {
    std::vector<std::vector<PJRT_Buffer*>> out;
    for (int r = 0; r < replicas; ++r) {
      std::vector<PJRT_Buffer*> weight_args(prog.args.size(), nullptr);
      for (size_t i = 0; i < prog.args.size(); ++i) {
        const StablehloArg& a = prog.args[i];
        if (a.kind != StablehloArg::Weight) continue;
        const WeightBuffer& w = weight(a.name, r);
        if (w.dtype != a.dtype || w.shape != a.shape)
          fail("PJRT backend: weight '", a.name, "' is ", dtype_name(w.dtype), " ", shape_str(w.shape),
               ", the graph for ", g.key.str(), " reads ", dtype_name(a.dtype), " ", shape_str(a.shape));
        weight_args[i] = w.buffer.get();
      }
      out.push_back(std::move(weight_args));
    }
    return out;
  }

  using Backend::create_cache;
  std::unique_ptr<DeviceCache> create_cache(const CacheGeometry& layers, int64_t batch,
                                            int64_t cache_len) override {
    auto c = std::make_unique<PjrtCache>();
    c->batch = batch;
    c->cache_len = cache_len;
    c->layers = layers;
    c->owner = this;
    c->k.resize(static_cast<size_t>(replicas_));
    c->v.resize(static_cast<size_t>(replicas_));
    c->seen.resize(static_cast<size_t>(replicas_));
    c->linear.resize(static_cast<size_t>(replicas_));
    std::vector<uint8_t> zeros;
    for (int r = 0; r < replicas_; ++r)
      for (const CacheLayer& l : layers) {
        auto& ks = c->k[static_cast<size_t>(r)];
        auto& vs = c->v[static_cast<size_t>(r)];
        if (l.kv_heads == 0) {  // no keys or values in this layer
          ks.emplace_back();
          vs.emplace_back();
          continue;
        }
        const std::vector<int64_t> dims = cache_dims(batch, l, cache_len);
        // [B, KV, L, hd]: 0.0 in every dtype (q8_0: scale 0 and quants 0)
        zeros.assign(static_cast<size_t>(batch * l.kv_heads * cache_len) * cache_row_bytes(l.head_dim), 0);
        ks.push_back(client_.upload(zeros.data(), cache_buffer_type(), dims, static_cast<size_t>(r)));
        vs.push_back(client_.upload(zeros.data(), cache_buffer_type(), dims, static_cast<size_t>(r)));
        stats_.setup_h2d_bytes += 2 * zeros.size();
      }
    return c;
  }

  // Through the host: only used when a dynamic cache grows (once per 64 tokens), never per step.
  void copy_cache(const DeviceCache& from_base, DeviceCache& to_base) override {
    const PjrtCache& from = own(from_base);
    PjrtCache& to = own(to_base);
    TS_ASSERT(from.k.size() == to.k.size() && from.batch == to.batch && to.cache_len >= from.cache_len &&
              from.layers == to.layers);
    std::vector<uint8_t> src, dst;
    auto copy = [&](const BufferHandle& a, BufferHandle& b, size_t device, const CacheLayer& layer) {
      if (!a) return;  // a layer without keys and values
      const int64_t rows = from.batch * layer.kv_heads;
      const size_t pos = cache_row_bytes(layer.head_dim),
                   row_from = static_cast<size_t>(from.cache_len) * pos,
                   row_to = static_cast<size_t>(to.cache_len) * pos;
      src.resize(static_cast<size_t>(rows) * row_from);   // [B*KV, Lf, hd]
      dst.assign(static_cast<size_t>(rows) * row_to, 0);  // [B*KV, Lt, hd]
      const std::vector<int64_t> dims = cache_dims(to.batch, layer, to.cache_len);
      pjrt::download(plugin_, a.get(), src.data(), src.size());
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(dst.data() + static_cast<size_t>(r) * row_to,
                    src.data() + static_cast<size_t>(r) * row_from, row_from);
      b = client_.upload(dst.data(), cache_buffer_type(), dims, device);
      stats_.cache_copy_bytes += src.size() + dst.size();
    };
    for (size_t r = 0; r < from.k.size(); ++r) {
      TS_ASSERT(from.k[r].size() == to.k[r].size());
      for (size_t l = 0; l < from.k[r].size(); ++l) {
        copy(from.k[r][l], to.k[r][l], r, from.layers[l]);
        copy(from.v[r][l], to.v[r][l], r, from.layers[l]);
      }
    }
    // Linear-attention states do not depend on the cache length: copied as they are.
    to.linear.clear();
    to.linear.resize(from.linear.size());
    for (size_t r = 0; r < from.linear.size(); ++r)
      for (const auto& [layer, st] : from.linear[r]) {
        std::vector<float> host(static_cast<size_t>(shape_numel(st.shape)));
        pjrt::download(plugin_, st.buffer.get(), host.data(), host.size() * sizeof(float));
        to.linear[r][layer] = {client_.upload(host.data(), PJRT_Buffer_Type_F32, st.shape, r), st.shape};
        stats_.cache_copy_bytes += 2 * host.size() * sizeof(float);
      }
    // Growing caches are used with host-side sampling only (CausalLM::generate), so there is no sampler
    // state to copy.
    for (const auto& s : from.seen)
      if (s) fail("PJRT backend: a cache with in-step sampler state cannot grow (use the static cache)");
  }

  // Replica r's buffer for Cache argument `a`: a layer's K or V, or its linear-attention state (zeroed on
  // first use).
  BufferHandle& cache_arg(PjrtCache& c, int replica, const pjrt::StablehloArg& a) {
    if (a.which != pjrt::kLinearStateWhich) return c.at(replica, a.layer, a.which);
    PjrtCache::LinearState& state = c.linear.at(static_cast<size_t>(replica))[a.layer];
    if (!state.buffer) {
      const std::vector<float> zeros(static_cast<size_t>(shape_numel(a.shape)), 0.0f);
      state = {client_.upload(zeros.data(), PJRT_Buffer_Type_F32, a.shape, static_cast<size_t>(replica)),
               a.shape};
      stats_.setup_h2d_bytes += zeros.size() * sizeof(float);
    }
    TS_ASSERT(state.shape == a.shape, a.name, " is ", shape_str(state.shape), ", the step reads ",
              shape_str(a.shape));
    return state.buffer;
  }

  // Replica r's sampler state of `c` for a step whose graph reads it ([batch, vocab] f32), zeroed on first
  // use.
  BufferHandle& seen_state(PjrtCache& c, int replica, const Shape& shape) {
    BufferHandle& seen = c.seen.at(static_cast<size_t>(replica));
    if (!seen) {
      const std::vector<float> zeros(static_cast<size_t>(shape_numel(shape)), 0.0f);  // [B, V]
      seen = client_.upload(zeros.data(), PJRT_Buffer_Type_F32, shape, static_cast<size_t>(replica));
      stats_.setup_h2d_bytes += zeros.size() * sizeof(float);
    }
    return seen;
  }

  // A non-weight argument of a program that runs one piece of a step on device 0 (op by op, or a segment
  // between collectives): a step input is uploaded once per step (memoised in `uploaded`, by input kind); the
  // KV cache and sampler state are donated. `what`, `key` and `name` make the error message for an input of
  // the wrong size.
  PJRT_Buffer* bind_piece_arg(const StablehloArg& a, const StepView& in, PjrtCache& cache,
                              std::unordered_map<int, BufferHandle>& uploaded,
                              std::vector<BufferHandle*>& donated, const char* what,
                              const graph::ShapeKey& key, const std::string& name) {
    switch (a.kind) {
      case StablehloArg::Input: {
        auto& buf = uploaded[static_cast<int>(a.input)];
        if (!buf) {
          const auto& v = in[a.input];
          if (static_cast<int64_t>(v.size()) != a.shape[0])
            fail(what, " ", key.str(), ": input '", name, "' has ", v.size(), " values, expected ",
                 a.shape[0]);
          buf = client_.upload(v.data(), PJRT_Buffer_Type_S32, a.shape);
          stats_.h2d_bytes += v.size() * sizeof(int32_t);
        }
        return buf.get();
      }
      case StablehloArg::Cache:
        donated.push_back(&cache_arg(cache, 0, a));
        return donated.back()->get();
      case StablehloArg::Seen:
        donated.push_back(&seen_state(cache, 0, a.shape));
        return donated.back()->get();
      case StablehloArg::Weight:
        break;
    }
    TS_ASSERT(false, "bind_piece_arg: weights are bound by the caller");
    return nullptr;
  }

  std::vector<uintptr_t> cache_addresses(const DeviceCache& base) const override {
    const PjrtCache& c = own(base);
    std::vector<uintptr_t> out;
    for (size_t r = 0; r < c.k.size(); ++r)
      for (const auto* list : {&c.k[r], &c.v[r]})
        for (const auto& b : *list) {
          if (!b) continue;  // a layer without keys and values
          auto a = pjrt::make_args<PJRT_Buffer_UnsafePointer_Args>();
          a.buffer = b.get();
          PJRT_CALL(plugin_, Buffer_UnsafePointer, a);
          out.push_back(a.buffer_pointer);
        }
    return out;
  }

  const PjrtCache& own(const DeviceCache& c) const {
    auto* p = dynamic_cast<const PjrtCache*>(&c);
    if (!p || p->owner != this) fail("PJRT backend: the cache was created by another backend");
    return *p;
  }
  PjrtCache& own(DeviceCache& c) const {
    return const_cast<PjrtCache&>(own(static_cast<const DeviceCache&>(c)));
  }

  const Plugin& plugin() const { return plugin_; }
  const Client& client() const { return client_; }
  TransferCounters& stats() { return stats_; }
  // Compile timing, from any thread that compiles.
  void note_emit(double s) {
    std::lock_guard<std::mutex> lock(timing_mu_);
    timing_.emit_seconds += s;
  }
  void note_compile(double s, bool last = true) {
    std::lock_guard<std::mutex> lock(timing_mu_);
    timing_.compile_seconds += s;
    if (last) timing_.last_compile_seconds = s;
  }
  void note_compiled() {
    std::lock_guard<std::mutex> lock(timing_mu_);
    ++timing_.compiles;
  }
  Communicator& comm() const {
    TS_ASSERT(comm_, "no communicator");
    return *comm_;
  }

  std::unique_ptr<Executable> compile_op_by_op(const graph::Graph& g) override;
  int op_compiles() const override {
    std::lock_guard<std::mutex> lock(op_mu_);
    return static_cast<int>(op_cache_.size());
  }
  const WeightBuffer& weight(const std::string& name, int replica = 0) const {
    const auto& map = weights_.at(static_cast<size_t>(replica));
    auto it = map.find(name);
    if (it == map.end())
      fail("PJRT backend: weight '", name, "' was not bound",
           replica > 0 ? " for replica " + std::to_string(replica) : "", " (bind_weights first)");
    return it->second;
  }
  // The compiled single-op program with this text (compiled on first use; the backend keeps it, so the
  // pointer stays valid as long as the backend).
  PJRT_LoadedExecutable* op_executable(const std::string& text) {
    std::lock_guard<std::mutex> lock(op_mu_);
    auto it = op_cache_.find(text);
    if (it != op_cache_.end()) return it->second.get();
    auto t0 = clock_type::now();
    auto exe = client_.compile(text, pjrt::compile_options_proto(1, 1));
    note_compile(seconds_since(t0), /*last=*/false);
    return op_cache_.emplace(text, std::move(exe)).first->second.get();
  }
  // Segmented steps exchange activations through the communicator: one step at a time in this process, so
  // two threads' collectives never interleave (the order across ranks is the caller's: every rank must run
  // the same steps in the same order).
  std::mutex& collective_mutex() { return collective_mu_; }

  // The compiled program must return exactly its outputs + one buffer per state (aliasing needs the order).
  void check_outputs(const pjrt::LoadedExecutableHandle& exe, int expected, const graph::Graph& g) const {
    if (!PJRT_HAS(plugin_, LoadedExecutable_GetExecutable) || !PJRT_HAS(plugin_, Executable_NumOutputs))
      return;
    auto ge = pjrt::make_args<PJRT_LoadedExecutable_GetExecutable_Args>();
    ge.loaded_executable = exe.get();
    PJRT_CALL(plugin_, LoadedExecutable_GetExecutable, ge);
    pjrt::ExecutableHandle owned(&plugin_, ge.executable);
    auto no = pjrt::make_args<PJRT_Executable_NumOutputs_Args>();
    no.executable = owned.get();
    PJRT_CALL(plugin_, Executable_NumOutputs, no);
    if (static_cast<int>(no.num_outputs) != expected)
      fail("PJRT executable for ", g.key.str(), " has ", no.num_outputs, " outputs, expected ", expected,
           " (logits + one per cache)");
  }

  // Kernel packages: the PJRT implementation of a package is StableHLO for this plugin's platform, with XLA
  // FFI handlers where the plugin has the FFI extension.
  kernels::KernelTarget kernel_target() const override {
    kernels::KernelTarget t{"pjrt", info_.platform_name, 0, ""};
    if (plugin_.extension(PJRT_Extension_Type_FFI))
      t.ffi_platform = pjrt::ffi_platform_name(info_.platform_name);
    return t;
  }
  void use_kernels(std::shared_ptr<const kernels::KernelSet> set) override {
    // FFI handlers are registered before anything compiles (a custom call to an unregistered target fails
    // to compile).
    for (const auto& p : set->packages)
      for (const auto& h : p->ffi_handlers) {
        const std::string what = "kernel package " + p->name + " (" + p->ffi_library + ", " + h.symbol + ")";
        plugin_.register_ffi_handler(h.target, h.fn, pjrt::ffi_platform_name(info_.platform_name), what,
                                     [&] { check_ffi_target(h.target, what); });
      }
    splice_ =
        std::make_shared<const KernelSplice>(pjrt::make_kernel_splice(std::move(set), info_.platform_name));
  }
  // xla-cpu-pjrt 0.0.1's register_handler returns no error when XLA refuses a handler (e.g. one declaring a
  // newer XLA FFI API version than the plugin's runtime): a program calling the target then fails to compile.
  // So a one-op program calling `target` is compiled (not run) after each new registration, to name the
  // package if it was not taken.
  void check_ffi_target(const std::string& target, const std::string& what) {
    const std::string probe =
        "module @ffi_probe {\n  func.func public @main() -> tensor<1xf32> {\n    %0 = "
        "stablehlo.custom_call @" +
        target +
        "() {api_version = 4 : i32} : () -> tensor<1xf32>\n    return %0 : tensor<1xf32>\n  "
        "}\n}\n";
    try {
      client_.compile(probe, pjrt::compile_options_proto(1, 1));
    } catch (const Error& e) {
      std::string why = e.what();  // XLA's diagnostics may run over several lines: the message stays one
      std::replace(why.begin(), why.end(), '\n', ' ');
      fail(what, ": the plugin has no handler for FFI target ", target,
           " after registering it (the plugin drops a handler XLA refuses without an error, e.g. one built "
           "against a newer XLA FFI API than its runtime's): ",
           why);
    }
  }

  // The graph lowered with the kernel packages in use spliced in; a package that accepted a node but had no
  // function of its signature is noted once per signature (that node keeps the built-in lowering).
  StablehloProgram lower(const graph::Graph& g) const {
    StablehloProgram prog;
    if (kv_dtype_ == DType::F32) {
      prog = pjrt::lower_to_stablehlo(g, splice_.get());
    } else {  // the caches in their dtype: the program rounds what it writes and widens what it reads
      graph::Graph typed = g;
      for (graph::Node& n : typed.nodes)
        if (n.op == graph::Op::CacheState) n.dtype = kv_dtype_;
      prog = pjrt::lower_to_stablehlo(typed, splice_.get());
    }
    if (!prog.kernel_misses.empty()) {
      std::lock_guard<std::mutex> lock(misses_mu_);
      for (const std::string& m : prog.kernel_misses)
        if (noted_misses_.insert(m).second)
          log_note("kernel package ", m, ": no function of this signature, built-in lowering used");
    }
    return prog;
  }

  // PjrtSettings::dump_dir: writes each emitted module to <dir>/<key><suffix>.mlir for debugging.
  void dump(const graph::Graph& g, const StablehloProgram& prog, const std::string& suffix = "") const {
    if (settings_.dump_dir.empty()) return;
    std::string name = g.key.str() + suffix;
    for (char& ch : name)
      if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    const std::string path = settings_.dump_dir + "/" + name + ".mlir";
    std::ofstream out(path);
    out << prog.text;
    if (!out) log_warning("PJRT dump_dir: cannot write ", path);
  }

 private:
  pjrt::PjrtSettings settings_;
  Plugin& plugin_;
  Client client_;
  int replicas_ = 1;
  std::shared_ptr<Communicator> comm_;
  DType kv_dtype_ = DType::F32;  // the KV caches' element type (PjrtOptions::kv_dtype)
  pjrt::PlatformInfo info_;
  std::vector<std::unordered_map<std::string, WeightBuffer>> weights_;  // per replica
  TransferCounters stats_;
  mutable std::mutex timing_mu_;  // guards timing_
  CompileTiming timing_;
  mutable std::mutex op_mu_;                                                // guards op_cache_
  std::unordered_map<std::string, pjrt::LoadedExecutableHandle> op_cache_;  // single-op program text -> exe
  std::mutex collective_mu_;
  std::shared_ptr<const KernelSplice> splice_;  // kernel packages in use (LoadOptions::kernels); may be null
  mutable std::mutex misses_mu_;                // guards noted_misses_
  mutable std::set<std::string> noted_misses_;  // kernel signatures already noted as missing
};

// Runs a graph one op at a time (disable_compile). Per op: a one-node graph whose operands are placeholders
// (inputs and weights as themselves, KV caches / the seen mask as state arguments, intermediate values as
// f32 arguments named by position), lowered by the same emitter; its text is the op-cache key. Names are
// generic so that the same op in every layer shares one compiled program.
class PjrtOpByOpExecutable : public Executable {
 public:
  PjrtOpByOpExecutable(PjrtBackendImpl& be, graph::Graph g)
      : be_(be), g_(std::move(g)), checks_(pjrt_step_checks(g_, "PJRT op-by-op")) {
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const graph::Node& n = g_.nodes[i];
      if (n.op == graph::Op::Input || n.op == graph::Op::Weight || n.op == graph::Op::CacheState ||
          n.op == graph::Op::SamplerState)
        continue;
      steps_.push_back(lower_node(static_cast<int>(i)));
      steps_.back().exe = be_.op_executable(steps_.back().prog.text);  // compiled now: runs only read
    }
  }

  void run(const StepInputs& in, DeviceCache& cache, std::vector<float>& logits) const override {
    BufferHandle out = execute(in, cache);
    if (g_.at(g_.outputs[0]).dtype != DType::F32) fail("PJRT op-by-op: this graph samples; use run_tokens()");
    logits.resize(static_cast<size_t>(shape_numel(g_.at(g_.outputs[0]).shape)));  // [rows_out, vocab]
    pjrt::download(be_.plugin(), out.get(), logits.data(), logits.size() * sizeof(float));
    be_.stats().d2h_bytes += logits.size() * sizeof(float);
  }
  void run_tokens(const StepInputs& in, DeviceCache& cache, std::vector<int32_t>& tokens) const override {
    BufferHandle out = execute(in, cache);
    if (g_.at(g_.outputs[0]).dtype != DType::I32) fail("PJRT op-by-op: this graph returns logits; use run()");
    tokens.resize(static_cast<size_t>(shape_numel(g_.at(g_.outputs[0]).shape)));  // [batch] int32
    pjrt::download(be_.plugin(), out.get(), tokens.data(), tokens.size() * sizeof(int32_t));
    be_.stats().d2h_bytes += tokens.size() * sizeof(int32_t);
  }

 private:
  // Where a placeholder argument's buffer comes from at run time.
  struct Source {
    enum Kind { Weight, Value } kind = Value;
    std::string weight;  // Weight: the model weight's name
    int node = -1;       // Value: the node whose output it is
  };
  struct Step {
    int node = -1;
    StablehloProgram prog;
    PJRT_LoadedExecutable* exe = nullptr;             // owned by the backend's op cache
    std::unordered_map<std::string, Source> sources;  // placeholder weight name -> source
  };

  // The CacheState / SamplerState behind a state-valued node (CacheUpdate and MarkSeen chains), or -1.
  int state_root(int id) const {
    while (true) {
      const graph::Node& n = g_.at(id);
      if (n.op == graph::Op::CacheState || n.op == graph::Op::SamplerState) return id;
      if (n.op != graph::Op::CacheUpdate && n.op != graph::Op::MarkSeen) return -1;
      id = n.inputs[0];
    }
  }

  Step lower_node(int id) {
    const graph::Node& n = g_.at(id);
    graph::Graph mini;
    mini.key = g_.key;
    mini.rope_tables = g_.rope_tables;
    Step step;
    step.node = id;
    std::unordered_map<int, int> remap;  // operand node -> placeholder node
    std::vector<int> inputs;
    for (int operand : n.inputs) {
      if (!remap.count(operand)) {
        const graph::Node& o = g_.at(operand);
        graph::Node p;
        const int root = state_root(operand);
        const std::string name = "arg" + std::to_string(remap.size());
        if (o.op == graph::Op::Input) {
          p = o;
          p.name = "input";
        } else if (root >= 0) {
          p = g_.at(root);
          p.name = "state";
        } else if (o.op == graph::Op::Weight) {
          p = o;
          p.name = name;
          p.view = {};
          step.sources[name] = Source{Source::Weight, graph::weight_key(o), -1};
        } else {
          p = graph::Node{};
          p.op = graph::Op::Weight;
          p.name = name;
          p.shape = o.shape;
          p.dtype = o.dtype;
          step.sources[name] = Source{Source::Value, "", operand};
        }
        remap[operand] = mini.add(std::move(p));
      }
      inputs.push_back(remap[operand]);
    }
    graph::Node op = n;
    op.name = graph::op_name(n.op);
    op.inputs = inputs;
    mini.outputs = {mini.add(std::move(op))};
    step.prog = be_.lower(mini);
    return step;
  }

  BufferHandle execute(const StepInputs& in_base, DeviceCache& cache_base) const {
    PjrtCache& cache = be_.own(cache_base);
    check_step_cache(cache, checks_);
    check_step_inputs(in_base, checks_);
    const StepView in(in_base, g_.key, checks_.token_mask);
    std::vector<BufferHandle> values(g_.nodes.size());  // per node: its output on the device
    std::unordered_map<int, BufferHandle> uploaded;     // per input kind: this run's upload
    BufferHandle last;
    for (const Step& st : steps_) {
      std::vector<PJRT_Buffer*> args(st.prog.args.size(), nullptr);
      std::vector<BufferHandle*> donated;
      for (size_t i = 0; i < st.prog.args.size(); ++i) {
        const StablehloArg& a = st.prog.args[i];
        switch (a.kind) {
          case StablehloArg::Weight: {
            const Source src = placeholder_source(st.sources, a.name);
            args[i] = src.kind == Source::Weight ? be_.weight(src.weight).buffer.get()
                                                 : values[static_cast<size_t>(src.node)].get();
            TS_ASSERT(args[i], "op-by-op: operand of ", g_.at(st.node).name, " not computed");
            break;
          }
          default:
            args[i] = be_.bind_piece_arg(a, in, cache, uploaded, donated, "PJRT op-by-op", g_.key,
                                         g_.at(st.node).name);
        }
      }
      BufferHandle out = std::move(execute_loaded(be_.plugin(), st.exe, {args}, {donated},
                                                  st.prog.num_outputs, st.prog.num_results)[0]);
      if (st.node == g_.outputs[0])
        last = std::move(out);
      else
        values[static_cast<size_t>(st.node)] = std::move(out);
    }
    ++be_.stats().runs;
    return last;
  }

  PjrtBackendImpl& be_;
  graph::Graph g_;
  StepChecks checks_;
  std::vector<Step> steps_;  // one per computing node, in graph order
};

std::unique_ptr<Executable> PjrtBackendImpl::compile_op_by_op(const graph::Graph& g) {
  if (g.key.tp_size > 1)
    fail("PJRT backend: disable_compile (op by op) does not run tensor-parallel graphs (", g.key.str(),
         "); compile the whole step instead");
  return std::make_unique<PjrtOpByOpExecutable>(*this, g);
}

void PjrtExecutable::check_inputs(const StepView& in) const {
  for (const StablehloArg& a : prog_.args) {
    if (a.kind != StablehloArg::Input) continue;
    const auto& v = in[a.input];
    if (static_cast<int64_t>(v.size()) != a.shape[0])
      fail("PJRT step ", key_.str(), ": input '", a.name, "' has ", v.size(), " values, expected ",
           a.shape[0]);
  }
}

PJRT_Buffer* PjrtExecutable::all_allowed(size_t d, const StablehloArg& a) const {
  std::lock_guard<std::mutex> lk(ones_mu_);
  if (ones_.size() <= d) ones_.resize(d + 1);
  if (!ones_[d]) {
    const std::vector<int32_t> ones(static_cast<size_t>(a.shape[0]), -1);
    ones_[d] = be_.client().upload(ones.data(), PJRT_Buffer_Type_S32, a.shape, d);
  }
  return ones_[d].get();
}

BufferHandle PjrtExecutable::execute(const StepInputs& in, DeviceCache& cache_base) const {
  const Plugin& p = be_.plugin();
  PjrtCache& cache = be_.own(cache_base);
  check_step_cache(cache, checks_);
  check_step_inputs(in, checks_);
  const StepView view(in, key_, checks_.token_mask);
  check_inputs(view);

  // Per device: bound weights, freshly uploaded step inputs, the states (donated).
  const size_t devices = weight_args_.size();
  std::vector<BufferHandle> uploads;
  uploads.reserve(prog_.args.size() * devices);
  std::vector<std::vector<PJRT_Buffer*>> args(devices, std::vector<PJRT_Buffer*>(prog_.args.size(), nullptr));
  std::vector<std::vector<BufferHandle*>> donated(devices);
  for (size_t d = 0; d < devices; ++d) {
    const int r = static_cast<int>(d);
    for (size_t i = 0; i < prog_.args.size(); ++i) {
      const StablehloArg& a = prog_.args[i];
      switch (a.kind) {
        case StablehloArg::Weight:
          args[d][i] = weight_args_[d][i];
          break;
        case StablehloArg::Input: {
          if (a.input == graph::InputKind::TokenMask && in.token_mask.empty()) {
            args[d][i] = all_allowed(d, a);  // no row constrained: the device's own all-ones mask
            break;
          }
          const auto& v = view[a.input];
          uploads.push_back(be_.client().upload(v.data(), PJRT_Buffer_Type_S32, a.shape, d));
          be_.stats().h2d_bytes += v.size() * sizeof(int32_t);
          args[d][i] = uploads.back().get();
          break;
        }
        case StablehloArg::Cache:
          donated[d].push_back(&be_.cache_arg(cache, r, a));
          args[d][i] = donated[d].back()->get();
          break;
        case StablehloArg::Seen:
          donated[d].push_back(&be_.seen_state(cache, r, a.shape));
          args[d][i] = donated[d].back()->get();
          break;
      }
    }
  }

  auto out = execute_loaded(p, exe_.get(), args, donated, prog_.num_outputs, prog_.num_results);
  ++be_.stats().runs;
  return std::move(out[0]);
}

void PjrtExecutable::run(const StepInputs& in, DeviceCache& cache, std::vector<float>& logits) const {
  if (prog_.tokens) fail("PJRT step ", key_.str(), ": this step samples in the program; use run_tokens()");
  BufferHandle out = execute(in, cache);
  logits.resize(static_cast<size_t>(shape_numel(prog_.logits_shape)));  // [rows_out, vocab]
  pjrt::download(be_.plugin(), out.get(), logits.data(), logits.size() * sizeof(float));
  be_.stats().d2h_bytes += logits.size() * sizeof(float);
}

void PjrtExecutable::run_tokens(const StepInputs& in, DeviceCache& cache,
                                std::vector<int32_t>& tokens) const {
  if (!prog_.tokens) fail("PJRT step ", key_.str(), ": run_tokens() needs a graph with in-step sampling");
  BufferHandle out = execute(in, cache);
  tokens.resize(static_cast<size_t>(shape_numel(prog_.logits_shape)));  // [batch] int32
  pjrt::download(be_.plugin(), out.get(), tokens.data(), tokens.size() * sizeof(int32_t));
  be_.stats().d2h_bytes += tokens.size() * sizeof(int32_t);
}

// A tensor-parallel graph run by one rank of several processes (one device each): the graph is cut at its
// AllReduce / AllGather nodes into segments, each lowered as its own program; between segments the
// collective's input is read to the host, combined through the communicator and written back. Segments are
// lowered with generic names (weights and carried values as positional placeholders, states as "state"), so
// the segments of different layers share one program text and are compiled once.
class PjrtSegmentedExecutable : public Executable {
 public:
  PjrtSegmentedExecutable(PjrtBackendImpl& be, const graph::Graph& g)
      : be_(be), g_(g), checks_(pjrt_step_checks(g, "PJRT step")) {
    split();
  }

  // The distinct segment program texts, in first-use order (what the on-disk cache identifies and stores).
  const std::vector<std::string>& texts() const { return texts_; }

  void compile_all() {
    for (const std::string& text : texts_) {
      auto t0 = clock_type::now();
      auto exe = be_.client().compile(text, pjrt::compile_options_proto(1, 1));
      be_.note_compile(seconds_since(t0));
      programs_.push_back(std::move(exe));
    }
    link();
  }
  void load_all(const std::vector<std::string>& bytes) {
    if (bytes.size() != texts_.size())
      fail("PJRT segmented executable for ", g_.key.str(), ": ", bytes.size(),
           " serialized programs, expected ", texts_.size());
    for (const std::string& b : bytes) programs_.push_back(be_.client().deserialize(b));
    link();
  }
  std::vector<std::string> serialize_all() const {
    std::vector<std::string> out;
    for (const auto& p : programs_) out.push_back(pjrt::serialize(be_.plugin(), p.get()));
    return out;
  }
  const PjrtBackendImpl* backend() const { return &be_; }

  void run(const StepInputs& in, DeviceCache& cache, std::vector<float>& logits) const override {
    if (g_.at(g_.outputs[0]).dtype != DType::F32)
      fail("PJRT step ", g_.key.str(), ": this step samples; use run_tokens()");
    logits.resize(static_cast<size_t>(shape_numel(g_.at(g_.outputs[0]).shape)));  // [rows_out, vocab]
    execute(in, cache, logits.data(), logits.size() * sizeof(float));
  }
  void run_tokens(const StepInputs& in, DeviceCache& cache, std::vector<int32_t>& tokens) const override {
    if (g_.at(g_.outputs[0]).dtype != DType::I32)
      fail("PJRT step ", g_.key.str(), ": run_tokens() needs a graph with in-step sampling");
    tokens.resize(static_cast<size_t>(shape_numel(g_.at(g_.outputs[0]).shape)));  // [batch] int32
    execute(in, cache, tokens.data(), tokens.size() * sizeof(int32_t));
  }

 private:
  struct Source {
    enum Kind { Weight, Value } kind = Value;
    std::string weight;  // Weight: graph::weight_key of the model weight
    int node = -1;       // Value: the node whose output is carried in
  };
  struct Segment {
    std::vector<int> nodes;    // computing nodes, graph order
    std::vector<int> outputs;  // nodes whose values later items read (results 0 .. outputs.size()-1)
    StablehloProgram prog;
    std::vector<Source> sources;  // per argument (Weight arguments only)
    size_t program = 0;           // index into texts_ / programs_
    PJRT_LoadedExecutable* exe = nullptr;
  };
  struct Item {
    int segment = -1;     // >= 0: run segments_[segment]
    int collective = -1;  // else: the AllReduce / AllGather node
  };

  static bool is_leaf(graph::Op op) {
    return op == graph::Op::Input || op == graph::Op::Weight || op == graph::Op::CacheState ||
           op == graph::Op::SamplerState;
  }
  static bool is_collective(graph::Op op) { return op == graph::Op::AllReduce || op == graph::Op::AllGather; }

  void split() {
    std::vector<int> seg_of(g_.nodes.size(), -1);
    std::vector<int> current;
    auto flush = [&] {
      if (current.empty()) return;
      for (int id : current) seg_of[static_cast<size_t>(id)] = static_cast<int>(segments_.size());
      items_.push_back({static_cast<int>(segments_.size()), -1});
      segments_.push_back(Segment{current, {}, {}, {}, 0, nullptr});
      current.clear();
    };
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const graph::Op op = g_.nodes[i].op;
      if (is_leaf(op)) continue;
      if (is_collective(op)) {
        flush();
        items_.push_back({-1, static_cast<int>(i)});
      } else {
        current.push_back(static_cast<int>(i));
      }
    }
    flush();
    // A segment's outputs: its values read outside it (by later segments or collectives), and the graph's
    // output.
    std::vector<std::vector<int>> outs(segments_.size());
    for (size_t j = 0; j < g_.nodes.size(); ++j) {
      if (is_leaf(g_.nodes[j].op)) continue;
      for (int in : g_.nodes[j].inputs) {
        const int s = seg_of[static_cast<size_t>(in)];
        if (s >= 0 && s != seg_of[j]) outs[static_cast<size_t>(s)].push_back(in);
      }
    }
    const int final_seg = seg_of[static_cast<size_t>(g_.outputs[0])];
    if (final_seg >= 0) outs[static_cast<size_t>(final_seg)].push_back(g_.outputs[0]);
    for (size_t s = 0; s < segments_.size(); ++s) {
      auto& o = outs[s];
      std::sort(o.begin(), o.end());
      o.erase(std::unique(o.begin(), o.end()), o.end());
      // The graph's output goes first (result 0), so a sampling segment reads like a whole step.
      if (static_cast<int>(s) == final_seg) {
        o.erase(std::find(o.begin(), o.end(), g_.outputs[0]));
        o.insert(o.begin(), g_.outputs[0]);
      }
      segments_[s].outputs = o;
      lower(segments_[s]);
      auto it = std::find(texts_.begin(), texts_.end(), segments_[s].prog.text);
      segments_[s].program = static_cast<size_t>(it - texts_.begin());
      if (it == texts_.end()) texts_.push_back(segments_[s].prog.text);
    }
  }

  void lower(Segment& seg) {
    graph::Graph mini;
    mini.key = g_.key;
    mini.key.tp_rank = 0;  // no collectives inside: an ordinary single-device program
    mini.key.tp_size = 1;
    mini.rope_tables = g_.rope_tables;
    std::unordered_map<int, int> remap;               // graph node -> mini node
    std::unordered_map<std::string, Source> sources;  // placeholder name -> source
    int placeholders = 0;
    for (int id : seg.nodes) {
      graph::Node n = g_.at(id);
      for (int& operand : n.inputs) {
        auto it = remap.find(operand);
        if (it == remap.end()) {
          const graph::Node& o = g_.at(operand);
          graph::Node p;
          if (o.op == graph::Op::Input) {
            p = o;
          } else if (o.op == graph::Op::CacheState || o.op == graph::Op::SamplerState) {
            p = o;
            p.name = "state";
          } else if (o.op == graph::Op::Weight) {
            p = o;
            p.name = "w" + std::to_string(placeholders++);
            p.view = {};
            sources[p.name] = Source{Source::Weight, graph::weight_key(o), -1};
          } else {  // computed by an earlier segment or a collective
            p = graph::Node{};
            p.op = graph::Op::Weight;
            p.name = "x" + std::to_string(placeholders++);
            p.shape = o.shape;
            p.dtype = o.dtype;
            sources[p.name] = Source{Source::Value, "", operand};
          }
          it = remap.emplace(operand, mini.add(std::move(p))).first;
        }
        operand = it->second;
      }
      n.name = graph::op_name(n.op);
      remap[id] = mini.add(std::move(n));
    }
    for (int o : seg.outputs) mini.outputs.push_back(remap.at(o));
    seg.prog = be_.lower(mini);
    seg.sources.assign(seg.prog.args.size(), Source{});
    for (size_t i = 0; i < seg.prog.args.size(); ++i)
      if (seg.prog.args[i].kind == StablehloArg::Weight)
        seg.sources[i] = placeholder_source(sources, seg.prog.args[i].name);
  }

  // Resolves each segment's program and checks its weights are bound with the shapes the program reads.
  void link() {
    for (Segment& seg : segments_) {
      seg.exe = programs_.at(seg.program).get();
      for (size_t i = 0; i < seg.prog.args.size(); ++i) {
        const StablehloArg& a = seg.prog.args[i];
        if (a.kind != StablehloArg::Weight || seg.sources[i].kind != Source::Weight) continue;
        const WeightBuffer& w = be_.weight(seg.sources[i].weight);
        if (w.dtype != a.dtype || w.shape != a.shape)
          fail("PJRT backend: weight '", seg.sources[i].weight, "' is ", dtype_name(w.dtype), " ",
               shape_str(w.shape), ", the graph for ", g_.key.str(), " reads ", dtype_name(a.dtype), " ",
               shape_str(a.shape));
      }
    }
  }

  // Runs every item; the graph's output (computed on the device, or by the last collective on the host) is
  // copied to `out` (`bytes` bytes).
  void execute(const StepInputs& in_base, DeviceCache& cache_base, void* out, size_t bytes) const {
    PjrtCache& cache = be_.own(cache_base);
    check_step_cache(cache, checks_);
    check_step_inputs(in_base, checks_);
    const StepView in(in_base, g_.key, checks_.token_mask);
    std::lock_guard<std::mutex> one_step(be_.collective_mutex());
    TransferCounters& st = be_.stats();
    const Plugin& p = be_.plugin();
    std::vector<BufferHandle> values(g_.nodes.size());  // per node: its value on the device
    std::unordered_map<int, BufferHandle> uploaded;     // per input kind: this step's upload
    std::vector<float> host, gathered;
    bool done = false;
    for (const Item& item : items_) {
      if (item.segment >= 0) {
        const Segment& seg = segments_[static_cast<size_t>(item.segment)];
        std::vector<PJRT_Buffer*> args(seg.prog.args.size(), nullptr);
        std::vector<BufferHandle*> donated;
        for (size_t i = 0; i < seg.prog.args.size(); ++i) {
          const StablehloArg& a = seg.prog.args[i];
          switch (a.kind) {
            case StablehloArg::Weight: {
              const Source& src = seg.sources[i];
              args[i] = src.kind == Source::Weight ? be_.weight(src.weight).buffer.get()
                                                   : values[static_cast<size_t>(src.node)].get();
              TS_ASSERT(args[i], "segmented step: value of ", g_.at(src.node).name, " not computed");
              break;
            }
            default:
              args[i] = be_.bind_piece_arg(a, in, cache, uploaded, donated, "PJRT step", g_.key, a.name);
          }
        }
        auto results =
            execute_loaded(p, seg.exe, {args}, {donated}, seg.prog.num_outputs, seg.prog.num_results);
        for (size_t j = 0; j < seg.outputs.size(); ++j)
          values[static_cast<size_t>(seg.outputs[j])] = std::move(results[j]);
        continue;
      }
      // A collective: device -> host, combine across the ranks, host -> device.
      const graph::Node& n = g_.at(item.collective);
      const graph::Node& x = g_.at(n.inputs[0]);
      const int64_t rows = x.shape[0], c = x.shape[1], tp = g_.key.tp_size;
      host.resize(static_cast<size_t>(rows * c));  // [rows, c]
      BufferHandle& src = values[static_cast<size_t>(n.inputs[0])];
      TS_ASSERT(src, "segmented step: input of ", n.name, " not computed");
      pjrt::download(p, src.get(), host.data(), host.size() * sizeof(float));
      st.d2h_bytes += host.size() * sizeof(float);
      st.collective_bytes += host.size() * sizeof(float);
      const std::vector<float>* result = &host;
      if (n.op == graph::Op::AllReduce) {
        be_.comm().all_reduce_sum(host.data(), host.size());
      } else {
        // Gathered rank-major ([tp][rows][c]), then interleaved into [rows][tp * c].
        std::vector<float> ranks(static_cast<size_t>(tp * rows * c));
        be_.comm().all_gather(host.data(), host.size(), ranks.data());
        gathered.resize(ranks.size());
        for (int64_t r = 0; r < tp; ++r)
          for (int64_t i = 0; i < rows; ++i)
            std::memcpy(gathered.data() + (i * tp + r) * c, ranks.data() + (r * rows + i) * c,
                        static_cast<size_t>(c) * sizeof(float));
        result = &gathered;
      }
      if (item.collective == g_.outputs[0]) {  // the logits: already on the host
        TS_ASSERT(result->size() * sizeof(float) == bytes, "segmented step: output of ", result->size(),
                  " floats");
        std::memcpy(out, result->data(), bytes);
        done = true;
        continue;
      }
      values[static_cast<size_t>(item.collective)] =
          be_.client().upload(result->data(), PJRT_Buffer_Type_F32, n.shape);
      st.h2d_bytes += result->size() * sizeof(float);
      st.collective_bytes += result->size() * sizeof(float);
    }
    if (!done) {
      BufferHandle& final = values[static_cast<size_t>(g_.outputs[0])];
      TS_ASSERT(final, "segmented step: output not computed");
      pjrt::download(p, final.get(), out, bytes);
      st.d2h_bytes += bytes;
    }
    ++st.runs;
  }

  PjrtBackendImpl& be_;
  graph::Graph g_;
  StepChecks checks_;
  std::vector<Segment> segments_;
  std::vector<Item> items_;
  std::vector<std::string> texts_;                      // distinct segment programs
  std::vector<pjrt::LoadedExecutableHandle> programs_;  // compiled, same order as texts_
};

// The on-disk form of a segmented executable: "tessera-segments <count>\n" then per program
// "<size>\n<bytes>".
std::string pack_segments(const std::vector<std::string>& parts) {
  std::string out = "tessera-segments " + std::to_string(parts.size()) + "\n";
  for (const std::string& p : parts) out += std::to_string(p.size()) + "\n" + p;
  return out;
}
std::vector<std::string> unpack_segments(const std::string& bytes) {
  auto bad = [] { fail("PJRT backend: corrupt segmented executable bytes"); };
  size_t pos = 0;
  auto number = [&]() -> size_t {
    const size_t nl = bytes.find('\n', pos);
    if (nl == std::string::npos || nl == pos || nl - pos > 19) bad();
    size_t v = 0;
    for (size_t i = pos; i < nl; ++i) {
      if (bytes[i] < '0' || bytes[i] > '9') bad();
      v = v * 10 + static_cast<size_t>(bytes[i] - '0');
    }
    pos = nl + 1;
    return v;
  };
  const std::string magic = "tessera-segments ";
  if (bytes.compare(0, magic.size(), magic) != 0) bad();
  pos = magic.size();
  const size_t count = number();
  if (count > bytes.size()) bad();
  std::vector<std::string> parts;
  for (size_t i = 0; i < count; ++i) {
    const size_t n = number();
    if (n > bytes.size() - pos) bad();
    parts.push_back(bytes.substr(pos, n));
    pos += n;
  }
  if (pos != bytes.size()) bad();
  return parts;
}

std::unique_ptr<Executable> PjrtBackendImpl::compile(const graph::Graph& g) {
  if (segmented(g)) {
    auto t0 = clock_type::now();
    auto exe = std::make_unique<PjrtSegmentedExecutable>(*this, g);
    note_emit(seconds_since(t0));
    exe->compile_all();
    note_compiled();
    return exe;
  }
  const int replicas = program_replicas(g);
  auto t0 = clock_type::now();
  StablehloProgram prog = lower(g);
  note_emit(seconds_since(t0));
  dump(g, prog);
  auto weight_args = bind_weight_args(prog, g, replicas);
  auto t1 = clock_type::now();
  auto exe = client_.compile(prog.text, options_for(replicas));
  note_compile(seconds_since(t1));
  note_compiled();
  check_outputs(exe, prog.num_results, g);
  return std::make_unique<PjrtExecutable>(*this, g, std::move(prog), std::move(exe), std::move(weight_args));
}

std::string PjrtBackendImpl::serialize(const Executable& base) const {
  if (auto* seg = dynamic_cast<const PjrtSegmentedExecutable*>(&base)) {
    if (seg->backend() != this) fail("PJRT backend: serialize() of an executable from another backend");
    return pack_segments(seg->serialize_all());
  }
  auto* exe = dynamic_cast<const PjrtExecutable*>(&base);
  if (!exe || exe->backend() != this) fail("PJRT backend: serialize() of an executable from another backend");
  return pjrt::serialize(plugin_, exe->loaded());
}

std::string PjrtBackendImpl::program_identity(const graph::Graph& g) {
  if (segmented(g)) {
    std::string id = "segments (host collectives over " + std::to_string(g.key.tp_size) + " ranks)\n";
    const PjrtSegmentedExecutable segments(*this, g);
    for (const std::string& t : segments.texts()) id += t;
    return id + "\ncompile options: " + pjrt::compile_options_proto(1, 1);
  }
  return lower(g).text + "\ncompile options: " + options_for(program_replicas(g));
}

std::unique_ptr<Executable> PjrtBackendImpl::load_serialized(const graph::Graph& g,
                                                             const std::string& bytes) {
  if (segmented(g)) {
    auto exe = std::make_unique<PjrtSegmentedExecutable>(*this, g);
    exe->load_all(unpack_segments(bytes));
    return exe;
  }
  StablehloProgram prog = lower(g);  // the signature (cheap: no compile)
  auto weight_args = bind_weight_args(prog, g, program_replicas(g));
  auto exe = client_.deserialize(bytes);
  check_outputs(exe, prog.num_results, g);
  return std::make_unique<PjrtExecutable>(*this, g, std::move(prog), std::move(exe), std::move(weight_args));
}

}  // namespace

std::unique_ptr<PjrtBackend> make_pjrt_backend(const std::string& device, const PjrtOptions& options) {
  if (!is_pjrt_device(device))
    fail("unknown PJRT device '", device, "' (expected xla-cpu, tpu, cuda or pjrt:/path/to/plugin.so)");
  return std::make_unique<PjrtBackendImpl>(device, options);
}

#else  // !TESSERA_HAVE_PJRT

std::unique_ptr<PjrtBackend> make_pjrt_backend(const std::string& device, const PjrtOptions&) {
  fail("device '", device,
       "': this build has no PJRT support: run scripts/setup.sh (installs xla-cpu-pjrt) and rebuild");
}

#endif

}  // namespace tessera::backends
