#include <gtest/gtest.h>

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
