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
//  * Prefill (M >= kGemmMinRows in matmul / matmul_multi): chunks of weight rows are dequantised to f32 and
//    run through the f32 gemm; x stays f32, so prefill computes exactly what dequantised f32 weights give.
//  * Bf16Dot::Exact (exact_bf16_matmul): decode too keeps x f32, on chunks of 64 weight rows dequantised to
//    f32 and the f32 decode kernel: bit for bit what the dequantised f32 checkpoint gives, at a lower rate.
// AVX-512 machines run the AVX2 kernels (no VNNI variant yet: none of our machines has it to test on).
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
  float* buf = scratch(0, qfloats + 3 * M * ld + 2 * M * ld);
  auto* q = reinterpret_cast<int8_t*>(buf);
  float* d = buf + qfloats;
  float* s = d + M * ld;
  auto* isum = reinterpret_cast<int32_t*>(s + M * ld);
  int32_t* off16 = isum + M * ld;
  std::fill(d, d + 5 * M * ld, 0.0f);  // the padding of d, s, isum and off16 (0.0f is all zero bits)
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
    }
  }
  return {q, d, s, isum, off16, K, nb, ld};
}

// ---- rows interleaved by 8 (Q4_K_R8, Q6_K_R8)
//
// Rows 8g .. 8g + 7 of the matrix are one run of K / 256 blocks of 8 * (the format's block bytes), block b
// holding block b of each of the 8 rows, field by field, so that 32 bytes hold 4 consecutive quants of each
// row and a vector lane stays one row throughout (the decode kernel's 8 dots need no horizontal sums).
// Q4_K_R8 (1152 bytes): d [8] f16 | dmin [8] f16 | scale byte j of row r at 32 + 8j + r (12 x 8) | quants at
//   128 + 256c + 32k + 4r + i: byte 32c + 4k + i of row r's qs (low nibble sub-block 2c, high 2c + 1).
// Q6_K_R8 (1680 bytes): d [8] f16 | scale s of row r at 16 + 8s + r (16 x 8, int8) | then per half h of the
//   block and k = 0..7, 96 bytes in the order the kernel reads them: at 144 + 768h + 96k + 32p + 4r + i, ql
//   byte 64h + 32p + 4k + i (p = 0, 1), and at 144 + 768h + 96k + 64 + 4r + i, qh byte 32h + 4k + i.
// A group is as many bytes as its 8 rows, so a matrix keeps its size and row blocks of it (offsets in whole
// groups) keep their place.
constexpr int kR8 = 8;

constexpr bool is_rows8(DType dt) { return dt == DType::Q4_K_R8 || dt == DType::Q6_K_R8; }
constexpr DType stored_of(DType dt) {
  return dt == DType::Q4_K_R8 ? DType::Q4_K : dt == DType::Q6_K_R8 ? DType::Q6_K : dt;
}

// f(stored offset, interleaved offset, bytes) for each run that row r's block (of the stored format) shares
// with its group's interleaved block.
template <typename F>
void rows8_runs(DType stored, int r, F&& f) {
  if (stored == DType::Q4_K) {
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
  const size_t bb = dtype_bytes(stored, 256);
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
  block_scales<WT>(blk, f16_to_f32(u16_at(blk + F::kD)), F::kMin ? f16_to_f32(u16_at(blk + 2)) : 0.0f, u.dlo,
                   u.dhi, u.m);
  if constexpr (WT == DType::Q8_0) {
    for (int j = 0; j < QK; ++j) u.q[0][j] = static_cast<int8_t>(blk[2 + j]);
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

constexpr bool kRows8Kernels = false;  // the _R8 forms: each group's rows as stored, through the above

}  // namespace
#include "backends/cpu/kernels_quant.inc"
}  // namespace qscalar

#if TESSERA_CPU_WIDE
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace qavx2 {
namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <DType WT>
struct Unpacked {
  __m256i q[Fmt<WT>::kSub];  // 32 quants as bytes, values 0..31 in order (signed where Fmt::kSigned)
  float dlo[Fmt<WT>::kSub], dhi[Fmt<WT>::kSub], m[Fmt<WT>::kSub];
};

inline __m256i shr16(__m256i v, int n) { return _mm256_srl_epi16(v, _mm_cvtsi32_si128(n)); }

// 16 bytes of nibbles as 32 bytes: the low nibbles first, then the high ones.
inline __m256i nibbles(const uint8_t* p) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0f));
}

// Bit j of qh as 0x10 in byte j (0 where clear).
inline __m256i fifth_bits(const uint8_t* p) {
  uint32_t qh;
  std::memcpy(&qh, p, 4);
  const __m256i bytes = _mm256_shuffle_epi8(  // byte j: byte j / 8 of qh (shuffles stay within 16-byte lanes)
      _mm256_set1_epi32(static_cast<int>(qh)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3,
                       3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));  // byte j: bit j % 8
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit), _mm256_set1_epi8(0x10));
}

template <DType WT>
inline void unpack(const uint8_t* blk, Unpacked<WT>& u) {
  using F = Fmt<WT>;
  block_scales<WT>(blk, _cvtsh_ss(u16_at(blk + F::kD)), F::kMin ? _cvtsh_ss(u16_at(blk + 2)) : 0.0f, u.dlo,
                   u.dhi, u.m);
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  if constexpr (WT == DType::Q8_0) {
    u.q[0] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
  } else if constexpr (WT == DType::Q4_0) {
    u.q[0] = _mm256_sub_epi8(nibbles(blk + 2), _mm256_set1_epi8(8));
  } else if constexpr (WT == DType::Q4_1) {
    u.q[0] = nibbles(blk + 4);
  } else if constexpr (WT == DType::Q5_0) {
    u.q[0] = _mm256_sub_epi8(_mm256_or_si256(nibbles(blk + 6), fifth_bits(blk + 2)), _mm256_set1_epi8(16));
  } else if constexpr (WT == DType::Q5_1) {
    u.q[0] = _mm256_or_si256(nibbles(blk + 8), fifth_bits(blk + 4));
  } else if constexpr (WT == DType::Q4_K || WT == DType::Q5_K) {
    const uint8_t* qs = blk + (WT == DType::Q5_K ? 48 : 16);
    const __m256i one = _mm256_set1_epi8(1);
    for (int c = 0; c < 4; ++c) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
      __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(shr16(raw, 4), m4);
      if constexpr (WT == DType::Q5_K) {
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(shr16(qh, 2 * c), one), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(shr16(qh, 2 * c + 1), one), 4));
      }
      u.q[2 * c] = lo;
      u.q[2 * c + 1] = hi;
    }
  } else {  // Q6_K
    const __m256i m2 = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
      for (int k = 0; k < 4; ++k) {
        const __m256i low = _mm256_and_si256(shr16(k & 1 ? l1 : l0, 4 * (k >> 1)), m4);
        const __m256i high = _mm256_slli_epi16(_mm256_and_si256(shr16(qh, 2 * k), m2), 4);
        u.q[4 * h + k] = _mm256_sub_epi8(_mm256_or_si256(low, high), off);
      }
    }
  }
}

// quantize_block_scalar's integers with AVX2: the same products x * inv, rounded by vcvtps2dq in the default
// mode (to nearest, ties to even, as nearbyint).
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

// ---- decode: groups of 8 sub-blocks (one K-quant block, or 8 blocks of a 32-value format)
//
// Each sub-block's integer dot with x is 8 int32 partial sums (vpmaddubsw, vpmaddwd); the 8 sub-blocks of a
// group are reduced together (vphaddd, pair by pair as they are unpacked) into one vector whose lane s is
// sub-block s's dot (Q6_K: two vectors of half-sub-block dots), so the scales are applied with one multiply
// and one FMA per group, from vectors of the weights' and x's per-sub-block scales. Quants of the offset
// formats (Q4_0, Q5_0, Q6_K) are taken unsigned and offset * (sum of the x quants) is subtracted from the
// integer dot (exact); Q8_0 keeps the sign trick. Integer sums are exact in any order, so only the float
// operations after them fix the result, and they are the same for every x row whatever MX.

// f16 field at byte offset off of n blocks of `bytes` (n <= 8; a constant for whole groups), as 8 floats
// (zero past n).
template <typename N>
inline __m256 f16_fields(const uint8_t* blk, size_t bytes, size_t off, N n) {
  __m128i h = _mm_setzero_si128();
  const auto at = [&](int s) { return u16_at(blk + s * bytes + off); };
  h = _mm_insert_epi16(h, at(0), 0);
  if (n > 1) h = _mm_insert_epi16(h, at(1), 1);
  if (n > 2) h = _mm_insert_epi16(h, at(2), 2);
  if (n > 3) h = _mm_insert_epi16(h, at(3), 3);
  if (n > 4) h = _mm_insert_epi16(h, at(4), 4);
  if (n > 5) h = _mm_insert_epi16(h, at(5), 5);
  if (n > 6) h = _mm_insert_epi16(h, at(6), 6);
  if (n > 7) h = _mm_insert_epi16(h, at(7), 7);
  return _mm256_cvtph_ps(h);
}

// The 8 bytes of v as 8 floats.
inline __m256 bytes_ps(uint64_t v) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<int64_t>(v))));
}

// The scales of a group starting at blk (n sub-blocks, n <= 8): d per sub-block; d2 the offset m per
// sub-block (kMin formats). Q6_K: d for sub-blocks 0-3 and d2 for 4-7, each in the lane order of group_dots'
// u0 / u1 ([first halves | second halves]). Zero past n.
template <DType WT, typename N>
inline void group_scales(const uint8_t* blk, N n, __m256& d, __m256& d2) {
  using F = Fmt<WT>;
  if constexpr (F::kSub == 1) {
    d = f16_fields(blk, F::kBytes, 0, n);
    if constexpr (F::kMin) d2 = f16_fields(blk, F::kBytes, 2, n);
  } else if constexpr (WT == DType::Q4_K || WT == DType::Q5_K) {
    // The 12 bytes of 6-bit scales and mins (a, b, c: bytes 0-3, 4-7, 8-11): sub-blocks 0-3 take the low six
    // bits of a (scales) and b (mins); 4-7 the nibbles of c with the top two bits of a and b above them.
    uint32_t a, b, c;
    std::memcpy(&a, blk + 4, 4);
    std::memcpy(&b, blk + 8, 4);
    std::memcpy(&c, blk + 12, 4);
    const uint64_t sc = (a & 0x3f3f3f3fu) | uint64_t{(c & 0x0f0f0f0fu) | (((a >> 6) & 0x03030303u) << 4)}
                                                << 32;
    const uint64_t mn =
        (b & 0x3f3f3f3fu) | uint64_t{((c >> 4) & 0x0f0f0f0fu) | (((b >> 6) & 0x03030303u) << 4)} << 32;
    d = _mm256_mul_ps(_mm256_set1_ps(_cvtsh_ss(u16_at(blk))), bytes_ps(sc));
    d2 = _mm256_mul_ps(_mm256_set1_ps(-_cvtsh_ss(u16_at(blk + 2))), bytes_ps(mn));
  } else {  // Q6_K: 16 int8 scales (sub-block s: 2s for values 0..15, 2s + 1 for 16..31)
    const __m128i sc = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)),
                                        _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15));
    const __m256 dd = _mm256_set1_ps(_cvtsh_ss(u16_at(blk + 208)));
    d = _mm256_mul_ps(dd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)));
    d2 = _mm256_mul_ps(dd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8))));
  }
}

// Bit b of each byte of v as bit 4 (0x10), the others clear (shifting 16-bit lanes: the bits that cross into
// the neighbouring byte are masked off).
inline __m256i bit_as_0x10(__m256i v, int b) {
  const __m256i m = _mm256_set1_epi8(0x10);
  return _mm256_and_si256(b <= 4 ? _mm256_slli_epi16(v, 4 - b) : _mm256_srli_epi16(v, b - 4), m);
}

// The quants of sub-blocks 2k and 2k + 1 of a group starting at blk (zero from sub-block n on): unsigned
// values for all formats but Q8_0 (the offset formats' offset is not subtracted).
template <DType WT, typename N>
inline void pair_quants(const uint8_t* blk, int k, N n, __m256i& a, __m256i& b) {
  using F = Fmt<WT>;
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  if constexpr (F::kSub == 1) {
    const auto one = [&](int s) {
      const uint8_t* p = blk + s * F::kBytes;
      if (s >= n) return _mm256_setzero_si256();
      if constexpr (WT == DType::Q8_0) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
      if constexpr (WT == DType::Q4_0) return nibbles(p + 2);
      if constexpr (WT == DType::Q4_1) return nibbles(p + 4);
      if constexpr (WT == DType::Q5_0) return _mm256_or_si256(nibbles(p + 6), fifth_bits(p + 2));
      if constexpr (WT == DType::Q5_1) return _mm256_or_si256(nibbles(p + 8), fifth_bits(p + 4));
    };
    a = one(2 * k);
    b = one(2 * k + 1);
  } else if constexpr (WT == DType::Q4_K || WT == DType::Q5_K) {
    // Sub-blocks 2k and 2k + 1: the low and high nibbles of 32 bytes; Q5_K's fifth bits: bits 2k, 2k + 1 of
    // qh.
    const __m256i raw =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + (WT == DType::Q5_K ? 48 : 16) + 32 * k));
    a = _mm256_and_si256(raw, m4);
    b = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
    if constexpr (WT == DType::Q5_K) {
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16));
      a = _mm256_or_si256(a, bit_as_0x10(qh, 2 * k));
      b = _mm256_or_si256(b, bit_as_0x10(qh, 2 * k + 1));
    }
  } else {  // Q6_K, half h = k / 2 (64 bytes of low nibbles, 32 of 2-bit high parts): its sub-blocks j, j + 1
    // (j = 2 (k % 2)) are the low nibbles (j = 0) or high nibbles (j = 2) of the two 32-byte rows, with bits
    // 2j, 2j + 1 and 2j + 2, 2j + 3 of the high parts above them.
    const int h = k / 2, j = 2 * (k % 2);
    const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h));
    const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * h + 32));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h));
    const __m256i m30 = _mm256_set1_epi8(0x30);
    const auto high = [&](int bit) {  // bits bit, bit + 1 of qh at 4, 5
      return _mm256_and_si256(bit <= 4 ? _mm256_slli_epi16(qh, 4 - bit) : _mm256_srli_epi16(qh, bit - 4),
                              m30);
    };
    const __m256i lo0 = j == 0 ? l0 : _mm256_srli_epi16(l0, 4), lo1 = j == 0 ? l1 : _mm256_srli_epi16(l1, 4);
    a = _mm256_or_si256(_mm256_and_si256(lo0, m4), high(2 * j));
    b = _mm256_or_si256(_mm256_and_si256(lo1, m4), high(2 * j + 2));
  }
}

// The integer dot of 32 quants w with 32 x quants at xq, as 8 int32 partial sums.
template <DType WT>
inline __m256i dot32(__m256i w, const int8_t* xq) {
  __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
  if constexpr (WT == DType::Q8_0) {  // vpmaddubsw wants unsigned weights: |w|, and w's sign moved to x
    x = _mm256_sign_epi8(x, w);
    w = _mm256_sign_epi8(w, w);
  }
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1));
}

// Group g of row wr (blocks 8g .. 8g + n - 1 of a 32-value format, or K-quant block g with n = 8) into the
// accumulators of x rows m0 .. m0 + MX - 1.
template <DType WT, int MX, typename N>
inline void group_dots(const uint8_t* wr, const QuantX& qx, int64_t m0, int64_t g, N n, __m256 (&acc)[MX],
                       __m256 (&macc)[MX]) {
  using F = Fmt<WT>;
  constexpr bool kOff = WT == DType::Q4_0 || WT == DType::Q5_0;  // unsigned quants, offset 8 or 16
  const uint8_t* blk = wr + static_cast<size_t>(g) * (F::kSub == 1 ? 8 : 1) * F::kBytes;
  // t[i][k]: x row i's dots of sub-blocks 2k, 2k + 1, lanes [2k: 0+1, 2+3, 2k+1: 0+1, 2+3 | the same of 4-7].
  __m256i t[MX][4];
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    __m256i a, b;
    pair_quants<WT>(blk, k, n, a, b);
#pragma GCC unroll 8
    for (int i = 0; i < MX; ++i) {
      // Past the group's end (a tail group) the quants are zero: any x in bounds serves.
      const int8_t* xq = qx.q + (m0 + i) * qx.K + g * 8 * QK;
      const int sa = 2 * k < n ? 2 * k : 0, sb = 2 * k + 1 < n ? 2 * k + 1 : 0;
      t[i][k] = _mm256_hadd_epi32(dot32<WT>(a, xq + sa * QK), dot32<WT>(b, xq + sb * QK));
    }
  }
  __m256 d, d2 = _mm256_setzero_ps();
  group_scales<WT>(blk, n, d, d2);
#pragma GCC unroll 8
  for (int i = 0; i < MX; ++i) {
    // u0: [s0..s3 values 0-15 | s0..s3 values 16-31], u1 the same of s4..s7.
    const __m256i u0 = _mm256_hadd_epi32(t[i][0], t[i][1]), u1 = _mm256_hadd_epi32(t[i][2], t[i][3]);
    const int64_t xo = (m0 + i) * qx.ld + g * 8;
    if constexpr (WT == DType::Q6_K) {
      const int32_t* off = qx.off16 + (m0 + i) * 2 * qx.ld + g * 16;
      const __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(off));
      const __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(off + 8));
      const __m256 r0 = _mm256_cvtepi32_ps(_mm256_sub_epi32(u0, c0));
      const __m256 r1 = _mm256_cvtepi32_ps(_mm256_sub_epi32(u1, c1));
      acc[i] = _mm256_fmadd_ps(
          r0, _mm256_mul_ps(d, _mm256_broadcast_ps(reinterpret_cast<const __m128*>(qx.d + xo))), acc[i]);
      acc[i] = _mm256_fmadd_ps(
          r1, _mm256_mul_ps(d2, _mm256_broadcast_ps(reinterpret_cast<const __m128*>(qx.d + xo + 4))), acc[i]);
    } else {
      __m256i r = _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20),
                                   _mm256_permute2x128_si256(u0, u1, 0x31));  // lane s: sub-block s
      if constexpr (kOff) {
        const __m256i sums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx.isum + xo));
        r = _mm256_sub_epi32(r, _mm256_slli_epi32(sums, WT == DType::Q4_0 ? 3 : 4));
      }
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(r), _mm256_mul_ps(d, _mm256_loadu_ps(qx.d + xo)), acc[i]);
      if constexpr (F::kMin) macc[i] = _mm256_fmadd_ps(d2, _mm256_loadu_ps(qx.s + xo), macc[i]);
    }
  }
}

template <DType WT, int MX>
inline void row_dots(const uint8_t* wr, const QuantX& qx, int64_t m0, float (&out)[MX]) {
  __m256 acc[MX], macc[MX];
#pragma GCC unroll 8
  for (int i = 0; i < MX; ++i) acc[i] = macc[i] = _mm256_setzero_ps();
  const int64_t full = qx.nb / 8;
  for (int64_t g = 0; g < full; ++g)
    group_dots<WT, MX>(wr, qx, m0, g, std::integral_constant<int, 8>{}, acc, macc);
  if (qx.nb % 8 != 0) group_dots<WT, MX>(wr, qx, m0, full, static_cast<int>(qx.nb % 8), acc, macc);
#pragma GCC unroll 8
  for (int i = 0; i < MX; ++i) out[i] = hsum(acc[i]) + hsum(macc[i]);
}

template <DType WT>
inline void dequant_row(const uint8_t* wr, int64_t K, float* y) {
  using F = Fmt<WT>;
  Unpacked<WT> u;
  for (int64_t b = 0; b < K / (QK * F::kSub); ++b) {
    unpack<WT>(wr + static_cast<size_t>(b) * F::kBytes, u);
    for (int s = 0; s < F::kSub; ++s, y += QK) {
      const __m256 m = _mm256_set1_ps(u.m[s]);
      const __m128i lo = _mm256_castsi256_si128(u.q[s]), hi = _mm256_extracti128_si256(u.q[s], 1);
      const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
      for (int k = 0; k < 4; ++k) {
        const __m256 d = _mm256_set1_ps(k < 2 ? u.dlo[s] : u.dhi[s]);
        const __m256i v = _mm256_cvtepi8_epi32(parts[k]);
        _mm256_storeu_ps(y + 8 * k, _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), d, m));
      }
    }
  }
}

// ---- decode on rows interleaved by 8 (Q4_K_R8, Q6_K_R8)
//
// Lane r of every vector is row r of the group: 32 bytes of quants (4 of each row) meet one 4-byte group of
// x broadcast to all lanes (vpmaddubsw), the int16 pairs of a sub-block (or a half of one: Q6_K's quants go
// up to 63) are summed, widened once (vpmaddwd) and scaled per lane by the rows' scales; no horizontal sums.
// Integer sums are exact; the float operations are the same for every x row whatever MX.

constexpr bool kRows8Kernels = true;
constexpr size_t kRows8Prefetch = 2048;  // bytes ahead in the group's run of blocks

inline __m256i x4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
inline __m256 u8x8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256 i8x8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
// f(std::integral_constant<int, s>{}) for s = 0 .. 7 (a sub-block's shifts and offsets as constants).
template <typename F>
inline void each_sub_block(F&& f) {
  [&]<int... S>(std::integer_sequence<int, S...>) { (f(std::integral_constant<int, S>{}), ...); }
  (std::make_integer_sequence<int, 8>{});
}
inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
template <size_t kBytes>
inline void prefetch_block(const uint8_t* p) {
#pragma GCC unroll 32
  for (size_t l = 0; l < kBytes; l += 64)
    _mm_prefetch(reinterpret_cast<const char*>(p + kRows8Prefetch + l), _MM_HINT_T0);
}

// The 6-bit scales and mins of a Q4_K_R8 block's 8 sub-blocks, 8 rows each, as k_quant_scale_min gives them:
// sub-block s's at sm + 8s (a byte per row), its mins at sm + 64 + 8s. From scale bytes 0-3 (a), 4-7 (b) and
// 8-11 (c) of every row.
inline void q4k_rows8_scales(const uint8_t* o, uint8_t* sm) {
  const __m256i m4 = _mm256_set1_epi8(0x0f), m63 = _mm256_set1_epi8(63), m30 = _mm256_set1_epi8(0x30);
  const __m256i a = load32(o + 32), b = load32(o + 64), c = load32(o + 96);
  _mm256_store_si256(reinterpret_cast<__m256i*>(sm), _mm256_and_si256(a, m63));
  _mm256_store_si256(
      reinterpret_cast<__m256i*>(sm + 32),
      _mm256_or_si256(_mm256_and_si256(c, m4), _mm256_and_si256(_mm256_srli_epi16(a, 2), m30)));
  _mm256_store_si256(reinterpret_cast<__m256i*>(sm + 64), _mm256_and_si256(b, m63));
  _mm256_store_si256(reinterpret_cast<__m256i*>(sm + 96),
                     _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), m4),
                                     _mm256_and_si256(_mm256_srli_epi16(b, 2), m30)));
}

// The 8 rows' dots of group grp (Q4_K_R8) with x rows m0 .. m0 + MX - 1: out[i] lane r = row r's.
template <int MX>
inline void q4k_rows8(const uint8_t* grp, const QuantX& qx, int64_t m0, __m256 (&out)[MX]) {
  constexpr size_t kB = 8 * 144;
  const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  __m256 acc[MX], macc[MX];
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) acc[i] = macc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < qx.K / 256; ++b) {
    const uint8_t* o = grp + static_cast<size_t>(b) * kB;
    prefetch_block<kB>(o);
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
    const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o + 16)));
    alignas(32) uint8_t sm[128];
    q4k_rows8_scales(o, sm);
    const auto sub = [&](auto si) {  // sub-block s: the low (s even) or high nibbles of 32-byte rows s / 2
      constexpr int s = decltype(si)::value;
      const uint8_t* q = o + 128 + 256 * (s / 2);
      __m256i dot[MX];
#pragma GCC unroll 4
      for (int i = 0; i < MX; ++i) dot[i] = _mm256_setzero_si256();
        // 8 pairs of products of at most 15 * 127 per int16 lane: no overflow.
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const __m256i raw = load32(q + 32 * k);
        const __m256i w = _mm256_and_si256(s % 2 ? _mm256_srli_epi16(raw, 4) : raw, m4);
#pragma GCC unroll 4
        for (int i = 0; i < MX; ++i)
          dot[i] = _mm256_add_epi16(
              dot[i], _mm256_maddubs_epi16(w, x4(qx.q + (m0 + i) * qx.K + b * 256 + 32 * s + 4 * k)));
      }
      const __m256 dsc = _mm256_mul_ps(d, u8x8(sm + 8 * s)), dmn = _mm256_mul_ps(dmin, u8x8(sm + 64 + 8 * s));
#pragma GCC unroll 4
      for (int i = 0; i < MX; ++i) {
        const int64_t xo = (m0 + i) * qx.ld + b * 8 + s;
        const __m256 v = _mm256_cvtepi32_ps(_mm256_madd_epi16(dot[i], ones));
        acc[i] = _mm256_fmadd_ps(dsc, _mm256_mul_ps(v, _mm256_set1_ps(qx.d[xo])), acc[i]);
        macc[i] = _mm256_fmadd_ps(dmn, _mm256_set1_ps(qx.s[xo]), macc[i]);
      }
    };
    each_sub_block(sub);
  }
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) out[i] = _mm256_sub_ps(acc[i], macc[i]);
}

// Step k of half h of a Q6_K_R8 block (q = its bytes at 144 + 768h + 96k): 4 quants (0..63) of each of the
// 8 rows, for each of the half's 4 sub-blocks t (w[t]): low nibbles of 32-byte rows l0 / l1, high nibbles,
// with 2 bits of hb above them.
inline void q6k_rows8_quants(const uint8_t* q, __m256i (&w)[4]) {
  const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
  const __m256i l0 = load32(q), l1 = load32(q + 32), hb = load32(q + 64);
  w[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
  w[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
  w[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30));
  w[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                         _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
}

// As q4k_rows8, for Q6_K_R8: quants q - 32 with q = low nibble | 2 high bits << 4, a scale per 16 values.
// Each half of a block is read once, in order: per k the quants of its 4 sub-blocks (4 values of each row).
template <int MX>
inline void q6k_rows8(const uint8_t* grp, const QuantX& qx, int64_t m0, __m256 (&out)[MX]) {
  constexpr size_t kB = 8 * 210;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[MX];
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < qx.K / 256; ++b) {
    const uint8_t* o = grp + static_cast<size_t>(b) * kB;
    prefetch_block<kB>(o);
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
    for (int h = 0; h < 2; ++h) {
      const int8_t* xh = qx.q + m0 * qx.K + b * 256 + 128 * h;  // sub-block 4h + t at 32t
      __m256i dot[4][MX], pair[4][MX];
#pragma GCC unroll 2
      for (int e = 0; e < 2; ++e) {  // values 16e .. 16e + 15 of each sub-block: k = 4e .. 4e + 3
#pragma GCC unroll 4
        for (int i = 0; i < MX; ++i)
          for (int t = 0; t < 4; ++t) dot[t][i] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int k = 4 * e; k < 4 * e + 4; ++k) {
          __m256i w[4];
          q6k_rows8_quants(o + 144 + 768 * h + 96 * k, w);
          // Two products of at most 63 * 127 per int16 lane, twice: no overflow; widened every second k.
#pragma GCC unroll 4
          for (int t = 0; t < 4; ++t)
#pragma GCC unroll 4
            for (int i = 0; i < MX; ++i) {
              const __m256i p = _mm256_maddubs_epi16(w[t], x4(xh + i * qx.K + 32 * t + 4 * k));
              pair[t][i] = k % 2 ? _mm256_add_epi16(pair[t][i], p) : p;
              if (k % 2) dot[t][i] = _mm256_add_epi32(dot[t][i], _mm256_madd_epi16(pair[t][i], ones));
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) {
          const int s = 4 * h + t;
          const __m256 sc = _mm256_mul_ps(d, i8x8(o + 16 + 8 * (2 * s + e)));
#pragma GCC unroll 4
          for (int i = 0; i < MX; ++i) {
            // The offset 32: minus 32 * (sum of the 16 x quants), kept in off16 (quantize_x's lane order).
            const int32_t off = qx.off16[(m0 + i) * 2 * qx.ld + 16 * b + 8 * h + t + 4 * e];
            const __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(dot[t][i], _mm256_set1_epi32(off)));
            const float xd = qx.d[(m0 + i) * qx.ld + b * 8 + s];
            acc[i] = _mm256_fmadd_ps(sc, _mm256_mul_ps(v, _mm256_set1_ps(xd)), acc[i]);
          }
        }
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < MX; ++i) out[i] = acc[i];
}

// 4 quants of each of 8 rows (w: row r at bytes 4r .. 4r + 3) as floats q * scale + offset (per row) into
// out + r * K: what the stored format's dequant_row gives, bit for bit (one rounding, of the same operands).
inline void rows8_values(__m256i w, __m256 scale, __m256 offset, float* out, int64_t K) {
  const __m128i lo = _mm256_castsi256_si128(w), hi = _mm256_extracti128_si256(w, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {  // rows 2p, 2p + 1
    const __m256i idx =
        _mm256_setr_epi32(2 * p, 2 * p, 2 * p, 2 * p, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1);
    const __m256 v =
        _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[p])),
                        _mm256_permutevar8x32_ps(scale, idx), _mm256_permutevar8x32_ps(offset, idx));
    _mm_storeu_ps(out + 2 * p * K, _mm256_castps256_ps128(v));
    _mm_storeu_ps(out + (2 * p + 1) * K, _mm256_extractf128_ps(v, 1));
  }
}

// The 8 rows of group grp of an _R8 matrix dequantised: row r into y + r * K.
template <DType WT>
void rows8_dequant_group(const uint8_t* grp, int64_t K, float* y) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  for (int64_t b = 0; b < K / 256; ++b) {
    float* yb = y + b * 256;
    if constexpr (WT == DType::Q4_K_R8) {
      const uint8_t* o = grp + static_cast<size_t>(b) * 8 * 144;
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
      const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o + 16)));
      alignas(32) uint8_t sm[128];
      q4k_rows8_scales(o, sm);
      for (int s = 0; s < 8; ++s) {
        const __m256 dsc = _mm256_mul_ps(d, u8x8(sm + 8 * s));
        const __m256 m = _mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(dmin, u8x8(sm + 64 + 8 * s)));
        for (int k = 0; k < 8; ++k) {
          const __m256i raw = load32(o + 128 + 256 * (s / 2) + 32 * k);
          rows8_values(_mm256_and_si256(s % 2 ? _mm256_srli_epi16(raw, 4) : raw, m4), dsc, m,
                       yb + 32 * s + 4 * k, K);
        }
      }
    } else {
      const uint8_t* o = grp + static_cast<size_t>(b) * 8 * 210;
      const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o)));
      for (int h = 0; h < 2; ++h)
        for (int k = 0; k < 8; ++k) {
          __m256i w[4];
          q6k_rows8_quants(o + 144 + 768 * h + 96 * k, w);
          for (int t = 0; t < 4; ++t) {
            const int s = 4 * h + t;
            // (q - 32) * scale, rounded once as the stored format's (q - 32 exact, times the scale).
            const __m256 sc = _mm256_mul_ps(d, i8x8(o + 16 + 8 * (2 * s + k / 4)));
            rows8_values(w[t], sc, _mm256_mul_ps(_mm256_set1_ps(-32.0f), sc), yb + 32 * s + 4 * k, K);
          }
        }
    }
  }
}

// Rows n0 .. n1 (whole groups) of an _R8 matrix with x rows m0 .. m0 + MX - 1 into y.
template <DType WT, int MX>
void rows8_pass(const uint8_t* w, size_t row_bytes, const QuantX& qx, int64_t m0, int64_t n0, int64_t n1,
                const float* bias, float* y, int64_t ldy) {
  for (int64_t n = n0; n < n1; n += kR8) {
    __m256 out[MX];
    const uint8_t* grp = w + static_cast<size_t>(n) * row_bytes;
    if constexpr (WT == DType::Q4_K_R8) {
      q4k_rows8<MX>(grp, qx, m0, out);
    } else {
      q6k_rows8<MX>(grp, qx, m0, out);
    }
    const __m256 bv = bias ? _mm256_loadu_ps(bias + n) : _mm256_setzero_ps();
#pragma GCC unroll 4
    for (int i = 0; i < MX; ++i) _mm256_storeu_ps(y + (m0 + i) * ldy + n, _mm256_add_ps(out[i], bv));
  }
}

}  // namespace
#include "backends/cpu/kernels_quant.inc"
}  // namespace qavx2
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
  if (use_avx2()) return qavx2::gemv_chunk(wt, w, row_bytes, qx, M, n0, n1, bias, y, ldy);
#endif
  qscalar::gemv_chunk(wt, w, row_bytes, qx, M, n0, n1, bias, y, ldy);
}

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

// Prefill: y = x · w^T for one product, in chunks of weight rows dequantised to f32 (scratch slot 2 of this
// thread, shared with the workers of the f32 gemm) and multiplied into a chunk of y (slot 3).
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
  if (!rows_invariant && M >= kGemmMinRows) {
    for (int i = 0; i < count; ++i)
      if (outs[i].N > 0) quant_gemm(x, M, K, outs[i], wt);
    return;
  }
#if TESSERA_CPU_WIDE
  const BlockQuantizer quantize_block = use_avx2() ? qavx2::quantize_block : quantize_block_scalar;
#else
  const BlockQuantizer quantize_block = quantize_block_scalar;
#endif
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
  return dt == DType::Q4_K ? DType::Q4_K_R8 : dt == DType::Q6_K ? DType::Q6_K_R8 : dt;
}

DType stored_dtype(DType dt) { return stored_of(dt); }

void interleave_rows8(DType dt, void* w, int64_t N, int64_t K) {
  const DType r8 = rows8_dtype(dt);
  TS_ASSERT(r8 != dt && N % kR8 == 0 && K % 256 == 0, "interleave_rows8 of ", dtype_name(dt), " [", N, ", ",
            K, "]");
  const size_t row_bytes = dtype_bytes(dt, K), bb = dtype_bytes(dt, 256);
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
