/* An example native cpu kernel package (README "Kernels loaded at run time"): matmul (a linear layer,
 * y[r, o] = sum_i x[r, i] * w[o, i] + bias[o]) on float32 activations and float32 or bfloat16 weights, built
 * against tessera/kernel_abi.h (ABI version 2) alone. It registers a plain kernel (any x86-64) for each dtype
 * and an AVX2+FMA one for float32, so the backend's choice by dtype and instruction set is exercised. It is
 * plain C, not tuned for speed. Its AVX2 float32 kernel sums as the built-in AVX2 kernels do (see
 * matmul_f32_avx2), so its logits equal the built-in path's on an AVX2 machine; the plain kernels sum in
 * their own order (results equal to rounding only).
 *
 * The test build compiles this file again (cmake/parts/kernel_packages.cmake) with EXAMPLE_NO_REGISTER (a
 * library missing tessera_register_kernels), EXAMPLE_ABI_VERSION=1 (a version-1 library, which has no
 * matmul: refused) and EXAMPLE_OUTPUT_SCALE=1.5f (a wrong kernel: the tests check that its logits differ, so
 * the loaded kernel is the one that runs). */
#include <math.h>
#include <string.h>
#include <tessera/kernel_abi.h>

#ifndef EXAMPLE_ABI_VERSION
#define EXAMPLE_ABI_VERSION TESSERA_KERNEL_ABI_VERSION
#endif

#ifndef EXAMPLE_OUTPUT_SCALE
#define EXAMPLE_OUTPUT_SCALE 1.0f
#endif

#define EXPORT __attribute__((visibility("default")))

static float bf16_to_f32(uint16_t b) {
  const uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* One output element: four partial sums over i, then the tail. */
#define DOT_SCALAR(LOAD)                            \
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f; \
  int64_t i = 0;                                    \
  for (; i + 4 <= in; i += 4) {                     \
    s0 += xr[i] * LOAD(i);                          \
    s1 += xr[i + 1] * LOAD(i + 1);                  \
    s2 += xr[i + 2] * LOAD(i + 2);                  \
    s3 += xr[i + 3] * LOAD(i + 3);                  \
  }                                                 \
  for (; i < in; ++i) s0 += xr[i] * LOAD(i);        \
  float s = (s0 + s1) + (s2 + s3);

#define MATMUL_ROWS(DOT)                                           \
  for (int64_t r = 0; r < rows; ++r) {                             \
    const float* xr = x + r * in; /* [in] */                       \
    float* yr = y + r * out;      /* [out] */                      \
    for (int64_t o = 0; o < out; ++o) {                            \
      DOT yr[o] = (bias ? s + bias[o] : s) * EXAMPLE_OUTPUT_SCALE; \
    }                                                              \
  }

__attribute__((unused)) static void matmul_f32_scalar(const float* x, const void* w_, const float* bias,
                                                      int64_t rows, int64_t in, int64_t out, float* y) {
  const float* w = (const float*)w_; /* [out, in] */
#define LOAD_F32(k) wr[k]
  MATMUL_ROWS(const float* wr = w + o * in; DOT_SCALAR(LOAD_F32))
}

__attribute__((unused)) static void matmul_bf16_scalar(const float* x, const void* w_, const float* bias,
                                                       int64_t rows, int64_t in, int64_t out, float* y) {
  const uint16_t* w = (const uint16_t*)w_; /* [out, in] bfloat16 bits */
#define LOAD_BF16(k) bf16_to_f32(wr[k])
  MATMUL_ROWS(const uint16_t* wr = w + o * in; DOT_SCALAR(LOAD_BF16))
}

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2,fma"))) static float dot_avx2(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  s0 = _mm256_add_ps(s0, s1);
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  float s = _mm_cvtss_f32(h);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

/* The built-in prefill kernel's sum for one output (src/backends/cpu/kernels_matmul.inc, gemm): per block of
 * 256 inputs one fused multiply-add chain from 0, then block 0 plus bias, later blocks added to the output.
 */
__attribute__((target("avx2,fma"))) static float dot_blocked(const float* a, const float* b, int64_t n,
                                                             const float* bias_o) {
  float y = 0.0f;
  for (int64_t k0 = 0; k0 < n; k0 += 256) {
    const int64_t k1 = k0 + 256 < n ? k0 + 256 : n;
    float acc = 0.0f;
    for (int64_t k = k0; k < k1; ++k) acc = fmaf(a[k], b[k], acc);
    y = k0 == 0 ? (bias_o ? acc + *bias_o : acc) : acc + y;
  }
  return y;
}

/* As the built-in AVX2 kernels sum, so the logits are bit for bit the built-in ones: fewer than 8 rows (a
 * decode step of up to 7 sequences) as its dot-product kernel, more as its blocked prefill kernel. (A decode
 * step of 8 or more sequences takes the dot-product kernel in the built-in path: there the sums differ in
 * rounding only.) */
__attribute__((target("avx2,fma"), unused)) static void matmul_f32_avx2(const float* x, const void* w_,
                                                                        const float* bias, int64_t rows,
                                                                        int64_t in, int64_t out, float* y) {
  const float* w = (const float*)w_; /* [out, in] */
  if (rows < 8) {
    MATMUL_ROWS(float s = dot_avx2(xr, w + o * in, in);)
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t o = 0; o < out; ++o)
        y[r * out + o] = dot_blocked(x + r * in, w + o * in, in, bias ? bias + o : 0) * EXAMPLE_OUTPUT_SCALE;
  }
}
#endif

EXPORT uint32_t tessera_kernel_abi_version(void) { return EXAMPLE_ABI_VERSION; }

#ifndef EXAMPLE_NO_REGISTER
EXPORT int tessera_register_kernels(const TesseraKernelHost* host) {
  TesseraKernel k = {sizeof(TesseraKernel),     TESSERA_KERNEL_OP_MATMUL, TESSERA_KERNEL_F32,
                     TESSERA_KERNEL_ISA_SCALAR, "matmul_f32_scalar",      (void (*)(void))matmul_f32_scalar};
  if (host->add(host, &k) != 0) return 1;
  k.dtype = TESSERA_KERNEL_BF16;
  k.name = "matmul_bf16_scalar";
  k.fn = (void (*)(void))matmul_bf16_scalar;
  if (host->add(host, &k) != 0) return 1;
#if defined(__x86_64__)
  k.dtype = TESSERA_KERNEL_F32;
  k.isa = TESSERA_KERNEL_ISA_AVX2;
  k.name = "matmul_f32_avx2";
  k.fn = (void (*)(void))matmul_f32_avx2;
  if (host->add(host, &k) != 0) return 1;
#endif
  return 0;
}
#endif
