// GGML tensor types: block geometry for every known type id, and
// dequantisation to float for the ones we support.
#pragma once
#include <cstddef>
#include <cstdint>

#include "tessera/tensor.h"

namespace tessera::io {

struct GgmlTypeInfo {
  uint32_t id;
  const char* name;     // "F32", "Q4_1", ...
  uint32_t block_size;  // elements per block
  uint32_t type_size;   // bytes per block
  bool dequant;         // we can dequantise it
};

// nullptr for an unknown id.
const GgmlTypeInfo* ggml_type_info(uint32_t id);
// The GGML type id whose blocks a block dtype stores (Q4_K: 12, MXFP4: 39, ...); throws Error for a dtype
// that is not a GGML block format we dequantise (floats, the row-interleaved _R8 forms).
uint32_t ggml_type_id(DType dt);
// Comma-separated names of the types we can dequantise (for error messages).
const char* ggml_supported_types();

// Dequantises `nblocks` consecutive blocks of type `id` from `src` into `dst`
// ([nblocks * block_size] floats). `id` must have dequant == true.
void dequantize_blocks(uint32_t id, const uint8_t* src, float* dst, size_t nblocks);

}  // namespace tessera::io
