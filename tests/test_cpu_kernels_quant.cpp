// Matmuls and lookups with block-quantised weights (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4,
// and the cpu backend's Q4_K_R8 / Q6_K_R8 forms of Q4_K / Q6_K) against double-precision references of the
// dequantised weights, for every instruction set this CPU supports and 1 and 2 threads, at odd shapes.
//
// References: the weights' values (d * q (+ m)) decoded from random block bytes by the GGUF reader's
// dequantisers (src/io/gguf_quants.cpp, written apart from the kernels). The int8 paths (decode below 8 rows
// and matmul_rows at any M; the prefill gemm from 8 rows on with Bf16Dot::RoundX) multiply x as the kernels
// round it: per row and block of 32, scale = max|x| / 127, q = round-half-even(x / scale)
// (kernels_quant.cpp); the exact prefill (8 rows and more with Bf16Dot::Exact) multiplies x as it is.
// Tolerances: int8 |y - ref| <= 3e-6 * sum_k |w_k xq_k| + 1.2e-7 |ref| (the integer dots are exact; each
// block or scale group adds one f32 product of two scales and one or two FMAs into one accumulator, a few
// roundings of 6e-8 per term at most); exact prefill as the f32 matmul's: 1e-6 sqrt(K) rss + 1.2e-7 |ref|.
// Dequantisation rounds d * q + m once (d * q is exact in f32), as the reader's dequantisers do, so it is
// checked for equality.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/thread_pool.h"
#include "cpu_targets_util.h"
#include "io/gguf_quants.h"
#include "quant_blocks_util.h"
#include "tessera/error.h"
#include "tessera/tensor.h"

namespace tessera::cpu {
namespace {

class CpuQuantKernels : public kernel_targets::OnEachInt8Target {};

constexpr DType kFormats[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                              DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::MXFP4};

// K rounded up to whole blocks of dt (32 values, or 256 for the K-quants).
int64_t kdim(DType dt, int64_t K) { return (K + dtype_block(dt) - 1) / dtype_block(dt) * dtype_block(dt); }

// Random blocks of [rows, K] (tests/quant_blocks_util.h) and their values.
struct QWeights {
  std::vector<uint8_t> raw;
  std::vector<double> value;  // [rows * K]
};

QWeights make_qweights(DType dt, int64_t rows, int64_t K, uint32_t seed) {
  tessera::test_blocks::RandomBlocks b = tessera::test_blocks::random_blocks(dt, rows, K, seed);
  QWeights w;
  w.raw = std::move(b.raw);
  w.value.assign(b.value.begin(), b.value.end());
  return w;
}

std::vector<float> random_vec(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// x as the decode kernel multiplies it: per row and block of 32, scale * q.
std::vector<double> round_x_as_kernel(const std::vector<float>& x, int64_t M, int64_t K) {
  std::vector<double> out(x.size());
  for (int64_t m = 0; m < M; ++m)
    for (int64_t b = 0; b < K / 32; ++b) {
      const float* xb = x.data() + m * K + b * 32;
      float amax = 0.0f;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
      const float scale = amax / 127.0f, inv = scale != 0.0f ? 1.0f / scale : 0.0f;
      for (int j = 0; j < 32; ++j)
        out[static_cast<size_t>(m * K + b * 32 + j)] =
            static_cast<double>(scale) * std::clamp(std::nearbyint(xb[j] * inv), -127.0f, 127.0f);
    }
  return out;
}

// y (from the kernel) against the reference of x (decode: rounded as the kernel does) and the exact weights.
void expect_matmul_near(const std::vector<float>& y, const std::vector<float>& x, const QWeights& w,
                        const std::vector<float>* bias, int64_t M, int64_t K, int64_t N, bool decode,
                        const std::string& what) {
  const std::vector<double> xr =
      decode ? round_x_as_kernel(x, M, K) : std::vector<double>(x.begin(), x.end());
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double ref = bias ? (*bias)[static_cast<size_t>(n)] : 0.0, l1 = 0.0, rss = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = xr[static_cast<size_t>(m * K + k)] * w.value[static_cast<size_t>(n * K + k)];
        ref += p;
        l1 += std::abs(p);
        rss += p * p;
      }
      const double tol = (decode ? 3e-6 * l1 : 1e-6 * std::sqrt(static_cast<double>(K)) * std::sqrt(rss)) +
                         1.2e-7 * std::abs(ref) + 1e-30;
      ASSERT_NEAR(y[static_cast<size_t>(m * N + n)], ref, tol)
          << what << " M=" << M << " K=" << K << " N=" << N << " at [" << m << ", " << n << "]";
    }
}

TEST_P(CpuQuantKernels, MatmulDecodeEveryFormat) {
  uint32_t seed = 1;
  for (DType dt : kFormats)
    for (int64_t M : {1, 2, 3, 4, 5, 7})
      for (int64_t K0 : {32, 96, 576, 1056})
        for (int64_t N : {1, 7, 67, 130}) {
          const int64_t K = kdim(dt, K0);
          const QWeights w = make_qweights(dt, N, K, ++seed);
          const std::vector<float> x = random_vec(M * K, ++seed), bias = random_vec(N, ++seed);
          std::vector<float> y(static_cast<size_t>(M * N), NAN);
          const bool with_bias = (N % 2) == 1;
          matmul(x.data(), M, K, w.raw.data(), dt, N, with_bias ? bias.data() : nullptr, y.data(),
                 Bf16Dot::RoundX);
          expect_matmul_near(y, x, w, with_bias ? &bias : nullptr, M, K, N, true, dtype_name(dt));
        }
}

TEST_P(CpuQuantKernels, MatmulPrefillEveryFormat) {
  // 8 rows and more. RoundX: the int8 gemm (x rounded as for decode; panels of 16 weight rows, so N = 5, 67,
  // 300 end in a short one; M = 13, 9 end in a short tile of x rows). Exact: dequantised chunks through the
  // f32 gemm (K = 8192: chunks of 256 rows, so N = 600 takes three, the last one short).
  struct Case {
    int64_t M, K, N;
  };
  uint32_t seed = 100;
  for (DType dt : kFormats)
    for (Case c : {Case{8, 32, 5}, Case{13, 160, 67}, Case{40, 576, 300}, Case{9, 8192, 600}})
      for (Bf16Dot dot : {Bf16Dot::RoundX, Bf16Dot::Exact}) {
        c.K = kdim(dt, c.K);
        const QWeights w = make_qweights(dt, c.N, c.K, ++seed);
        const std::vector<float> x = random_vec(c.M * c.K, ++seed), bias = random_vec(c.N, ++seed);
        std::vector<float> y(static_cast<size_t>(c.M * c.N), NAN);
        matmul(x.data(), c.M, c.K, w.raw.data(), dt, c.N, bias.data(), y.data(), dot);
        expect_matmul_near(
            y, x, w, &bias, c.M, c.K, c.N, dot == Bf16Dot::RoundX,
            std::string(dtype_name(dt)) + (dot == Bf16Dot::RoundX ? " int8 gemm" : " f32 gemm"));
      }
}

TEST_P(CpuQuantKernels, Int8GemmGivesTheScalarBitsAndEachRowAsInAnyCompany) {
  // The int8 gemm on this target against the scalar level's (the same integers and the same float operations
  // in the same order: equal bit for bit; on AMX-INT8 machines with the AVX512-VNNI dot, rows 0-15 run on AMX
  // tiles and are checked against vpdpbusd too), with large and tiny x values, every format and the
  // interleaved forms; and each output row the same whatever the rows beside it (M = 8 against the first 8
  // rows of M = 29) and whatever product it shares a matmul_multi with.
  uint32_t seed = 1200;
  std::vector<DType> formats(std::begin(kFormats), std::end(kFormats));
  for (DType r8 : {DType::Q4_K_R8, DType::Q6_K_R8, DType::Q4_0_R8, DType::Q4_1_R8, DType::MXFP4_R8})
    formats.push_back(r8);
  for (DType dt : formats)
    for (int64_t K0 : {32, 288, 1056}) {
      const DType stored = stored_dtype(dt);
      const int64_t K = kdim(stored, K0), N = 72, M = 29;
      const QWeights w = make_qweights(stored, N, K, ++seed);
      std::vector<uint8_t> raw = w.raw;
      if (dt != stored) interleave_rows8(stored, raw.data(), N, K);
      const std::vector<float> bias = random_vec(N, ++seed);
      std::vector<float> x = random_vec(M * K, ++seed);
      x[0] = 1e4f;
      x[static_cast<size_t>(M * K - 1)] = -1e-6f;
      const std::string what = std::string(dtype_name(dt)) + " K=" + std::to_string(K);
      std::vector<float> got(static_cast<size_t>(M * N), NAN), want(got.size(), NAN), few(8 * N, NAN);
      matmul(x.data(), M, K, raw.data(), dt, N, bias.data(), got.data(), Bf16Dot::RoundX);
      set_isa(Isa::Scalar);
      matmul(x.data(), M, K, raw.data(), dt, N, bias.data(), want.data(), Bf16Dot::RoundX);
      set_isa(GetParam().t.isa);
      ASSERT_EQ(got, want) << what << ": against the scalar gemm";
      if (amx_int8_in_use()) {  // whole blocks of 16 rows on AMX tiles: the same bits as without them
        set_use_amx(false);
        matmul(x.data(), M, K, raw.data(), dt, N, bias.data(), want.data(), Bf16Dot::RoundX);
        set_use_amx(true);
        ASSERT_EQ(got, want) << what << ": AMX tiles against vpdpbusd";
      }
      matmul(x.data(), 8, K, raw.data(), dt, N, bias.data(), few.data(), Bf16Dot::RoundX);
      ASSERT_TRUE(std::equal(few.begin(), few.end(), got.begin())) << what << ": 8 rows against 29";
      std::vector<float> a(got.size(), NAN), b(static_cast<size_t>(M * 8), NAN);
      const MatmulOut outs[2] = {{raw.data(), N, bias.data(), a.data()}, {raw.data(), 8, nullptr, b.data()}};
      matmul_multi(x.data(), M, K, dt, outs, 2, Bf16Dot::RoundX);
      ASSERT_EQ(a, got) << what << ": in a matmul_multi";
    }
}

TEST_P(CpuQuantKernels, MatmulRowsEachRowEqualsItAlone) {
  // matmul_rows (decode steps of a batch): each output row bit-identical to the row alone, at any M (here
  // past kGemmMinRows and past whole passes of 4 rows).
  const int64_t N = 131;
  uint32_t seed = 200;
  for (DType dt : kFormats) {
    const int64_t K = kdim(dt, 576);
    const QWeights w = make_qweights(dt, N, K, ++seed);
    const std::vector<float> bias = random_vec(N, ++seed);
    for (int64_t M : {2, 5, 8, 11, 16}) {
      const std::vector<float> x = random_vec(M * K, ++seed);
      std::vector<float> y(static_cast<size_t>(M * N), NAN), alone(static_cast<size_t>(N), NAN);
      const MatmulOut out{w.raw.data(), N, bias.data(), y.data()};
      matmul_rows(x.data(), M, K, dt, &out, 1, Bf16Dot::RoundX);
      expect_matmul_near(y, x, w, &bias, M, K, N, true, dtype_name(dt));
      for (int64_t m = 0; m < M; ++m) {
        const MatmulOut one{w.raw.data(), N, bias.data(), alone.data()};
        matmul_rows(x.data() + m * K, 1, K, dt, &one, 1, Bf16Dot::RoundX);
        for (int64_t n = 0; n < N; ++n)
          ASSERT_EQ(y[static_cast<size_t>(m * N + n)], alone[static_cast<size_t>(n)])
              << dtype_name(dt) << " M=" << M << " row " << m << " col " << n;
      }
    }
  }
}

TEST_P(CpuQuantKernels, MatmulMultiEqualsSeparateMatmuls) {
  uint32_t seed = 300;
  for (DType dt : kFormats)
    for (int64_t M : {1, 3, 9}) {
      const int64_t K = kdim(dt, 192);
      const std::vector<float> x = random_vec(M * K, ++seed);
      const int64_t Ns[3] = {64, 17, 200};
      std::vector<QWeights> ws;
      std::vector<std::vector<float>> ys, refs;
      std::vector<MatmulOut> outs;
      for (int64_t N : Ns) {
        ws.push_back(make_qweights(dt, N, K, ++seed));
        ys.emplace_back(static_cast<size_t>(M * N), NAN);
        refs.emplace_back(static_cast<size_t>(M * N), NAN);
      }
      for (int i = 0; i < 3; ++i) outs.push_back({ws[i].raw.data(), Ns[i], nullptr, ys[i].data()});
      matmul_multi(x.data(), M, K, dt, outs.data(), 3, Bf16Dot::RoundX);
      for (int i = 0; i < 3; ++i) {
        matmul(x.data(), M, K, ws[i].raw.data(), dt, Ns[i], nullptr, refs[i].data(), Bf16Dot::RoundX);
        ASSERT_EQ(ys[i], refs[i]) << dtype_name(dt) << " M=" << M << " product " << i;
      }
    }
}

TEST_P(CpuQuantKernels, DequantizeAndEmbeddingAreExact) {
  const int64_t rows = 37;
  uint32_t seed = 400;
  for (DType dt : kFormats) {
    const int64_t K = kdim(dt, 96);
    const QWeights w = make_qweights(dt, rows, K, ++seed);
    std::vector<float> y(static_cast<size_t>(rows * K), NAN);
    dequantize_rows(dt, w.raw.data(), K, rows, y.data());
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_EQ(y[i], static_cast<float>(w.value[i])) << dtype_name(dt) << " element " << i;
    const std::vector<int32_t> ids = {5, 0, 36, 5};
    std::vector<float> e(ids.size() * K, NAN);
    embedding(ids.data(), static_cast<int64_t>(ids.size()), w.raw.data(), dt, rows, K, e.data());
    for (size_t i = 0; i < ids.size(); ++i)
      for (int64_t k = 0; k < K; ++k)
        ASSERT_EQ(e[i * K + k], y[static_cast<size_t>(ids[i] * K + k)]) << dtype_name(dt) << " id " << ids[i];
  }
}

TEST_P(CpuQuantKernels, ZeroAndHugeActivations) {
  // A block of zeros (scale 0) contributes nothing; a block with one huge value keeps the others' sign.
  const int64_t N = 3;
  for (DType dt : kFormats) {
    const int64_t K = kdim(dt, 64);
    const QWeights w = make_qweights(dt, N, K, 500);
    std::vector<float> x(static_cast<size_t>(K), 0.0f);
    x[40] = 1e30f;
    x[41] = -1.0f;
    std::vector<float> y(static_cast<size_t>(N), NAN);
    matmul(x.data(), 1, K, w.raw.data(), dt, N, nullptr, y.data(), Bf16Dot::RoundX);
    expect_matmul_near(y, x, w, nullptr, 1, K, N, true, dtype_name(dt));
  }
}

TEST_P(CpuQuantKernels, NanActivationComesOutNan) {
  // A NaN in a decode row's x makes that row's outputs NaN (as a float dot product does), so the model's
  // non-finite logit check sees it, on every instruction set; the other row is untouched.
  const int64_t N = 3, M = 2;
  for (DType dt : kFormats) {
    const int64_t K = kdim(dt, 64);
    const QWeights w = make_qweights(dt, N, K, 501);
    std::vector<float> x = random_vec(M * K, 17);
    x[static_cast<size_t>(K + 5)] = NAN;
    std::vector<float> y(static_cast<size_t>(M * N), 0.0f);
    matmul(x.data(), M, K, w.raw.data(), dt, N, nullptr, y.data(), Bf16Dot::RoundX);
    for (int64_t n = 0; n < N; ++n) {
      EXPECT_TRUE(std::isfinite(y[static_cast<size_t>(n)])) << dtype_name(dt) << " row 0, " << n;
      EXPECT_TRUE(std::isnan(y[static_cast<size_t>(N + n)])) << dtype_name(dt) << " row 1, " << n;
    }
  }
}

TEST_P(CpuQuantKernels, ExactDecodeEqualsDequantisedF32) {
  // Bf16Dot::Exact keeps x f32 in decode too: every output equals the f32 weights' (dequantised here) bit for
  // bit, through matmul (below 8 rows), matmul_multi and matmul_rows at any M.
  const int64_t N = 150;
  uint32_t seed = 600;
  for (DType dt : kFormats) {
    const int64_t K = kdim(dt, 320);
    const QWeights w = make_qweights(dt, N, K, ++seed);
    std::vector<float> wf(w.value.begin(), w.value.end());
    const std::vector<float> bias = random_vec(N, ++seed);
    for (int64_t M : {1, 3, 7, 12}) {
      const std::vector<float> x = random_vec(M * K, ++seed);
      std::vector<float> want(static_cast<size_t>(M * N)), got(static_cast<size_t>(M * N), NAN);
      const MatmulOut f{wf.data(), N, bias.data(), want.data()};
      matmul_rows(x.data(), M, K, DType::F32, &f, 1);
      const MatmulOut q{w.raw.data(), N, bias.data(), got.data()};
      matmul_rows(x.data(), M, K, dt, &q, 1, Bf16Dot::Exact);
      ASSERT_EQ(got, want) << dtype_name(dt) << " matmul_rows M=" << M;
      if (M < 8) {
        std::fill(got.begin(), got.end(), NAN);
        matmul(x.data(), M, K, w.raw.data(), dt, N, bias.data(), got.data(), Bf16Dot::Exact);
        ASSERT_EQ(got, want) << dtype_name(dt) << " matmul M=" << M;
      }
    }
  }
}

TEST_P(CpuQuantKernels, InterleavedRowsComputeAsStored) {
  // The _R8 forms (rows interleaved by 8, as the cpu backend binds Q4_K / Q6_K matrices): the same values
  // (dequantised and looked up bit for bit), the prefill (both gemms) and the exact decode bit for bit as the
  // stored format, the int8 decode within the reference's bound and each row as it is alone.
  EXPECT_EQ(rows8_dtype(DType::Q8_0), DType::Q8_0);
  EXPECT_EQ(stored_dtype(DType::Q8_0), DType::Q8_0);
  uint32_t seed = 700;
  for (DType dt : {DType::Q4_K, DType::Q6_K, DType::Q4_0, DType::Q4_1, DType::MXFP4}) {
    const DType r8 = rows8_dtype(dt);
    ASSERT_NE(r8, dt);
    EXPECT_EQ(stored_dtype(r8), dt);
    EXPECT_EQ(dtype_bytes(r8, 256), dtype_bytes(dt, 256));
    EXPECT_EQ(dtype_block(r8), dtype_block(dt));
    for (int64_t N : {8, 72, 136})
      for (int64_t K0 : {32, 256, 576, 1280}) {
        const int64_t K = kdim(dt, K0);
        const std::string what =
            std::string(dtype_name(r8)) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
        const QWeights w = make_qweights(dt, N, K, ++seed);
        std::vector<uint8_t> wi = w.raw;
        interleave_rows8(dt, wi.data(), N, K);
        ASSERT_NE(wi, w.raw) << what;
        std::vector<float> y(static_cast<size_t>(N * K), NAN);
        dequantize_rows(r8, wi.data(), K, N, y.data());
        for (size_t i = 0; i < y.size(); ++i)
          ASSERT_EQ(y[i], static_cast<float>(w.value[i])) << what << " " << i;
        const std::vector<int32_t> ids = {3, 0, static_cast<int32_t>(N - 1), 3, static_cast<int32_t>(N / 2)};
        std::vector<float> e(ids.size() * K, NAN);
        embedding(ids.data(), static_cast<int64_t>(ids.size()), wi.data(), r8, N, K, e.data());
        for (size_t i = 0; i < ids.size(); ++i)
          for (int64_t k = 0; k < K; ++k)
            ASSERT_EQ(e[i * K + k], y[static_cast<size_t>(ids[i] * K + k)]) << what << " id " << ids[i];
        const std::vector<float> bias = random_vec(N, ++seed);
        for (int64_t M : {1, 2, 3, 4, 5, 7, 9, 13}) {
          const std::vector<float> x = random_vec(M * K, ++seed);
          std::vector<float> got(static_cast<size_t>(M * N), NAN), want(static_cast<size_t>(M * N), NAN);
          // Decode (int8 x): near the reference, and each row equal to it alone.
          const MatmulOut out{wi.data(), N, bias.data(), got.data()};
          matmul_rows(x.data(), M, K, r8, &out, 1, Bf16Dot::RoundX);
          expect_matmul_near(got, x, w, &bias, M, K, N, true, what);
          std::vector<float> alone(static_cast<size_t>(N), NAN);
          for (int64_t m = 0; m < M; ++m) {
            const MatmulOut one{wi.data(), N, bias.data(), alone.data()};
            matmul_rows(x.data() + m * K, 1, K, r8, &one, 1, Bf16Dot::RoundX);
            for (int64_t n = 0; n < N; ++n)
              ASSERT_EQ(got[static_cast<size_t>(m * N + n)], alone[static_cast<size_t>(n)])
                  << what << " M=" << M << " row " << m << " col " << n;
          }
          // Exact decode and prefill: what the stored format gives, bit for bit.
          const MatmulOut q{w.raw.data(), N, bias.data(), want.data()};
          matmul_rows(x.data(), M, K, dt, &q, 1, Bf16Dot::Exact);
          matmul_rows(x.data(), M, K, r8, &out, 1, Bf16Dot::Exact);
          ASSERT_EQ(got, want) << what << " exact decode M=" << M;
          for (Bf16Dot dot : {Bf16Dot::Exact, Bf16Dot::RoundX}) {  // the int8 gemm from 8 rows on
            if (dot == Bf16Dot::RoundX && M < 8) continue;  // the decode kernels, which sum in other orders
            matmul(x.data(), M, K, w.raw.data(), dt, N, bias.data(), want.data(), dot);
            matmul(x.data(), M, K, wi.data(), r8, N, bias.data(), got.data(), dot);
            ASSERT_EQ(got, want) << what << " matmul M=" << M
                                 << (dot == Bf16Dot::RoundX ? " int8" : " exact");
          }
        }
      }
  }
}

TEST_P(CpuQuantKernels, EveryInt8DotGivesTheAvx2Integers) {
  // vpdpbusd (AVX-VNNI, AVX512-VNNI) sums the same integer products as vpmaddubsw + vpmaddwd, which never
  // saturate on the kernels' operands, and the float steps after them are the same: every output equal,
  // bit for bit, to the AVX2 pair's, for each format and the interleaved forms, at any M.
  if (GetParam().t.isa == Isa::Scalar || GetParam().dot == Int8Dot::Avx2)
    GTEST_SKIP() << "compares another integer dot product with the AVX2 pair";
  uint32_t seed = 900;
  std::vector<DType> formats(std::begin(kFormats), std::end(kFormats));
  for (DType r8 : {DType::Q4_K_R8, DType::Q6_K_R8, DType::Q4_0_R8, DType::Q4_1_R8, DType::MXFP4_R8})
    formats.push_back(r8);
  for (DType dt : formats)
    for (int64_t K0 : {32, 288, 1056}) {
      const DType stored = stored_dtype(dt);
      const int64_t K = kdim(stored, K0), N = 72;
      const QWeights w = make_qweights(stored, N, K, ++seed);
      std::vector<uint8_t> raw = w.raw;
      if (dt != stored) interleave_rows8(stored, raw.data(), N, K);
      const std::vector<float> bias = random_vec(N, ++seed);
      for (int64_t M : {1, 2, 3, 4, 5, 7, 9}) {
        // A large and a tiny value too (a block whose other quants round to 0; one of tiny scale).
        std::vector<float> x = random_vec(M * K, ++seed);
        x[0] = 1e4f;
        x[static_cast<size_t>(M * K - 1)] = -1e-6f;
        std::vector<float> got(static_cast<size_t>(M * N), NAN), want(got.size(), NAN);
        const MatmulOut g{raw.data(), N, bias.data(), got.data()}, a{raw.data(), N, bias.data(), want.data()};
        matmul_rows(x.data(), M, K, dt, &g, 1, Bf16Dot::RoundX);
        set_int8_dot(Int8Dot::Avx2);
        matmul_rows(x.data(), M, K, dt, &a, 1, Bf16Dot::RoundX);
        set_int8_dot(GetParam().dot);
        ASSERT_EQ(got, want) << dtype_name(dt) << " K=" << K << " M=" << M;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, CpuQuantKernels, testing::ValuesIn(kernel_targets::int8_targets()),
                         kernel_targets::int8_target_name);

TEST(CpuInterleaveWeights, OnlyWholeGroupsTheMapAloneHoldsAreRewritten) {
  // What the cpu backend's bind_weights does after packing: each matrix below either comes back in its _R8
  // form or as it came, with the same values either way.
  struct Made {
    Tensor t;
    QWeights w;
  };
  const auto make = [](DType dt, int64_t N, int64_t K, uint32_t seed) {
    Made m{Tensor::empty(dt, {N, K}), make_qweights(dt, N, K, seed)};
    std::memcpy(m.t.data, m.w.raw.data(), m.t.nbytes());
    return m;
  };
  Made a = make(DType::Q4_K, 16, 256, 1);  // held by the map alone: rewritten
  Made b = make(DType::Q6_K, 24, 512, 2);  // a tied table and its head (exact aliases): rewritten once
  Made c = make(DType::Q4_K, 12, 256, 3);  // 12 rows: not whole groups
  Made d = make(DType::Q4_K, 16, 256, 4);  // held outside the map too: left alone
  Made e = make(DType::Q8_0, 16, 256, 5);  // no _R8 form
  Made f = make(DType::Q4_K, 32, 256, 6);  // with a row block of it also bound: left alone
  backends::WeightMap m{{"a", a.t}, {"b.embed", b.t}, {"b.head", b.t}, {"c", c.t},
                        {"d", d.t}, {"e", e.t},       {"f", f.t}};
  m["f.rows"] = Tensor::view(DType::Q4_K, {8, 256}, f.t.ptr<uint8_t>() + 8 * 144, f.t.owner);
  for (Made* x : {&a, &b, &c, &e, &f}) x->t = Tensor{};
  backends::WeightMap out = backends::cpu_interleave_weights(std::move(m));
  const std::map<std::string, std::pair<DType, const QWeights*>> want = {
      {"a", {DType::Q4_K_R8, &a.w}}, {"b.embed", {DType::Q6_K_R8, &b.w}}, {"b.head", {DType::Q6_K_R8, &b.w}},
      {"c", {DType::Q4_K, &c.w}},    {"d", {DType::Q4_K, &d.w}},          {"e", {DType::Q8_0, &e.w}},
      {"f", {DType::Q4_K, &f.w}}};
  for (const auto& [key, dw] : want) {
    const Tensor& t = out.at(key);
    EXPECT_EQ(t.dtype, dw.first) << key;
    std::vector<float> y(static_cast<size_t>(t.numel()), NAN);
    dequantize_rows(t.dtype, t.data, t.shape[1], t.shape[0], y.data());
    for (size_t i = 0; i < y.size(); ++i)
      ASSERT_EQ(y[i], static_cast<float>(dw.second->value[i])) << key << " " << i;
  }
  EXPECT_EQ(out.at("b.embed").data, out.at("b.head").data);
  EXPECT_EQ(std::memcmp(d.t.data, d.w.raw.data(), d.t.nbytes()), 0);  // the outside holder's bytes unchanged
}

TEST(CpuQuantKernelsDeathTest, KNotWholeBlocksIsAnInternalError) {
  // The loader never builds such a graph (a GGUF row is whole blocks; a column block that is not stays in a
  // float dtype), so the kernel asserts.
  std::vector<uint8_t> w(64, 0);
  std::vector<float> x(40, 1.0f), y(1);
  EXPECT_DEATH(matmul(x.data(), 1, 40, w.data(), DType::Q8_0, 1, nullptr, y.data()), "not a multiple of 32");
  std::vector<float> x2(288, 1.0f);
  EXPECT_DEATH(matmul(x2.data(), 1, 288, w.data(), DType::Q4_K, 1, nullptr, y.data()),
               "not a multiple of 256");
  // Rows interleaved by 8 come in whole groups (the backend interleaves only such matrices).
  std::vector<uint8_t> w12(12 * 144, 0);
  EXPECT_DEATH(interleave_rows8(DType::Q4_K, w12.data(), 12, 256), "interleave_rows8");
  EXPECT_DEATH(interleave_rows8(DType::Q8_0, w12.data(), 8, 256), "interleave_rows8");
}

}  // namespace
}  // namespace tessera::cpu
