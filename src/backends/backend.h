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
#include "tessera/tensor.h"

namespace tessera::backends {

using WeightMap = std::unordered_map<std::string, Tensor>;

// Host-side inputs of one step; the only data that crosses to the device.
struct StepInputs {
  std::vector<int32_t> ids;        // [batch * seq]
  std::vector<int32_t> positions;  // [batch * seq]
  std::vector<int32_t> slots;      // [seq] cache slot of each query column
  std::vector<int32_t> kv_begin;   // [batch] first cache slot each row may attend to
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
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual bool supports_op(graph::Op op) const = 0;
  // Takes the weights the graphs refer to by name (host tensors; zero-copy views where possible).
  virtual void bind_weights(WeightMap weights) = 0;
  virtual std::unique_ptr<Executable> compile(const graph::Graph& g) = 0;
  virtual std::unique_ptr<DeviceCache> create_cache(int64_t layers, int64_t batch, int64_t kv_heads,
                                                    int64_t cache_len, int64_t head_dim) = 0;
  // Copies every slot of `from` into the first slots of `to` (same layers/batch/heads, to.cache_len >= from's).
  virtual void copy_cache(const DeviceCache& from, DeviceCache& to) = 0;
};

std::unique_ptr<Backend> make_cpu_backend();

}  // namespace tessera::backends
