// CPU kernels vs plain double-precision scalar references, for every instruction set this CPU supports
// (scalar, avx2, avx512) and thread counts 1 and 2, at odd shapes.
//
// Stated tolerances (errors measured against the double reference computed from the same f32 inputs and
// the exactly-widened bf16/f16 weights):
//  * matmul: |y - ref| <= 1e-6 * sqrt(K) * rss(x_k * w_k, bias) + 2^-23 |ref| for every weight dtype: f32
//  accumulation
//    of K products with round-off growing like sqrt(K) (the typical error is ~20x below this); rounding x
//    to bf16 would exceed it by ~100x, so the test catches that. Bf16Dot::RoundX with bf16 weights where
//    matmul_rounds_bf16() (avx512bf16) is checked against a reference whose x is rounded to bf16.
//  * rms_norm, rope, attention, softmax: 1e-5 relative to the row/head scale (+1e-6 absolute).
//  * swiglu: 2e-6 relative (+1e-30 absolute): exp is a ~1 ulp polynomial on the vector paths.
//  * gated gelu (erf): 2e-6 + 2e-7 x^2 relative (+1e-37 absolute): the erfc fit is good to 1.2e-7 relative,
//    and the f32 rounding of x / sqrt 2 moves exp(-x^2 / 2) by ~1e-7 x^2 relative in the far negative tail.
//  * gated gelu_tanh: 2e-6 + 2e-7 (|x| + 0.1 |x|^3) relative: likewise, f32 rounding of the exponent 2u.
//    Both tails are below 1e-15 in absolute value where the extra term matters (x < -7).
//  * relu: exact (within the same 2e-6 bound).
//  * add, embedding, argmax: exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/kernels.h"
#include "backends/cpu/thread_pool.h"
#include "cpu_targets_util.h"
#include "tessera/error.h"
#include "tessera/tensor.h"

namespace tessera::cpu {
namespace {

using kernel_targets::all_targets;
using kernel_targets::Target;
using kernel_targets::target_name;

std::vector<float> random_vec(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

// Weights [n] in dtype dt (raw bytes) plus their exact f32 values.
struct Weights {
  std::vector<uint8_t> raw;
  std::vector<float> f32;
};

Weights make_weights(int64_t n, DType dt, uint32_t seed) {
  std::vector<float> v = random_vec(n, seed);
  Weights w;
  w.raw.resize(static_cast<size_t>(n) * dtype_size(dt));
  convert(v.data(), DType::F32, w.raw.data(), dt, n);
  w.f32.resize(static_cast<size_t>(n));
  convert(w.raw.data(), dt, w.f32.data(), DType::F32, n);
  return w;
}

class CpuKernels : public kernel_targets::OnEachTarget {};

// ------------------------------------------------------------------ matmul

void check_matmul(int64_t M, int64_t K, int64_t N, DType dt, bool with_bias, uint32_t seed,
                  Bf16Dot mode = Bf16Dot::Exact) {
  std::vector<float> x = random_vec(M * K, seed);         // [M, K]
  Weights w = make_weights(N * K, dt, seed + 1);          // [N, K]
  std::vector<float> bias = random_vec(N, seed + 2);      // [N]
  std::vector<float> y(static_cast<size_t>(M * N), NAN);  // [M, N]
  matmul(x.data(), M, K, w.raw.data(), dt, N, with_bias ? bias.data() : nullptr, y.data(), mode);
  if (mode == Bf16Dot::RoundX && dt == DType::BF16 && matmul_rounds_bf16()) {
    for (float& v : x) v = bf16_to_f32(f32_to_bf16(v));  // what the bf16 dot-product kernel multiplies
  }
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      double ref = with_bias ? bias[n] : 0.0, rss = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        const double p = static_cast<double>(x[m * K + k]) * w.f32[n * K + k];
        ref += p;
        rss += p * p;
      }
      // Accumulation error (the bias counts as one more term) plus the final rounding to f32.
      const double b2 = with_bias ? static_cast<double>(bias[n]) * bias[n] : 0.0;
      const double tol =
          1e-6 * std::sqrt(static_cast<double>(K)) * std::sqrt(rss + b2) + 1.2e-7 * std::abs(ref) + 1e-30;
      ASSERT_NEAR(y[m * N + n], ref, tol) << "M=" << M << " K=" << K << " N=" << N
                                          << " dtype=" << dtype_name(dt) << " at [" << m << ", " << n << "]";
    }
  }
}

TEST_P(CpuKernels, MatmulOddShapesAllDtypes) {
  uint32_t seed = 1;
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    for (int64_t M : {1, 2, 3, 5, 7, 9, 130}) {
      for (int64_t K : {1, 7, 33, 577}) {
        for (int64_t N : {1, 3, 65}) {
          ++seed;
          check_matmul(M, K, N, dt, (seed & 1) != 0, seed);
        }
      }
    }
  }
}

TEST_P(CpuKernels, MatmulModelShapes) {
  // A SmolLM2-like projection in both kernels (decode and prefill), with K split into several blocks.
  check_matmul(1, 576, 192, DType::BF16, false, 7);
  check_matmul(37, 1536, 70, DType::BF16, true, 8);
  check_matmul(64, 96, 200, DType::F32, false, 9);
  // The gemm's blocking: packed x blocks of 16 row tiles (96 rows on AVX2) with a short last block and tile,
  // packed weight chunks of 16 panels (256 columns on AVX2, 1024 on AVX-512) with a short last one, K blocks
  // of 256 with a tail.
  check_matmul(101, 300, 1100, DType::BF16, true, 10);
  check_matmul(200, 520, 300, DType::F32, false, 11);
}

TEST_P(CpuKernels, MatmulBf16DecodeShapes) {
  // Every K tail (masked loads) and N remainder of the decode kernels, 1..7 rows, with and without bias,
  // rounding x where RoundX allows it; Exact stays exact at the same shapes.
  uint32_t seed = 100;
  for (int64_t M : {1, 2, 4, 5, 7}) {
    for (int64_t K : {2, 31, 32, 33, 64, 95, 576}) {
      for (int64_t N : {1, 4, 7, 67, 300}) {
        ++seed;
        check_matmul(M, K, N, DType::BF16, (seed & 1) != 0, seed, Bf16Dot::RoundX);
        if (M == 1) check_matmul(M, K, N, DType::BF16, (seed & 1) != 0, seed, Bf16Dot::Exact);
      }
    }
  }
}

TEST_P(CpuKernels, MatmulBf16PrefillShapes) {
  // The prefill gemm of RoundX: row tiles of 6 (vdpbf16ps) or 32 (AMX) with remainders, K tails inside a
  // 32-value step and past one 512-value block, N past whole 16-column vectors, 32-column AMX steps and
  // 64-column panels (split over the threads); on an AMX-BF16 machine both the tile and the vector gemm.
  for (bool amx : {true, false}) {
    if (amx && !amx_supported()) continue;
    set_use_amx(amx);
    uint32_t seed = 500;
    for (int64_t M : {8, 13, 33, 64}) {
      for (int64_t K : {2, 33, 95, 512, 577, 1100}) {
        for (int64_t N : {1, 17, 65, 130}) {
          ++seed;
          check_matmul(M, K, N, DType::BF16, (seed & 1) != 0, seed, Bf16Dot::RoundX);
        }
      }
    }
    set_use_amx(true);
  }
}

TEST_P(CpuKernels, MatmulBf16AmxGemmRowsAsInAnyCompany) {
  // The AMX gemm: each output row the same bits whatever the rows beside it (M = 8 against the first 8 rows
  // of M = 70, whose last tile of 32 is part padding) and whatever the thread count splits.
  if (GetParam().isa != Isa::Avx512Bf16 || !amx_supported()) GTEST_SKIP() << "needs AMX-BF16";
  const int64_t K = 1100, N = 130;
  std::vector<float> x = random_vec(70 * K, 61);
  Weights w = make_weights(N * K, DType::BF16, 62);
  std::vector<float> all(static_cast<size_t>(70 * N)), few(static_cast<size_t>(8 * N));
  matmul(x.data(), 70, K, w.raw.data(), DType::BF16, N, nullptr, all.data(), Bf16Dot::RoundX);
  matmul(x.data(), 8, K, w.raw.data(), DType::BF16, N, nullptr, few.data(), Bf16Dot::RoundX);
  EXPECT_TRUE(std::equal(few.begin(), few.end(), all.begin()));
}

TEST_P(CpuKernels, MatmulRowsEachRowEqualsItAlone) {
  // Decode steps (matmul_rows): each row of a batch of any size, below and past the prefill gemm's 8 rows,
  // is bit-identical to the row computed alone (M = 1), in both bf16 modes and for f32 weights; K tails, N
  // remainders of the 4-row tiles and the 32-row blocks, two products in one call, with and without bias.
  for (DType dt : {DType::BF16, DType::F32}) {
    for (Bf16Dot mode : {Bf16Dot::Exact, Bf16Dot::RoundX}) {
      for (int64_t K : {33, 576}) {
        const int64_t Ns[2] = {70, 301};
        std::vector<Weights> w;
        std::vector<float> bias = random_vec(Ns[1], 61);
        for (int i = 0; i < 2; ++i) w.push_back(make_weights(Ns[i] * K, dt, 62 + i));
        const int64_t maxM = 17;
        std::vector<float> x = random_vec(maxM * K, 60, -3.0f, 3.0f);
        std::vector<std::vector<float>> alone(2);
        for (int i = 0; i < 2; ++i) alone[i].assign(static_cast<size_t>(maxM * Ns[i]), NAN);
        for (int64_t m = 0; m < maxM; ++m) {
          const MatmulOut outs[2] = {{w[0].raw.data(), Ns[0], nullptr, alone[0].data() + m * Ns[0]},
                                     {w[1].raw.data(), Ns[1], bias.data(), alone[1].data() + m * Ns[1]}};
          matmul_rows(x.data() + m * K, 1, K, dt, outs, 2, mode);
        }
        for (int64_t M : {2, 4, 7, 8, 9, 13, 16, 17}) {
          std::vector<std::vector<float>> batch(2);
          for (int i = 0; i < 2; ++i) batch[i].assign(static_cast<size_t>(M * Ns[i]), NAN);
          const MatmulOut outs[2] = {{w[0].raw.data(), Ns[0], nullptr, batch[0].data()},
                                     {w[1].raw.data(), Ns[1], bias.data(), batch[1].data()}};
          matmul_rows(x.data(), M, K, dt, outs, 2, mode);
          for (int i = 0; i < 2; ++i) {
            const std::vector<float> want(alone[i].begin(), alone[i].begin() + M * Ns[i]);
            EXPECT_EQ(batch[i], want) << dtype_name(dt) << " K=" << K << " M=" << M << " #" << i;
          }
        }
      }
    }
  }
}

TEST_P(CpuKernels, MatmulMultiEqualsSeparateMatmuls) {
  // q/k/v-like products of one x in one call give exactly what separate calls give (same kernels).
  for (DType dt : {DType::BF16, DType::F32}) {
    for (Bf16Dot mode : {Bf16Dot::Exact, Bf16Dot::RoundX}) {
      for (int64_t M : {1, 3, 9}) {
        const int64_t K = 160;
        const int64_t Ns[3] = {300, 70, 70};
        std::vector<float> x = random_vec(M * K, 41);
        std::vector<Weights> w;
        std::vector<std::vector<float>> bias, multi, single;
        std::vector<MatmulOut> outs;
        for (int i = 0; i < 3; ++i) {
          w.push_back(make_weights(Ns[i] * K, dt, 42 + i));
          bias.push_back(random_vec(Ns[i], 50 + i));
          multi.emplace_back(static_cast<size_t>(M * Ns[i]), NAN);
          single.emplace_back(static_cast<size_t>(M * Ns[i]), NAN);
        }
        for (int i = 0; i < 3; ++i) {
          outs.push_back({w[i].raw.data(), Ns[i], i == 1 ? bias[i].data() : nullptr, multi[i].data()});
          matmul(x.data(), M, K, w[i].raw.data(), dt, Ns[i], i == 1 ? bias[i].data() : nullptr,
                 single[i].data(), mode);
        }
        matmul_multi(x.data(), M, K, dt, outs.data(), 3, mode);
        for (int i = 0; i < 3; ++i)
          EXPECT_EQ(multi[i], single[i]) << dtype_name(dt) << " M=" << M << " #" << i;
      }
    }
  }
}

TEST(CpuKernelsIsa, Bf16RoundingOnlyOnAvx512Bf16) {
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16}) {
    if (!isa_supported(isa)) continue;
    set_isa(isa);
    EXPECT_EQ(matmul_rounds_bf16(), isa == Isa::Avx512Bf16) << isa_name(isa);
  }
  set_isa(best_isa());
}

TEST_P(CpuKernels, MatmulZeroK) {
  std::vector<float> bias = {1.0f, 2.0f}, y(4, NAN);
  matmul(nullptr, 2, 0, nullptr, DType::F32, 2, bias.data(), y.data());
  EXPECT_EQ(y, (std::vector<float>{1.0f, 2.0f, 1.0f, 2.0f}));
}

// ------------------------------------------------------------------ rms_norm

TEST_P(CpuKernels, RmsNorm) {
  for (int64_t rows : {1, 3, 5}) {
    for (int64_t dim : {1, 7, 64, 577}) {
      std::vector<float> x = random_vec(rows * dim, 11, -3.0f, 3.0f);  // [rows, dim]
      std::vector<float> w = random_vec(dim, 12, 0.5f, 1.5f);          // [dim]
      std::vector<float> y(x.size(), NAN), inplace = x;
      rms_norm(x.data(), w.data(), rows, dim, 1e-6f, y.data());
      rms_norm(inplace.data(), w.data(), rows, dim, 1e-6f, inplace.data());
      for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(x[r * dim + i]) * x[r * dim + i];
        const double inv = 1.0 / std::sqrt(ss / dim + 1e-6);
        for (int64_t i = 0; i < dim; ++i) {
          const double ref = x[r * dim + i] * inv * w[i];
          ASSERT_NEAR(y[r * dim + i], ref, 1e-5 * (std::abs(ref) + 1e-1))
              << "rows=" << rows << " dim=" << dim;
          ASSERT_EQ(inplace[r * dim + i], y[r * dim + i]);
        }
      }
    }
  }
}

// ------------------------------------------------------------------ rope

void check_rope(int64_t tokens, int64_t heads, int64_t hd, int64_t rot, std::vector<int32_t> pos) {
  const int64_t half = rot / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));  // [half]
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * i / static_cast<double>(rot)));
  }
  std::vector<float> x = random_vec(tokens * heads * hd, 21);  // [tokens, heads, hd]
  std::vector<float> y = x;
  rope(y.data(), tokens, heads, hd, rot, pos.data(), inv_freq.data());
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* xh = x.data() + (t * heads + h) * hd;
      const float* yh = y.data() + (t * heads + h) * hd;
      for (int64_t i = 0; i < half; ++i) {
        const float angle = static_cast<float>(pos[t]) * inv_freq[i];  // f32, as the kernel contract says
        const double c = std::cos(static_cast<double>(angle)), s = std::sin(static_cast<double>(angle));
        const double r0 = xh[i] * c - xh[i + half] * s;
        const double r1 = xh[i + half] * c + xh[i] * s;
        ASSERT_NEAR(yh[i], r0, 1e-5) << "t=" << t << " h=" << h << " i=" << i;
        ASSERT_NEAR(yh[i + half], r1, 1e-5) << "t=" << t << " h=" << h << " i=" << i;
      }
      for (int64_t i = rot; i < hd; ++i) ASSERT_EQ(yh[i], xh[i]) << "dims past rot_dim must be untouched";
    }
  }
}

TEST_P(CpuKernels, Rope) {
  check_rope(3, 2, 8, 8, {0, 5, 1000});
  check_rope(4, 3, 10, 4, {7, 0, 3, 31});  // partial rotation (rot_dim < head_dim)
  std::vector<int32_t> pos(40);
  for (int i = 0; i < 40; ++i) pos[i] = 3 * i;
  check_rope(40, 5, 64, 64, pos);
}

// ------------------------------------------------------------------ attention

struct AttnCase {
  int64_t T, nh, nkv, hd, cache_len;
  std::vector<int32_t> q_slot;
  int32_t kv_begin;
  int64_t window = 0;  // > 0: sliding window, keys j > q_slot - window
  float softcap = 0;   // > 0: scaled scores s -> tanh(s / softcap) * softcap
  bool sinks = false;  // a logit per query head in the softmax's denominator (gpt-oss)

  int64_t lo(int64_t t) const {
    return window > 0 ? std::max<int64_t>(kv_begin, q_slot[static_cast<size_t>(t)] - window + 1) : kv_begin;
  }
};

// kv_dtype BF16: the cache holds K and V rounded to bf16; the reference uses those rounded values.
void check_attention(const AttnCase& c, DType kv_dtype = DType::F32) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
  std::vector<float> q = random_vec(c.T * c.nh * c.hd, 31, -2.0f, 2.0f);           // [T, nh, hd]
  std::vector<float> k = random_vec(c.nkv * c.cache_len * c.hd, 32, -2.0f, 2.0f);  // [nkv, cache_len, hd]
  std::vector<float> v = random_vec(c.nkv * c.cache_len * c.hd, 33);               // [nkv, cache_len, hd]
  // Poison the slots no query may read: before kv_begin (or every query's window) and after the largest
  // q_slot.
  int32_t max_slot = -1;
  int64_t min_lo = c.cache_len;
  for (size_t t = 0; t < c.q_slot.size(); ++t) {
    max_slot = std::max(max_slot, c.q_slot[t]);
    if (c.q_slot[t] >= c.kv_begin) min_lo = std::min(min_lo, c.lo(static_cast<int64_t>(t)));
  }
  for (int64_t g = 0; g < c.nkv; ++g) {
    for (int64_t j = 0; j < c.cache_len; ++j) {
      if (j >= min_lo && j <= max_slot) continue;
      for (int64_t d = 0; d < c.hd; ++d)
        k[(g * c.cache_len + j) * c.hd + d] = v[(g * c.cache_len + j) * c.hd + d] = NAN;
    }
  }
  std::vector<float> out(static_cast<size_t>(c.T * c.nh * c.hd), NAN);  // [T, nh * hd]
  // Sinks from below to above the scores' range (|q.k * scale| up to ~10), so some dominate.
  const std::vector<float> sink_logits = random_vec(c.nh, 34, -6.0f, 6.0f);
  const float* sinks = c.sinks ? sink_logits.data() : nullptr;
  if (kv_dtype == DType::BF16) {
    std::vector<uint16_t> kb(k.size()), vb(v.size());
    for (size_t i = 0; i < k.size(); ++i) {
      kb[i] = f32_to_bf16(k[i]);
      vb[i] = f32_to_bf16(v[i]);
      k[i] = bf16_to_f32(kb[i]);
      v[i] = bf16_to_f32(vb[i]);
    }
    attention(q.data(), c.T, c.nh, c.hd, kb.data(), vb.data(), DType::BF16, c.nkv, c.cache_len,
              c.q_slot.data(), c.kv_begin, scale, out.data(), c.window, c.softcap, sinks);
  } else {
    attention(q.data(), c.T, c.nh, c.hd, k.data(), v.data(), DType::F32, c.nkv, c.cache_len, c.q_slot.data(),
              c.kv_begin, scale, out.data(), c.window, c.softcap, sinks);
  }
  const int64_t group = c.nh / c.nkv;
  for (int64_t t = 0; t < c.T; ++t) {
    for (int64_t h = 0; h < c.nh; ++h) {
      const float* qh = q.data() + (t * c.nh + h) * c.hd;
      const float* kb = k.data() + (h / group) * c.cache_len * c.hd;
      const float* vb = v.data() + (h / group) * c.cache_len * c.hd;
      std::vector<double> ref(static_cast<size_t>(c.hd), 0.0);
      if (c.q_slot[t] >= c.kv_begin) {
        std::vector<double> s;
        double mx = -INFINITY, sum = 0;
        for (int64_t j = c.lo(t); j <= c.q_slot[t]; ++j) {
          double d = 0;
          for (int64_t i = 0; i < c.hd; ++i) d += static_cast<double>(qh[i]) * kb[j * c.hd + i];
          s.push_back(c.softcap > 0 ? std::tanh(d * scale / c.softcap) * c.softcap : d * scale);
          mx = std::max(mx, s.back());
        }
        if (sinks) mx = std::max(mx, static_cast<double>(sinks[h]));
        for (double& e : s) sum += (e = std::exp(e - mx));
        if (sinks) sum += std::exp(static_cast<double>(sinks[h]) - mx);
        for (size_t j = 0; j < s.size(); ++j) {
          for (int64_t i = 0; i < c.hd; ++i) ref[i] += s[j] / sum * vb[(c.lo(t) + j) * c.hd + i];
        }
      }
      for (int64_t i = 0; i < c.hd; ++i) {
        ASSERT_NEAR(out[(t * c.nh + h) * c.hd + i], ref[i], 1e-5 + 1e-5 * std::abs(ref[i]))
            << "T=" << c.T << " window=" << c.window << " t=" << t << " h=" << h << " i=" << i;
      }
    }
  }
}

TEST_P(CpuKernels, AttentionDecodeGqa) { check_attention({1, 4, 2, 8, 16, {9}, 0}); }

TEST_P(CpuKernels, AttentionDecodeLongContextSplitsKeys) {
  // Decode over hundreds of keys: each kv head's keys are split into chunks whose partial softmax sums are
  // merged (uneven chunk lengths; one kv head and several; f32 and bf16 caches).
  check_attention({1, 4, 2, 64, 800, {700}, 5});
  check_attention({1, 3, 1, 40, 600, {599}, 0});
  check_attention({1, 9, 3, 64, 1100, {1030}, 17}, DType::BF16);
}

TEST_P(CpuKernels, AttentionDecodeAt32kKeys) {
  // Decode at the end of a 32k context (the split-K over key chunks, each thread's partial softmax merged):
  // against the double-precision reference, f32 and bf16 caches, with the slots before kv_begin poisoned.
  check_attention({1, 4, 2, 64, 32800, {32767}, 0});
  check_attention({1, 8, 2, 128, 32800, {32790}, 21}, DType::BF16);
}

TEST_P(CpuKernels, AttentionBf16Cache) {
  // Decode and a prefill block (six-row passes plus leftover keys), head_dim past whole vectors.
  check_attention({1, 4, 2, 64, 40, {33}, 0}, DType::BF16);
  check_attention({1, 9, 3, 72, 20, {17}, 2}, DType::BF16);
  std::vector<int32_t> slots(21);
  for (int i = 0; i < 21; ++i) slots[i] = 10 + i;
  check_attention({21, 6, 2, 64, 40, slots, 3}, DType::BF16);
}

TEST_P(CpuKernels, AttentionPrefillKvBeginAndSlots) {
  // T > 1 with distinct slots, kv_begin > 0 (left padding), odd head_dim, 3 query heads per kv head.
  check_attention({3, 6, 2, 33, 20, {4, 5, 7}, 2});
}

TEST_P(CpuKernels, AttentionPaddingRowIsZero) { check_attention({2, 2, 1, 16, 8, {1, 5}, 3}); }

TEST_P(CpuKernels, AttentionLongPrefill) {
  AttnCase c{130, 3, 1, 64, 160, {}, 0};
  for (int t = 0; t < 130; ++t) c.q_slot.push_back(t + 10);
  c.kv_begin = 4;
  check_attention(c);
}

TEST_P(CpuKernels, AttentionSlidingWindowDecode) {
  // One query: only the last `window` slots (the poisoned ones before it would turn the output into NaN).
  check_attention({1, 4, 2, 16, 40, {30}, 2, 8});
  check_attention({1, 4, 2, 16, 40, {30}, 2, 1});    // a window of one: the query's own key
  check_attention({1, 4, 2, 16, 40, {10}, 3, 100});  // window past kv_begin: the whole prefix
  check_attention({1, 4, 2, 16, 40, {9}, 3, 7});     // window start == kv_begin
  // Long windows split into chunks (flash-decoding) start at the window, f32 and bf16 caches.
  check_attention({1, 4, 2, 64, 1200, {1100}, 5, 700});
  check_attention({1, 9, 3, 64, 1100, {1030}, 17, 513}, DType::BF16);
}

TEST_P(CpuKernels, AttentionSlidingWindowPrefill) {
  std::vector<int32_t> slots(24);
  for (int i = 0; i < 24; ++i) slots[i] = i;
  check_attention({24, 4, 2, 16, 32, slots, 0, 8});
  check_attention({24, 4, 2, 16, 32, slots, 5, 8});  // left padding: rows 0..4 see nothing
  check_attention({24, 6, 2, 33, 32, slots, 3, 3}, DType::BF16);
  AttnCase c{130, 3, 1, 64, 160, {}, 4, 50};  // several blocks, rows of a block with different window starts
  for (int t = 0; t < 130; ++t) c.q_slot.push_back(t + 10);
  check_attention(c);
  c.nh = 12;  // 12 query heads per kv head: blocks of 8 tokens
  c.window = 200;
  check_attention(c);
}

// Gemma 2's attention logit soft-capping: prefill (with a window and left padding), decode, split decode.
TEST_P(CpuKernels, AttentionSoftCap) {
  std::vector<int32_t> slots(24);
  for (int32_t i = 0; i < 24; ++i) slots[static_cast<size_t>(i)] = i;
  check_attention({24, 4, 2, 16, 32, slots, 3, 8, 0.5f});  // caps hard: |q.k * scale| reaches ~10
  check_attention({24, 6, 2, 33, 32, slots, 0, 0, 2.0f}, DType::BF16);
  check_attention({1, 4, 2, 16, 40, {30}, 2, 0, 1.0f});
  check_attention({1, 4, 2, 64, 800, {700}, 5, 0, 3.0f});  // decode split into key chunks
}

// gpt-oss's attention sinks: prefill blocks (with a window and left padding), decode, decode split into key
// chunks (the sink joins the merged sum once), bf16 caches.
TEST_P(CpuKernels, AttentionSinks) {
  std::vector<int32_t> slots(24);
  for (int32_t i = 0; i < 24; ++i) slots[static_cast<size_t>(i)] = i;
  check_attention({24, 4, 2, 16, 32, slots, 3, 8, 0, true});
  check_attention({24, 6, 2, 33, 32, slots, 0, 0, 0, true}, DType::BF16);
  check_attention({1, 4, 2, 16, 40, {30}, 2, 0, 0, true});
  check_attention({1, 4, 2, 64, 800, {700}, 5, 0, 0, true});  // decode split into key chunks
  check_attention({1, 9, 3, 64, 1100, {1030}, 17, 513, 0, true}, DType::BF16);
  check_attention({2, 2, 1, 16, 8, {1, 5}, 3, 0, 0, true});  // a padding row stays zero
}

// A q8_0 or fp8 KV cache (--kv-cache-dtype): the output is, bit for bit, the f32 path's over the cache's
// dequantised values, so that path's invariances (a row alone or in a batch, a prompt whole or in chunks)
// hold for it; and the dequantised values are within the format's rounding of the written ones.
void check_quantised_cache(const AttnCase& c, DType kv_dtype) {
  SCOPED_TRACE(std::string(dtype_name(kv_dtype)) + " T=" + std::to_string(c.T) +
               " hd=" + std::to_string(c.hd));
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
  const int64_t rows = c.nkv * c.cache_len;
  std::vector<float> q = random_vec(c.T * c.nh * c.hd, 51, -2.0f, 2.0f);
  std::vector<float> k = random_vec(rows * c.hd, 52, -3.0f, 3.0f), v = random_vec(rows * c.hd, 53);
  const size_t row_bytes = kv_row_bytes(kv_dtype, c.hd);
  ASSERT_EQ(row_bytes,
            kv_dtype == DType::Q8_0 ? static_cast<size_t>((c.hd + 31) / 32 * 34) : static_cast<size_t>(c.hd));
  std::vector<uint8_t> kq(static_cast<size_t>(rows) * row_bytes), vq(kq.size());
  for (int64_t r = 0; r < rows; ++r) {
    store_kv_row(kv_dtype, k.data() + r * c.hd, c.hd, kq.data() + r * row_bytes);
    store_kv_row(kv_dtype, v.data() + r * c.hd, c.hd, vq.data() + r * row_bytes);
  }
  std::vector<float> kf(k.size()), vf(v.size());
  load_kv_rows(kv_dtype, kq.data(), c.hd, rows, kf.data());
  load_kv_rows(kv_dtype, vq.data(), c.hd, rows, vf.data());
  for (size_t i = 0; i < k.size(); ++i) {
    if (kv_dtype == DType::Q8_0) {
      // Half a step of d = max|x| / 127 over the block (the values are in [-3, 3)), plus d's f16 rounding.
      ASSERT_LE(std::abs(kf[i] - k[i]), 0.6f * 3.0f / 127.0f) << i;
    } else {  // e4m3: 3 mantissa bits, half a step is 2^-4 of the value (normal range), 2^-10 below 2^-6
      ASSERT_LE(std::abs(kf[i] - k[i]), std::max(std::abs(k[i]) / 16.0f, 1.0f / 1024.0f)) << i;
    }
  }
  std::vector<float> got(static_cast<size_t>(c.T * c.nh * c.hd), NAN), want(got.size(), NAN);
  const std::vector<float> sink_logits = random_vec(c.nh, 54, -6.0f, 6.0f);
  const float* sinks = c.sinks ? sink_logits.data() : nullptr;
  attention(q.data(), c.T, c.nh, c.hd, kq.data(), vq.data(), kv_dtype, c.nkv, c.cache_len, c.q_slot.data(),
            c.kv_begin, scale, got.data(), c.window, c.softcap, sinks);
  attention(q.data(), c.T, c.nh, c.hd, kf.data(), vf.data(), DType::F32, c.nkv, c.cache_len, c.q_slot.data(),
            c.kv_begin, scale, want.data(), c.window, c.softcap, sinks);
  ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

TEST_P(CpuKernels, AttentionQuantisedCacheIsTheF32PathOverItsValues) {
  std::vector<int32_t> slots(300);
  for (int32_t i = 0; i < 300; ++i) slots[static_cast<size_t>(i)] = i + 3;
  for (DType dt : {DType::Q8_0, DType::F8_E4M3}) {
    check_quantised_cache({1, 4, 2, 64, 40, {33}, 0}, dt);        // decode, one tile
    check_quantised_cache({1, 4, 2, 128, 1100, {1030}, 17}, dt);  // decode split into chunks
    check_quantised_cache({1, 16, 8, 128, 700, {650}, 0}, dt);    // one task a kv head, 6 tiles
    check_quantised_cache({300, 4, 2, 64, 320, slots, 3}, dt);    // prefill blocks over 3 tiles
    check_quantised_cache({300, 6, 2, 48, 320, slots, 0, 100, 2.0f, true}, dt);  // window, softcap, sinks
    std::vector<int32_t> late(200);  // a prompt chunk after 250 cached slots, windowed: keys from slot 201 on
    for (int32_t i = 0; i < 200; ++i) late[static_cast<size_t>(i)] = 250 + i;
    check_quantised_cache({200, 4, 2, 64, 460, late, 0, 50}, dt);
    check_quantised_cache({21, 6, 2, 16, 40, std::vector<int32_t>(slots.begin(), slots.begin() + 21), 2},
                          dt);  // head_dim 16: one q8_0 block padded with zeros
  }
}

// A non-finite key or value written to a quantised cache reads back as NaN (as from an f32 cache), never as
// a finite number or an error.
TEST(CpuKernelsKvCache, NonFiniteValuesReadBackAsNaN) {
  for (DType dt : {DType::Q8_0, DType::F8_E4M3}) {
    for (float bad : {NAN, INFINITY}) {
      std::vector<float> x(48, 0.5f), y(48);
      x[40] = bad;
      std::vector<uint8_t> row(kv_row_bytes(dt, 48));
      store_kv_row(dt, x.data(), 48, row.data());
      load_kv_rows(dt, row.data(), 48, 1, y.data());
      if (dt == DType::F8_E4M3 && std::isinf(bad)) {  // saturates, as CUDA's satfinite conversion
        EXPECT_EQ(y[40], 448.0f);
        EXPECT_EQ(y[0], 0.5f);
      } else {
        EXPECT_TRUE(std::isnan(y[40])) << dtype_name(dt) << " " << bad;
      }
    }
  }
}

// ------------------------------------------------------------------ elementwise

TEST_P(CpuKernels, Swiglu) {
  for (int64_t n : {1, 7, 33, 577, 70001}) {
    std::vector<float> g = random_vec(n, 41, -20.0f, 20.0f), u = random_vec(n, 42), y(static_cast<size_t>(n));
    if (n == 7) g = {-100.0f, -90.0f, -87.5f, 0.0f, 1e-20f, 88.0f, 100.0f};
    swiglu(g.data(), u.data(), n, y.data());
    for (int64_t i = 0; i < n; ++i) {
      const double ref = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
      ASSERT_NEAR(y[i], ref, 2e-6 * std::abs(ref) + 1e-30) << "n=" << n << " gate=" << g[i];
    }
  }
}

// gated_act against double-precision references of PyTorch's definitions.
TEST_P(CpuKernels, GatedActivations) {
  struct Case {
    GateAct act;
    double (*ref)(double);
    double (*tail)(double);  // relative tolerance added for large |x| (see the file comment)
  };
  auto none = [](double) { return 0.0; };
  const Case cases[] = {
      {GateAct::Silu, [](double x) { return x / (1.0 + std::exp(-x)); }, none},
      {GateAct::Gelu, [](double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); },
       [](double x) { return 2e-7 * x * x; }},
      // 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)): the same function without the cancellation of 1 + tanh(u)
      // in double for u << 0.
      {GateAct::GeluTanh,
       [](double x) {
         return x / (1.0 + std::exp(-2.0 * std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
       },
       [](double x) { return 2e-7 * (std::abs(x) + 0.1 * std::abs(x * x * x)); }},
      {GateAct::Relu, [](double x) { return x > 0 ? x : 0.0; }, none},
      {GateAct::Sigmoid, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, none},
  };
  for (const Case& c : cases) {
    for (int64_t n : {1, 7, 16, 33, 577, 70001}) {
      std::vector<float> g = random_vec(n, 43, -12.0f, 12.0f), u = random_vec(n, 44),
                         y(static_cast<size_t>(n));
      if (n == 7) g = {-100.0f, -13.0f, -5.0f, -0.0f, 1e-20f, 30.0f, 100.0f};
      if (n == 16)
        g = {-4.0f, -3.0f, -2.0f, -1.0f, -0.5f, -1e-3f, 1e-3f, 0.5f,
             1.0f,  2.0f,  3.0f,  4.0f,  6.0f,  -7.0f,  0.0f,  -9.0f};
      gated_act(c.act, g.data(), u.data(), n, y.data());
      for (int64_t i = 0; i < n; ++i) {
        const double x = g[static_cast<size_t>(i)], ref = c.ref(x) * u[static_cast<size_t>(i)];
        const double tol = (2e-6 + c.tail(x)) * std::abs(ref) + 1e-37;
        ASSERT_NEAR(y[static_cast<size_t>(i)], ref, tol)
            << "act=" << static_cast<int>(c.act) << " n=" << n << " gate=" << x;
      }
    }
    // NaN gates stay NaN (an overflowing model must not look healthy).
    std::vector<float> g(37, NAN), u(37, 1.0f), y(37);
    gated_act(c.act, g.data(), u.data(), 37, y.data());
    for (float v : y) ASSERT_TRUE(std::isnan(v)) << "act=" << static_cast<int>(c.act);
  }
  // Silu through gated_act is the swiglu kernel, bit for bit.
  std::vector<float> g = random_vec(999, 45, -20.0f, 20.0f), u = random_vec(999, 46), a(999), b(999);
  gated_act(GateAct::Silu, g.data(), u.data(), 999, a.data());
  swiglu(g.data(), u.data(), 999, b.data());
  EXPECT_EQ(a, b);
}

TEST_P(CpuKernels, AddIsExact) {
  for (int64_t n : {1, 7, 577, 70001}) {
    std::vector<float> a = random_vec(n, 51), b = random_vec(n, 52), y(static_cast<size_t>(n));
    add(a.data(), b.data(), n, y.data());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], a[i] + b[i]);
    add(a.data(), b.data(), n, a.data());  // in place
    EXPECT_EQ(a, y);
  }
}

TEST_P(CpuKernels, SoftCap) {
  for (int64_t n : {1, 7, 577, 70001}) {
    std::vector<float> x = random_vec(n, 53, -200.0f, 200.0f), y(static_cast<size_t>(n));
    softcap(x.data(), n, 30.0f, y.data());
    for (int64_t i = 0; i < n; ++i) {
      const double ref = std::tanh(static_cast<double>(x[i]) / 30.0) * 30.0;
      ASSERT_NEAR(y[i], ref, 1e-6 * 30.0) << "x=" << x[i];
    }
    softcap(x.data(), n, 30.0f, x.data());  // in place
    EXPECT_EQ(x, y);
  }
}

// Op::Scale: (x * w) * s with w per column, one w for all, or none; each product rounded in that order.
TEST_P(CpuKernels, ScaleRows) {
  const int64_t rows = 3, cols = 37;
  const std::vector<float> x = random_vec(rows * cols, 71, -4.0f, 4.0f), w = random_vec(cols, 73, 0.5f, 1.5f);
  std::vector<float> y(x.size());
  scale_rows(x.data(), rows, cols, w.data(), cols, 0.125f, y.data());
  for (int64_t i = 0; i < rows * cols; ++i) ASSERT_EQ(y[i], (x[i] * w[i % cols]) * 0.125f);
  scale_rows(x.data(), rows, cols, w.data(), 1, 1.0f, y.data());
  for (int64_t i = 0; i < rows * cols; ++i) ASSERT_EQ(y[i], x[i] * w[0]);
  scale_rows(x.data(), rows, cols, nullptr, 0, 0.7f, y.data());
  for (int64_t i = 0; i < rows * cols; ++i) ASSERT_EQ(y[i], x[i] * 0.7f);
}

// rms_norm without a weight (Gemma 4's value norm): the normalisation alone, as with a weight of ones.
TEST_P(CpuKernels, RmsNormWithoutWeight) {
  const int64_t rows = 5, dim = 48;
  const std::vector<float> x = random_vec(rows * dim, 79, -3.0f, 3.0f), ones(dim, 1.0f);
  std::vector<float> a(x.size()), b(x.size());
  rms_norm(x.data(), nullptr, rows, dim, 1e-6f, a.data());
  rms_norm(x.data(), ones.data(), rows, dim, 1e-6f, b.data());
  EXPECT_EQ(a, b);
}

TEST_P(CpuKernels, Softmax) {
  for (int64_t n : {1, 7, 577}) {
    std::vector<float> x = random_vec(3 * n, 61, -30.0f, 30.0f), y = x;  // [3, n]
    softmax(y.data(), 3, n);
    for (int64_t r = 0; r < 3; ++r) {
      double mx = -INFINITY, sum = 0;
      for (int64_t i = 0; i < n; ++i) mx = std::max(mx, static_cast<double>(x[r * n + i]));
      for (int64_t i = 0; i < n; ++i) sum += std::exp(x[r * n + i] - mx);
      for (int64_t i = 0; i < n; ++i) {
        const double ref = std::exp(x[r * n + i] - mx) / sum;
        ASSERT_NEAR(y[r * n + i], ref, 1e-5 * ref + 1e-7) << "n=" << n;
      }
    }
  }
}

TEST_P(CpuKernels, Argmax) {
  std::vector<float> x = {1.0f, 3.0f, -2.0f, 3.0f};
  EXPECT_EQ(argmax(x.data(), 4), 1);  // first of equal maxima
  x[2] = NAN;
  EXPECT_EQ(argmax(x.data(), 4), 1);
  std::vector<float> all_neg_inf(3, -INFINITY);
  EXPECT_EQ(argmax(all_neg_inf.data(), 3), 0);
}

// ------------------------------------------------------------------ embedding

TEST_P(CpuKernels, EmbeddingAllDtypes) {
  const int64_t vocab = 11, dim = 33;
  const std::vector<int32_t> ids = {0, 10, 3, 3, 7};
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    Weights table = make_weights(vocab * dim, dt, 71);  // [vocab, dim]
    std::vector<float> y(ids.size() * dim, NAN);        // [n, dim]
    embedding(ids.data(), static_cast<int64_t>(ids.size()), table.raw.data(), dt, vocab, dim, y.data());
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int64_t d = 0; d < dim; ++d)
        ASSERT_EQ(y[i * dim + d], table.f32[ids[i] * dim + d]) << dtype_name(dt);
    }
    // Gemma's scaled embedding: the f32 product, one rounding.
    const float scale = 5.65685415f;  // sqrt(32) in f32
    embedding(ids.data(), static_cast<int64_t>(ids.size()), table.raw.data(), dt, vocab, dim, y.data(),
              scale);
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int64_t d = 0; d < dim; ++d)
        ASSERT_EQ(y[i * dim + d], table.f32[ids[i] * dim + d] * scale) << dtype_name(dt);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTargets, CpuKernels, testing::ValuesIn(all_targets()), target_name);

// ------------------------------------------------------------------ dispatch and thread pool

TEST(CpuKernelsIsa, ParseAndSelect) {
  EXPECT_EQ(parse_isa("avx2"), Isa::Avx2);
  EXPECT_THROW(parse_isa("sse9"), Error);
  EXPECT_TRUE(isa_supported(Isa::Scalar));
  EXPECT_TRUE(isa_supported(best_isa()));
  set_isa(Isa::Scalar);
  EXPECT_EQ(active_isa(), Isa::Scalar);
  set_isa(best_isa());
}

TEST(CpuThreadPool, RunVisitsEveryThreadOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(3);
  for (int rep = 0; rep < 1000; ++rep) {
    pool.run([&](int tid, int n) {
      EXPECT_EQ(n, 3);
      hits[tid]++;
    });
  }
  for (auto& h : hits) EXPECT_EQ(h.load(), 1000);
}

TEST(CpuThreadPool, ParallelForCoversRangeOnce) {
  ThreadPool pool(2);
  for (int64_t n : {0, 1, 5, 1000}) {
    for (int64_t grain : {1, 3, 2000}) {
      std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
      pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
        EXPECT_LE(b, e);
        for (int64_t i = b; i < e; ++i) seen[i]++;
      });
      for (auto& s : seen) ASSERT_EQ(s.load(), 1) << "n=" << n << " grain=" << grain;
    }
  }
}

TEST(CpuThreadPool, ParallelChunksCoverRangeOnceInterleavedWithRun) {
  // Chunked jobs (which never wait for a worker that has not joined) back to back with plain run()s, which
  // every worker must run exactly once: a late worker must neither run a finished chunked job nor skip a
  // run().
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 2000; ++rep) {
      const int64_t n = 1 + rep % 37, chunk = 1 + rep % 5;
      std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
      pool.parallel_chunks(n, chunk, [&](int64_t b, int64_t e) {
        ASSERT_LT(b, e);
        ASSERT_LE(e - b, chunk);
        for (int64_t i = b; i < e; ++i) seen[static_cast<size_t>(i)]++;
      });
      for (auto& v : seen) ASSERT_EQ(v.load(), 1) << "n=" << n << " chunk=" << chunk;
      if (rep % 3 == 0) {
        std::vector<std::atomic<int>> visits(static_cast<size_t>(threads));
        pool.run([&](int tid, int nth) {
          ASSERT_EQ(nth, threads);
          visits[static_cast<size_t>(tid)]++;
        });
        for (auto& v : visits) ASSERT_EQ(v.load(), 1);
      }
    }
    EXPECT_THROW(pool.parallel_chunks(100, 1,
                                      [](int64_t b, int64_t) {
                                        if (b == 50) throw std::runtime_error("chunk 50");
                                      }),
                 std::runtime_error);
    std::atomic<int64_t> total{0};
    pool.parallel_chunks(100, 7, [&](int64_t b, int64_t e) { total += e - b; });
    EXPECT_EQ(total.load(), 100);
  }
}

TEST(CpuThreadPool, ParallelChunksHandEachThreadAContiguousSpan) {
  // Two threads, 40 chunks: the caller takes span 0 (chunks 0-19) front to back and then whatever is left
  // of span 1, so its chunks only increase (they start at 0 unless the caller was descheduled before its
  // first chunk and the worker, done with span 1, took span 0's front: a loaded machine does that); a worker
  // starts at the front of span 1 (chunk 20 or later, whenever it joins) and takes span 0's leftovers only
  // after that. Every chunk runs once.
  ThreadPool pool(2);
  for (int rep = 0; rep < 50; ++rep) {
    std::mutex mu;
    std::map<std::thread::id, std::vector<int64_t>> order;
    pool.parallel_chunks(40, 1, [&](int64_t b, int64_t) {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      std::lock_guard<std::mutex> lk(mu);
      order[std::this_thread::get_id()].push_back(b);
    });
    size_t covered = 0;
    for (const auto& [id, chunks] : order) {
      covered += chunks.size();
      if (id == std::this_thread::get_id()) {
        EXPECT_TRUE(std::is_sorted(chunks.begin(), chunks.end()));
      } else {
        EXPECT_GE(chunks.front(), 20);
        const auto wrap = std::find_if(chunks.begin(), chunks.end(), [](int64_t c) { return c < 20; });
        EXPECT_TRUE(std::is_sorted(chunks.begin(), wrap));
        EXPECT_TRUE(std::is_sorted(wrap, chunks.end()));
      }
    }
    EXPECT_EQ(covered, 40u);
    std::set<int64_t> all;
    for (const auto& [id, chunks] : order) all.insert(chunks.begin(), chunks.end());
    EXPECT_EQ(all.size(), 40u);
  }
}

TEST(CpuThreadPool, RethrowsWorkerExceptionAndStaysUsable) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.run([](int tid, int) {
    if (tid == 1) throw Error("boom");
  }),
               Error);
  std::atomic<int> ran{0};
  pool.run([&](int, int) { ran++; });
  EXPECT_EQ(ran.load(), 2);
}

TEST(CpuThreadPool, NestedRunIsInlineAndResizeWorks) {
  ThreadPool pool(2);
  std::atomic<int> inner{0};
  pool.run([&](int, int) { pool.run([&](int tid, int n) { inner += (tid == 0 && n == 1) ? 1 : 100; }); });
  EXPECT_EQ(inner.load(), 2);
  pool.set_num_threads(4);
  EXPECT_EQ(pool.num_threads(), 4);
  std::atomic<int> ran{0};
  pool.run([&](int, int) { ran++; });
  EXPECT_EQ(ran.load(), 4);
}

TEST(CpuThreadPool, SleepingWorkersWakeUp) {
  ThreadPool pool(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // past the spin window: workers sleep
  std::atomic<int> ran{0};
  pool.run([&](int, int) { ran++; });
  EXPECT_EQ(ran.load(), 2);
}

}  // namespace
}  // namespace tessera::cpu
