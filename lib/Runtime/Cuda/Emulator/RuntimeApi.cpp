//===- RuntimeApi.cpp - the CUDA runtime calls, on the host ---------------===//
//
// The part of the CUDA runtime API that lib/Runtime/Cuda and its tests call,
// for lamina_cuda_emulated: device memory is host memory, work is queued on
// streams as Streams.h says (Streams.cpp), and every device reports sm_90
// limits, so kernels that opt into more than 48 KiB of shared memory do as
// on an H100 or H200. Linked instead of libcudart; nothing here talks to a
// GPU.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"
#include "Streams.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace lamina::cuda_emulator {
namespace {
std::mutex errorMutex;
cudaError_t pending = cudaSuccess;
/// Per host thread, as CUDA's current device is.
thread_local int currentDevice = 0;
constexpr int kOptinShared = 227 * 1024;
std::map<const void *, size_t> sharedLimits;

/// The devices each process sees: LAMINA_CUDA_EMULATOR_DEVICES, 8 by
/// default, so that ranks started on one machine each select the device of
/// their local rank as on an 8-GPU node. They are all this process's memory.
int deviceCount() {
  static int n = [] {
    const char *v = std::getenv("LAMINA_CUDA_EMULATOR_DEVICES");
    int k = v && *v ? std::atoi(v) : 8;
    return k > 0 ? k : 8;
  }();
  return n;
}

cudaError_t checkDevice(int d) {
  return d >= 0 && d < deviceCount() ? cudaSuccess : cudaErrorInvalidDevice;
}
} // namespace

int currentDeviceId() { return currentDevice; }

size_t sharedLimit(const void *kernel) {
  std::lock_guard<std::mutex> lock(errorMutex);
  auto it = sharedLimits.find(kernel);
  return it == sharedLimits.end() ? 48 * 1024 : it->second;
}

void setLaunchError(cudaError_t err, const std::string &) {
  std::lock_guard<std::mutex> lock(errorMutex);
  if (pending == cudaSuccess)
    pending = err;
}
} // namespace lamina::cuda_emulator

using namespace lamina::cuda_emulator;

extern "C" {
cudaError_t cudaMalloc(void **p, size_t size) {
  // Device allocations are 256-byte aligned; so are these (and a request
  // for 0 bytes still gets a pointer of its own, as on the device).
  *p = std::aligned_alloc(256, (size + 255) / 256 * 256 + 256);
  if (!*p)
    return cudaErrorMemoryAllocation;
  noteAllocation(*p, size);
  return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
  // cudaFree synchronises the device: queued work may still use `p`.
  bool ok = drainAll();
  if (p) {
    forgetAllocation(p);
    std::free(p);
  }
  return ok ? cudaSuccess : cudaErrorLaunchFailure;
}
cudaError_t cudaMallocAsync(void **p, size_t size, cudaStream_t s) {
  cudaError_t e = cudaMalloc(p, size);
  // In a capture the graph owns it, at the same address every launch.
  if (e == cudaSuccess)
    (void)captureAllocation(s, *p);
  return e;
}
cudaError_t cudaFreeAsync(void *p, cudaStream_t s) {
  if (capturedFree(s, p))
    return cudaSuccess; // the graph frees it when it is destroyed
  // Stream-ordered: freed when the stream gets there (hung: leaked).
  submit(s, [p] {
    forgetAllocation(p);
    std::free(p);
  });
  return cudaSuccess;
}
// The stream-ordered pool is the host heap here: its attributes are
// accepted and change nothing.
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int d) {
  if (cudaError_t e = checkDevice(d); e != cudaSuccess)
    return e;
  static int token;
  *pool = reinterpret_cast<cudaMemPool_t>(&token);
  return cudaSuccess;
}
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr,
                                    void *value) {
  return pool && value ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaMallocHost(void **p, size_t size) { return cudaMalloc(p, size); }
cudaError_t cudaFreeHost(void *p) { return cudaFree(p); }
cudaError_t cudaMemGetInfo(size_t *free, size_t *total) {
  *free = *total = size_t(16) << 30;
  return cudaSuccess;
}

// Copies and sets run in stream order (Streams.h). The synchronous calls
// use the legacy stream: cudaMemcpy returns once the copy is done,
// cudaMemset on device memory returns at once (CUDA's rules).
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n,
                            cudaMemcpyKind, cudaStream_t s) {
  if (!n)
    return cudaSuccess;
  // A graph cannot copy from or to pageable memory.
  if ((!isAllocated(src) || !isAllocated(dst)) && capturing(s))
    return invalidateCapture(s, "a copy from or to pageable host memory");
  if (!isAllocated(src)) {
    // Pageable host memory is read when the copy is issued.
    auto copy = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char *>(src),
        static_cast<const unsigned char *>(src) + n);
    submit(s, [dst, copy] { std::memcpy(dst, copy->data(), copy->size()); });
  } else {
    submit(s, [dst, src, n] { std::memmove(dst, src, n); });
  }
  // A copy to pageable host memory returns once it is done.
  return isAllocated(dst) ? cudaSuccess : cudaStreamSynchronize(s);
}
/// Device to device only (the runtime's packed attention), in stream order.
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src,
                              size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind, cudaStream_t s) {
  if (!width || !height)
    return cudaSuccess;
  if (width > dpitch || width > spitch)
    return cudaErrorInvalidPitchValue;
  if (!isAllocated(src) || !isAllocated(dst))
    return cudaErrorInvalidValue;
  submit(s, [=] {
    for (size_t r = 0; r < height; ++r)
      std::memmove(static_cast<char *>(dst) + r * dpitch,
                   static_cast<const char *>(src) + r * spitch, width);
  });
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t n,
                       cudaMemcpyKind kind) {
  if (cudaError_t e = cudaMemcpyAsync(dst, src, n, kind, nullptr);
      e != cudaSuccess)
    return e;
  return cudaStreamSynchronize(nullptr);
}
cudaError_t cudaMemsetAsync(void *p, int value, size_t n, cudaStream_t s) {
  if (n)
    submit(s, [p, value, n] { std::memset(p, value, n); });
  return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int value, size_t n) {
  cudaError_t e = cudaMemsetAsync(p, value, n, nullptr);
  return e == cudaSuccess && !isAllocated(p) ? cudaStreamSynchronize(nullptr)
                                             : e;
}

cudaError_t cudaGetLastError(void) {
  std::lock_guard<std::mutex> lock(errorMutex);
  cudaError_t e = pending;
  pending = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) {
  std::lock_guard<std::mutex> lock(errorMutex);
  return pending;
}
const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "cudaSuccess";
  case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
  case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
  case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
  case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
  case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  case cudaErrorStreamCaptureUnsupported:
    return "cudaErrorStreamCaptureUnsupported";
  case cudaErrorStreamCaptureInvalidated:
    return "cudaErrorStreamCaptureInvalidated";
  case cudaErrorStreamCaptureIsolation:
    return "cudaErrorStreamCaptureIsolation";
  case cudaErrorIllegalState: return "cudaErrorIllegalState";
  default: return "cudaErrorUnknown";
  }
}
const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "no error";
  case cudaErrorLaunchFailure:
    return "unspecified launch failure (the emulator printed why)";
  default: return cudaGetErrorName(e);
  }
}

cudaError_t cudaGetDeviceCount(int *n) {
  *n = deviceCount();
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int *d) {
  *d = currentDevice;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  if (cudaError_t e = checkDevice(d); e != cudaSuccess)
    return e;
  currentDevice = d;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int d) {
  if (cudaError_t e = checkDevice(d); e != cudaSuccess)
    return e;
  std::memset(prop, 0, sizeof(*prop));
  std::strncpy(prop->name, "Lamina CUDA emulator (sm_90 limits)",
               sizeof(prop->name) - 1);
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 1;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->sharedMemPerBlockOptin = kOptinShared;
  prop->totalGlobalMem = size_t(16) << 30;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int d) {
  if (cudaError_t e = checkDevice(d); e != cudaSuccess)
    return e;
  switch (attr) {
  case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = kOptinShared; break;
  case cudaDevAttrMaxSharedMemoryPerBlock: *value = 48 * 1024; break;
  case cudaDevAttrMultiProcessorCount: *value = 1; break;
  case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
  case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
  case cudaDevAttrWarpSize: *value = 32; break;
  case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
  default: return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void *kernel, cudaFuncAttribute attr,
                                 int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || value > kOptinShared)
      return cudaErrorInvalidValue;
    std::lock_guard<std::mutex> lock(errorMutex);
    sharedLimits[kernel] = size_t(value);
  }
  return cudaSuccess;
}
} // extern "C"
