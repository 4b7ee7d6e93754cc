#include "graph/compile_cache.h"

namespace tessera::graph {

backends::Executable& CompileCache::get(const ShapeKey& key, const std::function<Graph(const ShapeKey&)>& build) {
  auto it = cache_.find(key);
  if (it != cache_.end()) {
    ++stats_.hits;
    return *it->second;
  }
  Graph g = build(key);
  auto exe = backend_.compile(g);
  ++stats_.compiles;
  stats_.keys.push_back(key.str());
  return *cache_.emplace(key, std::move(exe)).first->second;
}

}  // namespace tessera::graph
