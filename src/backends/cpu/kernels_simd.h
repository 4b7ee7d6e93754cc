// Internal to the CPU kernels: one small vector-traits struct per instruction set, so a kernel body
// written once against `V` (kernels_matmul.inc) can be compiled for each target, plus a table of
// out-of-line vector primitives (VecOps) for kernels that only need a few of them.
//
// The AVX2 and AVX-512 structs are compiled under `#pragma GCC target`, so the library itself is built
// for baseline x86-64 and runs on any machine; only the table chosen at run time executes wider code.
// Rule: no standard header may be included inside a target region (its inline functions would be
// compiled for that target and could be picked by the linker for baseline callers).
#pragma once

// The wide regions rely on GCC's `#pragma GCC target`, which clang does not implement; a clang build (the
// libFuzzer targets) compiles the portable scalar kernels only and reports AVX2/AVX-512 as unsupported.
#if defined(__GNUC__) && !defined(__clang__)
#define TESSERA_CPU_WIDE 1
#else
#define TESSERA_CPU_WIDE 0
#endif

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backends/cpu/kernels.h"
#include "backends/cpu/thread_pool.h"
#include "tessera/error.h"
#include "tessera/tensor.h"

// Target strings of the wide regions (a pragma does not expand macros, so each region spells them out and
// they must match isa_supported()): "avx2,fma,f16c" and "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c".

namespace tessera::cpu {

// ---- portable scalar: one lane ----
struct VScalar {
  using R = float;
  static constexpr int kLanes = 1;
  static constexpr int kGemmMR = 4;    // gemm micro-tile rows (of x)
  static constexpr int kGemmNV = 4;    // gemm micro-tile width in vectors (columns of y)
  static constexpr int kGemvRows = 4;  // x rows handled together by the small-M kernel
  static R zero() { return 0.0f; }
  static R set1(float a) { return a; }
  static R load(const float* p) { return *p; }
  static void store(float* p, R v) { *p = v; }
  static R fma(R a, R b, R c) { return a * b + c; }
  static R add(R a, R b) { return a + b; }
  static R mul(R a, R b) { return a * b; }
  static float hsum(R v) { return v; }
  static float first(R v) { return v; }
  static R load_bf16(const uint16_t* p) { return bf16_to_f32(*p); }
  static R load_f16(const uint16_t* p) { return f16_to_f32(*p); }
  static R div(R a, R b) { return a / b; }
  static R exp(R x) { return std::exp(x); }
  static R abs(R x) { return std::fabs(x); }
  static R relu(R x) { return x > 0.0f || x != x ? x : 0.0f; }            // max(x, 0), NaN kept
  static R select_neg(R x, R a, R b) { return std::signbit(x) ? a : b; }  // a where x's sign bit is set
  // bf16 "pairs" layout (used where kBf16Pairs): 2 * kLanes bf16 split into even and odd elements, and the
  // matching f32 deinterleave of x, so bf16 widens with one shift / one mask instead of a cross-lane widen.
  static constexpr bool kBf16Pairs = false;
  static void load_bf16_pair(const uint16_t* p, R& even, R& odd) {
    even = bf16_to_f32(p[0]);
    odd = bf16_to_f32(p[1]);
  }
  static void deinterleave(const float* src, float* dst) {
    dst[0] = src[0];
    dst[1] = src[1];
  }
  // Transposes the kLanes x kLanes matrix held in r (row i = r[i]).
  static void transpose(R (&)[kLanes]) {}
};

#if TESSERA_CPU_WIDE
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
// ---- AVX2 + FMA: 8 lanes, 16 registers ----
struct VAvx2 {
  using R = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kGemmMR = 6;  // 6 x 2 accumulators + 2 weights + 1 broadcast = 15 registers
  static constexpr int kGemmNV = 2;
  static constexpr int kGemvRows = 6;  // 6 x 2 accumulators + 2 weights + 1 input (one w row at a time)
  static R zero() { return _mm256_setzero_ps(); }
  static R set1(float a) { return _mm256_set1_ps(a); }
  static R load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, R v) { _mm256_storeu_ps(p, v); }
  static R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static R add(R a, R b) { return _mm256_add_ps(a, b); }
  static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static float hsum(R v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float first(R v) { return _mm256_cvtss_f32(v); }
  // bf16 is the top half of an f32: widen to 32 bits and shift left (exact).
  static R load_bf16(const uint16_t* p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static R load_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static R div(R a, R b) { return _mm256_div_ps(a, b); }
  static R abs(R x) { return _mm256_andnot_ps(set1(-0.0f), x); }
  static R relu(R x) { return _mm256_max_ps(zero(), x); }  // the second operand (x) when either is NaN
  static R select_neg(R x, R a, R b) { return _mm256_blendv_ps(b, a, x); }  // blendv reads the sign bit
  // exp in f32 (Cephes-style range reduction + degree-6 polynomial, ~1 ulp). Inputs below -87 give 0
  // (the true value is below the smallest normal), above ln(FLT_MAX) give inf, NaN stays NaN.
  static R exp(R x) {
    R xc = _mm256_min_ps(_mm256_max_ps(x, set1(-87.0f)), set1(88.7228394f));
    R n = _mm256_round_ps(mul(xc, set1(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    R r = _mm256_fnmadd_ps(n, set1(0.693359375f), xc);
    r = _mm256_fnmadd_ps(n, set1(-2.12194440e-4f), r);
    R p = set1(1.9875691500e-4f);
    p = fma(p, r, set1(1.3981999507e-3f));
    p = fma(p, r, set1(8.3334519073e-3f));
    p = fma(p, r, set1(4.1665795894e-2f));
    p = fma(p, r, set1(1.6666665459e-1f));
    p = fma(p, r, set1(5.0000001201e-1f));
    p = fma(p, mul(r, r), add(r, set1(1.0f)));
    // 2^n as two factors so n = 128 and n = -126 stay representable.
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1);
    __m256i n2 = _mm256_sub_epi32(ni, n1);
    R s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    R s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    R res = mul(mul(p, s1), s2);
    res = _mm256_blendv_ps(res, zero(), _mm256_cmp_ps(x, set1(-87.0f), _CMP_LT_OQ));
    res = _mm256_blendv_ps(res, set1(__builtin_inff()), _mm256_cmp_ps(x, set1(88.7228394f), _CMP_GT_OQ));
    return _mm256_blendv_ps(res, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  static constexpr bool kBf16Pairs = false;  // 16 registers are too few for the paired gemv tile
  static void load_bf16_pair(const uint16_t* p, R& even, R& odd) {
    __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    even = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    odd = _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static void deinterleave(const float* src, float* dst) {
    R a = load(src), b = load(src + 8);
    store(dst,
          _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8)));
    store(dst + 8,
          _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8)));
  }
  static void transpose(R (&r)[8]) {
    R t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {  // per 128-bit lane: columns 4l .. 4l+3 of rows i .. i+3
      u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
      u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
      u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
      u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int c = 0; c < 4; ++c) {
      r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
      r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
    }
  }
};
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC diagnostic push
// GCC 12 intrinsics self-initialise "undefined" vectors (__m512 __Y = __Y), which -Wuninitialized flags.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
// ---- AVX-512: 16 lanes, 32 registers ----
struct VAvx512 {
  using R = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kGemmMR = 6;  // 6 x 4 accumulators (a 6 x 64 tile of y) + 4 weights + 1 broadcast
  static constexpr int kGemmNV = 4;
  static constexpr int kGemvRows = 4;  // 4 x 4 accumulators + 4 weights + 1 input
  static R zero() { return _mm512_setzero_ps(); }
  static R set1(float a) { return _mm512_set1_ps(a); }
  static R load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, R v) { _mm512_storeu_ps(p, v); }
  static R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static R add(R a, R b) { return _mm512_add_ps(a, b); }
  static R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static float hsum(R v) { return _mm512_reduce_add_ps(v); }
  static float first(R v) { return _mm512_cvtss_f32(v); }
  static R load_bf16(const uint16_t* p) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
  static R load_f16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static R div(R a, R b) { return _mm512_div_ps(a, b); }
  static R abs(R x) { return _mm512_abs_ps(x); }
  static R relu(R x) { return _mm512_max_ps(zero(), x); }  // the second operand (x) when either is NaN
  static R select_neg(R x, R a, R b) {
    return _mm512_mask_blend_ps(_mm512_movepi32_mask(_mm512_castps_si512(x)), b, a);
  }
  // Same algorithm as VAvx2::exp.
  static R exp(R x) {
    R xc = _mm512_min_ps(_mm512_max_ps(x, set1(-87.0f)), set1(88.7228394f));
    R n = _mm512_roundscale_ps(mul(xc, set1(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    R r = _mm512_fnmadd_ps(n, set1(0.693359375f), xc);
    r = _mm512_fnmadd_ps(n, set1(-2.12194440e-4f), r);
    R p = set1(1.9875691500e-4f);
    p = fma(p, r, set1(1.3981999507e-3f));
    p = fma(p, r, set1(8.3334519073e-3f));
    p = fma(p, r, set1(4.1665795894e-2f));
    p = fma(p, r, set1(1.6666665459e-1f));
    p = fma(p, r, set1(5.0000001201e-1f));
    p = fma(p, mul(r, r), add(r, set1(1.0f)));
    __m512i ni = _mm512_cvtps_epi32(n);
    __m512i n1 = _mm512_srai_epi32(ni, 1);
    __m512i n2 = _mm512_sub_epi32(ni, n1);
    R s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, _mm512_set1_epi32(127)), 23));
    R s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, _mm512_set1_epi32(127)), 23));
    R res = mul(mul(p, s1), s2);
    res = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, set1(-87.0f), _CMP_LT_OQ), res, zero());
    res = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, set1(88.7228394f), _CMP_GT_OQ), res,
                               set1(__builtin_inff()));
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), res, x);
  }
  static constexpr bool kBf16Pairs = true;
  static void load_bf16_pair(const uint16_t* p, R& even, R& odd) {
    __m512i w = _mm512_loadu_si512(p);
    even = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    odd = _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }
  static void deinterleave(const float* src, float* dst) {
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    R a = load(src), b = load(src + 16);
    store(dst, _mm512_permutex2var_ps(a, ie, b));
    store(dst + 16, _mm512_permutex2var_ps(a, io, b));
  }
  static void transpose(R (&r)[16]) {
    R t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
      t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
      t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {  // u[i + c], 128-bit lane l: column 4l + c of rows i .. i+3
      const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
      const __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
      u[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
      u[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
      u[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
      u[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int c = 0; c < 4; ++c) {  // a 4 x 4 transpose of 128-bit blocks
      const R p = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88), q = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);
      const R rr = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
      const R ss = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
      r[c] = _mm512_shuffle_f32x4(p, rr, 0x88);
      r[8 + c] = _mm512_shuffle_f32x4(p, rr, 0xdd);
      r[4 + c] = _mm512_shuffle_f32x4(q, ss, 0x88);
      r[12 + c] = _mm512_shuffle_f32x4(q, ss, 0xdd);
    }
  }
};
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif  // TESSERA_CPU_WIDE

// Out-of-line vector primitives of one instruction set (kernels_dispatch.cpp).
struct VecOps {
  float (*dot)(const float* a, const float* b, int64_t n);
  float (*sumsq)(const float* x, int64_t n);
  void (*axpy)(float a, const float* x, float* y, int64_t n);                       // y += a * x
  void (*scale_mul)(const float* x, float s, const float* w, float* y, int64_t n);  // y = (x * s) * w
  void (*scale)(float s, float* y, int64_t n);                                      // y *= s
  float (*exp_sum)(float* x, int64_t n, float max);  // x = exp(x - max); returns sum
  void (*swiglu)(const float* gate, const float* up, int64_t n, float* y);
  void (*gelu_mul)(const float* gate, const float* up, int64_t n, float* y);       // gelu(gate) * up
  void (*gelu_tanh_mul)(const float* gate, const float* up, int64_t n, float* y);  // gelu_tanh(gate) * up
  void (*relu_mul)(const float* gate, const float* up, int64_t n, float* y);       // relu(gate) * up
  void (*add)(const float* a, const float* b, int64_t n, float* y);
  // out[r * ldo + :] = sum_j p[r * ldp + j] * rows[j, :] for r < R (any R; rows loaded once per 6 r).
  void (*weighted_rows_multi)(const float* p, int64_t ldp, int64_t R, int64_t n, const float* rows,
                              int64_t dim, float* out, int64_t ldo);
  // axpy and weighted_rows_multi with bfloat16 rows (a bf16 KV cache), widened exactly and summed in f32.
  void (*axpy_bf16)(float a, const uint16_t* x, float* y, int64_t n);
  void (*weighted_rows_multi_bf16)(const float* p, int64_t ldp, int64_t R, int64_t n, const uint16_t* rows,
                                   int64_t dim, float* out, int64_t ldo);
  // weighted_rows_multi adding to out: consecutive ranges of j give, bit for bit, one call over all of them.
  void (*weighted_rows_multi_acc)(const float* p, int64_t ldp, int64_t R, int64_t n, const float* rows,
                                  int64_t dim, float* out, int64_t ldo);
  // y[i] = the float8 e4m3fn value of byte x[i] (exact; NaN bytes give NaN), for i < n.
  void (*widen_f8e4m3)(const uint8_t* x, float* y, int64_t n);
};
const VecOps& vec_ops();  // of active_isa()

// Per-thread scratch of at least n floats, 64-byte aligned; grows (allocates) only when a larger size is
// first asked for on this thread, so kernels do not allocate in the steady state. `slot` separates
// buffers that are live at the same time (0..6; 4: the gemm's packed x block; 5, 6: attention's tiles of a
// quantised KV cache).
float* scratch(int slot, int64_t n);

// The decode kernels' scheduler: fn(o, n0, n1) over blocks of chunk_rows rows of each product of outs[0 ..
// count) in turn (count <= 8), a block being one work unit claimed dynamically by the pool's threads; on the
// calling thread alone when the products are small (macs_per_row times their rows under 64K multiply-adds).
template <typename Fn>
void for_each_row_chunk(const MatmulOut* outs, int count, int64_t chunk_rows, int64_t macs_per_row, Fn&& fn) {
  constexpr int kMaxOuts = 8;
  TS_ASSERT(count >= 1 && count <= kMaxOuts, "matmul of ", count, " products");
  int64_t first_chunk[kMaxOuts + 1] = {0};
  int64_t rows = 0;
  for (int i = 0; i < count; ++i) {
    first_chunk[i + 1] = first_chunk[i] + (outs[i].N + chunk_rows - 1) / chunk_rows;
    rows += outs[i].N;
  }
  auto run_chunks = [&](int64_t c0, int64_t c1) {
    int i = 0;
    for (int64_t c = c0; c < c1; ++c) {
      while (c >= first_chunk[i + 1]) ++i;
      const int64_t n0 = (c - first_chunk[i]) * chunk_rows;
      fn(outs[i], n0, std::min(outs[i].N, n0 + chunk_rows));
    }
  };
  if (macs_per_row * rows < 64 * 1024) return run_chunks(0, first_chunk[count]);
  ThreadPool::instance().parallel_chunks(first_chunk[count], 1, run_chunks);
}

// kernels_quant.cpp: matmul_multi / matmul_rows for block-quantised weights (Q8_0 .. Q6_K). rows_invariant
// (or M < kGemmMinRows): the decode kernel, each output row as it would be alone (int8 x, or with `exact` f32
// x on dequantised chunks); otherwise the dequantise-and-gemm prefill path.
void matmul_quant(const float* x, int64_t M, int64_t K, DType wdt, const MatmulOut* outs, int count,
                  bool rows_invariant, bool exact);

#if TESSERA_CPU_WIDE
namespace isa_avx512bf16 {
// kernels_matmul_bf16.cpp: matmul_multi() (1..8 products) for bf16 weights, Bf16Dot::RoundX and
// 0 < M < kGemmMinRows on the avx512bf16 set.
void matmul_bf16_small_m(const float* x, int64_t M, int64_t K, const MatmulOut* outs, int count);
// kernels_matmul_bf16.cpp: matmul() for bf16 weights, Bf16Dot::RoundX and M >= kGemmMinRows (the prefill
// gemm on vdpbf16ps).
void matmul_bf16_gemm(const float* x, int64_t M, int64_t K, const uint16_t* w, int64_t N, const float* bias,
                      float* y);
}  // namespace isa_avx512bf16
#endif

}  // namespace tessera::cpu
