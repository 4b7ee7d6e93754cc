// The matmuls of bf16 weights under Bf16Dot::RoundX on CPUs with AVX512-BF16 (the "avx512bf16" instruction
// set): x is rounded to bf16 (round-to-nearest-even, as llama.cpp does for its bf16 matmuls) and vdpbf16ps
// multiplies pairs, the products exact in f32 and summed in f32.
//  * Decode (M < kGemmMinRows): each vdpbf16ps multiplies 32 weights with 32 x values; per 64 bytes of
//    weights that is one load and one instruction (the AVX-512 kernel needs a widen, a mask and two FMAs), so
//    one core streams weights well above its share of the memory bandwidth. Weights stay in the Hugging Face
//    [N, K] row-major layout: pairs (w[n, k], w[n, k + 1]) meet (x[k], x[k + 1]) in the same lane whatever
//    the alignment, and the K tail is a masked load.
//  * Prefill (M >= kGemmMinRows): a gemm on panels of weight pairs, see matmul_bf16_gemm below; on CPUs with
//    AMX-BF16 (and the kernel's permission for tile data) the same panels go through tdpbf16ps tiles.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_simd.h"
#include "backends/cpu/thread_pool.h"
#include "tessera/error.h"

namespace tessera::cpu {

#if TESSERA_CPU_WIDE
#pragma GCC push_options
#pragma GCC diagnostic push
// GCC 12 intrinsics self-initialise "undefined" vectors (__m512 __Y = __Y), which -Wuninitialized flags.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")
namespace isa_avx512bf16 {
namespace {

constexpr int64_t kStep = 32;       // bf16 values per vector
constexpr int NW = 4;               // w rows per tile
constexpr int GR = 4;               // x rows per pass
constexpr int64_t kChunkRows = 64;  // w rows per scheduling chunk (a work unit claimed by one thread)

inline __mmask32 tail_mask(int64_t n) { return static_cast<__mmask32>((uint64_t{1} << n) - 1); }
inline __mmask16 tail_mask16(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff)
                 : static_cast<__mmask16>((1u << std::max<int64_t>(n, 0)) - 1);
}

// xb [M][Kp]: x rounded to bf16, each row padded with zeros to Kp (a multiple of kStep).
void round_x(const float* x, int64_t M, int64_t K, int64_t Kp, uint16_t* xb) {
  for (int64_t m = 0; m < M; ++m) {
    const float* src = x + m * K;
    uint16_t* dst = xb + m * Kp;
    for (int64_t k = 0; k < Kp; k += kStep) {
      const __m512 a = _mm512_maskz_loadu_ps(tail_mask16(K - k), src + k);
      const __m512 b = _mm512_maskz_loadu_ps(tail_mask16(K - k - 16), src + k + 16);
      _mm512_storeu_si512(dst + k, (__m512i)_mm512_cvtne2ps_pbh(b, a));
    }
  }
}

// [sum(a), sum(b), sum(c), sum(d)]
inline __m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m256 a8 = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
  const __m256 b8 = _mm256_add_ps(_mm512_castps512_ps256(b), _mm512_extractf32x8_ps(b, 1));
  const __m256 c8 = _mm256_add_ps(_mm512_castps512_ps256(c), _mm512_extractf32x8_ps(c, 1));
  const __m256 d8 = _mm256_add_ps(_mm512_castps512_ps256(d), _mm512_extractf32x8_ps(d, 1));
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(a8, b8), _mm256_hadd_ps(c8, d8));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// One weight row against MX x rows: two accumulators per x row (alternate 32-value steps), so consecutive
// vdpbf16ps do not wait on each other; the row is read front to back.
template <int MX>
inline void row_dot(const uint16_t* xb, int64_t Kp, const uint16_t* wr, int64_t K, __m512 (&sum)[MX]) {
  __m512 a[MX], b[MX];
#pragma GCC unroll 16
  for (int i = 0; i < MX; ++i) a[i] = b[i] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 2 * kStep <= K; k += 2 * kStep) {
    const __m512i w0 = _mm512_loadu_si512(wr + k), w1 = _mm512_loadu_si512(wr + k + kStep);
#pragma GCC unroll 16
    for (int i = 0; i < MX; ++i) {
      a[i] = _mm512_dpbf16_ps(a[i], (__m512bh)w0, (__m512bh)_mm512_loadu_si512(xb + i * Kp + k));
      b[i] = _mm512_dpbf16_ps(b[i], (__m512bh)w1, (__m512bh)_mm512_loadu_si512(xb + i * Kp + k + kStep));
    }
  }
  // x is zero-padded, so only the weights need the mask (they run into the next row).
  for (; k < K; k += kStep) {
    const __m512i w0 = _mm512_maskz_loadu_epi16(tail_mask(std::min<int64_t>(kStep, K - k)), wr + k);
#pragma GCC unroll 16
    for (int i = 0; i < MX; ++i)
      a[i] = _mm512_dpbf16_ps(a[i], (__m512bh)w0, (__m512bh)_mm512_loadu_si512(xb + i * Kp + k));
  }
#pragma GCC unroll 16
  for (int i = 0; i < MX; ++i) sum[i] = _mm512_add_ps(a[i], b[i]);
}

// y[i, n + j] for i < MX, j < NWT. The NWT weight rows are read one after another, not interleaved: on the
// 2-core EPYC, four interleaved row streams read 11 GB/s from memory and one stream 28 GB/s (the hardware
// prefetcher follows one stream well, four short ones badly). Only the final sums are combined across rows.
template <int MX, int NWT>
inline void tile(const uint16_t* xb, int64_t Kp, const uint16_t* w, int64_t K, int64_t n, const float* bias,
                 float* y, int64_t ldy) {
  __m512 acc[NWT][MX];
#pragma GCC unroll 16
  for (int j = 0; j < NWT; ++j) row_dot<MX>(xb, Kp, w + (n + j) * K, K, acc[j]);
  for (int i = 0; i < MX; ++i) {
    if constexpr (NWT == 4) {
      __m128 s = reduce4(acc[0][i], acc[1][i], acc[2][i], acc[3][i]);
      if (bias) s = _mm_add_ps(s, _mm_loadu_ps(bias + n));
      _mm_storeu_ps(y + i * ldy + n, s);
    } else {
      for (int j = 0; j < NWT; ++j)
        y[i * ldy + n + j] = _mm512_reduce_add_ps(acc[j][i]) + (bias ? bias[n + j] : 0.0f);
    }
  }
}

// y[0:MX, n0:n1].
template <int MX>
void rows(const uint16_t* xb, int64_t Kp, const uint16_t* w, int64_t K, int64_t n0, int64_t n1,
          const float* bias, float* y, int64_t ldy) {
  int64_t n = n0;
  for (; n + NW <= n1; n += NW) tile<MX, NW>(xb, Kp, w, K, n, bias, y, ldy);
  for (; n < n1; ++n) tile<MX, 1>(xb, Kp, w, K, n, bias, y, ldy);
}

// y[0:M, n0:n1], x rows in passes of GR.
void gemv(const uint16_t* xb, int64_t M, int64_t Kp, const uint16_t* w, int64_t K, int64_t n0, int64_t n1,
          const float* bias, float* y, int64_t N) {
  int64_t m = 0;
  for (; m + GR <= M; m += GR) rows<GR>(xb + m * Kp, Kp, w, K, n0, n1, bias, y + m * N, N);
  const uint16_t* xr = xb + m * Kp;
  float* yr = y + m * N;
  switch (M - m) {
    case 0:
      break;
    case 1:
      rows<1>(xr, Kp, w, K, n0, n1, bias, yr, N);
      break;
    case 2:
      rows<2>(xr, Kp, w, K, n0, n1, bias, yr, N);
      break;
    case 3:
      rows<3>(xr, Kp, w, K, n0, n1, bias, yr, N);
      break;
    default:
      TS_ASSERT(false, "bf16 gemv remainder ", M - m);
  }
}

// ---------------------------------------------------------------- gemm (prefill)
// y[M, N] for M >= kGemmMinRows: per K block of kKcB bf16 values, NR = 64 output columns of w are packed
// as pairs: wp[p][j] = (w[n0 + j, k0 + 2p], w[n0 + j, k0 + 2p + 1]) as one 32-bit word, so one vdpbf16ps
// with the broadcast pair (x[i, k0 + 2p], x[i, k0 + 2p + 1]) adds both products to 16 columns of row i.
// The micro-tile is 6 x 64 (24 accumulators), as in the f32 gemm, with twice the products per instruction.
constexpr int GMR = 6;         // x rows per micro-tile
constexpr int GNV = 4;         // vectors of 16 columns per micro-tile
constexpr int64_t GNR = 64;    // columns per packed panel
constexpr int64_t kKcB = 512;  // bf16 values of K per block: a panel is 256 pairs x 64 columns = 64 KB

// wp [kp][GNR] pair words of w rows n0 .. n0 + 63 (rows at or past N, and K past k0 + kc, are zeros);
// kp = ceil(kc / 2) rounded up to 16.
void pack_pairs(const uint16_t* w, int64_t K, int64_t N, int64_t n0, int64_t k0, int64_t kc, uint32_t* wp) {
  const int64_t cols = std::min<int64_t>(GNR, N - n0);
  for (int64_t j0 = 0; j0 < GNR; j0 += 16) {
    for (int64_t b = 0; b < kc; b += kStep) {  // 32 bf16 = 16 pairs per row and step
      const __mmask32 m = tail_mask(std::min<int64_t>(kStep, kc - b));
      // 16 rows of 16 pair words, transposed as 32-bit lanes with the f32 transpose.
      __m512 r[16];
      for (int64_t i = 0; i < 16; ++i)
        r[i] = j0 + i < cols
                   ? _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(m, w + (n0 + j0 + i) * K + k0 + b))
                   : _mm512_setzero_ps();
      VAvx512::transpose(r);
      for (int64_t i = 0; i < 16; ++i)
        _mm512_storeu_ps(reinterpret_cast<float*>(wp + (b / 2 + i) * GNR + j0), r[i]);
    }
  }
}

// The bf16 pair (x[2p], x[2p + 1]) as one 32-bit word.
inline int pair_at(const uint16_t* x, int64_t p) {
  int32_t v;
  std::memcpy(&v, x + 2 * p, sizeof v);
  return v;
}

// acc[i][v] += the dot of x rows xr[i] (bf16, at pair p) and the panel's columns 16v .. 16v + 15, p < kp.
inline void gemm_micro(const uint16_t* const* xr, const uint32_t* wp, int64_t kp, __m512 (&acc)[GMR][GNV]) {
  for (int64_t p = 0; p < kp; ++p) {
    __m512i b[GNV];
#pragma GCC unroll 8
    for (int v = 0; v < GNV; ++v) b[v] = _mm512_loadu_si512(wp + p * GNR + v * 16);
#pragma GCC unroll 8
    for (int i = 0; i < GMR; ++i) {
      const __m512i a = _mm512_set1_epi32(pair_at(xr[i], p));
#pragma GCC unroll 8
      for (int v = 0; v < GNV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], (__m512bh)a, (__m512bh)b[v]);
    }
  }
}

// y[:, n_begin .. n_end) over all M rows; xb [M][Kp] bf16 (zero-padded rows).
void gemm_cols(const uint16_t* xb, int64_t M, int64_t Kp, const uint16_t* w, int64_t K, int64_t N,
               int64_t n_begin, int64_t n_end, const float* bias, float* y) {
  auto* wp = reinterpret_cast<uint32_t*>(scratch(1, kKcB / 2 * GNR));
  for (int64_t k0 = 0; k0 < K; k0 += kKcB) {
    const int64_t kc = std::min(kKcB, K - k0);
    const int64_t kp = (kc + kStep - 1) / kStep * (kStep / 2);  // whole steps; the padding is zeros
    for (int64_t n0 = n_begin; n0 < n_end; n0 += GNR) {
      const int64_t cols = std::min<int64_t>(GNR, n_end - n0);
      pack_pairs(w, K, N, n0, k0, kc, wp);
      for (int64_t m0 = 0; m0 < M; m0 += GMR) {
        const int64_t rows = std::min<int64_t>(GMR, M - m0);
        const uint16_t* xr[GMR];
        for (int i = 0; i < GMR; ++i) xr[i] = xb + (m0 + std::min<int64_t>(i, rows - 1)) * Kp + k0;
        __m512 acc[GMR][GNV];
        for (int i = 0; i < GMR; ++i)
          for (int v = 0; v < GNV; ++v) acc[i][v] = _mm512_setzero_ps();
        gemm_micro(xr, wp, kp, acc);
        for (int64_t i = 0; i < rows; ++i) {  // store (first block: plus bias) or add
          float* yr = y + (m0 + i) * N + n0;
          for (int v = 0; v < GNV && v * 16 < cols; ++v) {
            const __mmask16 m = tail_mask16(cols - v * 16);
            __m512 r = acc[i][v];
            if (k0 == 0) {
              if (bias) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m, bias + n0 + v * 16));
            } else {
              r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m, yr + v * 16));
            }
            _mm512_mask_storeu_ps(yr + v * 16, m, r);
          }
        }
      }
    }
  }
}

// y rows m0 .. m0 + rows - 1, columns n0 .. n0 + cols - 1 (cols <= 32) from c [32][32] (ldc 32): stored, plus
// bias in the first K block, or added to what the earlier blocks stored.
void store_block(const float* c, int64_t rows, int64_t cols, bool first, const float* bias, int64_t n0,
                 float* y, int64_t N) {
  for (int64_t i = 0; i < rows; ++i) {
    float* yr = y + i * N + n0;
    for (int v = 0; v < 2 && v * 16 < cols; ++v) {
      const __mmask16 m = tail_mask16(cols - v * 16);
      __m512 r = _mm512_loadu_ps(c + i * 32 + v * 16);
      if (first) {
        if (bias) r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m, bias + n0 + v * 16));
      } else {
        r = _mm512_add_ps(r, _mm512_maskz_loadu_ps(m, yr + v * 16));
      }
      _mm512_mask_storeu_ps(yr + v * 16, m, r);
    }
  }
}

#pragma GCC push_options
#pragma GCC target("amx-tile,amx-bf16")
// gemm_cols on AMX tiles: the same pair panels (the layout tdpbf16ps wants of its B operand: 16 rows of pair
// words, one per column), 32 x rows by 32 columns per step: tiles 0-3 accumulate the 2 x 2 blocks of 16 x 16,
// 4-5 hold 16 x rows of 32 bf16 each, 6-7 16 pairs of 16 columns each; one tdpbf16ps multiplies 16 x 16 x 32.
// xb has Mp rows (M rounded up to 32, zeros past M).
void gemm_cols_amx(const uint16_t* xb, int64_t M, int64_t Mp, int64_t Kp, const uint16_t* w, int64_t K,
                   int64_t N, int64_t n_begin, int64_t n_end, const float* bias, float* y) {
  struct alignas(64) TileConfig {
    uint8_t palette = 1, start_row = 0, reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
  } cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
  auto* wp = reinterpret_cast<uint32_t*>(scratch(1, kKcB / 2 * GNR));
  alignas(64) float c[32 * 32];
  const size_t xstride = static_cast<size_t>(Kp) * sizeof(uint16_t), wstride = GNR * sizeof(uint32_t);
  for (int64_t k0 = 0; k0 < K; k0 += kKcB) {
    const int64_t kc = std::min(kKcB, K - k0);
    const int64_t steps = (kc + kStep - 1) / kStep;  // of 32 values (16 pairs); the padding is zeros
    for (int64_t n0 = n_begin; n0 < n_end; n0 += GNR) {
      const int64_t cols = std::min<int64_t>(GNR, n_end - n0);
      pack_pairs(w, K, N, n0, k0, kc, wp);
      for (int64_t m0 = 0; m0 < Mp; m0 += 32) {
        for (int64_t h = 0; h * 32 < cols; ++h) {
          _tile_zero(0);
          _tile_zero(1);
          _tile_zero(2);
          _tile_zero(3);
          for (int64_t s = 0; s < steps; ++s) {
            _tile_loadd(4, xb + m0 * Kp + k0 + s * kStep, xstride);
            _tile_loadd(5, xb + (m0 + 16) * Kp + k0 + s * kStep, xstride);
            _tile_loadd(6, wp + s * 16 * GNR + h * 32, wstride);
            _tile_loadd(7, wp + s * 16 * GNR + h * 32 + 16, wstride);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
            _tile_dpbf16ps(2, 5, 6);
            _tile_dpbf16ps(3, 5, 7);
          }
          _tile_stored(0, c, 128);
          _tile_stored(1, c + 16, 128);
          _tile_stored(2, c + 16 * 32, 128);
          _tile_stored(3, c + 16 * 32 + 16, 128);
          store_block(c, std::min<int64_t>(32, M - m0), std::min<int64_t>(32, cols - h * 32), k0 == 0, bias,
                      n0 + h * 32, y + m0 * N, N);
        }
      }
    }
  }
  _tile_release();
}
#pragma GCC pop_options

}  // namespace

void matmul_bf16_gemm(const float* x, int64_t M, int64_t K, const uint16_t* w, int64_t N, const float* bias,
                      float* y) {
  const int64_t Kp = (K + kStep - 1) / kStep * kStep;
  const bool amx = amx_in_use();
  const int64_t Mp = amx ? (M + 31) / 32 * 32 : M;  // AMX: whole tiles of 32 rows, zeros past M
  uint16_t* xb = reinterpret_cast<uint16_t*>(scratch(0, (Mp * Kp + 1) / 2 + 32));
  round_x(x, M, K, Kp, xb);
  std::memset(xb + M * Kp, 0, static_cast<size_t>((Mp - M) * Kp) * sizeof(uint16_t));
  // Columns split over the threads in whole 16-column vectors (each thread packs its own panels).
  const int64_t vecs = (N + 15) / 16;
  ThreadPool::instance().run([&](int tid, int nth) {
    const int64_t n0 = std::min(N, vecs * tid / nth * 16), n1 = std::min(N, vecs * (tid + 1) / nth * 16);
    if (n0 >= n1) return;
    if (amx) {
      gemm_cols_amx(xb, M, Mp, Kp, w, K, N, n0, n1, bias, y);
    } else {
      gemm_cols(xb, M, Kp, w, K, N, n0, n1, bias, y);
    }
  });
}

void matmul_bf16_small_m(const float* x, int64_t M, int64_t K, const MatmulOut* outs, int count) {
  const int64_t Kp = (K + kStep - 1) / kStep * kStep;
  // bf16 x in a float scratch buffer (two bf16 per float), shared with the workers.
  uint16_t* xb = reinterpret_cast<uint16_t*>(scratch(0, (M * Kp + 1) / 2 + 32));
  round_x(x, M, K, Kp, xb);
  for_each_row_chunk(outs, count, kChunkRows, M * K, [&](const MatmulOut& o, int64_t n0, int64_t n1) {
    gemv(xb, M, Kp, static_cast<const uint16_t*>(o.w), K, n0, n1, o.bias, o.y, o.N);
  });
}

}  // namespace isa_avx512bf16
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif  // TESSERA_CPU_WIDE

}  // namespace tessera::cpu
