// dtype q8_0 / q4_0 / q4_k (LoadOptions::dtype, --dtype): a float checkpoint's matrices quantised to GGML
// blocks at load and computed from them on the cpu device (tests/test_cpu_kernels_quant.cpp checks the
// kernels). Bounds against Transformers' float32 goldens of the tiny random fixtures (logits up to ~7.7,
// where Transformers' own bfloat16 is 0.165 off): Q8_0 within 0.5 (measured 0.32-0.35: every matmul input
// rounded to int8 per block of 32, prefill included; 0.23-0.24 when prefill kept f32 inputs), Q4_0 within 4.0 (measured 2.9-3.1: 4-bit blocks of random weights). The kernels' and the
// quantiser's exactness are checked apart (test_cpu_kernels_quant.cpp, RowsRoundTrip below); these catch the
// loader path (which matrices, their layout). Greedy tokens are not compared: the goldens' top-2 margins
// (0.002-0.04) are below bfloat16's own error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "backends/cpu/kernels.h"
#include "error_util.h"
#include "golden_util.h"
#include "pjrt_test_util.h"
#include "tessera/error.h"
#include "tessera/model.h"
#include "tessera/tensor.h"

namespace tessera {
namespace {

std::vector<int32_t> to32(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

TEST(QuantizeAtLoad, RowsRoundTripWithinHalfAStep) {
  // Each value comes back within half a quantisation step d (plus the f16 rounding of d); Q4_0's codes run
  // from -8 to 7 steps, so values of the sign opposite to the block's extreme may lose up to a whole step.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  const int64_t rows = 5, K = 96;
  std::vector<float> x(static_cast<size_t>(rows * K));
  for (float& v : x) v = u(rng);
  x[3] = 0.0f;
  for (int j = 32; j < 64; ++j) x[static_cast<size_t>(j)] = 0.0f;  // an all-zero block
  for (DType q : {DType::Q8_0, DType::Q4_0}) {
    std::vector<uint8_t> blocks(dtype_bytes(q, rows * K));
    quantize_rows(x.data(), rows, K, q, blocks.data());
    std::vector<float> back(x.size());
    cpu::dequantize_rows(q, blocks.data(), K, rows, back.data());
    for (size_t b = 0; b < x.size() / 32; ++b) {
      float amax = 0.0f;
      for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
      const float step = q == DType::Q8_0 ? amax / 127.0f : amax / 8.0f;
      for (size_t j = 0; j < 32; ++j)
        ASSERT_NEAR(back[b * 32 + j], x[b * 32 + j], (q == DType::Q8_0 ? 0.6f : 1.05f) * step + 1e-30f)
            << dtype_name(q) << " block " << b << " value " << j;
    }
  }
}

TEST(QuantizeAtLoad, Q4KRowsRoundTrip) {
  // Per sub-block of 32, x ~ d * sc * q - dmin * mn with q in 0..15: each value within a step (the
  // sub-block's range over 15) of the original, plus the 6-bit rounding of its scale and offset against the
  // block's largest; and the sub-block's RMS error under 0.45 of a step (uniform rounding alone gives 0.29).
  std::mt19937 rng(11);
  std::normal_distribution<float> n(0.0f, 1.0f);
  const int64_t rows = 3, K = 512;
  std::vector<float> x(static_cast<size_t>(rows * K));
  for (float& v : x) v = n(rng);
  for (int j = 0; j < 32; ++j) x[static_cast<size_t>(64 + j)] = 0.0f;               // an all-zero sub-block
  for (int j = 0; j < 32; ++j) x[static_cast<size_t>(128 + j)] = 0.5f + j / 64.0f;  // all positive
  for (int j = 0; j < 32; ++j) x[static_cast<size_t>(160 + j)] *= 0.01f;  // a small one beside large
  std::vector<uint8_t> blocks(dtype_bytes(DType::Q4_K, rows * K));
  quantize_rows(x.data(), rows, K, DType::Q4_K, blocks.data());
  std::vector<float> back(x.size());
  cpu::dequantize_rows(DType::Q4_K, blocks.data(), K, rows, back.data());
  double worst_rms = 0;
  for (size_t s = 0; s < x.size() / 32; ++s) {
    float lo = 0.0f, hi = 0.0f, bmax = 0.0f;
    for (size_t j = 0; j < 32; ++j) {
      lo = std::min(lo, x[s * 32 + j]);
      hi = std::max(hi, x[s * 32 + j]);
    }
    // The block's largest sub-block range bounds the 6-bit scale step.
    for (size_t t = s / 8 * 8; t < s / 8 * 8 + 8; ++t)
      for (size_t j = 0; j < 32; ++j) bmax = std::max(bmax, std::fabs(x[t * 32 + j]));
    const float step = (hi - lo) / 15.0f, scale_err = 2.0f * bmax / 63.0f;
    double se = 0;
    for (size_t j = 0; j < 32; ++j) {
      const float e = back[s * 32 + j] - x[s * 32 + j];
      ASSERT_LE(std::fabs(e), step + scale_err + 1e-6f) << "sub-block " << s << " value " << j;
      se += static_cast<double>(e) * e;
    }
    if (step > 0.05f) worst_rms = std::max(worst_rms, std::sqrt(se / 32) / step);
    if (hi == lo) {
      for (size_t j = 0; j < 32; ++j) ASSERT_EQ(back[s * 32 + j], 0.0f) << "zero sub-block " << s;
    }
  }
  EXPECT_LE(worst_rms, 0.45);
  std::printf("q4_k round trip: worst RMS error %.3f of a step\n", worst_rms);
  std::vector<float> bad(256, 1.0f);
  bad[5] = NAN;
  std::vector<uint8_t> out(144);
  EXPECT_THROW(quantize_rows(bad.data(), 1, 256, DType::Q4_K, out.data()), Error);
  // Values whose 6-bit scales would need a float16 step past 65504: an error, not infinite scales.
  std::vector<float> huge(256, 0.0f);
  for (size_t j = 0; j < huge.size(); j += 2) huge[j] = 1e9f;
  const std::string e =
      testing::error_of([&] { quantize_rows(huge.data(), 1, 256, DType::Q4_K, out.data()); });
  EXPECT_NE(e.find("beyond Q4_K's float16 scales"), std::string::npos) << e;
}

void check_fixture(const char* name, DType q, double bound, const char* device = "cpu") {
  auto j = golden::load_model_golden(name);
  LoadOptions opt;
  opt.dtype = q;
  opt.device_map = device;
  CausalLM m = AutoModelForCausalLM::from_pretrained(golden::model_path(name), opt);
  EXPECT_EQ(m.info().dtype, q);
  double worst = 0;
  for (const auto& c : j["forward"]) {
    auto expect = golden::matrix(c["logits"]);
    std::vector<float> got = m.forward(to32(golden::ids(c["input_ids"])));
    worst = std::max(worst, golden::max_abs_diff(got, expect.data).max_abs);
  }
  EXPECT_LE(worst, bound) << name << " " << dtype_name(q);
  std::printf("%s %s on %s: worst |logit - Transformers f32| %.4f\n", name, dtype_name(q), device, worst);
}

TEST(QuantizeAtLoad, Q8_0NearTransformersFloat32) {
  check_fixture("qwen3_tied", DType::Q8_0, 0.5);
  check_fixture("glm4", DType::Q8_0, 0.5);
}

TEST(QuantizeAtLoad, Q4_0NearTransformersFloat32) {
  check_fixture("qwen3_tied", DType::Q4_0, 4.0);
  check_fixture("glm4", DType::Q4_0, 4.0);
}

TEST(QuantizeAtLoad, NamesAndDevicesRefusedClearly) {
  EXPECT_EQ(parse_load_dtype("q8_0"), DType::Q8_0);
  EXPECT_EQ(parse_load_dtype("bf16"), DType::BF16);
  EXPECT_EQ(parse_load_dtype("q4_k"), DType::Q4_K);
  testing::expect_error([] { parse_load_dtype("q5_k"); },
                        "unsupported dtype 'q5_k' (expected float32, bfloat16, float16, q8_0, q4_0 or q4_k)");
  // config.json's torch_dtype stays a float type.
  EXPECT_THROW(parse_dtype("q8_0"), Error);
}

// On a PJRT device the quantised matrices go up as int8 and scales and are dequantised in the program
// (tests/test_quantized_gguf.cpp compares it with the cpu device's float32-input path on the same blocks).
TEST(QuantizeAtLoad, Q8_0OnXlaCpuNearTransformersFloat32) {
  REQUIRE_XLA_CPU();
  check_fixture("qwen3_tied", DType::Q8_0, 0.35, "xla-cpu");
}

}  // namespace
}  // namespace tessera
