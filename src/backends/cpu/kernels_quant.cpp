// Matmuls with block-quantised weights (GGML's Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, as a GGUF file
// stores them; layouts in tensor.h), computed from the blocks as stored. Every format is read as sub-blocks
// of 32 values: 32 small integers q (signed, or unsigned 0..31 with an offset), one f32 scale per 16 values
// (the same for both halves but in Q6_K, whose scales are per 16) and one f32 offset m; value = d * q + m. A
// K-quant block (256 values) is 8 sub-blocks whose d = (super-block scale) * (6- or 8-bit sub-scale) and
// m = -(min scale) * (6-bit min), both exact in f32.
//  * Decode (matmul_rows, and matmul / matmul_multi below kGemmMinRows rows): x is quantised once per call,
//    per row and block of 32, to int8 (q = round-half-even(x * 127 / max|x|), scale max|x| / 127 in f32; the
//    same integers on every instruction set), and each weight sub-block meets it in an integer dot product:
//    on AVX2 one vpmaddubsw (unsigned x signed bytes into int16 pairs) and one vpmaddwd per 32 weights, the
//    dots of 8 sub-blocks folded into one vector and scaled with one FMA (see "decode: groups of 8" below).
//    An offset m adds m * (x scale * sum of the x quants), kept per block. Weights are read once per step
//    whatever M: a chunk of 64 weight rows is dotted with every x row (in passes of up to 4) before the next
//    chunk is read, and each output is the same sum whatever M (rows never share an accumulator).
//  * Prefill (M >= kGemmMinRows in matmul / matmul_multi): the int8 gemm (kernels_quant.inc): x quantised
//    as for decode, weight rows unpacked 16 at a time into panels of unsigned bytes, vpdpbusd tiles.
//  * Bf16Dot::Exact (exact_bf16_matmul): x stays f32: prefill on chunks of weight rows dequantised to f32
//    through the f32 gemm, decode on chunks of 64 rows and the f32 decode kernel: bit for bit what the
//    dequantised f32 checkpoint gives, at a lower rate.
// The AVX2 kernels (kernels_quant_avx2.inc) are compiled four times, over four forms of the integer dot
// (cpu::Int8Dot): the AVX2 pair; vpdpbusd of AVX-VNNI; vpdpbusd's EVEX form (AVX512-VNNI: 256-bit vectors
// in decode, 512-bit in the prefill gemm); and the VNNI kernels' code with the AVX2 pair standing in for
// vpdpbusd, which tests that code on any AVX2 machine. The integers are the same in all four, so are the
// outputs.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_simd.h"
#include "backends/cpu/thread_pool.h"
#include "common/ggml_blocks.h"
#include "tessera/error.h"

namespace tessera::cpu {

namespace {

constexpr int64_t QK = 32;           // values per sub-block (and per block of the quantised x)
constexpr int64_t kGemmMinRows = 8;  // as kernels_matmul.cpp: from here on matmul() takes the prefill path
constexpr int64_t kChunkRows = 64;   // weight rows per scheduling chunk of the decode kernel
constexpr int GR = 4;                // x rows per pass of the decode kernel

// Per format: sub-blocks of 32 per block, bytes per block, and how its quants meet x: kSigned (q may be
// negative: vpmaddubsw takes |q| and moves q's sign onto x), kMin (an offset m per sub-block), kTwo (two
// scales per sub-block, one per 16 values).
template <DType WT>
struct Fmt;
template <int Sub, size_t Bytes, bool Signed, bool Min, bool Two = false>
struct FmtOf {
  static constexpr int kSub = Sub;
  static constexpr size_t kBytes = Bytes;
  static constexpr bool kSigned = Signed, kMin = Min, kTwo = Two;
  static constexpr size_t kD = Two ? 208 : 0;  // offset of the f16 scale d (Q6_K's is last); m / dmin at 2
};
template <>
struct Fmt<DType::Q8_0> : FmtOf<1, 34, true, false> {};
template <>
struct Fmt<DType::Q4_0> : FmtOf<1, 18, true, false> {};
template <>
struct Fmt<DType::Q4_1> : FmtOf<1, 20, false, true> {};
template <>
struct Fmt<DType::Q5_0> : FmtOf<1, 22, true, false> {};
template <>
struct Fmt<DType::Q5_1> : FmtOf<1, 24, false, true> {};
template <>
struct Fmt<DType::Q4_K> : FmtOf<8, 144, false, true> {};
template <>
struct Fmt<DType::Q5_K> : FmtOf<8, 176, false, true> {};
template <>
struct Fmt<DType::Q6_K> : FmtOf<8, 210, true, false, true> {};
template <>
struct Fmt<DType::MXFP4> : FmtOf<1, 17, true, false> {};  // scale: the E8M0 byte at 0 (block_d)

// MXFP4's quants: twice the FP4 E2M1 value of each code (integers, -12..12), and the same plus 12 (what
// makes them unsigned for the integer dot); its scale byte e as the f32 2^(e - 128) (half the block's power
// of two, for the doubled quants; 2^-127 and 2^-128 are subnormal, built from their bits).
constexpr int8_t kMxfp4Quants[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
constexpr int kMxfp4Offset = 12;
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t u16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

// The scales of one block from its f16 fields d and d2 (converted by the caller's instruction set): d, or a
// K-quant's sub-blocks' d and m (d2 = Q4_1 / Q5_1's m, Q4_K / Q5_K's dmin).
template <DType WT>
inline void block_scales(const uint8_t* blk, float d, float d2, float* dlo, float* dhi, float* m) {
  if constexpr (WT == DType::Q4_K || WT == DType::Q5_K) {
    for (int s = 0; s < 8; ++s) {
      uint8_t sc, mn;
      k_quant_scale_min(s, blk + 4, &sc, &mn);
      dlo[s] = dhi[s] = d * static_cast<float>(sc);
      m[s] = -(d2 * static_cast<float>(mn));
    }
  } else if constexpr (WT == DType::Q6_K) {
    const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
    for (int s = 0; s < 8; ++s) {
      dlo[s] = d * static_cast<float>(sc[2 * s]);
      dhi[s] = d * static_cast<float>(sc[2 * s + 1]);
      m[s] = 0.0f;
    }
  } else {
    static_assert(Fmt<WT>::kSub == 1);
    *dlo = *dhi = d;
    *m = d2;
  }
}

// fn(std::integral_constant<DType, wt>{}) for a block-quantised wt.
template <typename Fn>
void by_format(DType wt, Fn&& fn) {
  switch (wt) {
    case DType::Q8_0:
      return fn(std::integral_constant<DType, DType::Q8_0>{});
    case DType::Q4_0:
      return fn(std::integral_constant<DType, DType::Q4_0>{});
    case DType::Q4_1:
      return fn(std::integral_constant<DType, DType::Q4_1>{});
    case DType::Q5_0:
      return fn(std::integral_constant<DType, DType::Q5_0>{});
    case DType::Q5_1:
      return fn(std::integral_constant<DType, DType::Q5_1>{});
    case DType::Q4_K:
      return fn(std::integral_constant<DType, DType::Q4_K>{});
    case DType::Q5_K:
      return fn(std::integral_constant<DType, DType::Q5_K>{});
    case DType::Q6_K:
      return fn(std::integral_constant<DType, DType::Q6_K>{});
    case DType::MXFP4:
      return fn(std::integral_constant<DType, DType::MXFP4>{});
    default:
      TS_ASSERT(false, "quantised kernel for ", dtype_name(wt));
  }
}

// x quantised per row and block: q [M][K] int8; per row (stride ld = nb rounded up to 8, zeros past nb) and
// block of 32: d the scale, s = d * (sum of the block's q), isum that sum as an integer; off16 [M][2 ld]
// 32 * the sums per 16 values, each run of 16 (8 blocks) in the lane order of the AVX2 Q6_K kernel's u0, u1
// (the AVX2 kernels take offset formats' quants unsigned and subtract offset * sum after the integer dot,
// which is exact).
struct QuantX {
  const int8_t* q;
  const float* d;
  const float* s;
  const int32_t* isum;
  const int32_t* off16;
  const int32_t* isum16;  // [M][2 ld]: the sums of values 0..15 and 16..31 of each block, in block order
  int64_t K, nb, ld;
};

// One block of 32 x values to int8: q = round-half-even(x / scale), scale = max|x| / 127; the sums of the
// quants of values 0..15 and 16..31 into half. The same integers on every instruction set.
using BlockQuantizer = float (*)(const float* xb, int8_t* qb, int32_t* half);

float quantize_block_scalar(const float* xb, int8_t* qb, int32_t* half) {
  float amax = 0.0f;
  bool nan = false;
  for (int64_t j = 0; j < QK; ++j) {
    amax = std::max(amax, std::fabs(xb[j]));
    nan = nan || std::isnan(xb[j]);
  }
  // A NaN x makes the block's scale NaN, so the rows it enters come out NaN (as a float dot product would)
  // and the model's non-finite logit check sees it; the quants stay defined either way.
  const float scale = nan ? std::numeric_limits<float>::quiet_NaN() : amax / 127.0f;
  const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
  half[0] = half[1] = 0;
  for (int64_t j = 0; j < QK; ++j) {
    // A NaN product (a NaN x, or inf x 0 past an infinite max) counts 0; infinities clamp to +-127.
    const float p = xb[j] * inv;
    const float v = std::nearbyint(std::isnan(p) ? 0.0f : std::clamp(p, -127.0f, 127.0f));  // ties to even
    const int32_t iv = static_cast<int32_t>(v);
    qb[j] = static_cast<int8_t>(iv);
    half[j / 16] += iv;
  }
  return scale;
}

// Into scratch slot 0 of the calling thread (shared with the workers for the duration of one kernel).
QuantX quantize_x(const float* x, int64_t M, int64_t K, BlockQuantizer quantize_block) {
  const int64_t nb = K / QK, ld = (nb + 7) / 8 * 8;
  const int64_t qfloats = (M * K + 63) / 64 * 16;  // the int8 quants, in whole 64-byte lines
  float* buf = scratch(0, qfloats + 3 * M * ld + 4 * M * ld);
  auto* q = reinterpret_cast<int8_t*>(buf);
  float* d = buf + qfloats;
  float* s = d + M * ld;
  auto* isum = reinterpret_cast<int32_t*>(s + M * ld);
  int32_t* off16 = isum + M * ld;
  int32_t* isum16 = off16 + 2 * M * ld;
  std::fill(d, d + 7 * M * ld, 0.0f);  // the padding of d, s, isum, off16, isum16 (0.0f is all zero bits)
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t b = 0; b < nb; ++b) {
      int32_t half[2];
      const float scale = quantize_block(x + m * K + b * QK, q + m * K + b * QK, half);
      // Block b's halves in its run of 16: [blocks 0-3 first halves, their second halves, blocks 4-7 ...].
      int32_t* run = off16 + m * 2 * ld + b / 8 * 16 + (b % 8) / 4 * 8 + b % 4;
      run[0] = 32 * half[0];
      run[4] = 32 * half[1];
      d[m * ld + b] = scale;
      s[m * ld + b] = scale * static_cast<float>(half[0] + half[1]);
      isum[m * ld + b] = half[0] + half[1];
      isum16[m * 2 * ld + 2 * b] = half[0];
      isum16[m * 2 * ld + 2 * b + 1] = half[1];
    }
  }
  return {q, d, s, isum, off16, isum16, K, nb, ld};
}

// The int8 gemm's x panel (kernels_quant.inc), per group of G values and tile of MR x rows: the quants of the
// MR rows 4 by 4 ([G / 4][MR][4] bytes), then per row the block's scale d, s = d * (quant sum) and the
// integer correction -offset * (the group's quant sum), f32 / f32 / int32 [MR] each.
template <int G, int MR>
constexpr size_t x_group_bytes() {
  return static_cast<size_t>(G) * MR + 12 * MR;
}

// ---- rows interleaved by 8 (Q4_K_R8, Q6_K_R8, Q4_0_R8, Q4_1_R8)
//
// Rows 8g .. 8g + 7 of the matrix are one run of K / (block values) blocks of 8 * (the format's block bytes),
// block b holding block b of each of the 8 rows, field by field, so that 32 bytes hold 4 consecutive quants
// of each row and a vector lane stays one row throughout (the decode kernel's 8 dots need no horizontal
// sums). Q4_K_R8 (1152 bytes): d [8] f16 | dmin [8] f16 | scale byte j of row r at 32 + 8j + r (12 x 8) |
// quants at
//   128 + 256c + 32k + 4r + i: byte 32c + 4k + i of row r's qs (low nibble sub-block 2c, high 2c + 1).
// Q6_K_R8 (1680 bytes): d [8] f16 | scale s of row r at 16 + 8s + r (16 x 8, int8) | then per half h of the
//   block and k = 0..7, 96 bytes in the order the kernel reads them: at 144 + 768h + 96k + 32p + 4r + i, ql
//   byte 64h + 32p + 4k + i (p = 0, 1), and at 144 + 768h + 96k + 64 + 4r + i, qh byte 32h + 4k + i.
// Q4_0_R8 (144 bytes): d [8] f16 | quants at 16 + 32k + 4r + i: byte 4k + i of row r's qs (k = 0..3; low
//   nibbles values 4k + i, high nibbles 16 + 4k + i).
// Q4_1_R8 (160 bytes): d [8] f16 | m [8] f16 | quants at 32 + 32k + 4r + i, as Q4_0_R8's.
// MXFP4_R8 (136 bytes): e [8] (the E8M0 scale bytes) | quants at 8 + 32k + 4r + i, as Q4_0_R8's.
// A group is as many bytes as its 8 rows, so a matrix keeps its size and row blocks of it (offsets in whole
// groups) keep their place.
constexpr int kR8 = 8;

// Each stored format with an interleaved form, and that form.
constexpr std::pair<DType, DType> kRows8Forms[] = {{DType::Q4_K, DType::Q4_K_R8},
                                                   {DType::Q6_K, DType::Q6_K_R8},
                                                   {DType::Q4_0, DType::Q4_0_R8},
                                                   {DType::Q4_1, DType::Q4_1_R8},
                                                   {DType::MXFP4, DType::MXFP4_R8}};
constexpr bool is_rows8(DType dt) {
  for (const auto& [stored, r8] : kRows8Forms)
    if (dt == r8) return true;
  return false;
}
constexpr DType stored_of(DType dt) {
  for (const auto& [stored, r8] : kRows8Forms)
    if (dt == r8) return stored;
  return dt;
}

// fn(std::integral_constant<DType, wt>) for an interleaved form wt, as by_format for the stored ones.
template <typename Fn>
void by_rows8_format(DType wt, Fn&& fn) {
  switch (wt) {
    case DType::Q4_K_R8:
      return fn(std::integral_constant<DType, DType::Q4_K_R8>{});
    case DType::Q6_K_R8:
      return fn(std::integral_constant<DType, DType::Q6_K_R8>{});
    case DType::Q4_0_R8:
      return fn(std::integral_constant<DType, DType::Q4_0_R8>{});
    case DType::Q4_1_R8:
      return fn(std::integral_constant<DType, DType::Q4_1_R8>{});
    case DType::MXFP4_R8:
      return fn(std::integral_constant<DType, DType::MXFP4_R8>{});
    default:
      TS_ASSERT(false, "interleaved kernel for ", dtype_name(wt));
  }
}

// Q4_0_R8 / Q4_1_R8 / MXFP4_R8 blocks: bytes per block of 8 rows, and where the quants start (after the 8 d,
// and the 8 m of Q4_1; after MXFP4's 8 scale bytes).
template <DType WT>
struct Q4Rows8 {
  static constexpr bool kMin = WT == DType::Q4_1_R8, kMx = WT == DType::MXFP4_R8;
  static constexpr size_t kBytes = kMx ? 136 : kMin ? 160 : 144, kQuants = kMx ? 8 : kMin ? 32 : 16;
};

// f(stored offset, interleaved offset, bytes) for each run that row r's block (of the stored format) shares
// with its group's interleaved block.
template <typename F>
void rows8_runs(DType stored, int r, F&& f) {
  if (stored == DType::MXFP4) {
    f(0, r, 1);
    for (int q = 0; q < 16; q += 4) f(1 + q, 8 + q / 4 * 32 + 4 * r, 4);
  } else if (stored == DType::Q4_0 || stored == DType::Q4_1) {
    const int qs = stored == DType::Q4_0 ? 2 : 4, iq = stored == DType::Q4_0 ? 16 : 32;  // quants' offsets
    f(0, 2 * r, 2);
    if (stored == DType::Q4_1) f(2, 16 + 2 * r, 2);
    for (int q = 0; q < 16; q += 4) f(qs + q, iq + q / 4 * 32 + 4 * r, 4);
  } else if (stored == DType::Q4_K) {
    f(0, 2 * r, 2);
    f(2, 16 + 2 * r, 2);
    for (int j = 0; j < 12; ++j) f(4 + j, 32 + 8 * j + r, 1);
    for (int q = 0; q < 128; q += 4) f(16 + q, 128 + q / 32 * 256 + q % 32 / 4 * 32 + 4 * r, 4);
  } else {
    TS_ASSERT(stored == DType::Q6_K, "rows interleaved by 8 of ", dtype_name(stored));
    for (int q = 0; q < 128; q += 4) f(q, 144 + q / 64 * 768 + q % 32 / 4 * 96 + q % 64 / 32 * 32 + 4 * r, 4);
    for (int q = 0; q < 64; q += 4) f(128 + q, 144 + q / 32 * 768 + q % 32 / 4 * 96 + 64 + 4 * r, 4);
    for (int j = 0; j < 16; ++j) f(192 + j, 16 + 8 * j + r, 1);
    f(208, 2 * r, 2);
  }
}

// A run of rows8_runs (1, 2 or 4 bytes: fixed-size copies the compiler inlines).
inline void copy_run(uint8_t* dst, const uint8_t* src, int n) {
  if (n == 4) {
    std::memcpy(dst, src, 4);
  } else if (n == 2) {
    std::memcpy(dst, src, 2);
  } else {
    *dst = *src;
  }
}

// Group g of an interleaved matrix back to its 8 rows as stored (dst [8][row_bytes]).
void deinterleave_group(DType r8, const uint8_t* w, size_t row_bytes, int64_t g, uint8_t* dst) {
  const DType stored = stored_of(r8);
  const size_t bb = dtype_bytes(stored, dtype_block(stored));
  const uint8_t* grp = w + static_cast<size_t>(g) * kR8 * row_bytes;
  for (size_t b = 0; b < row_bytes / bb; ++b)
    for (int r = 0; r < kR8; ++r)
      rows8_runs(stored, r, [&](int so, int io, int n) {
        copy_run(dst + r * row_bytes + b * bb + so, grp + b * kR8 * bb + io, n);
      });
}

// Group g deinterleaved into a buffer of the calling thread (valid until its next call).
const uint8_t* group_rows(DType r8, const uint8_t* w, size_t row_bytes, int64_t g) {
  thread_local std::vector<uint8_t> bytes;
  bytes.resize(kR8 * row_bytes);
  deinterleave_group(r8, w, row_bytes, g, bytes.data());
  return bytes.data();
}

}  // namespace

// ---------------------------------------------------------------- portable scalar kernels
namespace qscalar {
namespace {

// One block's sub-blocks: the quants of each as signed values (the unsigned formats' are 0..31 or 0..15) and
// its scales and offset.
template <DType WT>
struct Unpacked {
  int8_t q[Fmt<WT>::kSub][QK];
  float dlo[Fmt<WT>::kSub], dhi[Fmt<WT>::kSub], m[Fmt<WT>::kSub];
};

template <DType WT>
inline void unpack(const uint8_t* blk, Unpacked<WT>& u) {
  using F = Fmt<WT>;
  block_scales<WT>(blk, WT == DType::MXFP4 ? e8m0_half(blk[0]) : f16_to_f32(u16_at(blk + F::kD)),
                   F::kMin ? f16_to_f32(u16_at(blk + 2)) : 0.0f, u.dlo, u.dhi, u.m);
  if constexpr (WT == DType::Q8_0) {
    for (int j = 0; j < QK; ++j) u.q[0][j] = static_cast<int8_t>(blk[2 + j]);
  } else if constexpr (WT == DType::MXFP4) {
    for (int j = 0; j < 16; ++j) {
      u.q[0][j] = kMxfp4Quants[blk[1 + j] & 0xf];
      u.q[0][j + 16] = kMxfp4Quants[blk[1 + j] >> 4];
    }
  } else if constexpr (Fmt<WT>::kSub == 1) {  // Q4_0, Q4_1, Q5_0, Q5_1: nibbles (and a fifth bit in qh)
    constexpr bool five = WT == DType::Q5_0 || WT == DType::Q5_1;
    const uint8_t* p = blk + (Fmt<WT>::kMin ? 4 : 2);
    uint32_t qh = 0;
    if constexpr (five) {
      std::memcpy(&qh, p, 4);
      p += 4;
    }
    const int off = Fmt<WT>::kMin ? 0 : five ? 16 : 8;
    for (int j = 0; j < 16; ++j) {
      const int lo = (p[j] & 0xf) | static_cast<int>(((qh >> j) & 1) << 4);
      const int hi = (p[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1) << 4);
      u.q[0][j] = static_cast<int8_t>(lo - off);
      u.q[0][j + 16] = static_cast<int8_t>(hi - off);
    }
  } else if constexpr (WT == DType::Q4_K || WT == DType::Q5_K) {
    // Sub-blocks 2c and 2c + 1 are the low and high nibbles of 32 bytes; Q5_K's fifth bits are bits 2c and
    // 2c + 1 of the 32 bytes of qh.
    const uint8_t* qh = blk + 16;
    const uint8_t* qs = blk + (WT == DType::Q5_K ? 48 : 16);
    for (int s = 0; s < 8; ++s) {
      const uint8_t* q = qs + 32 * (s / 2);
      const int shift = 4 * (s & 1);
      for (int j = 0; j < QK; ++j) {
        int v = (q[j] >> shift) & 0xf;
        if constexpr (WT == DType::Q5_K) v |= ((qh[j] >> s) & 1) << 4;
        u.q[s][j] = static_cast<int8_t>(v);
      }
    }
  } else {  // Q6_K: per half of 128 values, 64 bytes of low nibbles and 32 of 2-bit high parts
    for (int s = 0; s < 8; ++s) {
      const int h = s / 4, k = s % 4;
      const uint8_t* ql = blk + 64 * h + 32 * (k & 1);
      const uint8_t* qh = blk + 128 + 32 * h;
      for (int j = 0; j < QK; ++j) {
        const int v = ((ql[j] >> (4 * (k >> 1))) & 0xf) | (((qh[j] >> (2 * k)) & 3) << 4);
        u.q[s][j] = static_cast<int8_t>(v - 32);
      }
    }
  }
}

template <DType WT, int MX>
inline void row_dots(const uint8_t* wr, const QuantX& qx, int64_t m0, float (&out)[MX]) {
  using F = Fmt<WT>;
  float acc[MX], macc[MX];
  for (int i = 0; i < MX; ++i) acc[i] = macc[i] = 0.0f;
  Unpacked<WT> u;
  for (int64_t b = 0; b < qx.nb / F::kSub; ++b) {
    unpack<WT>(wr + static_cast<size_t>(b) * F::kBytes, u);
    for (int s = 0; s < F::kSub; ++s) {
      const int64_t xb = b * F::kSub + s;
      for (int i = 0; i < MX; ++i) {
        const int8_t* xq = qx.q + (m0 + i) * qx.K + xb * QK;
        const float xd = qx.d[(m0 + i) * qx.ld + xb];
        int32_t lo = 0, hi = 0;
        for (int j = 0; j < 16; ++j) lo += u.q[s][j] * xq[j];
        for (int j = 16; j < QK; ++j) hi += u.q[s][j] * xq[j];
        if constexpr (F::kTwo) {
          acc[i] += u.dlo[s] * xd * static_cast<float>(lo);
          acc[i] += u.dhi[s] * xd * static_cast<float>(hi);
        } else {
          acc[i] += u.dlo[s] * xd * static_cast<float>(lo + hi);
        }
        if constexpr (F::kMin) macc[i] += u.m[s] * qx.s[(m0 + i) * qx.ld + xb];
      }
    }
  }
  for (int i = 0; i < MX; ++i) out[i] = acc[i] + macc[i];
}

template <DType WT>
inline void dequant_row(const uint8_t* wr, int64_t K, float* y) {
  using F = Fmt<WT>;
  Unpacked<WT> u;
  for (int64_t b = 0; b < K / (QK * F::kSub); ++b) {
    unpack<WT>(wr + static_cast<size_t>(b) * F::kBytes, u);
    for (int s = 0; s < F::kSub; ++s, y += QK)
      for (int j = 0; j < QK; ++j)
        y[j] = static_cast<float>(u.q[s][j]) * (j < 16 ? u.dlo[s] : u.dhi[s]) + u.m[s];
  }
}

// The int8 gemm's tile (kernels_quant_avx2.inc describes it) in scalar code: the same integers, then the
// same float operations in the same order (std::fma is the vector FMA's single rounding), so the same bits.
// No AMX here (the AMX functions are never called: gemm_rows takes them only where kGemmZmm).
constexpr int kGemmMR = 4;
constexpr bool kGemmZmm = false;
template <int G>
inline void gemm_amx_config() {}
inline void gemm_amx_release() {}
template <int G, int kOff, bool kMin>
inline void gemm_amx_tile(const uint8_t*, int64_t, const QuantX&, int64_t, float (&)[16][16]) {}

template <DType WT>
inline void unpack_bytes(const uint8_t* blk, int off, uint8_t (&q)[Fmt<WT>::kSub][QK], float* dlo, float* dhi,
                         float* m) {
  Unpacked<WT> u;
  unpack<WT>(blk, u);
  for (int s = 0; s < Fmt<WT>::kSub; ++s) {
    for (int j = 0; j < QK; ++j) q[s][j] = static_cast<uint8_t>(u.q[s][j] + off);
    dlo[s] = u.dlo[s];
    dhi[s] = u.dhi[s];
    m[s] = u.m[s];
  }
}

template <int G, bool kMin, bool kWide>
inline void gemm_tile(const uint8_t* panel, const uint8_t* px, int64_t ng, float (&out)[kGemmMR][16]) {
  constexpr int MR = kGemmMR;
  constexpr size_t kQ = 16 * G, kStride = kQ + 64 + (kMin ? 64 : 0);
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < 16; ++r) out[i][r] = 0.0f;
  for (int64_t g = 0; g < ng; ++g, panel += kStride, px += x_group_bytes<G, MR>()) {
    const uint8_t* p = panel;
    for (int i = 0; i < MR; ++i) {
      float xd, xs;
      int32_t corr;
      std::memcpy(&xd, px + G * MR + 4 * i, 4);
      std::memcpy(&xs, px + G * MR + 4 * (MR + i), 4);
      std::memcpy(&corr, px + G * MR + 4 * (2 * MR + i), 4);
      for (int r = 0; r < 16; ++r) {
        int32_t dot = corr;
        for (int k = 0; k < G / 4; ++k)
          for (int j = 0; j < 4; ++j)
            dot +=
                static_cast<int32_t>(p[64 * k + 4 * r + j]) * static_cast<int8_t>(px[4 * (k * MR + i) + j]);
        float wd, wm;
        std::memcpy(&wd, p + kQ + 4 * r, 4);
        out[i][r] = std::fma(static_cast<float>(dot), wd * xd, out[i][r]);
        if constexpr (kMin) {
          std::memcpy(&wm, p + kQ + 64 + 4 * r, 4);
          out[i][r] = std::fma(wm, xs, out[i][r]);
        }
      }
    }
  }
}

constexpr bool kRows8Kernels = false;  // the _R8 forms: each group's rows as stored, through the above

}  // namespace
#include "backends/cpu/kernels_quant.inc"
}  // namespace qscalar

#if TESSERA_CPU_WIDE
// The AVX2 pair that stands in for vpdpbusd: vpmaddubsw (pairs into int16) and vpmaddwd (pairs of those into
// int32). Exact here: no pair of products reaches int16's limit (weights at most 128 as unsigned bytes, x
// quants at most 127 in magnitude: 2 * 128 * 127 = 32512), so it gives vpdpbusd's integers.
#define TESSERA_DPBUSD_AVX2                                                                            \
  inline __m256i dpbusd(__m256i acc, __m256i u, __m256i s) {                                           \
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))); \
  }

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace qavx2 {
namespace {
constexpr bool kVnni = false, kDpbusdOneInstruction = false, kGemmZmm = false;
constexpr int kGemmMR = 4;  // 8 float and 4 int32 accumulators: 16 vector registers
TESSERA_DPBUSD_AVX2
#include "backends/cpu/kernels_quant_avx2.inc"

// quantize_block_scalar's integers with AVX2: the same products x * inv, rounded by vcvtps2dq in the default
// mode (to nearest, ties to even, as nearbyint). Here only, not in the .inc: the x quantiser does not
// depend on the integer dot.
float quantize_block(const float* xb, int8_t* qb, int32_t* half) {
  __m256 v[4];
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 mx = _mm256_setzero_ps(), nan = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(xb + 8 * k);
    // The operand order makes a NaN lane keep mx, as std::max does in the scalar code.
    mx = _mm256_max_ps(_mm256_andnot_ps(sign, v[k]), mx);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v[k], v[k], _CMP_UNORD_Q));
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float finite_scale = _mm_cvtss_f32(m4) / 127.0f;
  const float scale = _mm256_movemask_ps(nan) ? std::numeric_limits<float>::quiet_NaN() : finite_scale;
  const __m256 inv = _mm256_set1_ps(finite_scale != 0.0f ? 1.0f / finite_scale : 0.0f);
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  __m256i iv[4];
  // As the scalar code: NaN products count 0, the rest clamp to +-127, then round.
  for (int k = 0; k < 4; ++k) {
    __m256 p = _mm256_mul_ps(v[k], inv);
    p = _mm256_and_ps(p, _mm256_cmp_ps(p, p, _CMP_ORD_Q));
    iv[k] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(p, lo), hi));
  }
  const auto total = [](__m256i a) {
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
    return _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1)));
  };
  half[0] = total(_mm256_add_epi32(iv[0], iv[1]));
  half[1] = total(_mm256_add_epi32(iv[2], iv[3]));
  // Packing works within 128-bit lanes: groups of four come out as (0 lo, 1 lo, 2 lo, 3 lo | 0 hi, ...).
  const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]), _mm256_packs_epi32(iv[2], iv[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb),
                      _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  return scale;
}
}  // namespace
#include "backends/cpu/kernels_quant.inc"
}  // namespace qavx2

// The VNNI kernels' code with the AVX2 pair standing in for vpdpbusd (the same integers): what the VNNI
// namespaces below run, testable on any AVX2 machine (Int8Dot::EmulatedVnni; tests only).
namespace qvnni_emulated {
namespace {
constexpr bool kVnni = true, kDpbusdOneInstruction = false, kGemmZmm = false;
constexpr int kGemmMR = 4;
TESSERA_DPBUSD_AVX2
#include "backends/cpu/kernels_quant_avx2.inc"
}  // namespace
#include "backends/cpu/kernels_quant.inc"
}  // namespace qvnni_emulated
#pragma GCC pop_options
#undef TESSERA_DPBUSD_AVX2

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avxvnni")
namespace qavxvnni {
namespace {
constexpr bool kVnni = true, kDpbusdOneInstruction = true, kGemmZmm = false;
constexpr int kGemmMR = 4;
inline __m256i dpbusd(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
#include "backends/cpu/kernels_quant_avx2.inc"
}  // namespace
#include "backends/cpu/kernels_quant.inc"
}  // namespace qavxvnni
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC diagnostic push
// GCC 12 intrinsics self-initialise "undefined" vectors (__m512 __Y = __Y), which -Wuninitialized flags.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx2,fma,f16c,avx512f,avx512vl,avx512vnni,amx-tile,amx-int8")
namespace qavx512vnni {  // the EVEX form: 256-bit vectors for decode, 512-bit in the prefill gemm
namespace {
constexpr bool kVnni = true, kDpbusdOneInstruction = true, kGemmZmm = true;
constexpr int kGemmMR = 8;  // 8 float and 8 int32 accumulators of 32 vector registers
inline __m256i dpbusd(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
#include "backends/cpu/kernels_quant_avx2.inc"
}  // namespace
#include "backends/cpu/kernels_quant.inc"
}  // namespace qavx512vnni
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif  // TESSERA_CPU_WIDE

namespace {

bool use_avx2() {
#if TESSERA_CPU_WIDE
  return active_isa() != Isa::Scalar;
#else
  return false;
#endif
}

void gemv_chunk(DType wt, const uint8_t* w, size_t row_bytes, const QuantX& qx, int64_t M, int64_t n0,
                int64_t n1, const float* bias, float* y, int64_t ldy) {
#if TESSERA_CPU_WIDE
  if (use_avx2()) {
    switch (active_int8_dot()) {
      case Int8Dot::Avx2:
        return qavx2::gemv_chunk(wt, w, row_bytes, qx, M, n0, n1, bias, y, ldy);
      case Int8Dot::AvxVnni:
        return qavxvnni::gemv_chunk(wt, w, row_bytes, qx, M, n0, n1, bias, y, ldy);
      case Int8Dot::Avx512Vnni:
        return qavx512vnni::gemv_chunk(wt, w, row_bytes, qx, M, n0, n1, bias, y, ldy);
      case Int8Dot::EmulatedVnni:
        return qvnni_emulated::gemv_chunk(wt, w, row_bytes, qx, M, n0, n1, bias, y, ldy);
    }
  }
#endif
  qscalar::gemv_chunk(wt, w, row_bytes, qx, M, n0, n1, bias, y, ldy);
}

// The int8 gemm's entry points of the active instruction set's namespace.
struct GemmFns {
  size_t (*x_bytes)(DType, int64_t, int64_t);
  void (*pack_x)(DType, const QuantX&, int64_t, uint8_t*);
  void (*rows)(DType, const uint8_t*, size_t, const QuantX&, const uint8_t*, bool, int64_t, int64_t, int64_t,
               const float*, float*, int64_t);
};
#define TESSERA_GEMM_FNS(ns) \
  GemmFns { ns::gemm_x_bytes, ns::gemm_pack_x, ns::gemm_rows }

GemmFns gemm_fns() {
#if TESSERA_CPU_WIDE
  if (use_avx2()) {
    switch (active_int8_dot()) {
      case Int8Dot::Avx2:
        return TESSERA_GEMM_FNS(qavx2);
      case Int8Dot::AvxVnni:
        return TESSERA_GEMM_FNS(qavxvnni);
      case Int8Dot::Avx512Vnni:
        return TESSERA_GEMM_FNS(qavx512vnni);
      case Int8Dot::EmulatedVnni:
        return TESSERA_GEMM_FNS(qvnni_emulated);
    }
  }
#endif
  return TESSERA_GEMM_FNS(qscalar);
}
#undef TESSERA_GEMM_FNS

void dequant_rows(DType wt, const uint8_t* w, size_t row_bytes, int64_t K, int64_t r0, int64_t r1, float* y) {
#if TESSERA_CPU_WIDE
  if (use_avx2()) return qavx2::dequant_rows(wt, w, row_bytes, K, r0, r1, y);
#endif
  qscalar::dequant_rows(wt, w, row_bytes, K, r0, r1, y);
}

void check_quant_shape(DType wt, int64_t K) {
  TS_ASSERT(is_quantized(wt), "quantised matmul of ", dtype_name(wt), " weights");
  TS_ASSERT(K % dtype_block(wt) == 0, dtype_name(wt), " weights with K = ", K, " (not a multiple of ",
            dtype_block(wt), ")");
}

// Columns n0 .. n0 + nc of y [M][ldy] from yc [M][nc].
void store_cols(const float* yc, int64_t M, int64_t nc, float* y, int64_t ldy, int64_t n0) {
  for (int64_t m = 0; m < M; ++m)
    std::memcpy(y + m * ldy + n0, yc + m * nc, static_cast<size_t>(nc) * sizeof(float));
}

// Exact prefill: y = x · w^T for one product, in chunks of weight rows dequantised to f32 (scratch slot 2 of
// this thread, shared with the workers of the f32 gemm) and multiplied into a chunk of y (slot 3).
void quant_gemm(const float* x, int64_t M, int64_t K, const MatmulOut& o, DType wt) {
  const size_t row_bytes = dtype_bytes(wt, K);
  // About 8 MiB of f32 weights per chunk: the gemm packs each x block once per chunk and thread, and a
  // chunk is dequantised in a fraction of the time it is multiplied.
  const int64_t chunk =
      std::clamp<int64_t>((int64_t{2048} * 1024 / K) / 16 * 16, 16, std::max<int64_t>(o.N, 16));
  float* wf = scratch(2, chunk * K);
  float* yc = scratch(3, M * chunk);
  const auto* w = static_cast<const uint8_t*>(o.w);
  for (int64_t n0 = 0; n0 < o.N; n0 += chunk) {
    const int64_t nc = std::min(chunk, o.N - n0);
    ThreadPool::instance().parallel_for(nc, 16, [&](int64_t r0, int64_t r1) {
      dequant_rows(wt, w + static_cast<size_t>(n0) * row_bytes, row_bytes, K, r0, r1, wf);
    });
    matmul(x, M, K, wf, DType::F32, nc, o.bias ? o.bias + n0 : nullptr, yc);
    store_cols(yc, M, nc, o.y, o.N, n0);
  }
}

// Prefill with x quantised to int8 (the int8 gemm of kernels_quant.inc): x once for every product, then each
// product's panels of 16 weight rows claimed by the threads in chunks of about 256 KiB of panels (at least
// two chunks per thread where there are enough).
void int8_gemm(const float* x, int64_t M, int64_t K, DType wt, const MatmulOut* outs, int count,
               BlockQuantizer quantize_block) {
  const QuantX qx = quantize_x(x, M, K, quantize_block);
  const GemmFns fns = gemm_fns();
  auto* xp = reinterpret_cast<uint8_t*>(scratch(1, static_cast<int64_t>(fns.x_bytes(wt, M, K) + 3) / 4));
  fns.pack_x(wt, qx, M, xp);
  const bool amx = amx_int8_in_use();
  const size_t row_bytes = dtype_bytes(wt, K);
  const int threads = ThreadPool::instance().num_threads();
  for (int i = 0; i < count; ++i) {
    const MatmulOut& o = outs[i];
    const int64_t np = (o.N + 15) / 16;
    const int64_t per = std::clamp<int64_t>(
        std::min<int64_t>(int64_t{256} * 1024 / (16 * K), np / std::max(1, 2 * threads)), 1, 16);
    ThreadPool::instance().parallel_chunks(np, per, [&](int64_t p0, int64_t p1) {
      fns.rows(wt, static_cast<const uint8_t*>(o.w), row_bytes, qx, xp, amx, M, 16 * p0,
               std::min(o.N, 16 * p1), o.bias, o.y, o.N);
    });
  }
}

// Decode with x kept f32 (Bf16Dot::Exact): rows n0 .. n1 of o dequantised to f32 (scratch slot 1 of the
// running thread) and multiplied with the f32 decode kernel, whose outputs are each one row's dot whatever
// M and whatever the block of weight rows, so this gives what f32 weights give, bit for bit.
void exact_chunk(const float* x, int64_t M, int64_t K, DType wt, size_t row_bytes, const MatmulOut& o,
                 int64_t n0, int64_t n1) {
  const int64_t nc = n1 - n0;
  float* wf = scratch(1, nc * K);
  dequant_rows(wt, static_cast<const uint8_t*>(o.w) + static_cast<size_t>(n0) * row_bytes, row_bytes, K, 0,
               nc, wf);
  const float* bias = o.bias ? o.bias + n0 : nullptr;
  if (M == 1) {
    const MatmulOut one{wf, nc, bias, o.y + n0};
    return matmul_rows(x, 1, K, DType::F32, &one, 1);  // nested in a pool job: runs on this thread
  }
  float* yc = scratch(2, M * nc);
  const MatmulOut part{wf, nc, bias, yc};
  matmul_rows(x, M, K, DType::F32, &part, 1);
  store_cols(yc, M, nc, o.y, o.N, n0);
}

}  // namespace

void matmul_quant(const float* x, int64_t M, int64_t K, DType wt, const MatmulOut* outs, int count,
                  bool rows_invariant, bool exact) {
  check_quant_shape(wt, K);
  if (M == 0) return;
#if TESSERA_CPU_WIDE
  const BlockQuantizer quantize_block = use_avx2() ? qavx2::quantize_block : quantize_block_scalar;
#else
  const BlockQuantizer quantize_block = quantize_block_scalar;
#endif
  if (!rows_invariant && M >= kGemmMinRows) {
    if (!exact) return int8_gemm(x, M, K, wt, outs, count, quantize_block);
    for (int i = 0; i < count; ++i)
      if (outs[i].N > 0) quant_gemm(x, M, K, outs[i], wt);
    return;
  }
  const QuantX qx = exact ? QuantX{} : quantize_x(x, M, K, quantize_block);
  const size_t row_bytes = dtype_bytes(wt, K);
  for_each_row_chunk(outs, count, kChunkRows, M * K, [&](const MatmulOut& o, int64_t n0, int64_t n1) {
    if (exact) return exact_chunk(x, M, K, wt, row_bytes, o, n0, n1);
    gemv_chunk(wt, static_cast<const uint8_t*>(o.w), row_bytes, qx, M, n0, n1, o.bias, o.y, o.N);
  });
}

void dequantize_rows(DType wt, const void* w, int64_t K, int64_t rows, float* y) {
  check_quant_shape(wt, K);
  dequant_rows(wt, static_cast<const uint8_t*>(w), dtype_bytes(wt, K), K, 0, rows, y);
}

void dequantize_row_at(DType wt, const void* w, int64_t K, int64_t r, float* y) {
  check_quant_shape(wt, K);
  const size_t row_bytes = dtype_bytes(wt, K);
  const auto* base = static_cast<const uint8_t*>(w);
  if (is_rows8(wt))
    return dequant_rows(stored_of(wt), group_rows(wt, base, row_bytes, r / kR8) + r % kR8 * row_bytes,
                        row_bytes, K, 0, 1, y);
  dequant_rows(wt, base + static_cast<size_t>(r) * row_bytes, row_bytes, K, 0, 1, y);
}

int64_t quant_scale_group(DType wt) { return stored_of(wt) == DType::Q6_K ? 16 : QK; }

bool quant_has_offset(DType wt) {
  bool has = false;
  by_format(stored_of(wt), [&](auto tag) { has = Fmt<decltype(tag)::value>::kMin; });
  return has;
}

void split_quant_rows(DType wt, const void* w, int64_t K, int64_t rows, int8_t* q, float* scale,
                      float* offset) {
  check_quant_shape(wt, K);
  TS_ASSERT(!is_rows8(wt), "split_quant_rows of ", dtype_name(wt),
            " (interleaved rows are the cpu's own form)");
  by_format(wt, [&](auto tag) {
    constexpr DType WT = decltype(tag)::value;
    using F = Fmt<WT>;
    const auto* base = static_cast<const uint8_t*>(w);
    const size_t row_bytes = dtype_bytes(WT, K);
    const int64_t nb = K / dtype_block(WT), subs = K / QK;
    // Rows split over the pool (a PJRT upload of a large matrix waits on this); each writes only its own.
    ThreadPool::instance().parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
      qscalar::Unpacked<WT> u;
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t b = 0; b < nb; ++b) {
          qscalar::unpack<WT>(base + static_cast<size_t>(r) * row_bytes + static_cast<size_t>(b) * F::kBytes,
                              u);
          for (int s = 0; s < F::kSub; ++s) {
            const int64_t sub = b * F::kSub + s;  // sub-block of 32 within the row
            std::memcpy(q + r * K + sub * QK, u.q[s], QK);
            if constexpr (WT == DType::Q6_K) {
              scale[(r * subs + sub) * 2] = u.dlo[s];
              scale[(r * subs + sub) * 2 + 1] = u.dhi[s];
            } else {
              scale[r * subs + sub] = u.dlo[s];  // both halves share it
            }
            if constexpr (F::kMin) offset[r * subs + sub] = u.m[s];
          }
        }
      }
    });
  });
}

DType rows8_dtype(DType dt) {
  for (const auto& [stored, r8] : kRows8Forms)
    if (dt == stored) return r8;
  return dt;
}

DType stored_dtype(DType dt) { return stored_of(dt); }

void interleave_rows8(DType dt, void* w, int64_t N, int64_t K) {
  const DType r8 = rows8_dtype(dt);
  TS_ASSERT(r8 != dt && N % kR8 == 0 && K % dtype_block(dt) == 0, "interleave_rows8 of ", dtype_name(dt),
            " [", N, ", ", K, "]");
  const size_t row_bytes = dtype_bytes(dt, K), bb = dtype_bytes(dt, dtype_block(dt));
  auto* base = static_cast<uint8_t*>(w);
  ThreadPool::instance().parallel_for(N / kR8, 1, [&](int64_t g0, int64_t g1) {
    std::vector<uint8_t> rows(kR8 * row_bytes);
    for (int64_t g = g0; g < g1; ++g) {
      uint8_t* grp = base + static_cast<size_t>(g) * kR8 * row_bytes;
      std::memcpy(rows.data(), grp, rows.size());
      for (size_t b = 0; b < row_bytes / bb; ++b)
        for (int r = 0; r < kR8; ++r)
          rows8_runs(dt, r, [&](int so, int io, int n) {
            copy_run(grp + b * kR8 * bb + io, rows.data() + r * row_bytes + b * bb + so, n);
          });
    }
  });
}

}  // namespace tessera::cpu
