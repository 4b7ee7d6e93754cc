#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>

#include "tessera/error.h"
#include "tessera/tensor.h"

using namespace tessera;

TEST(Tensor, Bf16RoundTripRoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_FLOAT_EQ(bf16_to_f32(f32_to_bf16(3.140625f)), 3.140625f);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to even (1.0).
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);
}

TEST(Tensor, F16RoundTrip) {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f}) {
    EXPECT_FLOAT_EQ(f16_to_f32(f32_to_f16(v)), v) << v;
  }
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
}

TEST(Tensor, ParseDtypeRejectsUnknown) {
  EXPECT_EQ(parse_dtype("bf16"), DType::BF16);
  EXPECT_THROW(parse_dtype("int4"), Error);
}

// float8 e4m3fn as the OCP FP8 format defines it (bias 7, 3 mantissa bits, no infinities, S.1111.111 NaN):
// the format's own landmarks, every finite byte round trip, ties to even, saturation at 448.
TEST(Tensor, Fp8E4m3fnFollowsTheFormat) {
  EXPECT_EQ(f8e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(f8e4m3_to_f32(0x7e), 448.0f);        // the largest finite
  EXPECT_EQ(f8e4m3_to_f32(0x08), 0.015625f);     // 2^-6, the smallest normal
  EXPECT_EQ(f8e4m3_to_f32(0x01), 0.001953125f);  // 2^-9, the smallest subnormal
  EXPECT_EQ(f8e4m3_to_f32(0xb8), -1.0f);
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(f8e4m3_to_f32(0xff)));
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    const float v = f8e4m3_to_f32(static_cast<uint8_t>(b));
    if (v == 0.0f) continue;  // +0 and -0
    EXPECT_EQ(f32_to_f8e4m3(v), b) << b;
  }
  // Halfway between two neighbours: to the even mantissa (normal and subnormal).
  EXPECT_EQ(f32_to_f8e4m3(1.0625f), 0x38);        // 1 and 1.125
  EXPECT_EQ(f32_to_f8e4m3(1.1875f), 0x3a);        // 1.125 and 1.25
  EXPECT_EQ(f32_to_f8e4m3(1.0626f), 0x39);        // just past halfway
  EXPECT_EQ(f32_to_f8e4m3(0.0009765625f), 0x00);  // 2^-10: 0 and 2^-9
  EXPECT_EQ(f32_to_f8e4m3(0.0029296875f), 0x02);  // 3 * 2^-10: 2^-9 and 2^-8
  EXPECT_EQ(f32_to_f8e4m3(0.0146484375f), 0x08);  // 15 * 2^-10: the last subnormal and 2^-6
  EXPECT_EQ(f32_to_f8e4m3(15.5f), 0x58);          // 15 and 16 (a carry into the exponent)
  // Saturation, and NaN kept.
  EXPECT_EQ(f32_to_f8e4m3(1e6f), 0x7e);
  EXPECT_EQ(f32_to_f8e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(f32_to_f8e4m3(460.0f), 0x7e);
  EXPECT_EQ(f32_to_f8e4m3(NAN) & 0x7f, 0x7f);
  EXPECT_EQ(f32_to_f8e4m3(-0.0f), 0x80);
}

TEST(Tensor, ParseKvCacheDtype) {
  EXPECT_EQ(parse_kv_cache_dtype("auto"), std::nullopt);
  EXPECT_EQ(parse_kv_cache_dtype("q8_0"), DType::Q8_0);
  EXPECT_EQ(parse_kv_cache_dtype("fp8"), DType::F8_E4M3);
  EXPECT_EQ(parse_kv_cache_dtype("bf16"), DType::BF16);
  try {
    parse_kv_cache_dtype("int4");
    ADD_FAILURE() << "int4 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'int4'"), std::string::npos) << e.what();
  }
}
