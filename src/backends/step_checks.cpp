#include "backends/step_checks.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "tessera/error.h"

namespace tessera::backends {

namespace {

template <typename... Args>
[[noreturn]] void refuse(const StepChecks& c, const Args&... args) {
  fail(c.what, " ", c.key.str(), ": ", args...);
}

std::string field(const StepChecks& c, const char* name) {
  return c.program_names ? std::string("input '") + name + "'" : std::string("StepInputs::") + name;
}

void size_is(const StepChecks& c, const std::vector<int32_t>& v, int64_t n, const char* name) {
  if (static_cast<int64_t>(v.size()) != n)
    refuse(c, field(c, name), " has ", v.size(), " values, expected ", n);
}

}  // namespace

StepChecks step_checks_of(const graph::Graph& g, const char* what) {
  StepChecks c;
  c.what = what;
  c.key = g.key;
  for (const graph::Node& n : g.nodes) {
    if (n.op == graph::Op::Input) {
      c.seen_from = c.seen_from || n.input_kind == graph::InputKind::SeenFrom;
      c.sample_params = c.sample_params || n.input_kind == graph::InputKind::SampleParams;
      if (n.input_kind == graph::InputKind::TokenMask) c.token_mask = n.shape[0];
    }
    if (n.op == graph::Op::Embedding) c.vocab = g.at(n.inputs[0]).shape[0];
  }
  return c;
}

void check_step_cache(const DeviceCache& cache, const StepChecks& c) {
  const graph::ShapeKey& k = c.key;
  if (cache.batch != k.cache_batch() || cache.cache_len != k.cache_len)
    refuse(c, "the cache has ", cache.batch, " rows of ", cache.cache_len, " slots, the step needs ",
           k.cache_batch(), " rows of ", k.cache_len, " slots");
}

void check_step_inputs(const StepInputs& in, const StepChecks& c) {
  const graph::ShapeKey& k = c.key;
  const int64_t batch = k.batch, seq = k.seq, rows = batch * seq, len = k.cache_len;
  size_is(c, in.ids, rows, "ids");
  size_is(c, in.positions, rows, "positions");
  if (static_cast<int64_t>(in.slots.size()) != rows && static_cast<int64_t>(in.slots.size()) != seq)
    refuse(c, field(c, "slots"), " has ", in.slots.size(), " values, expected ", rows, " (batch * seq) or ",
           seq, " (the same slots for every row)");
  size_is(c, in.kv_begin, batch, "kv_begin");
  if (c.seen_from) size_is(c, in.seen_from, batch, "seen_from");
  if (c.sample_params) size_is(c, in.sample_params, batch * graph::kSampleParams, "sample_params");
  if (!in.token_mask.empty()) {
    if (c.token_mask < 0) refuse(c, field(c, "token_mask"), " is given, and the step does not sample");
    size_is(c, in.token_mask, c.token_mask, "token_mask");
  }

  if (c.vocab >= 0)
    for (int64_t i = 0; i < rows; ++i) {
      const int32_t id = in.ids[static_cast<size_t>(i)];
      if (id < 0 || id >= c.vocab)
        refuse(c, "ids[", i, "] = ", id, " is not a token id (vocabulary of ", c.vocab, ")");
    }

  // Each row's slots (its own, or the one [seq] list every row shares): consecutive, then inside the cache
  // (the step writes a row's columns from its first slot on).
  const bool per_row = static_cast<int64_t>(in.slots.size()) == rows;
  for (int64_t b = 0; b < (per_row ? batch : 1); ++b) {
    const int64_t at = b * seq;  // index of the row's first slot in StepInputs::slots
    const int32_t* sl = in.slots.data() + at;
    const std::string row = per_row ? "row " + std::to_string(b) : std::string("every row");
    for (int64_t s = 1; s < seq; ++s)
      if (static_cast<int64_t>(sl[s]) != static_cast<int64_t>(sl[0]) + s)
        refuse(c, row, ": slots[", at + s, "] = ", sl[s], " does not follow slots[", at + s - 1,
               "] = ", sl[s - 1], " (a row's columns occupy consecutive slots)");
    const int64_t first = sl[0], last = first + seq - 1;
    if (first < 0 || last >= len) {
      const int64_t s = first < 0 || first >= len ? 0 : len - first;  // the first slot outside
      refuse(c, "slots[", at + s, "] = ", sl[s], " is outside the cache's ", len, " slots (", row,
             "'s slots ", first, "..", last, " do not fit)");
    }
  }
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t kb = in.kv_begin[static_cast<size_t>(b)];
    if (kb < 0 || kb > len) refuse(c, "kv_begin[", b, "] = ", kb, " is outside [0, ", len, "]");
  }
  if (c.seen_from)
    for (int64_t b = 0; b < batch; ++b) {
      const int32_t f = in.seen_from[static_cast<size_t>(b)];
      if (f < 0 || f > seq) refuse(c, "seen_from[", b, "] = ", f, " is outside [0, ", seq, "]");
    }

  if (k.row_mapped()) {
    size_is(c, in.cache_rows, batch, "cache_rows");
    // Shared rows: a cache row may be named again by a step row writing another slot of it.
    const bool shared = c.shared_rows && seq == 1 && !c.sample_params && per_row;
    std::vector<int64_t> named_by(static_cast<size_t>(k.cache_batch()), -1);  // cache row -> step row
    std::vector<std::pair<int32_t, int32_t>> written;                         // (cache row, slot), shared
    for (int64_t b = 0; b < batch; ++b) {
      const int32_t r = in.cache_rows[static_cast<size_t>(b)];
      if (r < 0 || r >= k.cache_batch())
        refuse(c, "cache_rows[", b, "] = ", r, " is outside the cache's ", k.cache_batch(), " rows");
      int64_t& o = named_by[static_cast<size_t>(r)];
      if (o >= 0 && !shared)
        refuse(c, "cache_rows[", b, "] = ", r, " repeats cache_rows[", o, "] (cache row ", r,
               " is named by two step rows)");
      o = b;
      if (shared) written.emplace_back(r, in.slots[static_cast<size_t>(b)]);
    }
    std::sort(written.begin(), written.end());
    for (size_t i = 1; i < written.size(); ++i)
      if (written[i] == written[i - 1])
        refuse(c, "two step rows write slot ", written[i].second, " of cache row ", written[i].first);
  } else if (!in.cache_rows.empty()) {
    // Step row b is cache row b; a mapping that says otherwise would be ignored, so it is refused.
    bool identity = static_cast<int64_t>(in.cache_rows.size()) == batch;
    for (int64_t b = 0; identity && b < batch; ++b) identity = in.cache_rows[static_cast<size_t>(b)] == b;
    if (!identity)
      refuse(c, field(c, "cache_rows"),
             " is set but the step is not row-mapped (step row b is cache row b; compile with "
             "ShapeKey::cache_rows > batch to map rows)");
  }
}

}  // namespace tessera::backends
