// Block layouts follow ggml's public format description; every block starts
// with its f16 scale(s). All reads go through memcpy: blocks are not aligned.
#include "io/gguf_quants.h"

#include <cctype>
#include <cmath>
#include <cstring>
#include <string>

#include "common/ggml_blocks.h"
#include "tessera/error.h"
#include "tessera/tensor.h"

namespace tessera::io {

namespace {

enum : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
  kMXFP4 = 39,
};

constexpr GgmlTypeInfo kTypes[] = {
    {0, "F32", 1, 4, true},          {1, "F16", 1, 2, true},          {2, "Q4_0", 32, 18, true},
    {3, "Q4_1", 32, 20, true},       {6, "Q5_0", 32, 22, true},       {7, "Q5_1", 32, 24, true},
    {8, "Q8_0", 32, 34, true},       {9, "Q8_1", 32, 40, false},      {10, "Q2_K", 256, 84, false},
    {11, "Q3_K", 256, 110, false},   {12, "Q4_K", 256, 144, true},    {13, "Q5_K", 256, 176, true},
    {14, "Q6_K", 256, 210, true},    {15, "Q8_K", 256, 292, false},   {16, "IQ2_XXS", 256, 66, false},
    {17, "IQ2_XS", 256, 74, false},  {18, "IQ3_XXS", 256, 98, false}, {19, "IQ1_S", 256, 50, false},
    {20, "IQ4_NL", 32, 18, false},   {21, "IQ3_S", 256, 110, false},  {22, "IQ2_S", 256, 82, false},
    {23, "IQ4_XS", 256, 136, false}, {24, "I8", 1, 1, false},         {25, "I16", 1, 2, false},
    {26, "I32", 1, 4, false},        {27, "I64", 1, 8, false},        {28, "F64", 1, 8, false},
    {29, "IQ1_M", 256, 56, false},   {30, "BF16", 1, 2, true},        {34, "TQ1_0", 256, 54, false},
    {35, "TQ2_0", 256, 66, false},   {39, "MXFP4", 32, 17, true},     {40, "NVFP4", 64, 36, false},
    {41, "Q1_0", 128, 18, false},
};

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// Q4_0: {f16 d; u8 qs[16]}: low nibbles are elements 0..15, high nibbles 16..31; x = (q - 8) * d.
void deq_q4_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0xf) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

// Q4_1: {f16 d; f16 m; u8 qs[16]}: x = q * d + m.
void deq_q4_1(const uint8_t* b, float* y) {
  const float d = half_at(b), m = half_at(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0xf) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// Q5_0: {f16 d; u32 qh; u8 qs[16]}: bit j of qh is the 5th bit of element j; x = (q - 16) * d.
void deq_q5_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int hi0 = ((qh >> j) & 1) << 4, hi1 = ((qh >> (j + 16)) & 1) << 4;
    y[j] = static_cast<float>(((qs[j] & 0xf) | hi0) - 16) * d;
    y[j + 16] = static_cast<float>(((qs[j] >> 4) | hi1) - 16) * d;
  }
}

// Q5_1: {f16 d; f16 m; u32 qh; u8 qs[16]}: x = q * d + m.
void deq_q5_1(const uint8_t* b, float* y) {
  const float d = half_at(b), m = half_at(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int hi0 = ((qh >> j) & 1) << 4, hi1 = ((qh >> (j + 16)) & 1) << 4;
    y[j] = static_cast<float>((qs[j] & 0xf) | hi0) * d + m;
    y[j + 16] = static_cast<float>((qs[j] >> 4) | hi1) * d + m;
  }
}

// Q8_0: {f16 d; i8 qs[32]}: x = q * d.
void deq_q8_0(const uint8_t* b, float* y) {
  const float d = half_at(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

// Q4_K: {f16 d; f16 dmin; u8 scales[12]; u8 qs[128]}, 256 values in 8 sub-blocks of 32.
void deq_q4_k(const uint8_t* b, float* y) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32, y += 64) {
    uint8_t sc, m;
    k_quant_scale_min(is, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    k_quant_scale_min(is + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) y[l] = d1 * static_cast<float>(q[l] & 0xf) - m1;
    for (int l = 0; l < 32; ++l) y[l + 32] = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

// Q5_K: {f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}.
void deq_q5_k(const uint8_t* b, float* y) {
  const float d = half_at(b), dmin = half_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0, is = 0; j < 256; j += 64, is += 2, ql += 32, y += 64) {
    uint8_t sc, m;
    k_quant_scale_min(is, scales, &sc, &m);
    const float d1 = d * sc, m1 = dmin * m;
    k_quant_scale_min(is + 1, scales, &sc, &m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) y[l] = d1 * static_cast<float>((ql[l] & 0xf) + (qh[l] & u1 ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l)
      y[l + 32] = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    u1 = static_cast<uint8_t>(u1 << 2);
    u2 = static_cast<uint8_t>(u2 << 2);
  }
}

// Q6_K: {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}: 6-bit values, 16 sub-blocks of 16.
void deq_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half_at(b + 208);
  for (int n = 0; n < 256; n += 128, ql += 64, qh += 32, sc += 8, y += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}

// MXFP4 (OCP microscaling): {u8 e; u8 qs[16]}: nibbles placed as Q4_0's, each an FP4 E2M1 code (sign bit 3,
// two exponent bits, one mantissa bit); x = fp4(q) * 2^(e - 127), exact in f32 wherever finite (e = 255, NaN
// in the OCP format, is read as the plain power, as Transformers' ldexp and llama.cpp do).
void deq_mxfp4(const uint8_t* b, float* y) {
  static constexpr double kFp4[16] = {0.0,  0.5,  1.0,  1.5,  2.0,  3.0,  4.0,  6.0,
                                      -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0};
  const int e = static_cast<int>(b[0]) - 127;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(std::ldexp(kFp4[b[1 + j] & 0xf], e));
    y[j + 16] = static_cast<float>(std::ldexp(kFp4[b[1 + j] >> 4], e));
  }
}

template <void (*Fn)(const uint8_t*, float*)>
void each_block(const uint8_t* src, float* dst, size_t nblocks, size_t bytes, size_t elems) {
  for (size_t i = 0; i < nblocks; ++i) Fn(src + i * bytes, dst + i * elems);
}

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  for (const auto& t : kTypes)
    if (t.id == id) return &t;
  return nullptr;
}

uint32_t ggml_type_id(DType dt) {
  const std::string name = dtype_name(dt);
  if (is_quantized(dt))
    for (const GgmlTypeInfo& t : kTypes) {
      std::string upper = name;
      for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      if (t.dequant && upper == t.name) return t.id;
    }
  fail("no GGML block type stores ", name);
}

const char* ggml_supported_types() {
  return "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, MXFP4";
}

void dequantize_blocks(uint32_t id, const uint8_t* src, float* dst, size_t n) {
  switch (id) {
    case kF32:
      std::memcpy(dst, src, n * 4);
      return;
    case kF16:
      for (size_t i = 0; i < n; ++i) dst[i] = half_at(src + 2 * i);
      return;
    case kBF16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      return;
    case kQ4_0:
      return each_block<deq_q4_0>(src, dst, n, 18, 32);
    case kQ4_1:
      return each_block<deq_q4_1>(src, dst, n, 20, 32);
    case kQ5_0:
      return each_block<deq_q5_0>(src, dst, n, 22, 32);
    case kQ5_1:
      return each_block<deq_q5_1>(src, dst, n, 24, 32);
    case kQ8_0:
      return each_block<deq_q8_0>(src, dst, n, 34, 32);
    case kQ4_K:
      return each_block<deq_q4_k>(src, dst, n, 144, 256);
    case kQ5_K:
      return each_block<deq_q5_k>(src, dst, n, 176, 256);
    case kQ6_K:
      return each_block<deq_q6_k>(src, dst, n, 210, 256);
    case kMXFP4:
      return each_block<deq_mxfp4>(src, dst, n, 17, 32);
    default:
      TS_ASSERT(false, "dequantize_blocks: unsupported GGML type ", id);
  }
}

}  // namespace tessera::io
