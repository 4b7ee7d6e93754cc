// A loaded model as the generation code sees it: the parsed config, the architecture, the backend holding
// the weights and the compiled programs. Built once by from_pretrained (src/runtime/loading.cpp) and then
// only read, except for the compile cache (thread-safe) and two flags (atomics), so any number of threads
// may run generate(), forward() and SlotBatches of one model at once; each call owns its own DeviceCache.
// Tensor parallelism over MPI is the exception: the ranks must run the same steps in the same order, so
// calls on such a model are serialised (tp_mutex).
#pragma once
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "backends/backend.h"
#include "backends/communicator.h"
#include "graph/graph.h"
#include "models/architecture.h"
#include "runtime/compile_cache.h"
#include "tessera/generation.h"
#include "tessera/model.h"

namespace tessera::runtime {

// This rank's KV cache layout of a model: per layer its (local) kv heads and head_dim, none for the layers
// that keep no keys and values (linear attention, layers reading another layer's).
backends::CacheGeometry cache_geometry(const models::DecoderConfig& c);

struct ModelCore {
  models::DecoderConfig config;
  const models::Architecture* arch = nullptr;
  std::unique_ptr<backends::Backend> backend;
  backends::Capabilities caps;
  std::unique_ptr<runtime::CompileCache> cache;
  GenerationConfig gen_defaults;
  ModelInfo info;
  std::vector<int> buckets;      // ascending prefill lengths; empty = exact prompt length
  int prefill_chunk = 0;         // generate(): prompts longer than this prefill in chunks of it (0: whole)
  bool device_sampling = false;  // the compiled step samples and returns token ids (see Capabilities)
  std::atomic<bool> first_generate_done{false};
  // One of several processes of a tensor-parallel job (MPI): rank 0's chosen tokens are sent to every rank,
  // so the ranks stay in step even if their logits were ever to differ in the last bit.
  std::shared_ptr<backends::Communicator> comm;
  std::mutex tp_mutex;

  // The graph for `key` on this rank (with the in-step sampling tail when key.sampling != Off), checked
  // against the backend's ops.
  graph::Graph build(const graph::ShapeKey& key) const;
  // The prefill length for a prompt of `len` tokens; beyond the largest bucket, the exact length (with a
  // warning when `warn`).
  int bucket_for(int len, bool warn) const;
  // The compiled executable for `key`; with disable_compile a fresh one each call, kept in `scratch`
  // (native cpu: a fresh plan; op-by-op where the backend has it).
  const backends::Executable& executable(const graph::ShapeKey& key, bool disable_compile,
                                         std::unique_ptr<backends::Executable>& scratch);
  // Throws Error naming the first id outside the vocabulary.
  void check_ids(const std::vector<int32_t>& ids) const;
  // A zeroed KV cache of `rows` sequences of `cache_len` slots.
  std::unique_ptr<backends::DeviceCache> make_cache(int rows, int cache_len) const;
  // The sampling mode a step runs with: Off unless `in_step` and the backend samples in the step.
  graph::Sampling sampling_for(bool in_step, bool do_sample) const;
  // A lock for calls that run steps: held on tensor-parallel models over MPI, empty otherwise.
  std::unique_lock<std::mutex> step_lock();
  // The recompile guard counts from the end of the first generation unless warmup() armed it already.
  void generation_done();
  // The compile counters now (a copy: other threads may be compiling).
  runtime::CompileStats compile_stats() const;
};

// CompileReport of what happened between two snapshots of the counters.
CompileReport compile_report(const runtime::CompileStats& before, const runtime::CompileStats& after);

}  // namespace tessera::runtime

namespace tessera {
struct CausalLM::Impl : runtime::ModelCore {};
}  // namespace tessera
