//===- DeviceTest.cpp - DeviceBuffer and splat constants on the host ------===//

#include "lamina/Runtime/Device.h"

#include <gtest/gtest.h>

#include <cstring>
#include <utility>

using namespace lamina::rt;

namespace {

TEST(DeviceBuffer, SelfMoveKeepsTheBuffer) {
  DeviceBuffer b;
  ASSERT_TRUE(b.allocate(hostDevice(), 256).ok());
  void *p = b.data();
  DeviceBuffer &same = b;
  b = std::move(same);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.bytes(), 256u);
  DeviceBuffer other = std::move(b);
  EXPECT_EQ(other.data(), p);
  EXPECT_EQ(b.data(), nullptr);
}

TEST(SplatConstant, FillsAndSharesPerValueAndType) {
  Device &d = hostDevice();
  float one = 1.0f, two = 2.0f;
  void *a = nullptr, *b = nullptr, *c = nullptr, *big = nullptr;
  ASSERT_TRUE(splatConstant(d, &one, DType::F32, 100, &a).ok());
  for (int i = 0; i < 100; ++i)
    ASSERT_EQ(static_cast<float *>(a)[i], 1.0f) << i;
  // A smaller splat of the same value is a prefix of the same buffer.
  ASSERT_TRUE(splatConstant(d, &one, DType::F32, 10, &b).ok());
  EXPECT_EQ(a, b);
  // Another value, or the same bits as another type, gets its own.
  ASSERT_TRUE(splatConstant(d, &two, DType::F32, 10, &c).ok());
  EXPECT_NE(a, c);
  EXPECT_EQ(static_cast<float *>(c)[9], 2.0f);
  int32_t oneBits;
  std::memcpy(&oneBits, &one, 4);
  void *asInt = nullptr;
  ASSERT_TRUE(splatConstant(d, &oneBits, DType::I32, 10, &asInt).ok());
  EXPECT_NE(a, asInt);
  // A larger request allocates a larger buffer; the old one stays valid.
  ASSERT_TRUE(splatConstant(d, &one, DType::F32, 1000, &big).ok());
  EXPECT_NE(a, big);
  EXPECT_EQ(static_cast<float *>(big)[999], 1.0f);
  EXPECT_EQ(static_cast<float *>(a)[99], 1.0f);
  // Zero elements still give a valid pointer.
  void *none = nullptr;
  ASSERT_TRUE(splatConstant(d, &two, DType::F32, 0, &none).ok());
  EXPECT_NE(none, nullptr);
}

TEST(SplatConstant, HalfAndBoolWidths) {
  Device &d = hostDevice();
  uint16_t bf16One = 0x3f80;
  uint8_t yes = 1;
  void *h = nullptr, *t = nullptr;
  ASSERT_TRUE(splatConstant(d, &bf16One, DType::BF16, 33, &h).ok());
  ASSERT_TRUE(splatConstant(d, &yes, DType::I1, 33, &t).ok());
  for (int i = 0; i < 33; ++i) {
    EXPECT_EQ(static_cast<uint16_t *>(h)[i], 0x3f80) << i;
    EXPECT_EQ(static_cast<uint8_t *>(t)[i], 1) << i;
  }
}

} // namespace
