// Shared by the tests that run compiled steps themselves (tests/test_cpu_rows.cpp, test_pjrt_rows.cpp,
// test_pjrt_threads.cpp, test_concurrency.cpp, test_model_variants.cpp): a tiny fixture checkpoint with
// float32 weights bound to a backend, the shape keys of its steps and the step inputs these tests feed. A
// test file says `using namespace tessera::step_test;` for the names below. Header-only; tests only.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "golden_util.h"
#include "io/weight_source.h"
#include "models/architecture.h"
#include "runtime/model_core.h"
#include "sampling/sampling_params.h"

namespace tessera::step_test {

using backends::DeviceCache;
using backends::Executable;
using backends::StepInputs;
using graph::Phase;
using graph::Sampling;
using graph::ShapeKey;
using sampling::SamplingParams;

// A checkpoint's architecture and config, and its weights as float32.
struct Checkpoint {
  const models::Architecture* arch = nullptr;
  models::DecoderConfig config;
  backends::WeightMap weights;
};

// The checkpoint in directory `dir` (config.json and weights); `name` names it in errors.
inline Checkpoint load_checkpoint(const std::string& dir, const std::string& name) {
  Checkpoint c;
  auto cj = golden::load_json(dir + "/config.json");
  c.arch = &models::find_architecture(cj["architectures"][0].get<std::string>(), name);
  c.config = c.arch->parse_config(cj, name);
  auto src = io::open_checkpoint(dir);
  for (const auto& w : c.arch->weights(c.config)) c.weights.emplace(w.name, src->load(w.name, DType::F32));
  return c;
}

// The native cpu backend, with a bfloat16 or float32 KV cache.
inline std::unique_ptr<backends::Backend> cpu_backend(bool bf16_kv_cache) {
  backends::CpuBackendOptions o;
  o.kv_dtype = bf16_kv_cache ? DType::BF16 : DType::F32;
  return backends::make_cpu_backend(nullptr, o);
}

// The key of a float32 step.
inline ShapeKey step_key(Phase phase, int batch, int seq, int len, int cache_rows = 0,
                         Sampling s = Sampling::Off) {
  return ShapeKey{.phase = phase,
                  .batch = batch,
                  .seq = seq,
                  .cache_len = len,
                  .dtype = DType::F32,
                  .sampling = s,
                  .cache_rows = cache_rows};
}

// A checkpoint's weights bound to a backend of type B (backends::Backend, or e.g. backends::PjrtBackend for
// its counters), with its steps compiled on first use. exe() is for one thread at a time: tests that run
// steps from several threads compile them first, or through a runtime::CompileCache.
template <class B = backends::Backend>
struct StepModel {
  const models::Architecture* arch = nullptr;
  models::DecoderConfig config;
  std::unique_ptr<B> be;
  std::map<std::string, std::unique_ptr<Executable>> exes;

  StepModel(const std::string& dir, const std::string& name, std::unique_ptr<B> backend)
      : be(std::move(backend)) {
    Checkpoint c = load_checkpoint(dir, name);
    arch = c.arch;
    config = std::move(c.config);
    be->bind_weights(std::move(c.weights));
  }
  int64_t vocab() const { return config.vocab_size; }
  // The step graph of `key` with the sampler appended (which only Sampling::Greedy and Sample keys use).
  graph::Graph graph(const ShapeKey& key) const {
    graph::Graph g = arch->build_graph(config, key);
    graph::append_sampling(g, config.vocab_size);
    return g;
  }
  const Executable& exe(const ShapeKey& key) {
    auto& e = exes[key.str()];
    if (!e) e = be->compile(graph(key));
    return *e;
  }
  std::unique_ptr<DeviceCache> cache(int64_t rows, int64_t len) {
    return be->create_cache(runtime::cache_geometry(config), rows, len);
  }
};

// Appends one prefill row: `prompt` left-padded to `bucket` columns (0: the prompt's length), written from
// cache slot `first_slot`; a pad column feeds id 0 at position `pad_position` and is masked (the row's
// kv_begin is its first prompt column).
inline void append_prefill_row(StepInputs& in, std::span<const int32_t> prompt, int bucket = 0,
                               int first_slot = 0, int pad_position = 0) {
  const int n = static_cast<int>(prompt.size());
  const int pad = bucket > n ? bucket - n : 0;
  for (int s = 0; s < pad + n; ++s) {
    in.ids.push_back(s < pad ? 0 : prompt[static_cast<size_t>(s - pad)]);
    in.positions.push_back(s < pad ? pad_position : s - pad);
    in.slots.push_back(first_slot + s);
  }
  in.kv_begin.push_back(first_slot + pad);
}

// A one-row prefill of `prompt` from slot 0, left-padded to `bucket` columns (0: none).
inline StepInputs prefill_inputs(std::span<const int32_t> prompt, int bucket = 0) {
  StepInputs in;
  append_prefill_row(in, prompt, bucket);
  return in;
}

// The same with in-step sampling: the repetition penalty counts the prompt's ids, and `p` is encoded for the
// token chosen from the prefill (step 0).
inline StepInputs sampled_prefill_inputs(std::span<const int32_t> prompt, const SamplingParams& p,
                                         int bucket = 0) {
  StepInputs in = prefill_inputs(prompt, bucket);
  in.seen_from = in.kv_begin;
  p.append_encoded(0, in.sample_params);
  return in;
}

// Appends one decode row: `id` at `position`, written at cache slot `slot`, attending from slot `kv_begin`.
inline void append_decode_row(StepInputs& in, int32_t id, int position, int slot, int kv_begin = 0) {
  in.ids.push_back(id);
  in.positions.push_back(position);
  in.slots.push_back(slot);
  in.kv_begin.push_back(kv_begin);
}

}  // namespace tessera::step_test
