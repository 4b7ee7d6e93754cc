// The checks every backend makes before a step reads or writes anything: the cache is the step's (rows,
// slots) and the StepInputs fit the step's ShapeKey (sizes, token ids, slots, kv_begin, seen_from, cache
// rows). Every index a kernel or a program uses comes from values checked here; each refusal is one line
// naming the step, the field, the index and the value.
#pragma once
#include <cstdint>

#include "backends/backend.h"
#include "graph/graph.h"

namespace tessera::backends {

// What one compiled step reads (fixed when it is compiled).
struct StepChecks {
  const char* what = "step";  // starts every message, before the key: "cpu step", "PJRT step", ...
  graph::ShapeKey key;
  bool seen_from = false;      // the step reads StepInputs::seen_from (a sampling prefill)
  bool sample_params = false;  // the step reads StepInputs::sample_params (in-step sampling)
  int64_t vocab = -1;          // ids must lie in [0, vocab) (the embedding table's rows); -1: not checked
  int64_t token_mask = -1;     // values of the step's token mask input (in-step sampling); -1: none
  // Size errors name the field as the step's program input ("input 'slots' has ...", as the PJRT backend's
  // other argument errors do) instead of the StepInputs member ("StepInputs::slots has ...").
  bool program_names = false;
  // Several step rows of a row-mapped decode step (seq 1, no in-step sampling) may name one cache row, each
  // writing and reading its own slot: a sequence's next token and its draft tokens verified in one step
  // (Capabilities::shared_cache_rows).
  bool shared_rows = false;
};

// The checks for graph `g`: its key, the inputs it reads, its embedding table's rows.
StepChecks step_checks_of(const graph::Graph& g, const char* what);

// The cache has the step's cache rows (ShapeKey::cache_batch) and length.
void check_step_cache(const DeviceCache& cache, const StepChecks& c);

// The inputs fit the step: ids and positions [batch * seq], slots [batch * seq] or [seq] (the same for every
// row), consecutive within a row and inside the cache; kv_begin [batch] in [0, cache_len]; seen_from [batch]
// in [0, seq] and sample_params [batch * kSampleParams] when the step reads them; cache_rows [batch] distinct
// rows of the cache on a row-mapped step (or, with `shared_rows` on a decode step, rows that may repeat
// with distinct slots), else empty or the identity (step row b is cache row b).
void check_step_inputs(const StepInputs& in, const StepChecks& c);

}  // namespace tessera::backends
