#include "backends/backend.h"

namespace tessera::backends {

void check_graph(const Backend& backend, const graph::Graph& g) {
  for (const graph::Node& n : g.nodes)
    if (!backend.supports_op(n.op))
      fail("backend ", backend.name(), " cannot run op ", graph::op_name(n.op), " (node '", n.name, "' of ",
           g.key.str(), ")");
}

}  // namespace tessera::backends
