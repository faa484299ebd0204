//===- HostDevice.cpp - the CPU as a Device -------------------------------===//
//
// Memory is host memory (64-byte aligned: cache lines, AVX-512 loads), the
// entry runs the host kernels synchronously, copies are memcpy.
//
// The staged variant (LAMINA_STAGED_DEVICE=1) exercises the drivers' device
// paths without a GPU: it claims not to be the host, so every argument, the
// arena and the optimizer state get their own allocations that the driver
// must copy to and from; allocations start poisoned (0xFF bytes: NaN in
// every float type) and run() refuses arguments outside them. A host
// program run staged computes bit for bit what it computes unstaged.
//
//===----------------------------------------------------------------------===//

#include "lamina/Runtime/Device.h"

#include "lamina/Runtime/Kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

using namespace lamina::rt;

namespace {
class HostDevice : public Device {
public:
  std::string describe() const override { return "host"; }
  std::string kernels() const override {
    int n = getNumThreads();
    return describe() + ", " + std::to_string(n) +
           (n == 1 ? " thread" : " threads") + ", GEMM " + gemmKernels();
  }
  bool isHost() const override { return true; }
  Status setThreads(int threads) override {
    setNumThreads(threads);
    return Status::success();
  }
  Status allocate(size_t bytes, void **out) override {
    // aligned_alloc wants a multiple of the alignment, and at least one
    // block so the pointer is valid.
    size_t rounded = (bytes + 63) / 64 * 64;
    *out = std::aligned_alloc(64, rounded ? rounded : 64);
    if (!*out)
      return Status::error("cannot allocate " + std::to_string(bytes) +
                           " bytes of host memory");
    return Status::success();
  }
  void release(void *p) override { std::free(p); }
  Status upload(void *device, const void *host, size_t bytes) override {
    if (bytes)
      std::memmove(device, host, bytes);
    return Status::success();
  }
  Status download(void *host, const void *device, size_t bytes) override {
    if (bytes)
      std::memmove(host, device, bytes);
    return Status::success();
  }
  Status run(EntryFn entry, const Tensor *args, int,
             void *arena) override {
    entry(args, arena);
    return Status::success();
  }
  Status copy(void *dst, const void *src, size_t bytes) override {
    if (bytes)
      std::memmove(dst, src, bytes);
    return Status::success();
  }
  Status fillZero(void *dst, size_t bytes) override {
    if (bytes)
      std::memset(dst, 0, bytes);
    return Status::success();
  }
  Status accumulate(float *dst, const float *src, int64_t n,
                    float scale) override {
    if (scale == 1.0f)
      for (int64_t e = 0; e < n; ++e)
        dst[e] += src[e];
    else
      for (int64_t e = 0; e < n; ++e)
        dst[e] += scale * src[e];
    return Status::success();
  }
  Status accumulateMany(const GradientSum *sums, int count) override {
    for (int i = 0; i < count; ++i) {
      const GradientSum &s = sums[i];
      if (!s.intoZeros) {
        if (Status st = accumulate(s.dst, s.src, s.n, s.scale); !st.ok())
          return st;
        continue;
      }
      // accumulate's expressions on a zero dst (0 + x turns -0 into +0).
      if (s.scale == 1.0f)
        for (int64_t e = 0; e < s.n; ++e)
          s.dst[e] = 0.0f + s.src[e];
      else
        for (int64_t e = 0; e < s.n; ++e)
          s.dst[e] = 0.0f + s.scale * s.src[e];
    }
    return Status::success();
  }
  Status sumOfSquares(const Tensor *tensors, int n,
                      double *result) override {
    double sum = 0;
    for (int i = 0; i < n; ++i) {
      const float *g = static_cast<const float *>(tensors[i].data);
      for (int64_t e = 0, m = tensors[i].numElements(); e < m; ++e)
        sum += double(g[e]) * double(g[e]);
    }
    *result = sum;
    return Status::success();
  }
  Status clipByNorm(const Tensor *tensors, int n, double *sumSq,
                    double maxNorm) override {
    double norm = std::sqrt(*sumSq);
    *sumSq = norm;
    double coef = maxNorm / (norm + 1e-6);
    if (!std::isfinite(norm) || coef >= 1.0)
      return Status::success();
    const float c = float(coef);
    for (int i = 0; i < n; ++i) {
      float *g = static_cast<float *>(tensors[i].data);
      for (int64_t e = 0, m = tensors[i].numElements(); e < m; ++e)
        g[e] *= c;
    }
    return Status::success();
  }
  Status clipGradNorm(const Tensor *grads, int n, float maxNorm,
                      double &totalNorm) override {
    return lamina::rt::clipGradNorm(grads, n, maxNorm, totalNorm);
  }
  Status optimizerUpdate(const OptimizerConfig &cfg, float lr, int64_t step,
                         const Tensor &param, const Tensor &grad,
                         const Tensor *state, const Tensor *copy) override {
    if (Status s =
            lamina::rt::optimizerUpdate(cfg, lr, step, param, grad, state);
        !s.ok() || !copy)
      return s;
    return lamina::rt::cast(param, *copy);
  }
  Status cast(const Tensor &from, const Tensor &to) override {
    return lamina::rt::cast(from, to);
  }
};
class StagedDevice final : public HostDevice {
public:
  std::string describe() const override { return "host (staged)"; }
  bool isHost() const override { return false; }
  Status allocate(size_t bytes, void **out) override {
    if (Status s = HostDevice::allocate(bytes, out); !s.ok())
      return s;
    std::memset(*out, 0xFF, bytes);
    std::lock_guard<std::mutex> lock(mutex);
    live[static_cast<char *>(*out)] = bytes;
    return Status::success();
  }
  void release(void *p) override {
    {
      std::lock_guard<std::mutex> lock(mutex);
      live.erase(static_cast<char *>(p));
    }
    HostDevice::release(p);
  }
  Status run(EntryFn entry, const Tensor *args, int numArgs,
             void *arena) override {
    // (An empty arena is still one allocation.)
    if (!owns(arena, 1))
      return Status::error("staged device: the arena is not device memory");
    for (int i = 0; i < numArgs; ++i)
      if (!owns(args[i].data, args[i].byteSize()))
        return Status::error("staged device: argument " + std::to_string(i) +
                             " is not device memory");
    return HostDevice::run(entry, args, numArgs, arena);
  }

private:
  bool owns(const void *p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex);
    auto c = static_cast<const char *>(p);
    auto it = live.upper_bound(const_cast<char *>(c));
    if (it == live.begin())
      return false;
    --it;
    return c >= it->first && c + bytes <= it->first + std::max<size_t>(it->second, 1);
  }
  std::mutex mutex;
  std::map<char *, size_t> live;
};
} // namespace

Device &lamina::rt::hostDevice() {
  static HostDevice host;
  static StagedDevice staged;
  static const bool useStaged = [] {
    const char *v = std::getenv("LAMINA_STAGED_DEVICE");
    return v && std::strcmp(v, "1") == 0;
  }();
  return useStaged ? static_cast<Device &>(staged) : host;
}

Status lamina::rt::splatConstant(Device &device, const void *value, DType dtype,
                                 int64_t numElements, void **out) {
  size_t width = dtypeSize(dtype);
  size_t bytes = size_t(std::max<int64_t>(numElements, 1)) * width;
  uint64_t bits = 0;
  std::memcpy(&bits, value, width);
  struct Filled {
    void *data;
    size_t bytes;
  };
  // Keyed by device, type and the value's bits; the last entry of each list
  // is the largest buffer.
  static std::mutex mutex;
  static std::map<std::tuple<Device *, int, uint64_t>, std::vector<Filled>>
      cache;
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<Filled> &buffers = cache[{&device, int(dtype), bits}];
  if (!buffers.empty() && buffers.back().bytes >= bytes) {
    *out = buffers.back().data;
    return Status::success();
  }
  if (Status s = device.allocate(bytes, out); !s.ok())
    return s;
  std::unique_ptr<char[]> host;
  char *fill = static_cast<char *>(*out);
  if (!device.isHost()) {
    host.reset(new char[bytes]);
    fill = host.get();
  }
  if (bits == 0) {
    std::memset(fill, 0, bytes);
  } else {
    for (size_t off = 0; off < bytes; off += width)
      std::memcpy(fill + off, value, width);
  }
  if (host)
    if (Status s = device.upload(*out, host.get(), bytes); !s.ok()) {
      device.release(*out);
      return s;
    }
  buffers.push_back({*out, bytes});
  return Status::success();
}
