#include <nlohmann/json.hpp>
#include <sstream>

#include "models/architecture.h"
#include "tessera/error.h"

namespace tessera::models {

namespace qwen3 {
Architecture architecture();
}
namespace llama {
Architecture architecture();
}
namespace glm4 {
Architecture architecture();
}

namespace {
const std::vector<Architecture>& table() {
  static const std::vector<Architecture> t = {qwen3::architecture(), llama::architecture(), glm4::architecture()};
  return t;
}
}  // namespace

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
  fail(origin, ": architecture '", name, "' is not supported (supported: ", os.str(), ")");
}

}  // namespace tessera::models
