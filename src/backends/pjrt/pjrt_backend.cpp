// backends::Backend on a PJRT plugin. Per step: upload the four small step inputs, execute with the KV
// caches donated (they come back as the aliased outputs, same device memory), download the logits. Weights
// and caches never cross to the host during a step; TransferStats counts what does.
#include "backends/pjrt/pjrt_backend.h"

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <unordered_map>

#include "backends/pjrt/pjrt_api.h"
#include "backends/pjrt/stablehlo_emitter.h"
#include "tessera/error.h"

namespace tessera::backends {

bool is_pjrt_device(const std::string& device) {
  return device == "xla-cpu" || device == "tpu" || device == "cuda" || device.rfind("pjrt:", 0) == 0;
}

#if TESSERA_HAVE_PJRT
namespace {

using pjrt::BufferHandle;
using pjrt::Client;
using pjrt::Plugin;
using pjrt::StablehloArg;
using pjrt::StablehloProgram;
using clock_type = std::chrono::steady_clock;

PJRT_Buffer_Type buffer_type(DType dt) {
  switch (dt) {
    case DType::F32: return PJRT_Buffer_Type_F32;
    case DType::BF16: return PJRT_Buffer_Type_BF16;
    case DType::F16: return PJRT_Buffer_Type_F16;
    case DType::I32: return PJRT_Buffer_Type_S32;
    case DType::I64: return PJRT_Buffer_Type_S64;
  }
  return PJRT_Buffer_Type_INVALID;
}

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

class PjrtCache : public DeviceCache {
 public:
  // k[l], v[l]: device buffers f32 [batch, kv_heads, cache_len, head_dim]
  std::vector<BufferHandle> k, v;
  BufferHandle seen;  // sampler state f32 [batch, vocab]; created zeroed by the first sampling step
  int64_t kv_heads = 0, head_dim = 0;
  const void* owner = nullptr;  // the backend that created it

  BufferHandle& at(int layer, int which) {
    auto& list = which == 0 ? k : v;
    TS_ASSERT(layer >= 0 && static_cast<size_t>(layer) < list.size(), "cache layer ", layer, " of ", list.size());
    return list[static_cast<size_t>(layer)];
  }
};

struct WeightBuffer {
  BufferHandle buffer;
  DType dtype;
  Shape shape;
};

class PjrtBackendImpl;

const std::vector<int32_t>& step_input(const StepInputs& in, graph::InputKind kind) {
  switch (kind) {
    case graph::InputKind::TokenIds: return in.ids;
    case graph::InputKind::Positions: return in.positions;
    case graph::InputKind::Slots: return in.slots;
    case graph::InputKind::KvBegin: return in.kv_begin;
    case graph::InputKind::SeenFrom: return in.seen_from;
    case graph::InputKind::SampleParams: return in.sample_params;
  }
  return in.ids;
}

// Executes `exe` on one device; the buffers in `donated` (the arguments aliased to results 1, 2, ...) are
// replaced by those results. Returns result 0.
BufferHandle execute_loaded(const Plugin& p, PJRT_LoadedExecutable* exe, std::vector<PJRT_Buffer*>& args,
                            const std::vector<BufferHandle*>& donated, int num_results) {
  std::vector<PJRT_Buffer*> outs(static_cast<size_t>(num_results), nullptr);
  PJRT_Buffer** out_list = outs.data();
  PJRT_Buffer* const* arg_list = args.data();
  PJRT_Event* done = nullptr;
  PJRT_ExecuteOptions opts = pjrt::make_execute_options();
  auto ex = pjrt::make_args<PJRT_LoadedExecutable_Execute_Args>();
  ex.executable = exe;
  ex.options = &opts;
  ex.argument_lists = &arg_list;
  ex.num_devices = 1;
  ex.num_args = args.size();
  ex.output_lists = &out_list;
  ex.device_complete_events = &done;
  PJRT_CALL(p, LoadedExecutable_Execute, ex);
  // Take ownership of every output at once; the donated state buffers are replaced by their aliases.
  std::vector<BufferHandle> results;
  for (PJRT_Buffer* b : outs) results.emplace_back(&p, b);
  for (size_t i = 0; i < donated.size(); ++i) *donated[i] = std::move(results[1 + i]);
  pjrt::await(p, pjrt::EventHandle(&p, done), "PJRT execute");
  return std::move(results[0]);
}

class PjrtExecutable : public Executable {
 public:
  PjrtExecutable(PjrtBackendImpl& be, const graph::ShapeKey& key, StablehloProgram prog,
                 pjrt::LoadedExecutableHandle exe, std::vector<PJRT_Buffer*> weight_args)
      : be_(be), key_(key), prog_(std::move(prog)), exe_(std::move(exe)), weight_args_(std::move(weight_args)) {}

  void run(const StepInputs& in, DeviceCache& cache, std::vector<float>& logits) override;
  void run_tokens(const StepInputs& in, DeviceCache& cache, std::vector<int32_t>& tokens) override;
  PJRT_LoadedExecutable* loaded() const { return exe_.get(); }
  const PjrtBackendImpl* backend() const { return &be_; }

 private:
  const std::vector<int32_t>& input(const StepInputs& in, const StablehloArg& a) const;
  void check_inputs(const StepInputs& in) const;
  // Uploads the inputs, executes with the states donated, and returns result 0 (logits or token ids).
  BufferHandle execute(const StepInputs& in, DeviceCache& cache);

  PjrtBackendImpl& be_;
  graph::ShapeKey key_;
  StablehloProgram prog_;
  pjrt::LoadedExecutableHandle exe_;
  std::vector<PJRT_Buffer*> weight_args_;  // per argument: the weight buffer, or null for inputs/caches
};

class PjrtBackendImpl : public PjrtBackend {
 public:
  PjrtBackendImpl(const std::string& device, const PjrtOptions& opt)
      : plugin_(Plugin::load(pjrt::find_plugin(device))),
        client_(plugin_, device == "xla-cpu" ? opt.device_count : 0) {
    info_.device = device;
    info_.plugin_path = plugin_.path();
    info_.api_version = plugin_.api_version();
    info_.header_api_version = std::to_string(PJRT_API_MAJOR) + "." + std::to_string(PJRT_API_MINOR);
    info_.platform_name = client_.platform_name();
    info_.platform_version = client_.platform_version();
    info_.attributes = plugin_.attributes();
    info_.devices = client_.describe_devices();
  }

  std::string name() const override { return info_.device; }
  bool supports_op(graph::Op op) const override { return op != graph::Op::kCount; }
  const pjrt::PlatformInfo& platform() const override { return info_; }
  TransferStats transfer_stats() const override { return stats_; }
  void reset_transfer_stats() override { stats_ = {}; }
  CompileTiming compile_timing() const override { return timing_; }

  void bind_weights(WeightMap weights) override {
    weights_.clear();
    for (auto& [name, t] : weights) {
      if (buffer_type(t.dtype) == PJRT_Buffer_Type_INVALID) fail("weight ", name, ": unsupported dtype");
      BufferHandle b = client_.upload(t.data, buffer_type(t.dtype), t.shape);
      stats_.setup_h2d_bytes += t.nbytes();
      weights_.emplace(name, WeightBuffer{std::move(b), t.dtype, t.shape});
    }
    // The host tensors are dropped here: the device copies are the only ones kept.
  }

  std::unique_ptr<Executable> compile(const graph::Graph& g) override {
    auto t0 = clock_type::now();
    StablehloProgram prog = pjrt::lower_to_stablehlo(g);
    timing_.emit_seconds += seconds_since(t0);
    dump(g, prog);
    std::vector<PJRT_Buffer*> weight_args = bind_weight_args(prog, g);
    auto t1 = clock_type::now();
    auto exe = client_.compile(prog.text, pjrt::compile_options_proto(1, 1));
    timing_.last_compile_seconds = seconds_since(t1);
    timing_.compile_seconds += timing_.last_compile_seconds;
    ++timing_.compiles;
    check_outputs(exe, prog.num_results, g);
    return std::make_unique<PjrtExecutable>(*this, g.key, std::move(prog), std::move(exe), std::move(weight_args));
  }

  std::string serialize(const Executable& base) const override {
    auto* exe = dynamic_cast<const PjrtExecutable*>(&base);
    if (!exe || exe->backend() != this) fail("PJRT backend: serialize() of an executable from another backend");
    return pjrt::serialize(plugin_, exe->loaded());
  }

  // The program text and the compile options; the compiler is compiler_identity().
  std::string program_identity(const graph::Graph& g) override {
    return pjrt::lower_to_stablehlo(g).text + "\ncompile options: " + pjrt::compile_options_proto(1, 1);
  }
  std::string compiler_identity() const override {
    return "platform " + info_.platform_name + " " + info_.platform_version + "; PJRT API " + info_.api_version +
           "; device " + (info_.devices.empty() ? std::string("?") : info_.devices[0].kind);
  }

  std::unique_ptr<Executable> load_serialized(const graph::Graph& g, const std::string& bytes) override {
    StablehloProgram prog = pjrt::lower_to_stablehlo(g);  // the signature (cheap: no compile)
    std::vector<PJRT_Buffer*> weight_args = bind_weight_args(prog, g);
    auto exe = client_.deserialize(bytes);
    check_outputs(exe, prog.num_results, g);
    return std::make_unique<PjrtExecutable>(*this, g.key, std::move(prog), std::move(exe), std::move(weight_args));
  }

  // Per argument of `prog`: the bound weight's buffer, or null for step inputs and caches.
  std::vector<PJRT_Buffer*> bind_weight_args(const StablehloProgram& prog, const graph::Graph& g) const {
    std::vector<PJRT_Buffer*> weight_args(prog.args.size(), nullptr);
    for (size_t i = 0; i < prog.args.size(); ++i) {
      const StablehloArg& a = prog.args[i];
      if (a.kind != StablehloArg::Weight) continue;
      auto it = weights_.find(a.name);
      if (it == weights_.end()) fail("PJRT backend: weight '", a.name, "' was not bound (bind_weights first)");
      if (it->second.dtype != a.dtype || it->second.shape != a.shape)
        fail("PJRT backend: weight '", a.name, "' is ", dtype_name(it->second.dtype), " ", shape_str(it->second.shape),
             ", the graph for ", g.key.str(), " reads ", dtype_name(a.dtype), " ", shape_str(a.shape));
      weight_args[i] = it->second.buffer.get();
    }
    return weight_args;
  }

  std::unique_ptr<DeviceCache> create_cache(int64_t layers, int64_t batch, int64_t kv_heads, int64_t cache_len,
                                            int64_t head_dim) override {
    auto c = std::make_unique<PjrtCache>();
    c->batch = batch;
    c->cache_len = cache_len;
    c->kv_heads = kv_heads;
    c->head_dim = head_dim;
    c->owner = this;
    const std::vector<int64_t> dims{batch, kv_heads, cache_len, head_dim};
    const std::vector<float> zeros(static_cast<size_t>(shape_numel(dims)), 0.0f);  // [B, KV, L, hd]
    for (int64_t l = 0; l < layers; ++l) {
      c->k.push_back(client_.upload(zeros.data(), PJRT_Buffer_Type_F32, dims));
      c->v.push_back(client_.upload(zeros.data(), PJRT_Buffer_Type_F32, dims));
      stats_.setup_h2d_bytes += 2 * zeros.size() * sizeof(float);
    }
    return c;
  }

  // Through the host: only used when a dynamic cache grows (once per 64 tokens), never per step.
  void copy_cache(const DeviceCache& from_base, DeviceCache& to_base) override {
    const PjrtCache& from = own(from_base);
    PjrtCache& to = own(to_base);
    TS_ASSERT(from.k.size() == to.k.size() && from.batch == to.batch && to.cache_len >= from.cache_len);
    const int64_t rows = from.batch * from.kv_heads, hd = from.head_dim;
    std::vector<float> src(static_cast<size_t>(rows * from.cache_len * hd));  // [B*KV, Lf, hd]
    std::vector<float> dst(static_cast<size_t>(rows * to.cache_len * hd));    // [B*KV, Lt, hd]
    const std::vector<int64_t> dims{to.batch, to.kv_heads, to.cache_len, hd};
    auto copy = [&](const BufferHandle& a, BufferHandle& b) {
      pjrt::download(plugin_, a.get(), src.data(), src.size() * sizeof(float));
      std::fill(dst.begin(), dst.end(), 0.0f);
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(dst.data() + r * to.cache_len * hd, src.data() + r * from.cache_len * hd,
                    static_cast<size_t>(from.cache_len * hd) * sizeof(float));
      b = client_.upload(dst.data(), PJRT_Buffer_Type_F32, dims);
      stats_.cache_copy_bytes += (src.size() + dst.size()) * sizeof(float);
    };
    for (size_t l = 0; l < from.k.size(); ++l) {
      copy(from.k[l], to.k[l]);
      copy(from.v[l], to.v[l]);
    }
    // Growing caches are used with host-side sampling only (CausalLM::generate), so there is no state to copy.
    if (from.seen) fail("PJRT backend: a cache with in-step sampler state cannot grow (use the static cache)");
  }

  // The sampler state of `c` for a step whose graph reads it ([batch, vocab] f32), zeroed on first use.
  BufferHandle& seen_state(PjrtCache& c, const Shape& shape) {
    if (!c.seen) {
      const std::vector<float> zeros(static_cast<size_t>(shape_numel(shape)), 0.0f);  // [B, V]
      c.seen = client_.upload(zeros.data(), PJRT_Buffer_Type_F32, shape);
      stats_.setup_h2d_bytes += zeros.size() * sizeof(float);
    }
    return c.seen;
  }

  std::vector<uintptr_t> cache_addresses(const DeviceCache& base) const override {
    const PjrtCache& c = own(base);
    std::vector<uintptr_t> out;
    for (const auto* list : {&c.k, &c.v})
      for (const auto& b : *list) {
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
  PjrtCache& own(DeviceCache& c) const { return const_cast<PjrtCache&>(own(static_cast<const DeviceCache&>(c))); }

  const Plugin& plugin() const { return plugin_; }
  const Client& client() const { return client_; }
  TransferStats& stats() { return stats_; }

  std::unique_ptr<Executable> compile_op_by_op(const graph::Graph& g) override;
  int op_compiles() const override { return static_cast<int>(op_cache_.size()); }
  const WeightBuffer& weight(const std::string& name) const {
    auto it = weights_.find(name);
    if (it == weights_.end()) fail("PJRT backend: weight '", name, "' was not bound (bind_weights first)");
    return it->second;
  }
  // The compiled single-op program with this text (compiled on first use).
  PJRT_LoadedExecutable* op_executable(const std::string& text) {
    auto it = op_cache_.find(text);
    if (it != op_cache_.end()) return it->second.get();
    auto t0 = clock_type::now();
    auto exe = client_.compile(text, pjrt::compile_options_proto(1, 1));
    timing_.compile_seconds += seconds_since(t0);
    return op_cache_.emplace(text, std::move(exe)).first->second.get();
  }

 private:
  // The compiled program must return exactly logits + one buffer per cache (aliasing needs the order).
  void check_outputs(const pjrt::LoadedExecutableHandle& exe, int expected, const graph::Graph& g) const {
    if (!PJRT_HAS(plugin_, LoadedExecutable_GetExecutable) || !PJRT_HAS(plugin_, Executable_NumOutputs)) return;
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

  // TESSERA_PJRT_DUMP=<dir>: writes each emitted module to <dir>/<key>.mlir for debugging.
  void dump(const graph::Graph& g, const StablehloProgram& prog) const {
    const char* dir = std::getenv("TESSERA_PJRT_DUMP");
    if (!dir || !*dir) return;
    std::string name = g.key.str();
    for (char& ch : name)
      if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    std::ofstream(std::string(dir) + "/" + name + ".mlir") << prog.text;
  }

  Plugin& plugin_;
  Client client_;
  pjrt::PlatformInfo info_;
  std::unordered_map<std::string, WeightBuffer> weights_;
  TransferStats stats_;
  CompileTiming timing_;
  std::unordered_map<std::string, pjrt::LoadedExecutableHandle> op_cache_;  // single-op program text -> exe
};

// Runs a graph one op at a time (disable_compile). Per op: a one-node graph whose operands are placeholders
// (inputs and weights as themselves, KV caches / the seen mask as state arguments, intermediate values as
// f32 arguments named by position), lowered by the same emitter; its text is the op-cache key. Names are
// generic so that the same op in every layer shares one compiled program.
class PjrtOpByOpExecutable : public Executable {
 public:
  PjrtOpByOpExecutable(PjrtBackendImpl& be, graph::Graph g) : be_(be), g_(std::move(g)) {
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const graph::Node& n = g_.nodes[i];
      if (n.op == graph::Op::Input || n.op == graph::Op::Weight || n.op == graph::Op::CacheState ||
          n.op == graph::Op::SamplerState)
        continue;
      steps_.push_back(lower_node(static_cast<int>(i)));
    }
  }

  void run(const StepInputs& in, DeviceCache& cache, std::vector<float>& logits) override {
    BufferHandle out = execute(in, cache);
    if (g_.at(g_.outputs[0]).dtype != DType::F32) fail("PJRT op-by-op: this graph samples; use run_tokens()");
    logits.resize(static_cast<size_t>(shape_numel(g_.at(g_.outputs[0]).shape)));  // [rows_out, vocab]
    pjrt::download(be_.plugin(), out.get(), logits.data(), logits.size() * sizeof(float));
    be_.stats().d2h_bytes += logits.size() * sizeof(float);
  }
  void run_tokens(const StepInputs& in, DeviceCache& cache, std::vector<int32_t>& tokens) override {
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
    step.prog = pjrt::lower_to_stablehlo(mini);
    return step;
  }

  BufferHandle execute(const StepInputs& in, DeviceCache& cache_base) {
    PjrtCache& cache = be_.own(cache_base);
    std::vector<BufferHandle> values(g_.nodes.size());  // per node: its output on the device
    std::unordered_map<int, BufferHandle> uploaded;      // per input kind: this run's upload
    BufferHandle last;
    for (Step& st : steps_) {
      std::vector<PJRT_Buffer*> args(st.prog.args.size(), nullptr);
      std::vector<BufferHandle*> donated;
      for (size_t i = 0; i < st.prog.args.size(); ++i) {
        const StablehloArg& a = st.prog.args[i];
        switch (a.kind) {
          case StablehloArg::Weight: {
            const Source& src = st.sources.at(a.name);
            args[i] = src.kind == Source::Weight ? be_.weight(src.weight).buffer.get()
                                                 : values[static_cast<size_t>(src.node)].get();
            TS_ASSERT(args[i], "op-by-op: operand of ", g_.at(st.node).name, " not computed");
            break;
          }
          case StablehloArg::Input: {
            auto& buf = uploaded[static_cast<int>(a.input)];
            if (!buf) {
              const auto& v = step_input(in, a.input);
              if (static_cast<int64_t>(v.size()) != a.shape[0])
                fail("PJRT op-by-op ", g_.key.str(), ": input '", g_.at(st.node).name, "' has ", v.size(),
                     " values, expected ", a.shape[0]);
              buf = be_.client().upload(v.data(), PJRT_Buffer_Type_S32, a.shape);
              be_.stats().h2d_bytes += v.size() * sizeof(int32_t);
            }
            args[i] = buf.get();
            break;
          }
          case StablehloArg::Cache:
            donated.push_back(&cache.at(a.layer, a.which));
            args[i] = donated.back()->get();
            break;
          case StablehloArg::Seen:
            donated.push_back(&be_.seen_state(cache, a.shape));
            args[i] = donated.back()->get();
            break;
        }
      }
      BufferHandle out = execute_loaded(be_.plugin(), be_.op_executable(st.prog.text), args, donated,
                                        st.prog.num_results);
      if (st.node == g_.outputs[0]) last = std::move(out);
      else values[static_cast<size_t>(st.node)] = std::move(out);
    }
    ++be_.stats().runs;
    return last;
  }

  PjrtBackendImpl& be_;
  graph::Graph g_;
  std::vector<Step> steps_;  // one per computing node, in graph order
};

std::unique_ptr<Executable> PjrtBackendImpl::compile_op_by_op(const graph::Graph& g) {
  return std::make_unique<PjrtOpByOpExecutable>(*this, g);
}

const std::vector<int32_t>& PjrtExecutable::input(const StepInputs& in, const StablehloArg& a) const {
  return step_input(in, a.input);
}

void PjrtExecutable::check_inputs(const StepInputs& in) const {
  for (const StablehloArg& a : prog_.args) {
    if (a.kind != StablehloArg::Input) continue;
    const auto& v = input(in, a);
    if (static_cast<int64_t>(v.size()) != a.shape[0])
      fail("PJRT step ", key_.str(), ": input '", a.name, "' has ", v.size(), " values, expected ", a.shape[0]);
  }
  // The emitted cache_update writes S contiguous slots starting at slots[0] (see stablehlo_emitter.cpp).
  const auto& slots = in.slots;
  for (size_t s = 0; s < slots.size(); ++s)
    if (slots[s] != slots[0] + static_cast<int32_t>(s))
      fail("PJRT step ", key_.str(), ": slots must be contiguous (slots[", s, "] = ", slots[s], ", slots[0] = ",
           slots[0], ")");
  if (!slots.empty() && (slots[0] < 0 || slots[0] + static_cast<int64_t>(slots.size()) > key_.cache_len))
    fail("PJRT step ", key_.str(), ": slots ", slots[0], "..", slots[0] + static_cast<int64_t>(slots.size()) - 1,
         " do not fit the cache of ", key_.cache_len, " slots");
}

BufferHandle PjrtExecutable::execute(const StepInputs& in, DeviceCache& cache_base) {
  const Plugin& p = be_.plugin();
  PjrtCache& cache = be_.own(cache_base);
  check_inputs(in);
  if (cache.batch != key_.batch || cache.cache_len != key_.cache_len)
    fail("PJRT step ", key_.str(), ": cache has batch ", cache.batch, " and ", cache.cache_len, " slots");

  // Arguments: bound weights, freshly uploaded step inputs, the states (donated).
  std::vector<BufferHandle> uploads;
  uploads.reserve(prog_.args.size());
  std::vector<PJRT_Buffer*> args(prog_.args.size(), nullptr);
  std::vector<BufferHandle*> donated;
  for (size_t i = 0; i < prog_.args.size(); ++i) {
    const StablehloArg& a = prog_.args[i];
    switch (a.kind) {
      case StablehloArg::Weight: args[i] = weight_args_[i]; break;
      case StablehloArg::Input: {
        const auto& v = input(in, a);
        uploads.push_back(be_.client().upload(v.data(), PJRT_Buffer_Type_S32, a.shape));
        be_.stats().h2d_bytes += v.size() * sizeof(int32_t);
        args[i] = uploads.back().get();
        break;
      }
      case StablehloArg::Cache:
        donated.push_back(&cache.at(a.layer, a.which));
        args[i] = donated.back()->get();
        break;
      case StablehloArg::Seen:
        donated.push_back(&be_.seen_state(cache, a.shape));
        args[i] = donated.back()->get();
        break;
    }
  }

  BufferHandle out = execute_loaded(p, exe_.get(), args, donated, prog_.num_results);
  ++be_.stats().runs;
  return out;
}

void PjrtExecutable::run(const StepInputs& in, DeviceCache& cache, std::vector<float>& logits) {
  if (prog_.tokens) fail("PJRT step ", key_.str(), ": this step samples in the program; use run_tokens()");
  BufferHandle out = execute(in, cache);
  logits.resize(static_cast<size_t>(shape_numel(prog_.logits_shape)));  // [rows_out, vocab]
  pjrt::download(be_.plugin(), out.get(), logits.data(), logits.size() * sizeof(float));
  be_.stats().d2h_bytes += logits.size() * sizeof(float);
}

void PjrtExecutable::run_tokens(const StepInputs& in, DeviceCache& cache, std::vector<int32_t>& tokens) {
  if (!prog_.tokens) fail("PJRT step ", key_.str(), ": run_tokens() needs a graph with in-step sampling");
  BufferHandle out = execute(in, cache);
  tokens.resize(static_cast<size_t>(shape_numel(prog_.logits_shape)));  // [batch] int32
  pjrt::download(be_.plugin(), out.get(), tokens.data(), tokens.size() * sizeof(int32_t));
  be_.stats().d2h_bytes += tokens.size() * sizeof(int32_t);
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
