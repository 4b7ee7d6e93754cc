#include "runtime/model_core.h"

#include "tessera/error.h"
#include "tessera/log.h"

namespace tessera::runtime {

graph::Graph ModelCore::build(const graph::ShapeKey& key) const {
  graph::ShapeKey k = key;  // one model instance is one rank: the layout comes from the config
  k.tp_rank = config.tp.rank;
  k.tp_size = config.tp.size;
  graph::Graph g = arch->build_graph(config, k);
  graph::append_sampling(g, config.vocab_size);
  backends::check_graph(*backend, g);
  return g;
}

int ModelCore::bucket_for(int len, bool warn) const {
  for (int b : buckets)
    if (b >= len) return b;
  if (warn && !buckets.empty())
    log_warning("prompt of ", len, " tokens is longer than the largest bucket (", buckets.back(),
                "); compiling its exact length");
  return len;
}

const backends::Executable& ModelCore::executable(const graph::ShapeKey& key, bool disable_compile,
                                                  std::unique_ptr<backends::Executable>& scratch) {
  if (disable_compile) {
    scratch = backend->compile_op_by_op(build(key));
    return *scratch;
  }
  return cache->get(key, [this](const graph::ShapeKey& k) { return build(k); });
}

void ModelCore::check_ids(const std::vector<int32_t>& ids) const {
  for (int32_t id : ids)
    if (id < 0 || id >= config.vocab_size)
      fail("input id ", id, " is out of range for vocab size ", config.vocab_size);
}

backends::CacheGeometry cache_geometry(const models::DecoderConfig& c) {
  backends::CacheGeometry g(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l)
    if (c.layer_has_cache(l)) g[static_cast<size_t>(l)] = {c.local_kv_heads_of(l), c.head_dim_of(l)};
  return g;
}

std::unique_ptr<backends::DeviceCache> ModelCore::make_cache(int rows, int cache_len) const {
  return backend->create_cache(cache_geometry(config), rows, cache_len);
}

graph::Sampling ModelCore::sampling_for(bool in_step, bool do_sample) const {
  if (!in_step || !device_sampling) return graph::Sampling::Off;
  return do_sample ? graph::Sampling::Sample : graph::Sampling::Greedy;
}

std::unique_lock<std::mutex> ModelCore::step_lock() {
  return comm ? std::unique_lock<std::mutex>(tp_mutex) : std::unique_lock<std::mutex>();
}

void ModelCore::generation_done() {
  if (!first_generate_done.exchange(true)) cache->arm_guard();
}

runtime::CompileStats ModelCore::compile_stats() const { return cache->stats(); }

CompileReport compile_report(const runtime::CompileStats& before, const runtime::CompileStats& after) {
  CompileReport r;
  r.compiles = after.compiles - before.compiles;
  r.hits = after.hits - before.hits;
  r.disk_hits = after.disk_hits - before.disk_hits;
  r.compile_seconds = after.compile_seconds - before.compile_seconds;
  r.load_seconds = after.load_seconds - before.load_seconds;
  r.first_compile_seconds = after.first_compile_seconds;
  if (after.keys.size() >= before.keys.size())
    r.keys.assign(after.keys.begin() + static_cast<long>(before.keys.size()), after.keys.end());
  if (after.misses.size() >= before.misses.size())
    r.misses.assign(after.misses.begin() + static_cast<long>(before.misses.size()), after.misses.end());
  return r;
}

}  // namespace tessera::runtime
