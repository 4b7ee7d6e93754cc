// One Executable per ShapeKey, with counters that make recompiles visible.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/backend.h"
#include "graph/graph.h"

namespace tessera::graph {

struct CompileStats {
  int compiles = 0;
  int hits = 0;
  std::vector<std::string> keys;  // every key compiled, in order
};

class CompileCache {
 public:
  explicit CompileCache(backends::Backend& backend) : backend_(backend) {}
  // Returns the executable for `key`, building and compiling the graph on a miss.
  backends::Executable& get(const ShapeKey& key, const std::function<Graph(const ShapeKey&)>& build);
  bool contains(const ShapeKey& key) const { return cache_.count(key) != 0; }
  const CompileStats& stats() const { return stats_; }

 private:
  backends::Backend& backend_;
  std::unordered_map<ShapeKey, std::unique_ptr<backends::Executable>, ShapeKeyHash> cache_;
  CompileStats stats_;
};

}  // namespace tessera::graph
