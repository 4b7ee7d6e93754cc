// GGML's K-quant scale packing, shared by the GGUF reader's dequantisers (src/io/gguf_quants.cpp), the
// cpu backend's kernels on the blocks as stored (src/backends/cpu/kernels_quant.cpp) and the Q4_K quantiser
// (src/common/tensor.cpp).
#pragma once
#include <cstdint>

namespace tessera {

// Q4_K and Q5_K pack the 6-bit (scale, min) pairs of their 8 sub-blocks of 32 values into 12 bytes q: pairs
// 0..3 in the low 6 bits of q[j] and q[j + 4]; pairs 4..7 in the nibbles of q[j + 4] with their top 2 bits in
// the top bits of q[j - 4] (scale) and q[j] (min).
inline void k_quant_scale_min(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = static_cast<uint8_t>((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
    *min = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// The inverse: the 8 pairs (each value 0..63) packed into q[12].
inline void k_quant_pack_scale_min(const uint8_t* scale, const uint8_t* min, uint8_t* q) {
  for (int j = 0; j < 4; ++j) {
    q[j] = static_cast<uint8_t>((scale[j] & 63) | ((scale[j + 4] >> 4) << 6));
    q[j + 4] = static_cast<uint8_t>((min[j] & 63) | ((min[j + 4] >> 4) << 6));
    q[j + 8] = static_cast<uint8_t>((scale[j + 4] & 0xf) | ((min[j + 4] & 0xf) << 4));
  }
}

}  // namespace tessera
