// libFuzzer target: arbitrary bytes through the GGUF parser, every metadata
// getter, every tensor dequantised, and the llama -> Hugging Face view. Any
// input must end in success or a tessera::Error, never a crash or a hang.
#include <cstddef>
#include <cstdint>

#include "io/gguf.h"
#include "io/weight_source.h"
#include "tessera/error.h"

namespace {

void touch(const tessera::Tensor& t) {
  volatile uint8_t sink = t.nbytes() ? static_cast<const uint8_t*>(t.data)[t.nbytes() - 1] : 0;
  (void)sink;
}

// Calls every getter on every key: each must return or throw Error.
void read_metadata(const tessera::io::GgufFile& g) {
  for (const auto& k : g.keys()) {
    auto swallow = [](auto&& fn) {
      try {
        fn();
      } catch (const tessera::Error&) {
      }
    };
    swallow([&] { g.get_string(k); });
    swallow([&] { g.get_int(k); });
    swallow([&] { g.get_float(k); });
    swallow([&] { g.get_bool(k); });
    swallow([&] { g.get_string_array(k); });
    swallow([&] { g.get_int_array(k); });
    swallow([&] { g.get_float_array(k); });
    swallow([&] { g.array_size(k); });
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  std::shared_ptr<io::GgufFile> g;
  try {
    g = io::GgufFile::parse(data, size, "fuzz.gguf");
  } catch (const Error&) {
    return 0;
  }
  read_metadata(*g);
  for (const auto& t : g->tensors()) {
    if (t.nbytes > (64u << 20)) continue;  // keep each run fast; the sizes were validated against the input
    try {
      touch(g->load_tensor(t.name, DType::F32));
      touch(g->load_tensor(t.name, DType::BF16));
    } catch (const Error&) {
    }
  }
  try {
    auto src = io::open_gguf(g);
    for (const auto& m : src->tensors()) {
      try {
        touch(src->load(m.name, DType::F32));
      } catch (const Error&) {
      }
    }
  } catch (const Error&) {
  }
  return 0;
}
