//===- CudaTestUtil.h - device buffers and comparisons for CUDA tests -----===//
//
// Shared by the lamina-cuda-tests sources: a device copy of a test Buf,
// random float buffers, closeness checks and the CudaKernel fixture (which
// skips when no CUDA device is visible).
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_UNITTESTS_RUNTIME_CUDA_CUDATESTUTIL_H
#define LAMINA_UNITTESTS_RUNTIME_CUDA_CUDATESTUTIL_H

#include "../RuntimeTestUtil.h"
#include "lamina/Runtime/Cuda/Kernels.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace lamina::rt::test {
namespace cu = lamina::rt::cuda;

/// A device copy of a Buf (same dtype and shape).
struct Dev {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  void *ptr = nullptr;
  size_t bytes = 0;

  explicit Dev(const Buf &b) : dtype(b.dtype), shape(b.shape) {
    bytes = b.bytes.size();
    EXPECT_EQ(cudaMalloc(&ptr, bytes ? bytes : 1), cudaSuccess);
    if (bytes) {
      EXPECT_EQ(cudaMemcpy(ptr, b.bytes.data(), bytes, cudaMemcpyHostToDevice),
                cudaSuccess);
    }
  }
  Dev(DType t, std::vector<int64_t> s) : Dev(Buf(t, std::move(s))) {}
  Dev(const Dev &) = delete;
  ~Dev() { cudaFree(ptr); }
  Tensor view() { return Tensor{ptr, dtype, int(shape.size()), shape.data()}; }
  Buf download() const {
    Buf b(dtype, shape);
    if (bytes) {
      EXPECT_EQ(cudaMemcpy(b.bytes.data(), ptr, bytes, cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
    return b;
  }
};

/// A device copy of a Buf one element past an allocation's (aligned)
/// start, so that no vector load or store fits it: tests of the kernels'
/// elementwise fallbacks.
struct MisalignedDev {
  Dev raw;
  std::vector<int64_t> shape;

  explicit MisalignedDev(const Buf &b)
      : raw(b.dtype, {b.count() + 1}), shape(b.shape) {
    if (!b.bytes.empty()) {
      EXPECT_EQ(cudaMemcpy(at(), b.bytes.data(), b.bytes.size(),
                           cudaMemcpyHostToDevice),
                cudaSuccess);
    }
  }
  MisalignedDev(DType t, std::vector<int64_t> s)
      : MisalignedDev(Buf(t, std::move(s))) {}
  char *at() const {
    return static_cast<char *>(raw.ptr) + dtypeSize(raw.dtype);
  }
  Tensor view() {
    return Tensor{at(), raw.dtype, int(shape.size()), shape.data()};
  }
  Buf download() const {
    Buf b(raw.dtype, shape);
    if (!b.bytes.empty()) {
      EXPECT_EQ(cudaMemcpy(b.bytes.data(), at(), b.bytes.size(),
                           cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
    return b;
  }
};

inline ::testing::AssertionResult allClose(Buf got, Buf want, double rel,
                                    double abs) {
  if (got.dtype != want.dtype || got.shape != want.shape)
    return ::testing::AssertionFailure() << "dtype or shape differs";
  for (int64_t i = 0; i < got.count(); ++i)
    if (auto r = close(valueAt(got, i), valueAt(want, i), rel, abs); !r)
      return r << " at element " << i;
  return ::testing::AssertionSuccess();
}

/// Tolerances: f32 results of the same formula agree to a few ulp plus
/// summation order; f16/bf16 results may round one ulp apart.
inline double relFor(DType t) { return t == DType::F32 ? 1e-5 : 1e-2; }
inline double absFor(DType t) { return t == DType::F32 ? 1e-6 : 1e-2; }

class CudaKernel : public ::testing::Test {
protected:
  void SetUp() override {
    if (cu::deviceCount() == 0)
      GTEST_SKIP() << "no CUDA device";
    // Non-blocking, as the runtime's compute stream (Device.cpp): work on
    // the legacy default stream is not ordered with it.
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
              cudaSuccess);
  }
  void TearDown() override {
    if (stream)
      cudaStreamDestroy(stream);
  }
  /// Waits for the stream; expects no device error.
  void sync() { EXPECT_OK(cu::deviceStatus(stream)); }
  cudaStream_t stream = nullptr;
};

inline const DType kFloatTypes[] = {DType::F32, DType::BF16, DType::F16};

} // namespace lamina::rt::test

#endif // LAMINA_UNITTESTS_RUNTIME_CUDA_CUDATESTUTIL_H
