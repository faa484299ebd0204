//===- ExpertParallel.cpp - graph.moe_exchange over the group (GPU) -------===//
//
// lib/Runtime/ExpertParallel.cpp on device memory: the same checks and
// byte counts; the group orders its transfers on the compute stream.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include "lamina/Runtime/Cuda/ExpertParallel.h"

#include <vector>

using namespace lamina::rt;
using lamina::rt::cuda::detail::cudaCheck;
namespace shared = lamina::rt::ep::detail;

Status lamina::rt::cuda::ep::exchange(const Tensor &rows, const Tensor &counts,
                                      const Tensor &result,
                                      const Tensor &received,
                                      cudaStream_t stream) {
  const char *op = "moe_exchange";
  ExpertParallelGroup *g;
  if (Status s = shared::begin(rows, counts, result, received, g); !s.ok())
    return s;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) == cudaSuccess &&
      capture != cudaStreamCaptureStatusNone)
    return Status::error("moe_exchange: sizes its transfers on the host, "
                         "which a CUDA graph cannot capture (unset "
                         "LAMINA_CUDA_GRAPHS)");
  const std::vector<int64_t> countBytes = shared::countBytes(counts);
  if (Status s = g->allToAll(counts.data, countBytes, received.data, countBytes,
                             size_t(counts.shape[1]) * sizeof(int64_t));
      !s.ok())
    return s;
  // Both sides' counts on the host: the rows' sizes.
  std::vector<int64_t> sent(size_t(counts.numElements())),
      got(size_t(received.numElements()));
  if (Status s = cudaCheck(op, cudaMemcpyAsync(sent.data(), counts.data,
                                               counts.byteSize(),
                                               cudaMemcpyDeviceToHost, stream));
      !s.ok())
    return s;
  if (Status s = cudaCheck(op, cudaMemcpyAsync(got.data(), received.data,
                                               received.byteSize(),
                                               cudaMemcpyDeviceToHost, stream));
      !s.ok())
    return s;
  if (Status s = cudaCheck(op, cudaStreamSynchronize(stream)); !s.ok())
    return s;
  std::vector<int64_t> sendBytes, recvBytes;
  size_t blockBytes;
  if (Status s =
          shared::rowBytes(rows, sent.data(), got.data(), g->size(),
                           counts.shape[1], sendBytes, recvBytes, blockBytes);
      !s.ok())
    return s;
  if (Status s = cudaCheck(
          op, cudaMemsetAsync(result.data, 0, result.byteSize(), stream));
      !s.ok())
    return s;
  return g->allToAll(rows.data, sendBytes, result.data, recvBytes, blockBytes);
}
