// libFuzzer target: arbitrary bytes as generation_config.json through
// GenerationConfig::from_json (and the same bytes as flag overrides, merged and
// validated). Any input must end in success or a tessera::Error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tessera/error.h"
#include "tessera/generation.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  const std::string text(reinterpret_cast<const char*>(data), size);
  GenerationConfig g;
  try {
    g = GenerationConfig::from_json(text, "fuzz/generation_config.json");
  } catch (const Error&) {
    return 0;
  }
  try {
    const GenerationOverrides o = GenerationOverrides::from_json(text, "fuzz/overrides.json");
    (void)GenerationConfig::merged(g, o);
  } catch (const Error&) {
  }
  return 0;
}
