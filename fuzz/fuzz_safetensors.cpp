// libFuzzer target: arbitrary bytes through the safetensors header parser, then
// every tensor loaded as each float dtype. Any input must end in success or a
// tessera::Error, never a crash, hang or sanitizer report.
#include <cstddef>
#include <cstdint>

#include "io/safetensors.h"
#include "tessera/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  try {
    const io::SafetensorsHeader h = io::parse_safetensors_header(data, size, "fuzz.safetensors");
    for (const auto& e : h.tensors) {
      for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
        try {
          Tensor t = io::load_safetensors_tensor(data, h, e, dt, nullptr, "fuzz.safetensors");
          volatile uint8_t sink = t.nbytes() ? static_cast<const uint8_t*>(t.data)[t.nbytes() - 1] : 0;
          (void)sink;
        } catch (const Error&) {
        }
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
