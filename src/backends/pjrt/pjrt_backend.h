// The PJRT backend: the same graphs as the native CPU backend, lowered to StableHLO and compiled by a PJRT
// plugin (XLA CPU, CUDA, TPU). Weights are uploaded once; the KV cache lives on the device and is donated to
// every step (updated in place); a step sends only ids/positions/slots/kv_begin and brings back only the
// logits. Needs no pjrt_c_api.h: include it anywhere. In a build without PJRT, make_pjrt_backend throws
// Error.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/communicator.h"
#include "backends/pjrt/pjrt_info.h"

namespace tessera::backends {

struct CompileTiming {
  int compiles = 0;
  double emit_seconds = 0;     // graph -> StableHLO text, all compiles
  double compile_seconds = 0;  // PJRT_Client_Compile, all compiles
  double last_compile_seconds = 0;
};

// Threads: executables are immutable; any number of threads may run them at once (the same executable or
// different ones), each run with its own DeviceCache, while others compile, load or create caches. Counters
// (transfer_stats, compile_timing) are updated atomically. bind_weights / bind_replica_weights replace what
// compiled executables read, so they must not overlap anything else. Segmented (host-collective) steps run
// one at a time per backend.
class PjrtBackend : public Backend {
 public:
  virtual const pjrt::PlatformInfo& platform() const = 0;
  virtual void reset_transfer_stats() = 0;
  virtual CompileTiming compile_timing() const = 0;
  // For tests: the device addresses of every cache buffer (K and V per layer, in that order), read with
  // PJRT_Buffer_UnsafePointer. Equal before and after a step = the cache was updated in place, not copied.
  virtual std::vector<uintptr_t> cache_addresses(const DeviceCache& cache) const = 0;

  // Groundwork for the on-disk compile cache: the plugin's bytes for a compiled step
  // (PJRT_Executable_Serialize), and an executable for graph `g` loaded back from such bytes without
  // compiling (PJRT_Executable_DeserializeAndLoad). The bytes are opaque and tied to the plugin build: a
  // caller must key them by plugin path/version and program hash. Foreign or corrupt bytes throw Error.
  // disable_compile (debugging): an executable that runs `g` one op at a time. Each op is lowered on its own
  // (operands become arguments) and compiled, when the executable is made, once per distinct single-op
  // program (op kind, attributes, shapes) into a cache kept by the backend, so repeated layers and steps
  // reuse it. Intermediate values stay
  // on the device; the KV cache is donated to the ops that write it.
  std::unique_ptr<Executable> compile_op_by_op(const graph::Graph& g) override = 0;
  virtual int op_compiles() const = 0;  // distinct single-op programs compiled so far

  // Devices one tensor-parallel program runs on (PjrtOptions::replicas).
  virtual int replicas() const = 0;
  // Tensor parallelism in one process: the weights of rank `replica`, uploaded to device `replica` (keyed by
  // graph::weight_key as for bind_weights, which binds replica 0). Every replica must be bound before a graph
  // with tp_size = replicas() is compiled.
  void bind_replica_weights(int replica, WeightMap weights) override = 0;

  std::string serialize(const Executable& exe) const override = 0;
  std::unique_ptr<Executable> load_serialized(const graph::Graph& g, const std::string& bytes) override = 0;
};

struct PjrtOptions {
  // Devices to ask the XLA CPU plugin for ("cpu_device_count"; at least `replicas`); ignored by other
  // plugins. Single-device programs run on device 0.
  int device_count = 1;
  // Tensor parallelism in one process: a graph with tp_size = replicas is one program compiled with
  // num_replicas = replicas (collectives as stablehlo.all_reduce / all_gather) and run on devices
  // 0 .. replicas-1, each with its own weights (bind_replica_weights) and KV cache.
  int replicas = 1;
  // Tensor parallelism across processes (one device each, e.g. one process per chip under mpirun): a graph
  // with tp_size > 1 runs as segments cut at its collectives, each segment one compiled program; between
  // segments the collective's input is read to the host, reduced or gathered through `comm`, and written
  // back.
  std::shared_ptr<Communicator> comm;
  // Plugin search, start-up timeout, debugging dumps (pjrt_info.h). Unset: pjrt::default_pjrt_settings().
  std::optional<pjrt::PjrtSettings> settings;
  // The KV caches' element type: float32, bfloat16, F8_E4M3 (fp8 e4m3fn, values clamped to +-448 when
  // written, as the native backend's fp8 cache) or Q8_0 (int8 buffers of the native cache's Q8_0 blocks);
  // the program rounds (quantises) what it writes and computes attention in float32 from what it reads.
  // Anything else is an Error.
  DType kv_dtype = DType::F32;
};

// device: "xla-cpu", "tpu", "cuda" or "pjrt:/path/to/plugin.so". Throws Error when the plugin is missing
// (listing where it looked), fails to load, or this build has no PJRT support.
std::unique_ptr<PjrtBackend> make_pjrt_backend(const std::string& device, const PjrtOptions& options = {});

// True for the device names make_pjrt_backend accepts (whether or not the plugin is installed).
bool is_pjrt_device(const std::string& device);

}  // namespace tessera::backends
