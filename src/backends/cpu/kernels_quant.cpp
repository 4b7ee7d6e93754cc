// Matmuls with block-quantised weights (Q8_0, Q4_0, Q4_1 as a GGUF file stores them; layouts in tensor.h),
// computed from the blocks as stored:
//  * Decode (matmul_rows, and matmul / matmul_multi below kGemmMinRows rows): x is quantised once per call,
//    per row and block of 32, to int8 (q = round-half-even(x * 127 / max|x|), scale max|x| / 127 in f32; the
//    same code on every instruction set, so every set sees the same integers), and each weight block meets
//    it in an integer dot product: on AVX2 one vpmaddubsw (unsigned x signed bytes into int16 pairs) and one
//    vpmaddwd per 32 weights, then one f32 FMA with the product of the two scales. Q4_1's offset m adds
//    m * (x scale * sum of the x quants), kept per block. Weights are read once per step whatever M: a chunk
//    of 64 weight rows is dotted with every x row (in passes of up to 4) before the next chunk is read, and
//    each output is the same sum whatever M (rows never share an accumulator).
//  * Prefill (M >= kGemmMinRows in matmul / matmul_multi): chunks of weight rows are dequantised to f32 and
//    run through the f32 gemm; x stays f32, so prefill computes exactly what dequantised f32 weights give.
//  * Bf16Dot::Exact (exact_bf16_matmul): decode too keeps x f32, on chunks of 64 weight rows dequantised to
//    f32 and the f32 decode kernel: bit for bit what the dequantised f32 checkpoint gives, at a lower rate.
// AVX-512 machines run the AVX2 kernels (no VNNI variant yet: none of our machines has it to test on).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_simd.h"
#include "backends/cpu/thread_pool.h"
#include "tessera/error.h"

namespace tessera::cpu {

namespace {

constexpr int64_t QK = 32;           // values per block
constexpr int64_t kGemmMinRows = 8;  // as kernels_matmul.cpp: from here on matmul() takes the prefill path
constexpr int64_t kChunkRows = 64;   // weight rows per scheduling chunk of the decode kernel
constexpr int GR = 4;                // x rows per pass of the decode kernel

inline uint16_t u16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

// x quantised per row and block: q [M][K] int8, d [M][nb] scales, s [M][nb] = d * sum of the block's q.
struct QuantX {
  const int8_t* q;
  const float* d;
  const float* s;
  int64_t K, nb;
};

// Into scratch slot 0 of the calling thread (shared with the workers for the duration of one kernel).
QuantX quantize_x(const float* x, int64_t M, int64_t K) {
  const int64_t nb = K / QK;
  const int64_t qfloats = (M * K + 63) / 64 * 16;  // the int8 quants, in whole 64-byte lines
  float* buf = scratch(0, qfloats + 2 * M * nb);
  auto* q = reinterpret_cast<int8_t*>(buf);
  float* d = buf + qfloats;
  float* s = d + M * nb;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + m * K + b * QK;
      int8_t* qb = q + m * K + b * QK;
      float amax = 0.0f;
      for (int64_t j = 0; j < QK; ++j) amax = std::max(amax, std::fabs(xb[j]));
      const float scale = amax / 127.0f;
      const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
      int32_t sum = 0;
      for (int64_t j = 0; j < QK; ++j) {
        const float v = std::nearbyint(xb[j] * inv);  // the default rounding: to nearest, ties to even
        const int32_t iv = static_cast<int32_t>(std::clamp(v, -127.0f, 127.0f));
        qb[j] = static_cast<int8_t>(iv);
        sum += iv;
      }
      d[m * nb + b] = scale;
      s[m * nb + b] = scale * static_cast<float>(sum);
    }
  }
  return {q, d, s, K, nb};
}

}  // namespace

// ---------------------------------------------------------------- portable scalar kernels
namespace qscalar {
namespace {

// The 32 quants of block `blk` as signed values (Q4_1: the unsigned nibbles), its scale and offset.
template <DType WT>
inline void unpack(const uint8_t* blk, int32_t* wq, float* dw, float* mw) {
  *dw = f16_to_f32(u16_at(blk));
  *mw = 0.0f;
  if constexpr (WT == DType::Q8_0) {
    for (int j = 0; j < QK; ++j) wq[j] = static_cast<int8_t>(blk[2 + j]);
  } else {
    const uint8_t* qs = blk + (WT == DType::Q4_1 ? 4 : 2);
    const int32_t off = WT == DType::Q4_0 ? 8 : 0;
    for (int j = 0; j < 16; ++j) {
      wq[j] = (qs[j] & 0xf) - off;
      wq[j + 16] = (qs[j] >> 4) - off;
    }
    if constexpr (WT == DType::Q4_1) *mw = f16_to_f32(u16_at(blk + 2));
  }
}

template <DType WT, int MX>
inline void row_dots(const uint8_t* wr, const QuantX& qx, int64_t m0, float (&out)[MX]) {
  constexpr size_t kBlock = WT == DType::Q8_0 ? 34 : WT == DType::Q4_0 ? 18 : 20;
  float acc[MX], macc[MX];
  for (int i = 0; i < MX; ++i) acc[i] = macc[i] = 0.0f;
  int32_t wq[QK];
  for (int64_t b = 0; b < qx.nb; ++b) {
    float dw, mw;
    unpack<WT>(wr + static_cast<size_t>(b) * kBlock, wq, &dw, &mw);
    for (int i = 0; i < MX; ++i) {
      const int8_t* xq = qx.q + (m0 + i) * qx.K + b * QK;
      int32_t isum = 0;
      for (int j = 0; j < QK; ++j) isum += wq[j] * xq[j];
      acc[i] += dw * qx.d[(m0 + i) * qx.nb + b] * static_cast<float>(isum);
      if constexpr (WT == DType::Q4_1) macc[i] += mw * qx.s[(m0 + i) * qx.nb + b];
    }
  }
  for (int i = 0; i < MX; ++i) out[i] = acc[i] + macc[i];
}

template <DType WT>
inline void dequant_row(const uint8_t* wr, int64_t K, float* y) {
  constexpr size_t kBlock = WT == DType::Q8_0 ? 34 : WT == DType::Q4_0 ? 18 : 20;
  int32_t wq[QK];
  for (int64_t b = 0; b < K / QK; ++b) {
    float dw, mw;
    unpack<WT>(wr + static_cast<size_t>(b) * kBlock, wq, &dw, &mw);
    for (int j = 0; j < QK; ++j) y[b * QK + j] = static_cast<float>(wq[j]) * dw + mw;
  }
}

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

// The block's 32 quants as bytes (values 0..31 in order): signed for Q8_0 and Q4_0, the unsigned nibbles for
// Q4_1.
template <DType WT>
inline __m256i load_quants(const uint8_t* blk) {
  if constexpr (WT == DType::Q8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
  } else {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + (WT == DType::Q4_1 ? 4 : 2)));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m256i w = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(raw, 4), m4), _mm_and_si128(raw, m4));
    if constexpr (WT == DType::Q4_0) return _mm256_sub_epi8(w, _mm256_set1_epi8(8));
    return w;
  }
}

// Dots of one weight row with x rows m0 .. m0 + MX - 1. Two accumulators per x row (even and odd blocks) so
// consecutive FMAs do not wait on each other; the same operations in the same order for each x row whatever
// MX, so an output does not depend on how many rows share the pass.
template <DType WT, int MX>
inline void row_dots(const uint8_t* wr, const QuantX& qx, int64_t m0, float (&out)[MX]) {
  constexpr size_t kBlock = WT == DType::Q8_0 ? 34 : WT == DType::Q4_0 ? 18 : 20;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[2][MX];
  float macc[MX];
#pragma GCC unroll 8
  for (int i = 0; i < MX; ++i) {
    acc[0][i] = acc[1][i] = _mm256_setzero_ps();
    macc[i] = 0.0f;
  }
  const int8_t* xq[MX];
  const float* xd[MX];
  const float* xs[MX];
#pragma GCC unroll 8
  for (int i = 0; i < MX; ++i) {
    xq[i] = qx.q + (m0 + i) * qx.K;
    xd[i] = qx.d + (m0 + i) * qx.nb;
    xs[i] = qx.s + (m0 + i) * qx.nb;
  }
  for (int64_t b = 0; b < qx.nb; ++b) {
    const uint8_t* blk = wr + static_cast<size_t>(b) * kBlock;
    const __m256i w = load_quants<WT>(blk);
    const float dw = _cvtsh_ss(u16_at(blk));
    // vpmaddubsw multiplies unsigned by signed bytes: signed weights give their magnitude, and x their sign.
    const __m256i uw = WT == DType::Q4_1 ? w : _mm256_sign_epi8(w, w);
    const int p = static_cast<int>(b & 1);
#pragma GCC unroll 8
    for (int i = 0; i < MX; ++i) {
      __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[i] + b * QK));
      if constexpr (WT != DType::Q4_1) x = _mm256_sign_epi8(x, w);
      const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(uw, x), ones);
      acc[p][i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(dw * xd[i][b]), acc[p][i]);
      if constexpr (WT == DType::Q4_1) macc[i] = std::fma(_cvtsh_ss(u16_at(blk + 2)), xs[i][b], macc[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MX; ++i) out[i] = hsum(_mm256_add_ps(acc[0][i], acc[1][i])) + macc[i];
}

template <DType WT>
inline void dequant_row(const uint8_t* wr, int64_t K, float* y) {
  constexpr size_t kBlock = WT == DType::Q8_0 ? 34 : WT == DType::Q4_0 ? 18 : 20;
  for (int64_t b = 0; b < K / QK; ++b) {
    const uint8_t* blk = wr + static_cast<size_t>(b) * kBlock;
    const __m256i w = load_quants<WT>(blk);
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(u16_at(blk)));
    const __m256 m = _mm256_set1_ps(WT == DType::Q4_1 ? _cvtsh_ss(u16_at(blk + 2)) : 0.0f);
    const __m128i lo = _mm256_castsi256_si128(w), hi = _mm256_extracti128_si256(w, 1);
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int k = 0; k < 4; ++k) {
      const __m256i v = WT == DType::Q4_1 ? _mm256_cvtepu8_epi32(parts[k]) : _mm256_cvtepi8_epi32(parts[k]);
      _mm256_storeu_ps(y + b * QK + 8 * k, _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), d, m));
    }
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
  TS_ASSERT(K % QK == 0, dtype_name(wt), " weights with K = ", K, " (not a multiple of ", QK, ")");
}

// Prefill: y = x · w^T for one product, in chunks of weight rows dequantised to f32 (scratch slot 2 of this
// thread, shared with the workers of the f32 gemm) and multiplied into a chunk of y (slot 3).
void quant_gemm(const float* x, int64_t M, int64_t K, const MatmulOut& o, DType wt) {
  const size_t row_bytes = dtype_bytes(wt, K);
  // About 2 MiB of f32 weights per chunk (stays in cache between the dequantisation and the gemm's packing).
  const int64_t chunk =
      std::clamp<int64_t>((int64_t{512} * 1024 / K) / 16 * 16, 16, std::max<int64_t>(o.N, 16));
  float* wf = scratch(2, chunk * K);
  float* yc = scratch(3, M * chunk);
  const auto* w = static_cast<const uint8_t*>(o.w);
  for (int64_t n0 = 0; n0 < o.N; n0 += chunk) {
    const int64_t nc = std::min(chunk, o.N - n0);
    ThreadPool::instance().parallel_for(nc, 16, [&](int64_t r0, int64_t r1) {
      dequant_rows(wt, w + static_cast<size_t>(n0) * row_bytes, row_bytes, K, r0, r1, wf);
    });
    matmul(x, M, K, wf, DType::F32, nc, o.bias ? o.bias + n0 : nullptr, yc);
    for (int64_t m = 0; m < M; ++m)
      std::memcpy(o.y + m * o.N + n0, yc + m * nc, static_cast<size_t>(nc) * sizeof(float));
  }
}

}  // namespace

namespace {

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
  for (int64_t m = 0; m < M; ++m)
    std::memcpy(o.y + m * o.N + n0, yc + m * nc, static_cast<size_t>(nc) * sizeof(float));
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
  const QuantX qx = exact ? QuantX{} : quantize_x(x, M, K);
  const size_t row_bytes = dtype_bytes(wt, K);
  // Chunks of kChunkRows rows of each output in turn, claimed dynamically by the threads.
  constexpr int kMaxOuts = 8;
  TS_ASSERT(count >= 1 && count <= kMaxOuts, "quantised matmul of ", count, " products");
  int64_t first_chunk[kMaxOuts + 1] = {0};
  int64_t rows = 0;
  for (int i = 0; i < count; ++i) {
    first_chunk[i + 1] = first_chunk[i] + (outs[i].N + kChunkRows - 1) / kChunkRows;
    rows += outs[i].N;
  }
  auto run_chunks = [&](int64_t c0, int64_t c1) {
    int i = 0;
    for (int64_t c = c0; c < c1; ++c) {
      while (c >= first_chunk[i + 1]) ++i;
      const MatmulOut& o = outs[i];
      const int64_t n0 = (c - first_chunk[i]) * kChunkRows, n1 = std::min(o.N, n0 + kChunkRows);
      if (exact) {
        exact_chunk(x, M, K, wt, row_bytes, o, n0, n1);
      } else {
        gemv_chunk(wt, static_cast<const uint8_t*>(o.w), row_bytes, qx, M, n0, n1, o.bias, o.y, o.N);
      }
    }
  };
  if (M * K * rows < 64 * 1024) return run_chunks(0, first_chunk[count]);
  ThreadPool::instance().parallel_chunks(first_chunk[count], 1, run_chunks);
}

void dequantize_rows(DType wt, const void* w, int64_t K, int64_t rows, float* y) {
  check_quant_shape(wt, K);
  dequant_rows(wt, static_cast<const uint8_t*>(w), dtype_bytes(wt, K), K, 0, rows, y);
}

}  // namespace tessera::cpu
