/* An example native cpu kernel package (README "Kernels loaded at run time"): rms_norm on float32, built
 * against tessera/kernel_abi.h alone. It registers three kernels, plain (any x86-64), AVX2+FMA and AVX-512,
 * so the backend's choice by instruction set is exercised; each computes what the built-in kernel of its
 * instruction set computes, in the same order (built with -ffp-contract=off, as the library's ISO C++ is):
 * y = (x * (1 / sqrt(mean(x^2) + eps))) * weight, row by row (x and y may alias).
 *
 * The test build compiles this file twice more (cmake/parts/kernel_packages.cmake): with
 * EXAMPLE_ABI_VERSION=99 (a library for another ABI version) and with EXAMPLE_NO_REGISTER (a library missing
 * tessera_register_kernels), for the tests of broken packages, and with EXAMPLE_OUTPUT_SCALE=1.5f (a wrong
 * kernel: the tests check that its logits differ, so the loaded kernel is the one that runs). */
#include <math.h>
#include <tessera/kernel_abi.h>

#ifndef EXAMPLE_ABI_VERSION
#define EXAMPLE_ABI_VERSION TESSERA_KERNEL_ABI_VERSION
#endif

#ifndef EXAMPLE_OUTPUT_SCALE
#define EXAMPLE_OUTPUT_SCALE 1.0f
#endif

#define EXPORT __attribute__((visibility("default")))

/* Each row: the sum of squares in the built-in kernel's order (four accumulators of `lanes` floats, summed
 * pairwise, then the tail), so the result is bit for bit the built-in one on the same instruction set. */
#define RMS_NORM_ROWS(SUMSQ)                                                               \
  for (int64_t r = 0; r < rows; ++r) {                                                     \
    const float* xr = x + r * dim; /* [dim] */                                             \
    float* yr = y + r * dim;       /* [dim] */                                             \
    const float inv = 1.0f / sqrtf(SUMSQ(xr, dim) / (float)dim + eps);                     \
    for (int64_t i = 0; i < dim; ++i) yr[i] = (xr[i] * inv) * w[i] * EXAMPLE_OUTPUT_SCALE; \
  }

static float sumsq_scalar(const float* a, int64_t n) {
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 = a[i] * a[i] + s0;
    s1 = a[i + 1] * a[i + 1] + s1;
    s2 = a[i + 2] * a[i + 2] + s2;
    s3 = a[i + 3] * a[i + 3] + s3;
  }
  for (; i < n; ++i) s0 = a[i] * a[i] + s0;
  return (s0 + s1) + (s2 + s3);
}

__attribute__((unused)) static void rms_norm_scalar(const float* x, const float* w, int64_t rows, int64_t dim,
                                                    float eps, float* y) {
  RMS_NORM_ROWS(sumsq_scalar)
}

#if defined(__x86_64__)
#include <immintrin.h>

/* The built-in dot(x, x) of one instruction set: four accumulators of LANES floats (type R, ops P##_...),
 * then their pairwise sum reduced across lanes by HSUM, then the scalar tail. */
#define SUMSQ_BODY(R, LANES, P, HSUM)                                                                 \
  R s0 = P##_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;                                                 \
  int64_t i = 0;                                                                                      \
  for (; i + 4 * LANES <= n; i += 4 * LANES) {                                                        \
    R v0 = P##_loadu_ps(a + i), v1 = P##_loadu_ps(a + i + LANES);                                     \
    R v2 = P##_loadu_ps(a + i + 2 * LANES), v3 = P##_loadu_ps(a + i + 3 * LANES);                     \
    s0 = P##_fmadd_ps(v0, v0, s0);                                                                    \
    s1 = P##_fmadd_ps(v1, v1, s1);                                                                    \
    s2 = P##_fmadd_ps(v2, v2, s2);                                                                    \
    s3 = P##_fmadd_ps(v3, v3, s3);                                                                    \
  }                                                                                                   \
  for (; i + LANES <= n; i += LANES) s0 = P##_fmadd_ps(P##_loadu_ps(a + i), P##_loadu_ps(a + i), s0); \
  float s = HSUM(P##_add_ps(P##_add_ps(s0, s1), P##_add_ps(s2, s3)));                                 \
  for (; i < n; ++i) s += a[i] * a[i];                                                                \
  return s;

__attribute__((target("avx2,fma"))) static float hsum_avx2(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

__attribute__((target("avx2,fma"))) static float sumsq_avx2(const float* a, int64_t n) {
  SUMSQ_BODY(__m256, 8, _mm256, hsum_avx2)
}

__attribute__((target("avx2,fma"), unused)) static void rms_norm_avx2(const float* x, const float* w,
                                                                      int64_t rows, int64_t dim, float eps,
                                                                      float* y) {
  RMS_NORM_ROWS(sumsq_avx2)
}

__attribute__((target("avx512f"))) static float sumsq_avx512(const float* a, int64_t n) {
  SUMSQ_BODY(__m512, 16, _mm512, _mm512_reduce_add_ps)
}

__attribute__((target("avx512f"), unused)) static void rms_norm_avx512(const float* x, const float* w,
                                                                       int64_t rows, int64_t dim, float eps,
                                                                       float* y){RMS_NORM_ROWS(sumsq_avx512)}
#endif

EXPORT uint32_t tessera_kernel_abi_version(void) {
  return EXAMPLE_ABI_VERSION;
}

#ifndef EXAMPLE_NO_REGISTER
EXPORT int tessera_register_kernels(const TesseraKernelHost* host) {
  TesseraKernel k = {sizeof(TesseraKernel),     TESSERA_KERNEL_OP_RMS_NORM, TESSERA_KERNEL_F32,
                     TESSERA_KERNEL_ISA_SCALAR, "rms_norm_scalar",          (void (*)(void))rms_norm_scalar};
  if (host->add(host, &k) != 0) return 1;
#if defined(__x86_64__)
  k.isa = TESSERA_KERNEL_ISA_AVX2;
  k.name = "rms_norm_avx2";
  k.fn = (void (*)(void))rms_norm_avx2;
  if (host->add(host, &k) != 0) return 1;
  k.isa = TESSERA_KERNEL_ISA_AVX512;
  k.name = "rms_norm_avx512";
  k.fn = (void (*)(void))rms_norm_avx512;
  if (host->add(host, &k) != 0) return 1;
#endif
  return 0;
}
#endif
