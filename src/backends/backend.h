// The small interface every backend implements. A backend compiles a Graph
// for one ShapeKey into an Executable, owns the device-side KV cache, and
// holds the model weights in whatever form its kernels want.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/graph.h"
#include "tessera/error.h"
#include "tessera/tensor.h"

namespace tessera::backends {

using WeightMap = std::unordered_map<std::string, Tensor>;

// Host-side inputs of one step; the only data that crosses to the device.
struct StepInputs {
  std::vector<int32_t> ids;        // [batch * seq]
  std::vector<int32_t> positions;  // [batch * seq]
  std::vector<int32_t> slots;      // [seq] cache slot of each query column
  std::vector<int32_t> kv_begin;   // [batch] first cache slot each row may attend to
  // In-step sampling only (ShapeKey::sampling != Off):
  std::vector<int32_t> seen_from;      // [batch] prefill: first column whose ids count as seen
  std::vector<int32_t> sample_params;  // [batch * graph::kSampleParams] (see graph::SampleParam)
};

// Per-layer K and V caches, [batch, kv_heads, cache_len, head_dim] each, on the device.
class DeviceCache {
 public:
  virtual ~DeviceCache() = default;
  int64_t batch = 0, cache_len = 0;
};

class Executable {
 public:
  virtual ~Executable() = default;
  // Runs the step and copies the logits output ([rows, vocab] float32) to `logits`.
  virtual void run(const StepInputs& in, DeviceCache& cache, std::vector<float>& logits) = 0;
  // For graphs with in-step sampling: runs the step and copies the chosen token ids ([batch] int32).
  // The cache's sampler state (the per-row seen mask) is created zeroed on the first such step.
  virtual void run_tokens(const StepInputs& in, DeviceCache& cache, std::vector<int32_t>& tokens) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual bool supports_op(graph::Op op) const = 0;
  // Takes the weights the graphs refer to, keyed by graph::weight_key (host tensors; zero-copy views where possible).
  virtual void bind_weights(WeightMap weights) = 0;
  virtual std::unique_ptr<Executable> compile(const graph::Graph& g) = 0;
  virtual std::unique_ptr<DeviceCache> create_cache(int64_t layers, int64_t batch, int64_t kv_heads,
                                                    int64_t cache_len, int64_t head_dim) = 0;
  // Copies every slot of `from` into the first slots of `to` (same layers/batch/heads, to.cache_len >= from's).
  // The sampler state is not copied (a grown cache is used with host-side sampling only).
  virtual void copy_cache(const DeviceCache& from, DeviceCache& to) = 0;

  // Persistent executables (the on-disk compile cache). `program_identity` is text that fixes the compiled
  // program exactly: the program itself, the compiler (platform, version, API version) and the compile
  // options; empty when the backend's executables cannot be saved (the native CPU backend: planning is cheap).
  virtual std::string program_identity(const graph::Graph&) { return {}; }
  // The same identity less the program: what changes when the plugin changes.
  virtual std::string compiler_identity() const { return {}; }
  virtual std::string serialize(const Executable&) const {
    fail("backend ", name(), ": executables cannot be serialized");
  }
  virtual std::unique_ptr<Executable> load_serialized(const graph::Graph&, const std::string&) {
    fail("backend ", name(), ": executables cannot be loaded from bytes");
  }
};

class Communicator;
// `comm`: the tensor-parallel group for graphs with tp_size > 1 (nullptr: single rank).
struct CpuBackendOptions {
  bool exact_bf16_matmul = false;  // LoadOptions::exact_bf16_matmul
  bool bf16_kv_cache = false;      // KV caches in bfloat16 (rounded on write) instead of float32
};
std::unique_ptr<Backend> make_cpu_backend(std::shared_ptr<Communicator> comm = nullptr,
                                          const CpuBackendOptions& options = {});

}  // namespace tessera::backends
