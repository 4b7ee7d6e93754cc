#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_set>

#include "models/architecture.h"
#include "tessera/error.h"

namespace tessera::models {

// Each architecture's file (qwen3.cpp, ...) defines its architecture(); adding one is its file, its
// declaration here and its row in the table.
namespace qwen3 {
Architecture architecture();
}
namespace llama {
Architecture architecture();
}
namespace glm4 {
Architecture architecture();
}
namespace qwen2 {
Architecture architecture();
}
namespace mistral {
Architecture architecture();
}
namespace phi3 {
Architecture architecture();
}
namespace gemma2 {
Architecture architecture();
}
namespace gemma3 {
Architecture architecture();
}
namespace gemma4 {
Architecture architecture();
}
namespace qwen3_moe {
Architecture architecture();
}
namespace mixtral {
Architecture architecture();
}
namespace gpt_oss {
Architecture architecture();
}
namespace smollm3 {
Architecture architecture();
}
namespace qwen3_5 {
Architecture architecture();
Architecture moe_architecture();
Architecture next_architecture();
}  // namespace qwen3_5
namespace olmo {
Architecture olmo2_architecture();
Architecture olmo3_architecture();
}  // namespace olmo

namespace {
const std::vector<Architecture>& table() {
  static const std::vector<Architecture> t = {
      qwen3::architecture(),       llama::architecture(),        glm4::architecture(),
      qwen2::architecture(),       mistral::architecture(),      phi3::architecture(),
      gemma2::architecture(),      gemma3::architecture(),       qwen3_moe::architecture(),
      mixtral::architecture(),     gpt_oss::architecture(),      smollm3::architecture(),
      olmo::olmo2_architecture(),  olmo::olmo3_architecture(),   qwen3_5::architecture(),
      qwen3_5::moe_architecture(), qwen3_5::next_architecture(), gemma4::architecture(),
  };
  return t;
}
}  // namespace

std::vector<WeightSpec> weight_specs_of(const graph::Graph& g) {
  std::vector<WeightSpec> out;
  std::unordered_set<std::string> seen;  // a tied embedding or a fused tensor is read by several nodes
  for (const auto& n : g.nodes) {
    if (n.op != graph::Op::Weight || !seen.insert(n.name).second) continue;
    out.push_back(WeightSpec{n.name, n.view.stored, n.view.stored.size() == 1});
  }
  return out;
}

std::vector<std::string> supported_architectures() {
  std::vector<std::string> out;
  for (const auto& a : table()) out.push_back(a.name);
  return out;
}

const Architecture& find_architecture(const std::string& name, const std::string& origin) {
  for (const auto& a : table())
    if (name == a.name) return a;
  std::ostringstream os;
  for (const auto& s : supported_architectures()) os << (os.tellp() > 0 ? ", " : "") << s;
  fail(origin, ": field 'architectures' names ", ConfigReader::show(nlohmann::json(name)),
       ", which is not supported (supported: ", os.str(), ")");
}

}  // namespace tessera::models
