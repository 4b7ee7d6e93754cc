// Decode matmul (M < kGemmMinRows) for bf16 weights on CPUs with AVX512-BF16, the kernel of the
// "avx512bf16" instruction set: x is rounded to bf16 (round-to-nearest-even, as llama.cpp does for its bf16
// matmuls) and each vdpbf16ps multiplies 32 weights with 32 x values, the products exact in f32 and summed
// in f32. Per 64 bytes of weights that is one load and one instruction (the AVX-512 kernel needs a widen,
// a mask and two FMAs), so one core streams weights well above its share of the memory bandwidth.
// Weights stay in the Hugging Face [N, K] row-major layout: pairs (w[n, k], w[n, k + 1]) meet
// (x[k], x[k + 1]) in the same lane whatever the alignment, and the K tail is a masked load.
#include <algorithm>
#include <cstdint>

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
  for (; k < K; k += kStep) {  // x is zero-padded, so only the weights need the mask (they run into the next row)
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

}  // namespace

void matmul_bf16_small_m(const float* x, int64_t M, int64_t K, const MatmulOut* outs, int count) {
  const int64_t Kp = (K + kStep - 1) / kStep * kStep;
  // bf16 x in a float scratch buffer (two bf16 per float), shared with the workers.
  uint16_t* xb = reinterpret_cast<uint16_t*>(scratch(0, (M * Kp + 1) / 2 + 32));
  round_x(x, M, K, Kp, xb);
  // Chunks of kChunkRows rows of each output in turn, claimed dynamically by the threads.
  constexpr int kMaxOuts = 8;
  TS_ASSERT(count >= 1 && count <= kMaxOuts, "matmul_multi of ", count, " products");
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
      const int64_t n0 = (c - first_chunk[i]) * kChunkRows;
      gemv(xb, M, Kp, static_cast<const uint16_t*>(o.w), K, n0, std::min(o.N, n0 + kChunkRows), o.bias, o.y,
           o.N);
    }
  };
  if (M * K * rows < 64 * 1024) {
    run_chunks(0, first_chunk[count]);
    return;
  }
  ThreadPool::instance().parallel_chunks(first_chunk[count], 1, run_chunks);
}

}  // namespace isa_avx512bf16
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif  // TESSERA_CPU_WIDE

}  // namespace tessera::cpu
