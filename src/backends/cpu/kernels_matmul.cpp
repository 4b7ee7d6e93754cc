// matmul: y[M, N] = x[M, K] · w[N, K]^T (+ bias). The bodies live in kernels_matmul.inc, compiled once per
// instruction set; this file picks one per call from active_isa().
#include <algorithm>
#include <cstdint>

#include "backends/cpu/kernels.h"
#include "backends/cpu/kernels_simd.h"
#include "backends/cpu/thread_pool.h"
#include "tessera/error.h"

namespace tessera::cpu {
namespace {

// From this many rows of x on, packing x for the gemm kernel beats streaming the weights once per
// kGemvRows rows (measured with bench_kernels).
constexpr int64_t kGemmMinRows = 8;
// Below about this many multiply-adds per thread a kernel runs on the caller alone (a fork-join costs
// about a microsecond).
constexpr int64_t kSerialWork = 32 * 1024;

}  // namespace

namespace isa_scalar {
using V = VScalar;
#include "backends/cpu/kernels_matmul.inc"
}  // namespace isa_scalar

#if TESSERA_CPU_WIDE
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace isa_avx2 {
using V = VAvx2;
#include "backends/cpu/kernels_matmul.inc"
}  // namespace isa_avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC diagnostic push
// GCC 12 intrinsics self-initialise "undefined" vectors (__m512 __Y = __Y), which -Wuninitialized flags.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
namespace isa_avx512 {
using V = VAvx512;
#include "backends/cpu/kernels_matmul.inc"
}  // namespace isa_avx512
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif  // TESSERA_CPU_WIDE

namespace {
// The f32-accumulating kernel of the active instruction set (avx512bf16 machines run the avx512 one);
// `rows_invariant`: each output row as it would be alone, whatever M.
void isa_matmul(const float* x, int64_t M, int64_t K, const void* w, DType wdt, int64_t N, const float* bias,
                float* y, bool rows_invariant) {
  switch (active_isa()) {
#if TESSERA_CPU_WIDE
    case Isa::Avx512Bf16:
    case Isa::Avx512:
      return isa_avx512::matmul_impl(x, M, K, w, wdt, N, bias, y, rows_invariant);
    case Isa::Avx2:
      return isa_avx2::matmul_impl(x, M, K, w, wdt, N, bias, y, rows_invariant);
#else
    case Isa::Avx512Bf16:
    case Isa::Avx512:
    case Isa::Avx2:
#endif
    case Isa::Scalar:
      return isa_scalar::matmul_impl(x, M, K, w, wdt, N, bias, y, rows_invariant);
  }
}
// matmul_quant over the products in groups of at most 8.
void matmul_quant_groups(const float* x, int64_t M, int64_t K, DType wdt, const MatmulOut* outs, int count,
                         bool rows_invariant, Bf16Dot dot) {
  for (int i = 0; i < count; i += 8)
    matmul_quant(x, M, K, wdt, outs + i, std::min(8, count - i), rows_invariant, dot == Bf16Dot::Exact);
}
}  // namespace

void matmul(const float* x, int64_t M, int64_t K, const void* w, DType wdt, int64_t N, const float* bias,
            float* y, [[maybe_unused]] Bf16Dot bf16) {
  TS_ASSERT(M >= 0 && K >= 0 && N >= 0, "matmul shape M=", M, " K=", K, " N=", N);
  if (M == 0 || N == 0) return;
  if (K == 0) {  // empty sum
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) y[m * N + n] = bias ? bias[n] : 0.0f;
    }
    return;
  }
  if (is_quantized(wdt)) {
    const MatmulOut out{w, N, bias, y};
    return matmul_quant(x, M, K, wdt, &out, 1, false, bf16 == Bf16Dot::Exact);
  }
#if TESSERA_CPU_WIDE
  if (active_isa() == Isa::Avx512Bf16 && bf16 == Bf16Dot::RoundX && wdt == DType::BF16) {
    if (M < kGemmMinRows) {
      const MatmulOut out{w, N, bias, y};
      return isa_avx512bf16::matmul_bf16_small_m(x, M, K, &out, 1);
    }
    return isa_avx512bf16::matmul_bf16_gemm(x, M, K, static_cast<const uint16_t*>(w), N, bias, y);
  }
#endif
  isa_matmul(x, M, K, w, wdt, N, bias, y, false);
}

void matmul_multi(const float* x, int64_t M, int64_t K, DType wdt, const MatmulOut* outs, int count,
                  Bf16Dot bf16) {
  if (is_quantized(wdt)) return matmul_quant_groups(x, M, K, wdt, outs, count, false, bf16);
#if TESSERA_CPU_WIDE
  if (active_isa() == Isa::Avx512Bf16 && bf16 == Bf16Dot::RoundX && wdt == DType::BF16 && M > 0 &&
      M < kGemmMinRows && K > 0 && count >= 1 && count <= 8) {
    return isa_avx512bf16::matmul_bf16_small_m(x, M, K, outs, count);
  }
#endif
  for (int i = 0; i < count; ++i) matmul(x, M, K, outs[i].w, wdt, outs[i].N, outs[i].bias, outs[i].y, bf16);
}

void matmul_rows(const float* x, int64_t M, int64_t K, DType wdt, const MatmulOut* outs, int count,
                 [[maybe_unused]] Bf16Dot bf16) {
  if (is_quantized(wdt)) return matmul_quant_groups(x, M, K, wdt, outs, count, true, bf16);
  if (M < kGemmMinRows || K == 0) return matmul_multi(x, M, K, wdt, outs, count, bf16);
#if TESSERA_CPU_WIDE
  if (active_isa() == Isa::Avx512Bf16 && bf16 == Bf16Dot::RoundX && wdt == DType::BF16 && count >= 1 &&
      count <= 8) {
    return isa_avx512bf16::matmul_bf16_small_m(x, M, K, outs, count);
  }
#endif
  for (int i = 0; i < count; ++i)
    if (outs[i].N > 0) isa_matmul(x, M, K, outs[i].w, wdt, outs[i].N, outs[i].bias, outs[i].y, true);
}

bool matmul_rounds_bf16() { return active_isa() == Isa::Avx512Bf16; }

}  // namespace tessera::cpu
