// libFuzzer target: arbitrary bytes as config.json, through the bounded JSON
// reader and every registered architecture's config parser (whatever
// `architectures` says), then the weight list of a small accepted config.
// Any input must end in success or a tessera::Error, never a crash or hang.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "io/json_util.h"
#include "models/architecture.h"
#include "tessera/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  nlohmann::json j;
  try {
    j = io::parse_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz/config.json");
  } catch (const Error&) {
    return 0;
  }
  // The registry path the loader takes: architectures[0] names the parser.
  try {
    if (j.is_object() && j.contains("architectures") && j["architectures"].is_array() &&
        !j["architectures"].empty() && j["architectures"][0].is_string()) {
      const auto& arch =
          models::find_architecture(j["architectures"][0].get<std::string>(), "fuzz/config.json");
      (void)arch.parse_config(j, "fuzz/config.json");
    }
  } catch (const Error&) {
  }
  for (const std::string& name : models::supported_architectures()) {
    try {
      const auto& arch = models::find_architecture(name, "fuzz/config.json");
      const models::DecoderConfig c = arch.parse_config(j, "fuzz/config.json");
      // Keep each run fast: the weight list is proportional to the layer count.
      if (c.num_layers <= 4 && c.hidden_size <= 4096 && c.vocab_size <= (1 << 20)) (void)arch.weights(c);
    } catch (const Error&) {
    }
  }
  return 0;
}
