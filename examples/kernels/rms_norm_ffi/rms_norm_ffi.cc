// The example XLA FFI handler of a PJRT kernel package (README "Kernels loaded at run time"): RMSNorm as a
// typed FFI handler (api_version 4 custom call), built against the XLA FFI headers of the jaxlib wheel.
// Tessera dlopens this library, looks up the symbol kernel.json names, and registers it with the plugin's
// PJRT_FFI_Extension for the target the package's StableHLO calls:
//   stablehlo.custom_call @tessera_rms_norm_f32(%x, %w) {api_version = 4 : i32,
//                                                       mhlo.backend_config = {eps = 1.0e-06 : f32}}
// x is [rows, cols] with cols a multiple of dim = the weight's length (qk-norm normalises each head of a
// row); the result has x's shape. The arithmetic follows Tessera's built-in lowering (sum of squares,
// divided by dim, plus eps, square root, one over it, times x, times the weight) in float32.
#include <cmath>
#include <cstddef>
#include <cstdint>

// The FFI API version the handler declares (XLA asks a handler for it when registering it). jaxlib 0.10.2's
// headers say 0.3; xla-cpu-pjrt 0.0.1's runtime implements 0.2 and drops, without an error, a handler that
// declares a newer minor version. The structs this handler reads have the same layout in both (the call frame
// is 168 bytes in each) and it calls no function added in 0.3, so it declares 0.2: the newest version both
// sides know. EXAMPLE_FFI_API_MINOR overrides it (-1: the headers' own version, a test variant).
#include "xla/ffi/api/c_api.h"
#ifndef EXAMPLE_FFI_API_MINOR
#define EXAMPLE_FFI_API_MINOR 2
#endif
#if EXAMPLE_FFI_API_MINOR >= 0
#undef XLA_FFI_API_MINOR
#define XLA_FFI_API_MINOR EXAMPLE_FFI_API_MINOR
#endif
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

#ifndef EXAMPLE_OUTPUT_SCALE
#define EXAMPLE_OUTPUT_SCALE 1.0f  // the tests build a wrong variant (1.5f) to show this handler is what runs
#endif

namespace {

ffi::Error rms_norm(ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> w, ffi::ResultBuffer<ffi::F32> y,
                    float eps) {
  const size_t n = x.element_count(), dim = w.element_count();
  if (dim == 0 || n % dim != 0 || y->element_count() != n)
    return ffi::Error::InvalidArgument("tessera_rms_norm_f32: x's size is not a multiple of the weight's");
  const float* xs = x.typed_data();
  const float* ws = w.typed_data();
  float* ys = y->typed_data();
  for (size_t g = 0; g < n / dim; ++g) {
    const float* xr = xs + g * dim;
    float* yr = ys + g * dim;
    float sum = 0.0f;
    for (size_t i = 0; i < dim; ++i) sum += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
    for (size_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv * ws[i] * EXAMPLE_OUTPUT_SCALE;
  }
  return ffi::Error::Success();
}

}  // namespace

#ifndef EXAMPLE_FFI_SYMBOL
#define EXAMPLE_FFI_SYMBOL tessera_rms_norm_f32_ffi
#endif

// The exported handler (the only symbol with default visibility).
XLA_FFI_DEFINE_HANDLER_SYMBOL(EXAMPLE_FFI_SYMBOL, rms_norm,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<float>("eps"));
