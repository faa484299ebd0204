//===- MathTest.cpp - per-element math and fp16/bf16 conversion -----------===//

#include "RuntimeTestUtil.h"

#include <climits>
#include <cmath>

using namespace lamina::rt;
using namespace lamina::rt::test;

namespace {

uint16_t halfBits(float f) { return math::floatToHalf(f); }

TEST(RuntimeMath, HalfRoundTripsEveryPattern) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = math::halfToFloat(uint16_t(h));
    bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    if (nan) {
      EXPECT_TRUE(std::isnan(f));
      EXPECT_EQ(math::floatToHalf(f), h | 0x200); // quieted, payload kept
    } else {
      ASSERT_EQ(math::floatToHalf(f), h) << std::hex << h;
    }
  }
}

TEST(RuntimeMath, HalfRoundsToNearestEven) {
  EXPECT_EQ(halfBits(1.0f), 0x3c00);
  EXPECT_EQ(halfBits(1.0f + 0x1p-11f), 0x3c00);            // tie -> even
  EXPECT_EQ(halfBits(1.0f + 3 * 0x1p-11f), 0x3c02);        // tie -> even (up)
  EXPECT_EQ(halfBits(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01); // above the tie
  EXPECT_EQ(halfBits(65504.0f), 0x7bff);
  EXPECT_EQ(halfBits(65519.0f), 0x7bff);
  EXPECT_EQ(halfBits(65520.0f), 0x7c00); // ties to even = overflow
  EXPECT_EQ(halfBits(-1e10f), 0xfc00);
  EXPECT_EQ(halfBits(0x1p-24f), 0x0001); // smallest subnormal
  EXPECT_EQ(halfBits(0x1p-25f), 0x0000); // tie with 0 -> even
  EXPECT_EQ(halfBits(1.5f * 0x1p-25f), 0x0001);
  EXPECT_EQ(halfBits(3 * 0x1p-25f), 0x0002);        // tie between 1 and 2 units
  EXPECT_EQ(halfBits(0x1p-14f - 0x1p-26f), 0x0400); // carries into normal
  EXPECT_EQ(halfBits(-0.0f), 0x8000);
  EXPECT_EQ(halfBits(INFINITY), 0x7c00);
  EXPECT_TRUE(std::isnan(math::halfToFloat(halfBits(NAN))));
  EXPECT_EQ(math::halfToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(math::halfToFloat(0x0001), 0x1p-24f);
}

#if defined(__FLT16_MAX__)
// The compiler's own _Float16 conversion (libgcc, correctly rounded) as the
// reference, over a spread of float bit patterns.
TEST(RuntimeMath, HalfMatchesCompilerConversion) {
  for (uint64_t u = 0; u <= 0xffffffffull; u += 4093) {
    float f = math::bitsFloat(uint32_t(u));
    if (std::isnan(f))
      continue;
    _Float16 h = static_cast<_Float16>(f);
    uint16_t bits;
    std::memcpy(&bits, &h, 2);
    ASSERT_EQ(math::floatToHalf(f), bits) << std::hexfloat << f;
  }
}
#endif

uint16_t bf16Reference(float f) {
  uint32_t u = math::floatBits(f);
  uint16_t lo = uint16_t(u >> 16), hi = uint16_t(lo + 1);
  double dl = std::fabs(double(math::bf16ToFloat(lo)) - f);
  double dh = std::isinf(math::bf16ToFloat(hi)) && !std::isinf(f)
                  ? std::fabs(double(math::bf16ToFloat(uint16_t(hi - 1))) +
                              std::ldexp(1.0, 128 - 8) * (f < 0 ? -1 : 1) - f)
                  : std::fabs(double(math::bf16ToFloat(hi)) - f);
  if (dl < dh || (dl == dh && !(lo & 1)))
    return lo;
  return hi;
}

TEST(RuntimeMath, BFloat16RoundsToNearestEven) {
  for (uint64_t u = 0; u <= 0xffffffffull; u += 65521) {
    float f = math::bitsFloat(uint32_t(u));
    if (std::isnan(f) || std::isinf(f))
      continue;
    ASSERT_EQ(math::floatToBf16(f), bf16Reference(f)) << std::hexfloat << f;
  }
  EXPECT_EQ(math::floatToBf16(1.0f + 0x1p-8f), 0x3f80);     // tie -> even
  EXPECT_EQ(math::floatToBf16(1.0f + 3 * 0x1p-8f), 0x3f82); // tie -> even
  EXPECT_EQ(math::floatToBf16(3.0e38f), 0x7f62);
  EXPECT_EQ(math::floatToBf16(3.4e38f), 0x7f80); // past max + ulp/2: inf
  uint16_t nan = math::floatToBf16(math::bitsFloat(0x7f800001)); // low payload
  EXPECT_TRUE(std::isnan(math::bf16ToFloat(nan)));
  for (uint32_t b = 0; b < 0x10000; ++b) {
    if (!std::isnan(math::bf16ToFloat(uint16_t(b)))) {
      ASSERT_EQ(math::floatToBf16(math::bf16ToFloat(uint16_t(b))), b);
    }
  }
}

TEST(RuntimeMath, DoubleRoundsOnceToHalfAndBf16) {
  // Via float this would round twice: first to the tie, then to even (down).
  double d = 1.0 + 0x1p-11 + 0x1p-40;
  EXPECT_EQ(math::floatToHalf(float(d)), 0x3c00);
  EXPECT_EQ(math::doubleToHalf(d), 0x3c01);
  EXPECT_EQ(math::doubleToBf16(1.0 + 0x1p-8 + 0x1p-40), 0x3f81);
  EXPECT_EQ(math::doubleToHalf(1.0 + 0x1p-11), 0x3c00);
  EXPECT_EQ(math::doubleToHalf(1e300), 0x7c00);
  EXPECT_EQ(math::doubleToHalf(-0.1), math::floatToHalf(-0.1f));
}

TEST(RuntimeMath, KnownValues) {
  EXPECT_TRUE(close(math::erf(0.5f), 0.5204998778130465, 1e-6));
  EXPECT_TRUE(close(math::erf(1.0), 0.8427007929497149, 1e-15));
  EXPECT_TRUE(close(math::erf(-2.0f), -0.9953222650189527, 1e-6));
  EXPECT_EQ(math::sigmoid(0.0f), 0.5f);
  EXPECT_TRUE(close(math::sigmoid(2.0f), 0.8807970779778823, 1e-6));
  EXPECT_TRUE(close(math::sigmoid(-100.0), 3.720075976020836e-44, 1e-12));
  EXPECT_EQ(math::sigmoid(1000.0f), 1.0f);
  EXPECT_EQ(math::sigmoid(-1000.0f), 0.0f);
  EXPECT_FALSE(std::isnan(math::sigmoid(-INFINITY)));
  EXPECT_TRUE(close(math::gelu(1.0f), 0.8413447460685429, 1e-6));
  EXPECT_TRUE(close(math::gelu(-1.0f), -0.15865525393145707, 1e-6));
  EXPECT_TRUE(close(math::gelu(3.0), 2.99595030590511, 1e-14));
  // 1 + erf(-5/sqrt 2) would cancel to garbage in float; erfc does not.
  EXPECT_TRUE(close(math::gelu(-5.0f), -1.4332578593959731e-06, 1e-5));
  EXPECT_TRUE(close(math::geluTanh(1.0f), 0.8411919906082768, 1e-6));
  EXPECT_TRUE(close(math::geluTanh(-1.0f), -0.15880800939172324, 1e-6));
  EXPECT_TRUE(close(math::geluTanh(3.0), 2.996362607918227, 1e-14));
  EXPECT_EQ(math::geluTanh(1e30f), 1e30f); // x^3 overflows; tanh saturates
  EXPECT_EQ(math::relu(-3.0f), 0.0f);
  EXPECT_TRUE(std::isnan(math::relu(NAN)));
  EXPECT_EQ(math::abs(-0.0f), 0.0f);
  EXPECT_FALSE(std::signbit(math::abs(-0.0f)));
  EXPECT_EQ(math::reciprocal(4.0f), 0.25f);
}

TEST(RuntimeMath, MinMaxPropagateNaN) {
  EXPECT_TRUE(std::isnan(math::maximum(NAN, 1.0f)));
  EXPECT_TRUE(std::isnan(math::maximum(1.0f, NAN)));
  EXPECT_TRUE(std::isnan(math::minimum(std::nan(""), 1.0)));
  EXPECT_TRUE(std::isnan(math::minimum(1.0, std::nan(""))));
  EXPECT_EQ(math::maximum(2.0f, -3.0f), 2.0f);
  EXPECT_EQ(math::minimum(2, -3), -3);
}

TEST(RuntimeMath, IntegerArithmeticWrapsAndTruncates) {
  EXPECT_EQ(math::div(7, -2), -3);
  EXPECT_EQ(math::div(-7, 2), -3);
  EXPECT_EQ(math::div(5, 0), 0);
  EXPECT_EQ(math::div(INT_MIN, -1), INT_MIN);
  EXPECT_EQ(math::div(uint8_t(200), uint8_t(7)), 28);
  EXPECT_EQ(math::add(int8_t(100), int8_t(100)), int8_t(-56));
  EXPECT_EQ(math::mul(INT64_MAX, int64_t(2)), int64_t(-2));
  EXPECT_EQ(math::mul(uint16_t(65535), uint16_t(65535)), uint16_t(1));
  EXPECT_EQ(math::neg(INT_MIN), INT_MIN);
  EXPECT_EQ(math::abs(int8_t(-128)), int8_t(-128));
  EXPECT_EQ(math::abs(-5), 5);
  EXPECT_EQ(math::pow(2, 10), 1024);
  EXPECT_EQ(math::pow(-3, 3), -27);
  EXPECT_EQ(math::pow(3, 0), 1);
  EXPECT_EQ(math::pow(2, -1), 0);
  EXPECT_EQ(math::pow(-1, -3), -1);
  EXPECT_EQ(math::pow(1, -7), 1);
  EXPECT_EQ(math::pow(int64_t(3), int64_t(40)),
            int64_t(12157665459056928801ull));
  EXPECT_TRUE(close(math::pow(2.0f, 0.5f), std::sqrt(2.0), 1e-7));
}

} // namespace
