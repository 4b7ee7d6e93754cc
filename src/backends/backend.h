// The small interface every backend implements. A backend holds the model weights in whatever form its
// kernels want, compiles a Graph for one ShapeKey into an immutable Executable, and makes DeviceCaches: the
// per-sequence state (KV cache, sampler state, scratch) that callers own and pass to each run.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/graph.h"
#include "kernels/target.h"
#include "tessera/error.h"
#include "tessera/tensor.h"

namespace tessera::backends {

using WeightMap = std::unordered_map<std::string, Tensor>;

// Host-side inputs of one step; the only data that crosses to the device.
struct StepInputs {
  std::vector<int32_t> ids;        // [batch * seq]
  std::vector<int32_t> positions;  // [batch * seq]
  // [batch * seq] cache slot of each query column, per row (consecutive within a row); [seq] is accepted too
  // and means every row uses the same slots.
  std::vector<int32_t> slots;
  std::vector<int32_t> kv_begin;  // [batch] first cache slot each row may attend to
  // In-step sampling only (ShapeKey::sampling != Off):
  std::vector<int32_t> seen_from;      // [batch] prefill: first column whose ids count as seen
  std::vector<int32_t> sample_params;  // [batch * graph::kSampleParams] (see graph::SampleParam)
  // ShapeKey::row_mapped() steps only: [batch] cache row of each step row.
  std::vector<int32_t> cache_rows = {};
  // In-step sampling: [batch * graph::mask_words(vocab)] allowed-token bits per row (constrained decoding);
  // empty: every token allowed for every row.
  std::vector<int32_t> token_mask = {};
};

// The state a sequence (or a set of sequences, one per cache row) carries from step to step: per-layer K and
// V caches, [cache_batch, kv_heads, cache_len, head_dim] each, on the device; the sampler state of in-step
// sampling; and the scratch memory a step runs in. Owned by the caller: one DeviceCache is used by one thread
// at a time, while any number of threads run the same Executable, each with its own DeviceCache.
class DeviceCache {
 public:
  virtual ~DeviceCache() = default;
  int64_t batch = 0, cache_len = 0;  // batch: cache rows
};

// A compiled step: immutable once built, shared by every caller and thread (runs are const and keep no state
// of their own; everything a run writes lives in the DeviceCache it is given or in the outputs).
class Executable {
 public:
  virtual ~Executable() = default;
  // Runs the step and copies the logits output ([rows, vocab] float32) to `logits`.
  virtual void run(const StepInputs& in, DeviceCache& cache, std::vector<float>& logits) const = 0;
  // For graphs with in-step sampling: runs the step and copies the chosen token ids ([batch] int32).
  // The cache's sampler state (the per-row seen mask) is created zeroed on the first such step.
  virtual void run_tokens(const StepInputs& in, DeviceCache& cache, std::vector<int32_t>& tokens) const = 0;
};

// Bytes that crossed between host and device.
struct TransferStats {
  uint64_t h2d_bytes = 0;         // step inputs sent by Executable::run
  uint64_t d2h_bytes = 0;         // logits (run) or token ids (run_tokens) returned
  uint64_t runs = 0;              // Executable::run calls
  uint64_t setup_h2d_bytes = 0;   // weights (bind_weights) and zeroed caches (create_cache); not per step
  uint64_t cache_copy_bytes = 0;  // copy_cache through the host (dynamic cache growth), both directions
  uint64_t collective_bytes = 0;  // segmented steps (one process per rank): activations read for and written
                                  // back after each host collective; also counted in h2d/d2h_bytes
};

// What a backend can do; the runtime asks this instead of testing which backend it has.
struct Capabilities {
  // Compiled steps can sample (ShapeKey::sampling Greedy / Sample), so a decode step brings back token ids
  // instead of logits. The runtime uses it by default where it is also `prefers_buckets` (a device: logits
  // would cross to the host every step).
  bool in_step_sampling = false;
  // Compiling a shape is costly (a real compiler), so prompts are padded to a few bucket lengths by default
  // (LoadOptions::buckets "auto" = "pow2"); false: planning is cheap and padding costs real FLOPs ("exact").
  bool prefers_buckets = false;
  bool serializable = false;      // executables save to and load from bytes (the on-disk compile cache)
  bool op_by_op = false;          // compile_op_by_op() runs ops one by one (else it is compile())
  int replicas = 1;               // devices one tensor-parallel program runs on in this process
  bool counts_transfers = false;  // transfer_stats() counts host/device bytes (a device with its own memory)
  // Weight matrices may be bound in GGML's block formats (DType Q8_0 .. Q6_K) and are computed from the
  // blocks (else the loader dequantises them to a float dtype).
  bool block_quantized_weights = false;
  // A row-mapped decode step (seq 1, host sampling) may give one cache row several step rows at distinct
  // slots (StepChecks::shared_rows): a sequence's next token and its draft tokens verified in one step, each
  // row computed exactly as a decode step of that row alone. The cpu backend (its kernels loop over step rows
  // and write every row's keys before any row attends, and give a row the same bits in any company); not
  // PJRT, whose dot gives a row other last bits beside other rows.
  bool shared_cache_rows = false;
  bool copies_cache_rows = false;  // copy_cache_row_prefix
  bool state_snapshots = false;    // snapshot_state / restore_state (recurrent state of linear attention)
};

// Paged cache memory (Backend::cache_paging): the memory behind a cache row's slots is taken as the slots are
// first written, in blocks of `block_tokens` slots, and given back by Backend::release_cache_slots, so a
// cache of many long rows costs what its rows hold, not rows x cache_len. block_bytes: one block of one
// layer's keys (or values) of one kv head. block_tokens 0: the backend allocates whole caches up front.
struct CachePaging {
  int block_tokens = 0;
  int64_t block_bytes = 0;
};

// One layer's part of a KV cache: kv_heads heads of head_dim values per slot, for keys and for values.
// kv_heads 0: the layer keeps none (linear attention; a layer reading another layer's keys and values).
struct CacheLayer {
  int64_t kv_heads = 0, head_dim = 0;
  bool operator==(const CacheLayer&) const = default;
};
using CacheGeometry = std::vector<CacheLayer>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual Capabilities capabilities() const = 0;
  // Whether this backend can run `op` (every graph is checked before it is compiled: check_graph below).
  virtual bool supports_op(graph::Op op) const = 0;
  // Takes the weights the graphs refer to, keyed by graph::weight_key (host tensors; zero-copy views where
  // possible).
  virtual void bind_weights(WeightMap weights) = 0;
  // Tensor parallelism in one process (capabilities().replicas > 1): rank `replica`'s weights, uploaded to
  // device `replica`; replica 0 is bind_weights. Every replica must be bound before a graph with tp_size =
  // replicas is compiled.
  virtual void bind_replica_weights(int replica, WeightMap weights) {
    if (replica != 0) fail("backend ", name(), ": one device per process (no replica ", replica, ")");
    bind_weights(std::move(weights));
  }
  virtual std::unique_ptr<Executable> compile(const graph::Graph& g) = 0;
  // disable_compile (debugging): an executable that runs `g` one op at a time where the backend can
  // (capabilities().op_by_op); otherwise a fresh compile.
  virtual std::unique_ptr<Executable> compile_op_by_op(const graph::Graph& g) { return compile(g); }
  // A cache of `batch` rows (sequences) of `cache_len` slots each, zeroed: per layer, the keys and values
  // of its geometry (none for a layer with kv_heads 0).
  virtual std::unique_ptr<DeviceCache> create_cache(const CacheGeometry& layers, int64_t batch,
                                                    int64_t cache_len) = 0;
  // Every one of `layers` layers alike.
  std::unique_ptr<DeviceCache> create_cache(int64_t layers, int64_t batch, int64_t kv_heads,
                                            int64_t cache_len, int64_t head_dim) {
    return create_cache(CacheGeometry(static_cast<size_t>(layers), CacheLayer{kv_heads, head_dim}), batch,
                        cache_len);
  }
  // Copies every slot of `from` into the first slots of `to` (same layers/batch/heads, to.cache_len >=
  // from's). The sampler state is not copied (a grown cache is used with host-side sampling only).
  virtual void copy_cache(const DeviceCache& from, DeviceCache& to) = 0;
  // Copies slots [0, count) of cache row `from_row` into row `to_row` of the same cache, every layer's keys
  // and values (prefix caching: a prompt's computed chunks shared with another sequence). Backends with
  // Capabilities::copies_cache_rows.
  virtual void copy_cache_row_prefix(DeviceCache& cache, int from_row, int to_row, int count) {
    (void)cache, (void)from_row, (void)to_row, (void)count;
    fail("backend ", name(), ": copying cache rows is not supported");
  }
  // Linear-attention layers' recurrent state (graph::Op::GatedDeltaNet), kept per cache row beside the keys
  // and values: snapshot_state saves row `row`'s state (every such layer) as that row's snapshot;
  // restore_state makes row `to_row`'s state row `from_row`'s snapshot (prefix caching for hybrid models: the
  // state after a prompt's whole chunks). No-ops for a model without such layers. Backends with
  // Capabilities::state_snapshots.
  virtual void snapshot_state(DeviceCache& cache, int row) {
    (void)cache, (void)row;
    fail("backend ", name(), ": recurrent-state snapshots are not supported");
  }
  virtual void restore_state(DeviceCache& cache, int from_row, int to_row) {
    (void)cache, (void)from_row, (void)to_row;
    fail("backend ", name(), ": recurrent-state snapshots are not supported");
  }
  // The dtype caches hold keys and values in.
  virtual DType cache_dtype() const { return DType::F32; }
  // Bytes a cache holds for one position of one kv head of head_dim values (q8_0: whole blocks).
  size_t cache_row_bytes(int64_t head_dim) const { return kv_row_bytes(cache_dtype(), head_dim); }
  // Bytes one position of every layer's keys and values takes.
  size_t cache_position_bytes(const CacheGeometry& layers) const {
    size_t n = 0;
    for (const CacheLayer& l : layers)
      if (l.kv_heads > 0) n += 2 * static_cast<size_t>(l.kv_heads) * cache_row_bytes(l.head_dim);
    return n;
  }
  // Paged cache memory for caches of heads of `head_dim` values (above); {} where caches are allocated whole.
  virtual CachePaging cache_paging(int64_t head_dim) const {
    (void)head_dim;
    return {};
  }
  // Gives back the memory of slots [from, cache_len) of cache row `row`, every layer's keys and values; those
  // slots then read as zeros until written again. Backends whose cache_paging() has block_tokens > 0; `from`
  // a multiple of it.
  virtual void release_cache_slots(DeviceCache& cache, int row, int from) {
    (void)cache, (void)row, (void)from;
    fail("backend ", name(), ": cache memory is not paged");
  }
  // Bytes between host and device since the backend was made (zero where capabilities().counts_transfers is
  // false: the native backend works in host memory).
  virtual TransferStats transfer_stats() const { return {}; }

  // Persistent executables (the on-disk compile cache). `program_identity` is text that fixes the compiled
  // program exactly: the program itself, the compiler (platform, version, API version) and the compile
  // options; empty when the backend's executables cannot be saved (the native CPU backend: planning is
  // cheap).
  virtual std::string program_identity(const graph::Graph&) { return {}; }
  // The same identity less the program: what changes when the plugin changes.
  virtual std::string compiler_identity() const { return {}; }
  virtual std::string serialize(const Executable&) const {
    fail("backend ", name(), ": executables cannot be serialized");
  }
  virtual std::unique_ptr<Executable> load_serialized(const graph::Graph&, const std::string&) {
    fail("backend ", name(), ": executables cannot be loaded from bytes");
  }

  // Kernels loaded at run time (src/kernels/package.h): which implementation of a package this backend runs
  // (an empty backend: none), and the packages that apply, given before anything is compiled. Graphs
  // compiled after use_kernels run a package's kernel for every node it accepts, the built-in one elsewhere.
  virtual kernels::KernelTarget kernel_target() const { return {}; }
  virtual void use_kernels(std::shared_ptr<const kernels::KernelSet>) {}
};

// Throws Error naming the first node whose op `backend` does not support.
void check_graph(const Backend& backend, const graph::Graph& g);

class Communicator;
// `comm`: the tensor-parallel group for graphs with tp_size > 1 (nullptr: single rank).
struct CpuBackendOptions {
  bool exact_bf16_matmul = false;  // LoadOptions::exact_bf16_matmul
  // The KV caches' dtype: F32, BF16 (rounded on write), Q8_0 (whole blocks of 32 per head, the last padded)
  // or F8_E4M3 (quantised on write; attention dequantises per tile, cpu::attention).
  DType kv_dtype = DType::F32;
};
std::unique_ptr<Backend> make_cpu_backend(std::shared_ptr<Communicator> comm = nullptr,
                                          const CpuBackendOptions& options = {});
// What the cpu backend's bind_weights does to a bound map after packing it: Q4_K and Q6_K matrices whose
// rows are a multiple of 8, held by this map alone and overlapped by no other weight but exact aliases, are
// rewritten in place into their _R8 forms (dtype relabelled); every other tensor is returned as it came.
WeightMap cpu_interleave_weights(WeightMap weights);

}  // namespace tessera::backends
