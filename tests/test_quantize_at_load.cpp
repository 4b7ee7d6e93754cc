// dtype q8_0 / q4_0 (LoadOptions::dtype, --dtype): a float checkpoint's matrices quantised to GGML blocks at
// load and computed from them on the cpu device (tests/test_cpu_kernels_quant.cpp checks the kernels).
// Bounds against Transformers' float32 goldens of the tiny random fixtures (logits up to ~7.7, where
// Transformers' own bfloat16 is 0.165 off): Q8_0 within 0.35 (measured 0.23-0.24, int8 decode inputs
// included), Q4_0 within 4.0 (measured 2.9-3.1: 4-bit blocks of random weights). The kernels' and the
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

void check_fixture(const char* name, DType q, double bound) {
  auto j = golden::load_model_golden(name);
  LoadOptions opt;
  opt.dtype = q;
  CausalLM m = AutoModelForCausalLM::from_pretrained(golden::model_path(name), opt);
  EXPECT_EQ(m.info().dtype, q);
  double worst = 0;
  for (const auto& c : j["forward"]) {
    auto expect = golden::matrix(c["logits"]);
    std::vector<float> got = m.forward(to32(golden::ids(c["input_ids"])));
    worst = std::max(worst, golden::max_abs_diff(got, expect.data).max_abs);
  }
  EXPECT_LE(worst, bound) << name << " " << dtype_name(q);
  std::printf("%s %s: worst |logit - Transformers f32| %.4f\n", name, dtype_name(q), worst);
}

TEST(QuantizeAtLoad, Q8_0NearTransformersFloat32) {
  check_fixture("qwen3_tied", DType::Q8_0, 0.35);
  check_fixture("glm4", DType::Q8_0, 0.35);
}

TEST(QuantizeAtLoad, Q4_0NearTransformersFloat32) {
  check_fixture("qwen3_tied", DType::Q4_0, 4.0);
  check_fixture("glm4", DType::Q4_0, 4.0);
}

TEST(QuantizeAtLoad, NamesAndDevicesRefusedClearly) {
  EXPECT_EQ(parse_load_dtype("q8_0"), DType::Q8_0);
  EXPECT_EQ(parse_load_dtype("bf16"), DType::BF16);
  testing::expect_error([] { parse_load_dtype("q4_k"); },
                        "unsupported dtype 'q4_k' (expected float32, bfloat16, float16, q8_0 or q4_0)");
  // config.json's torch_dtype stays a float type.
  EXPECT_THROW(parse_dtype("q8_0"), Error);
  LoadOptions opt;
  opt.dtype = DType::Q8_0;
  opt.device_map = "xla-cpu";
  testing::expect_error([&] { AutoModelForCausalLM::from_pretrained(golden::model_path("qwen3_tied"), opt); },
                        "dtype q8_0 (quantised at load) runs on the cpu device, not 'xla-cpu'");
}

}  // namespace
}  // namespace tessera
