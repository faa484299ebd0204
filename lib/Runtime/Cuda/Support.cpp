//===- Support.cpp - device count, the data-error slot, messages ----------===//

#include "Common.h"

#include <cstdlib>
#include <mutex>
#include <string>

using namespace lamina::rt;
using namespace lamina::rt::cuda;
using namespace lamina::rt::cuda::detail;

AttentionPath lamina::rt::cuda::detail::attentionPath() {
  static const AttentionPath path = [] {
    const char *e = std::getenv("LAMINA_CUDA_ATTENTION");
    std::string v = e ? e : "";
    return v == "cudnn"         ? AttentionPath::Cudnn
           : v == "tensor-core" ? AttentionPath::TensorCore
           : v == "generic"     ? AttentionPath::Generic
                                : AttentionPath::Default;
  }();
  return path;
}

bool lamina::rt::cuda::detail::rowNormKernels() {
  const char *e = std::getenv("LAMINA_CUDA_NORM");
  return e && std::string(e) == "rows";
}

int lamina::rt::cuda::deviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    // No driver, no device, or a driver older than the runtime: none usable.
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

Status lamina::rt::cuda::detail::cudaCheck(const char *op, cudaError_t err) {
  if (err == cudaSuccess)
    return Status::success();
  (void)cudaGetLastError(); // clear a non-sticky error
  return Status::error(std::string(op) + ": CUDA error: " +
                       cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

Status lamina::rt::cuda::detail::unsupported(const char *op, const Tensor &t) {
  return Status::error(std::string(op) + ": " + describe(t) +
                       " is not supported on the CUDA backend yet (f32, f16, "
                       "bf16 only)");
}

ErrorSlot *lamina::rt::cuda::detail::errorSlot() {
  static ErrorSlot *slot = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void *p = nullptr;
    // Cleared by a synchronous copy: done before any kernel may write it
    // (cudaMemset would be queued on the legacy stream, which the
    // non-blocking compute stream does not wait for).
    ErrorSlot zero{};
    if (cudaMalloc(&p, sizeof(ErrorSlot)) == cudaSuccess &&
        cudaMemcpy(p, &zero, sizeof zero, cudaMemcpyHostToDevice) ==
            cudaSuccess)
      slot = static_cast<ErrorSlot *>(p);
    else
      (void)cudaGetLastError();
  });
  return slot;
}

Status lamina::rt::cuda::deviceStatus(cudaStream_t stream) {
  if (Status s = cudaCheck("deviceStatus", cudaStreamSynchronize(stream));
      !s.ok())
    return s;
  ErrorSlot *slot = errorSlot();
  if (!slot)
    return Status::error("deviceStatus: cannot allocate the error slot");
  ErrorSlot host;
  if (Status s = cudaCheck("deviceStatus", cudaMemcpy(&host, slot, sizeof host,
                                                      cudaMemcpyDeviceToHost));
      !s.ok())
    return s;
  if (host.code == int(DataError::None))
    return Status::success();
  // Reset in the stream's order, so an error of work issued after this
  // call is not wiped by a reset that runs late.
  (void)cudaMemsetAsync(slot, 0, sizeof(ErrorSlot), stream);
  std::string at = " at position " + std::to_string(host.position);
  std::string range = " is out of range for a dim of size " +
                      std::to_string(host.bound);
  switch (DataError(host.code)) {
  case DataError::GatherIndex:
    return Status::error("gather: index " + std::to_string(host.value) + at +
                         range);
  case DataError::GatherNDIndex:
    return Status::error("gather_nd: index " + std::to_string(host.value) +
                         at + range);
  case DataError::ScatterIndex:
    return Status::error("scatter_nd: index " + std::to_string(host.value) +
                         at + range);
  case DataError::Label:
    return Status::error("softmax_cross_entropy: label " +
                         std::to_string(host.value) + at +
                         " is out of range for " + std::to_string(host.bound) +
                         " classes");
  default:
    return Status::error("deviceStatus: unknown device error " +
                         std::to_string(host.code));
  }
}
