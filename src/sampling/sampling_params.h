// The one encoding of per-row sampling settings. The runtime builds a SamplingParams from a GenerationConfig
// (and the call's seed); encode() writes the graph::SampleParam layout a compiled step reads (in-step
// sampling), decode() reads it back (the cpu backend's Op::Sample), and the host sampler takes the struct
// itself, so every path applies the same settings in the same order.
#pragma once
#include <cstdint>
#include <vector>

#include "graph/graph.h"
#include "tessera/generation.h"

namespace tessera::sampling {

struct SamplingParams {
  float temperature = 1.0f;
  int32_t top_k = 0;  // 0: off
  float top_p = 1.0f;
  float min_p = 0.0f;  // 0: off
  float repetition_penalty = 1.0f;
  uint64_t seed = 0;
  bool do_sample = false;  // false: repetition penalty + argmax (the warpers and the seed are not used)

  // The settings of `cfg` with `seed` (the caller resolves GenerationConfig::seed: unset means a fresh one).
  static SamplingParams from_config(const GenerationConfig& cfg, uint64_t seed);
  // One row in the graph::SampleParam layout (graph::kSampleParams int32 values, floats bit-cast), for the
  // token chosen at generation step `step` (0: the token chosen from the prefill).
  void encode(int32_t step, int32_t* row) const;
  // Appends one encoded row to `out`.
  void append_encoded(int32_t step, std::vector<int32_t>& out) const;
  // The settings in an encoded row (the inverse of encode); step_of() is its step.
  static SamplingParams decode(const int32_t* row);
  static int32_t step_of(const int32_t* row) { return row[graph::kStep]; }

  bool operator==(const SamplingParams&) const = default;
};

// A fresh 64-bit seed (std::random_device) for a call that gives none.
uint64_t fresh_seed();

}  // namespace tessera::sampling
