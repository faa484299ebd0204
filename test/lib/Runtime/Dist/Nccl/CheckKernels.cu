//===- CheckKernels.cu - the dummy compute kernel of lamina-nccl-check ----===//
//
// A kernel of adjustable length standing in for compute while an all-reduce
// runs on a communication stream. Many short blocks (one element per
// thread), so the block scheduler can interleave the higher-priority
// communication stream's blocks, as it would with real compute kernels.
//
//===----------------------------------------------------------------------===//

#include "CheckKernels.h"

#include "Common.h" // lib/Runtime/Cuda

namespace {

__global__ void spinKernel(float *data, size_t n, int iterations) {
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  float x = data[i];
  for (int k = 0; k < iterations; ++k)
    x = x * 0.999999f + 1e-6f;
  data[i] = x;
}

} // namespace

cudaError_t lamina::rt::dist::nccl::check::launchSpin(float *data, size_t n,
                                                      int iterations,
                                                      cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  const unsigned threads = 256;
  size_t blocks = (n + threads - 1) / threads;
  if (blocks > 0x7fffffffu)
    return cudaErrorInvalidValue;
  lamina::rt::cuda::detail::launchKernel(spinKernel, dim3(unsigned(blocks)),
                                         dim3(threads), 0, stream, data, n,
                                         iterations);
  return cudaGetLastError();
}
