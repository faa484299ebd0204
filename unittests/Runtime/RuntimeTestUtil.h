//===- RuntimeTestUtil.h - buffers and references for tests ---*- C++ -*-===//

#ifndef LAMINA_UNITTESTS_RUNTIME_TESTUTIL_H
#define LAMINA_UNITTESTS_RUNTIME_TESTUTIL_H

#include "lamina/Runtime/Kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace lamina::rt::test {

/// An owning tensor: storage plus the shape the view points at. Views stay
/// valid when a Buf is moved (vectors keep their heap blocks).
struct Buf {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  Buf() = default;
  Buf(DType t, std::vector<int64_t> s) : dtype(t), shape(std::move(s)) {
    bytes.assign(size_t(count()) * dtypeSize(t), 0);
  }
  int64_t count() const { return numElements(shape.data(), int(shape.size())); }
  Tensor view() {
    return Tensor{bytes.data(), dtype, int(shape.size()), shape.data()};
  }
  template <typename T> T *data() {
    return reinterpret_cast<T *>(bytes.data());
  }
  template <typename T> std::vector<T> values() {
    return std::vector<T>(data<T>(), data<T>() + count());
  }
};

template <typename T>
Buf make(DType t, std::vector<int64_t> shape, const std::vector<T> &values) {
  Buf b(t, std::move(shape));
  EXPECT_EQ(int64_t(values.size()), b.count());
  if (!b.bytes.empty())
    std::memcpy(b.bytes.data(), values.data(), b.bytes.size());
  return b;
}
inline Buf f32(std::vector<int64_t> shape, const std::vector<float> &v) {
  return make(DType::F32, std::move(shape), v);
}
inline Buf i64(std::vector<int64_t> shape, const std::vector<int64_t> &v) {
  return make(DType::I64, std::move(shape), v);
}

/// The two 16-bit float formats and their conversions, to loop over.
struct HalfFormat {
  DType dtype;
  uint16_t (*toBits)(float);
  float (*fromBits)(uint16_t);
};
inline const HalfFormat kHalfFormats[] = {
    {DType::F16, math::floatToHalf, math::halfToFloat},
    {DType::BF16, math::floatToBf16, math::bf16ToFloat}};

inline std::mt19937 &rng() {
  static std::mt19937 gen(1234);
  return gen;
}
inline std::vector<float> randomFloats(int64_t n, float lo = -2, float hi = 2) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = d(rng());
  return v;
}
inline Buf randomF32(std::vector<int64_t> shape, float lo = -2, float hi = 2) {
  Buf b(DType::F32, std::move(shape));
  std::vector<float> v = randomFloats(b.count(), lo, hi);
  if (!v.empty())
    std::memcpy(b.bytes.data(), v.data(), b.bytes.size());
  return b;
}

/// Element i as a double, for any float storage.
inline double valueAt(Buf &b, int64_t i) {
  switch (b.dtype) {
  case DType::F16: return math::halfToFloat(b.data<uint16_t>()[i]);
  case DType::BF16: return math::bf16ToFloat(b.data<uint16_t>()[i]);
  case DType::F64: return b.data<double>()[i];
  default: return b.data<float>()[i];
  }
}

/// Random values of a float type in [lo, hi].
inline Buf randomOf(DType t, std::vector<int64_t> shape, float lo = -2,
                    float hi = 2) {
  Buf f = randomF32(shape, lo, hi);
  if (t == DType::F32)
    return f;
  Buf b(t, shape);
  for (int64_t i = 0; i < f.count(); ++i)
    b.data<uint16_t>()[i] = t == DType::BF16
                                ? math::floatToBf16(f.data<float>()[i])
                                : math::floatToHalf(f.data<float>()[i]);
  return b;
}

/// Row-major index <-> multi-index.
inline std::vector<int64_t> unravel(int64_t i,
                                    const std::vector<int64_t> &shape) {
  std::vector<int64_t> idx(shape.size());
  for (int d = int(shape.size()) - 1; d >= 0; --d) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}
inline int64_t ravel(const std::vector<int64_t> &idx,
                     const std::vector<int64_t> &shape) {
  int64_t i = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    i = i * shape[d] + idx[d];
  return i;
}
/// Element of `shape` read at result multi-index `out` under broadcasting.
inline int64_t broadcastIndex(const std::vector<int64_t> &out,
                              const std::vector<int64_t> &shape) {
  std::vector<int64_t> idx(shape.size());
  size_t lead = out.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d)
    idx[d] = shape[d] == 1 ? 0 : out[lead + d];
  return ravel(idx, shape);
}

/// |got - want| <= rel * |want| + abs; NaN matches NaN.
inline ::testing::AssertionResult close(double got, double want, double rel,
                                        double abs = 0) {
  if (std::isnan(want) && std::isnan(got))
    return ::testing::AssertionSuccess();
  if (got == want || std::fabs(got - want) <= rel * std::fabs(want) + abs)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "got " << got << ", want " << want << " (rel " << rel << ", abs "
         << abs << ")";
}

#define EXPECT_OK(expr)                                                        \
  do {                                                                         \
    ::lamina::rt::Status s_ = (expr);                                          \
    EXPECT_TRUE(s_.ok()) << s_.message();                                      \
  } while (0)
#define ASSERT_OK(expr)                                                        \
  do {                                                                         \
    ::lamina::rt::Status s_ = (expr);                                          \
    ASSERT_TRUE(s_.ok()) << s_.message();                                      \
  } while (0)
#define EXPECT_ERROR(expr, substring)                                          \
  do {                                                                         \
    ::lamina::rt::Status s_ = (expr);                                          \
    EXPECT_FALSE(s_.ok());                                                     \
    EXPECT_NE(s_.message().find(substring), std::string::npos)                 \
        << s_.message();                                                       \
  } while (0)

/// A fixture with a fresh folder `dir` under /tmp, removed with everything
/// in it after each test.
class TempDirTest : public ::testing::Test {
protected:
  void SetUp() override {
    char tmpl[] = "/tmp/lamina-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir = tmpl;
  }
  void TearDown() override {
    std::string cmd = "rm -rf '" + dir + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  std::string dir;
};

} // namespace lamina::rt::test

#endif // LAMINA_UNITTESTS_RUNTIME_TESTUTIL_H
