//===- EmulatorTest.cpp - the kernel emulator's own semantics -------------===//
//
// The scheduler's barriers, shuffles, launch checks and WMMA against what
// the CUDA programming guide specifies, with small kernels written here
// (DeviceCode.h gives them CUDA's names, as it does lib/Runtime/Cuda's).
//
//===----------------------------------------------------------------------===//

#include "DeviceCode.h"
#include "mma.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace emu = lamina::cuda_emulator;

namespace {
void run(dim3 grid, dim3 block, size_t shared,
         const std::function<void()> &body, const void *kernel = nullptr) {
  emu::launch(kernel, grid, block, shared, body);
}

TEST(CudaEmulator, ShufflesReadTheNamedLane) {
  std::vector<float> xorOut(64), downOut(64), bcast(64);
  run(1, 64, 0, [&] {
    int t = threadIdx.x;
    float v = float(t);
    xorOut[t] = __shfl_xor_sync(0xffffffffu, v, 1);
    downOut[t] = __shfl_down_sync(0xffffffffu, v, 4);
    bcast[t] = __shfl_sync(0xffffffffu, v, 3);
  });
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (int t = 0; t < 64; ++t) {
    EXPECT_EQ(xorOut[t], float(t ^ 1));
    // Past the warp's last lane the caller keeps its own value.
    EXPECT_EQ(downOut[t], float(t % 32 + 4 < 32 ? t + 4 : t));
    EXPECT_EQ(bcast[t], float(t / 32 * 32 + 3));
  }
}

TEST(CudaEmulator, ShuffleFromAnExitedLaneIsPoisoned) {
  std::vector<float> out(32, 0.0f);
  run(1, 32, 0, [&] {
    int t = threadIdx.x;
    if (t >= 16)
      return;
    out[t] = __shfl_xor_sync(0xffffffffu, float(t), 16);
  });
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (int t = 0; t < 16; ++t)
    EXPECT_TRUE(std::isnan(out[t])) << t;
}

TEST(CudaEmulator, BarriersOrderSharedMemory) {
  // Each thread writes its slot, then reads its neighbour's: right only if
  // __syncthreads waits for every thread (two warps, greedy order).
  std::vector<int> out(64);
  run(2, 64, 0, [&] {
    __shared__ int slots[64];
    int t = threadIdx.x;
    slots[t] = t + 100 * int(blockIdx.x);
    __syncthreads();
    out[t] = slots[(t + 33) % 64];
  });
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (int t = 0; t < 64; ++t)
    EXPECT_EQ(out[t], (t + 33) % 64 + 100); // the last block's
}

TEST(CudaEmulator, ADivergentBarrierIsADeadlock) {
  run(1, 32, 0, [&] {
    if (threadIdx.x < 16)
      __syncthreads();
    else
      __syncwarp();
  });
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess); // read once
}

TEST(CudaEmulator, ExitedThreadsDoNotHoldBarriersBack) {
  int after = 0;
  run(1, 64, 0, [&] {
    if (threadIdx.x >= 40)
      return;
    __syncthreads();
    __syncwarp();
    ++after;
  });
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(after, 40);
}

TEST(CudaEmulator, DynamicSharedMemoryNeedsTheOptIn) {
  static int kernelTag;
  const void *k = &kernelTag;
  run(1, 32, 64 * 1024, [] {}, k);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  ASSERT_EQ(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 64 * 1024),
            cudaSuccess);
  std::vector<float> first(1);
  run(1, 32, 64 * 1024, [&] {
    float *smem = static_cast<float *>(emu::dynamicShared());
    if (threadIdx.x == 0)
      first[0] = smem[0]; // never written: NaN, not zero
  }, k);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_TRUE(std::isnan(first[0]));
  EXPECT_EQ(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 228 * 1024),
            cudaErrorInvalidValue);
}

TEST(CudaEmulator, BadLaunchDimensionsFail) {
  run(1, 2048, 0, [] {});
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
}

TEST(CudaEmulator, WmmaComputesTheProduct) {
  namespace wmma = nvcuda::wmma;
  std::vector<__half> a(256), b(256);
  std::vector<float> c(256), d(256);
  for (int i = 0; i < 256; ++i) {
    a[i] = __float2half(float(i % 7) - 3);
    b[i] = __float2half(float(i % 5) - 2);
    c[i] = float(i % 3);
  }
  run(1, 32, 0, [&] {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(fa, a.data(), 16);
    wmma::load_matrix_sync(fb, b.data(), 16);
    wmma::load_matrix_sync(acc, c.data(), 16, wmma::mem_row_major);
    wmma::mma_sync(acc, fa, fb, acc);
    wmma::store_matrix_sync(d.data(), acc, 16, wmma::mem_row_major);
  });
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      float want = c[i * 16 + j];
      for (int k = 0; k < 16; ++k) // b col-major: b(k, j) at j * 16 + k
        want += __half2float(a[i * 16 + k]) * __half2float(b[j * 16 + k]);
      EXPECT_EQ(d[i * 16 + j], want) << i << "," << j;
    }
}
} // namespace
