//===- Emulator.h - the CUDA kernels compiled for the CPU ---------*- C++ -*-===//
//
// The kernel emulator's interface (docs/cuda.md, "The kernel emulator"),
// used by DeviceCode.h, which lamina_cuda_emulated force-includes into
// lib/Runtime/Cuda's .cu files when the host C++ compiler builds them.
// Every CUDA thread of a block runs as a fiber on one OS thread;
// __syncthreads, __syncwarp, the warp shuffles and the WMMA operations are
// the points where a fiber yields, so the kernels' indexing, tiling and
// synchronisation run unchanged and a missing barrier shows up as a wrong
// result. What it does not model: timing, the device's approximate math
// (__expf is expf), the memory model beyond barriers, and cuBLASLt's own
// kernels (CublasLt.cpp is a reference loop).
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_CUDA_EMULATOR_EMULATOR_H
#define LAMINA_LIB_RUNTIME_CUDA_EMULATOR_EMULATOR_H

#include "Streams.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

namespace lamina::cuda_emulator {

/// The running CUDA thread's coordinates.
struct ThreadCoords {
  uint3 threadIdx, blockIdx;
  dim3 blockDim, gridDim;
};
const ThreadCoords &self();

/// Runs body once per thread of every block of `grid` (blocks one after the
/// other), with `sharedBytes` of dynamic shared memory a block. A deadlock
/// (a barrier some live thread never reaches) or a mismatched warp mask
/// makes the launch fail: cudaGetLastError then reports it, and the reason
/// is printed.
/// `kernel` names the launch, for the dynamic shared memory it may use
/// (48 KiB, or what cudaFuncSetAttribute allowed it).
void launch(const void *kernel, dim3 grid, dim3 block, size_t sharedBytes,
            const std::function<void()> &body);
/// launch's checks of the launch's shape, when it is issued (as CUDA
/// reports them): false, with the error for cudaGetLastError, if it fails.
bool checkLaunch(const void *kernel, dim3 grid, dim3 block, size_t sharedBytes);

/// The block's dynamic shared memory (extern __shared__).
void *dynamicShared();

void syncThreads();
void syncWarp(unsigned mask = 0xffffffffu);
/// Exchanges `bytes` (<= 8) of `value` among the lanes of `mask`: returns
/// lane `source(lane)`'s value, or a poisoned value (all bits set) when that
/// lane has exited, does not exist or is outside the mask.
uint64_t exchange(unsigned mask, uint64_t value, int source);
/// The running thread's lane (linear thread index mod 32).
int lane();

template <typename T> T shuffle(unsigned mask, T v, int source) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  uint64_t raw = 0;
  std::memcpy(&raw, &v, sizeof(T));
  raw = exchange(mask, raw, source);
  T out;
  std::memcpy(&out, &raw, sizeof(T));
  return out;
}
template <typename T> T shflXor(unsigned mask, T v, int laneMask,
                                int width = 32) {
  int l = lane();
  int src = l ^ laneMask;
  if ((src & ~(width - 1)) != (l & ~(width - 1)))
    src = l;
  return shuffle(mask, v, src);
}
template <typename T> T shfl(unsigned mask, T v, int srcLane, int width = 32) {
  int l = lane();
  return shuffle(mask, v, (l & ~(width - 1)) + (srcLane & (width - 1)));
}
template <typename T> T shflDown(unsigned mask, T v, unsigned delta,
                                 int width = 32) {
  int l = lane();
  int src = l + int(delta);
  if ((src & ~(width - 1)) != (l & ~(width - 1)))
    src = l;
  return shuffle(mask, v, src);
}
template <typename T> T shflUp(unsigned mask, T v, unsigned delta,
                               int width = 32) {
  int l = lane();
  int src = l - int(delta);
  if (src < (l & ~(width - 1)))
    src = l;
  return shuffle(mask, v, src);
}

// Atomics: fibers switch only at barriers, so a plain read-modify-write is
// atomic here.
template <typename T> T atomicAddImpl(T *p, T v) {
  T old = *p;
  *p = old + v;
  return old;
}
template <typename T> T atomicMaxImpl(T *p, T v) {
  T old = *p;
  *p = old < v ? v : old;
  return old;
}
template <typename T> T atomicMinImpl(T *p, T v) {
  T old = *p;
  *p = v < old ? v : old;
  return old;
}
template <typename T> T atomicCASImpl(T *p, T compare, T v) {
  T old = *p;
  if (old == compare)
    *p = v;
  return old;
}
template <typename T> T atomicExchImpl(T *p, T v) {
  T old = *p;
  *p = v;
  return old;
}

inline float uintAsFloat(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline unsigned floatAsUint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline unsigned short halfAsUshort(__half h) {
  unsigned short u;
  std::memcpy(&u, &h, 2);
  return u;
}
inline unsigned short bf16AsUshort(__nv_bfloat16 h) {
  unsigned short u;
  std::memcpy(&u, &h, 2);
  return u;
}
} // namespace lamina::cuda_emulator

#endif // LAMINA_LIB_RUNTIME_CUDA_EMULATOR_EMULATOR_H
