//===- Device.h - where a generated program's memory and kernels live -*- C++ -*-===//
//
// The program drivers (programMain, trainMain) are written once against this
// interface: the host backend's device is the CPU (memory is host memory,
// the entry runs the kernels of Kernels.h), the CUDA backend's is a GPU
// (lamina::rt::cuda::device(), lib/Runtime/Cuda/Device.cpp: device memory,
// the entry enqueues the kernels of Cuda/Kernels.h on one stream). Reading
// files, checking inputs and weights, sampling batches, checkpoints and
// exports stay on the host and are shared; only what touches the arena,
// the parameters and the optimizer state goes through the device.
//
// No MLIR dependency; part of lamina_runtime.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_DEVICE_H
#define LAMINA_RUNTIME_DEVICE_H

#include "lamina/Runtime/Optimizer.h"
#include "lamina/Runtime/Program.h"
#include "lamina/Runtime/Status.h"
#include "lamina/Runtime/Tensor.h"

#include <stddef.h>
#include <stdint.h>
#include <string>
#include <utility>

namespace lamina::rt {

class Device {
public:
  virtual ~Device() = default;

  /// "host" or "cuda:0 (NVIDIA H200)", for messages.
  virtual std::string describe() const = 0;
  /// What runs the kernels (the programs' --kernels): the device, and on
  /// the host its threads and the GEMM kernel family picked for this CPU.
  virtual std::string kernels() const { return describe(); }
  /// True when device memory is host memory: drivers then use host buffers
  /// in place instead of copying them.
  virtual bool isHost() const = 0;
  /// Kernel threads for the host; an error on devices that have no such
  /// setting (so `--threads` is refused rather than ignored).
  virtual Status setThreads(int threads) = 0;

  /// At least `bytes` bytes (one 64-byte block when 0), 64-byte aligned,
  /// contents undefined. An error names the size.
  virtual Status allocate(size_t bytes, void **out) = 0;
  virtual void release(void *p) = 0;
  /// Copies between host memory and memory from allocate(); both wait for
  /// the work enqueued before them, so the data is current.
  virtual Status upload(void *device, const void *host, size_t bytes) = 0;
  virtual Status download(void *host, const void *device, size_t bytes) = 0;

  /// Runs a generated entry (its args and arena in device memory) and waits
  /// for it. Errors the kernels report while running -- an out-of-range
  /// index or label -- come back here; errors found when a kernel is called
  /// end the process through checkKernel, as on the host.
  virtual Status run(EntryFn entry, const Tensor *args, int numArgs,
                     void *arena) = 0;

  /// Enqueues a generated entry without waiting for it: errors it reports
  /// surface at the next run() or synchronize(). The distributed executor
  /// uses it so that compute, copies and communication queue up without a
  /// host synchronisation per function. Default: run().
  virtual Status launch(EntryFn entry, const Tensor *args, int numArgs,
                        void *arena) {
    return run(entry, args, numArgs, arena);
  }
  /// Waits for the work enqueued so far and reports the kernels' errors.
  virtual Status synchronize() { return Status::success(); }

  /// Device-to-device copy and zero fill, ordered after the work enqueued
  /// before them; neither waits on the host.
  virtual Status copy(void *dst, const void *src, size_t bytes) = 0;
  virtual Status fillZero(void *dst, size_t bytes) = 0;
  /// dst[i] += scale * src[i] for n f32 elements (gradient accumulation;
  /// scale 1 is a plain sum).
  virtual Status accumulate(float *dst, const float *src, int64_t n,
                            float scale = 1.0f) = 0;
  /// accumulate for each of `count` sums (GradientSum, Optimizer.h), those
  /// marked intoZeros as onto a zero-filled buffer. Their buffers do not
  /// overlap, so a device may take them in fewer launches (CUDA: up to 64
  /// a launch) and skip the fills, with the same bits. Default: fillZero
  /// and accumulate, one sum at a time.
  virtual Status accumulateMany(const GradientSum *sums, int count) {
    for (int i = 0; i < count; ++i) {
      const GradientSum &s = sums[i];
      if (s.intoZeros)
        if (Status st = fillZero(s.dst, size_t(s.n) * sizeof(float)); !st.ok())
          return st;
      if (Status st = accumulate(s.dst, s.src, s.n, s.scale); !st.ok())
        return st;
    }
    return Status::success();
  }
  /// The sum of the squares of every element of the n f32 tensors, in
  /// double, into *deviceResult (device memory; the host's order:
  /// tensors in turn, elements in order).
  virtual Status sumOfSquares(const Tensor *tensors, int n,
                              double *deviceResult) = 0;
  /// clipGradNorm's scaling with the norm's square in device memory (a sum
  /// of squares, all-reduced across ranks): *deviceSumSq becomes the norm
  /// sqrt(sum), and with c = maxNorm / (norm + 1e-6) every element is
  /// multiplied by float(c) when c < 1.
  virtual Status clipByNorm(const Tensor *tensors, int n, double *deviceSumSq,
                            double maxNorm) = 0;

  /// clipGradNorm (Optimizer.h) over gradients in device memory.
  virtual Status clipGradNorm(const Tensor *grads, int n, float maxNorm,
                              double &totalNorm) = 0;
  /// One optimizer update of one f32 parameter in device memory:
  /// optimizerUpdate (Optimizer.h) with `state` its numSlots(cfg) buffers.
  /// With `copy` (an f16/bf16 tensor of the parameter's shape, or null),
  /// the updated parameter is also stored there, rounded as cast() rounds
  /// (the low-precision copy a mixed-precision step reads: ArgKind::
  /// ParamCopy).
  virtual Status optimizerUpdate(const OptimizerConfig &cfg, float lr,
                                 int64_t step, const Tensor &param,
                                 const Tensor &grad, const Tensor *state,
                                 const Tensor *copy) = 0;
  /// optimizerUpdate for each of n parameters (one step: the same lr and
  /// step count). The updates are independent, so a device may batch them
  /// into fewer launches (CUDA: one AdamW kernel over up to 64 tensors)
  /// with the same result; every update is checked before any runs.
  /// Default: one optimizerUpdate per parameter, in order.
  virtual Status optimizerUpdates(float lr, int64_t step,
                                  const ParamUpdate *updates, int n) {
    for (int i = 0; i < n; ++i) {
      const ParamUpdate &u = updates[i];
      if (Status s = optimizerUpdate(*u.cfg, lr, step, u.param, u.grad, u.state,
                                     u.copy);
          !s.ok())
        return s;
    }
    return Status::success();
  }
  /// `to` = `from` converted to `to`'s element type (same shape), in device
  /// memory, ordered after the work enqueued before it.
  virtual Status cast(const Tensor &from, const Tensor &to) = 0;
};

/// The CPU: host memory, the host kernels. With LAMINA_STAGED_DEVICE=1 in
/// the environment, a checking variant that makes the drivers take their
/// device paths: separate, poisoned allocations for everything the entry
/// reads (lib/Runtime/HostDevice.cpp; docs/cuda.md).
Device &hostDevice();

/// A program constant whose `numElements` elements all equal the one at
/// `value` (dtypeSize(dtype) bytes; i1 is one byte), in `device`'s memory.
/// Generated programs emit large splats (the zeros a scatter-add or a pad
/// starts from, the ones of a causal mask) this way rather than as array
/// literals, which made the 1B GPT's C++ 2.5 GB. All splats of one value and
/// type share one buffer (kernels never write their inputs), filled on first
/// use and kept for the life of the process; a larger request allocates a
/// larger buffer (the smaller stays: earlier views may still be in use).
Status splatConstant(Device &device, const void *value, DType dtype,
                     int64_t numElements, void **out);

/// A generated program's view of a splat constant of this shape on
/// `device` (gen::splat); a failure ends the process as a kernel's does.
inline Tensor splatView(Device &device, const void *value, DType dtype,
                        int rank, const int64_t *shape) {
  void *data = nullptr;
  checkKernel(splatConstant(device, value, dtype, numElements(shape, rank),
                            &data),
              "a constant of the program");
  return Tensor{data, dtype, rank, shape};
}

/// Memory from a Device, released when the buffer dies.
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  DeviceBuffer(DeviceBuffer &&o) noexcept { *this = std::move(o); }
  DeviceBuffer &operator=(DeviceBuffer &&o) noexcept {
    if (this == &o) // a self-move keeps the buffer (it may be in flight)
      return *this;
    reset();
    device = o.device, ptr = o.ptr, size = o.size;
    o.device = nullptr, o.ptr = nullptr, o.size = 0;
    return *this;
  }
  ~DeviceBuffer() { reset(); }

  Status allocate(Device &d, size_t bytes) {
    reset();
    if (Status s = d.allocate(bytes, &ptr); !s.ok())
      return s;
    device = &d, size = bytes;
    return Status::success();
  }
  /// A device copy of `bytes` host bytes.
  Status upload(Device &d, const void *host, size_t bytes) {
    if (Status s = allocate(d, bytes); !s.ok())
      return s;
    return d.upload(ptr, host, bytes);
  }
  void reset() {
    if (device && ptr)
      device->release(ptr);
    device = nullptr, ptr = nullptr, size = 0;
  }
  void *data() const { return ptr; }
  size_t bytes() const { return size; }

private:
  Device *device = nullptr;
  void *ptr = nullptr;
  size_t size = 0;
};

} // namespace lamina::rt

#endif // LAMINA_RUNTIME_DEVICE_H
