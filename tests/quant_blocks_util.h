// Random quantised blocks for the kernel tests (test_cpu_kernels_quant.cpp, test_cpu_kernels_moe.cpp):
// random bytes with f16 scales (and offsets / mins) of sensible size, and their exact values as the GGUF
// reader's dequantiser gives them.
#pragma once
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "io/gguf_quants.h"
#include "tessera/tensor.h"

namespace tessera::test_blocks {

// [rows, K] of block format `dt` (K a whole number of blocks): the bytes, and their values [rows * K].
struct RandomBlocks {
  std::vector<uint8_t> raw;
  std::vector<float> value;
};

inline RandomBlocks random_blocks(DType dt, int64_t rows, int64_t K, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> scale(0.001f, 0.05f), offset(-0.4f, 0.1f), dmin(0.0f, 0.02f);
  std::uniform_int_distribution<int> byte(0, 255);
  const bool kquant = dtype_block(dt) == 256;
  const size_t bytes = dtype_bytes(dt, dtype_block(dt));
  const size_t nblocks = static_cast<size_t>(rows * K / dtype_block(dt));
  RandomBlocks w;
  w.raw.resize(nblocks * bytes);
  for (auto& b : w.raw) b = static_cast<uint8_t>(byte(rng));
  // The f16 fields: d (last in Q6_K, first elsewhere), and Q4_1 / Q5_1's m or Q4_K / Q5_K's dmin.
  std::uniform_int_distribution<int> e8m0(118, 128);  // MXFP4's scale byte: 2^-9 .. 2^1
  for (size_t b = 0; b < nblocks; ++b) {
    uint8_t* blk = w.raw.data() + b * bytes;
    if (dt == DType::MXFP4) {
      blk[0] = static_cast<uint8_t>(e8m0(rng));
      continue;
    }
    const uint16_t dh = f32_to_f16(kquant ? scale(rng) / 16 : scale(rng));
    std::memcpy(blk + (dt == DType::Q6_K ? 208 : 0), &dh, 2);
    const bool second = dt == DType::Q4_1 || dt == DType::Q5_1 || dt == DType::Q4_K || dt == DType::Q5_K;
    const uint16_t mh = f32_to_f16(kquant ? dmin(rng) / 16 : offset(rng));
    if (second) std::memcpy(blk + 2, &mh, 2);
  }
  w.value.resize(static_cast<size_t>(rows * K));
  io::dequantize_blocks(io::ggml_type_id(dt), w.raw.data(), w.value.data(), nblocks);
  return w;
}

}  // namespace tessera::test_blocks
