//===- Device.cpp - the GPU as a Device for generated programs ------------===//
//
// One device per process (LOCAL_RANK picks it under launchers that start one
// process per GPU, else device 0), one non-blocking compute stream that the
// entry's kernels, the copies and the optimizer are all enqueued on, so
// their order is the stream's. Host code synchronises only where it reads a
// result: after run() (which also collects the kernels' data errors), after
// a download, and in clipGradNorm (the norm decides the scale).
//
// With LAMINA_CUDA_GRAPHS=1, run() replays each entry as a CUDA graph: the
// first call with given arguments and arena runs it as usual (plans,
// workspaces and constants are made then), the second captures its launches
// on the compute stream into a graph, and every call from then on launches
// the graph, one host call instead of one per kernel (docs/cuda.md, "CUDA
// graphs"). The kernels and their order are the same, so are the results.
// LAMINA_CUDA_TIMING=1 prints each entry's GPU time per run at exit
// (EntryTiming).
//
//===----------------------------------------------------------------------===//

#include "Common.h"
#include "lamina/Runtime/Cuda/Generated.h"
#include "lamina/Runtime/Cuda/Optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

using namespace lamina::rt;
using namespace lamina::rt::cuda;
using lamina::rt::cuda::detail::cudaCheck;

namespace {

cudaStream_t runningStream = nullptr;

/// Whether the variable is set to something other than "" or "0".
bool envFlag(const char *name) {
  const char *v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

bool graphsRequested() {
  static bool on = envFlag("LAMINA_CUDA_GRAPHS");
  return on;
}

/// What a captured entry was captured with: the same entry on the same
/// argument buffers and arena replays the same graph.
struct GraphKey {
  EntryFn entry;
  void *arena;
  std::vector<void *> args;
  bool operator<(const GraphKey &o) const {
    return std::tie(entry, arena, args) < std::tie(o.entry, o.arena, o.args);
  }
};
/// LAMINA_CUDA_TIMING=1: the GPU time of each run(), events recorded on
/// the stream around the entry's work, per entry, printed at exit. Set
/// against a profile's sum of kernel times it says whether a step's
/// missing time is between the entry's kernels (what CUDA graphs remove)
/// or outside the entry (the optimizer, the copies, the host).
struct EntryTiming {
  bool on = envFlag("LAMINA_CUDA_TIMING");
  cudaEvent_t start = nullptr, stop = nullptr;
  std::vector<std::pair<EntryFn, std::vector<float>>> runs; // first-run order

  Status begin(cudaStream_t stream) {
    const char *what = "LAMINA_CUDA_TIMING";
    if (!start) {
      if (Status s = cudaCheck(what, cudaEventCreate(&start)); !s.ok())
        return s;
      if (Status s = cudaCheck(what, cudaEventCreate(&stop)); !s.ok())
        return s;
      std::atexit(report);
    }
    return cudaCheck(what, cudaEventRecord(start, stream));
  }
  Status end(cudaStream_t stream) {
    return cudaCheck("LAMINA_CUDA_TIMING", cudaEventRecord(stop, stream));
  }
  /// After the stream was synchronised.
  void collect(EntryFn entry) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, start, stop) != cudaSuccess) {
      (void)cudaGetLastError();
      return;
    }
    auto it = std::find_if(runs.begin(), runs.end(),
                           [&](const auto &r) { return r.first == entry; });
    if (it == runs.end())
      it = runs.insert(runs.end(), {entry, {}});
    it->second.push_back(ms);
  }
  /// One line per entry: the first two runs (plans, workspaces, a graph's
  /// capture) apart, then the mean, min and max of the rest.
  static void report();
};

struct Replay {
  bool warm = false;              ///< ran once without capture
  cudaGraphExec_t exec = nullptr; ///< captured
};

class CudaDevice final : public Device {
public:
  std::string describe() const override {
    return "cuda:" + std::to_string(ordinal) + (name.empty() ? "" : " (" + name + ")");
  }
  bool isHost() const override { return false; }
  Status setThreads(int) override {
    return Status::error("--threads sets host kernel threads; this program "
                         "runs on a GPU");
  }

  Status allocate(size_t bytes, void **out) override {
    if (Status s = init(); !s.ok())
      return s;
    // cudaMalloc is 256-byte aligned, more than the 64 promised.
    cudaError_t err = cudaMalloc(out, bytes ? bytes : 64);
    if (err != cudaSuccess) {
      *out = nullptr;
      return Status::error("cannot allocate " + std::to_string(bytes) +
                           " bytes on " + describe() + ": " +
                           cudaGetErrorString(err));
    }
    return Status::success();
  }
  void release(void *p) override {
    if (p)
      cudaFree(p);
  }
  Status upload(void *device, const void *host, size_t bytes) override {
    return copy(device, host, bytes, cudaMemcpyHostToDevice);
  }
  Status download(void *host, const void *device, size_t bytes) override {
    return copy(host, device, bytes, cudaMemcpyDeviceToHost);
  }

  Status run(EntryFn entry, const Tensor *args, int numArgs,
             void *arena) override {
    if (Status s = init(); !s.ok())
      return s;
    if (timing.on)
      if (Status s = timing.begin(stream); !s.ok())
        return s;
    if (Status s = enqueue(entry, args, numArgs, arena); !s.ok())
      return s;
    if (timing.on)
      if (Status s = timing.end(stream); !s.ok())
        return s;
    Status status = deviceStatus(stream);
    if (timing.on && status.ok())
      timing.collect(entry);
    return status;
  }

  Status launch(EntryFn entry, const Tensor *args, int,
                void *arena) override {
    if (Status s = init(); !s.ok())
      return s;
    runningStream = stream;
    entry(args, arena);
    runningStream = nullptr;
    return Status::success();
  }
  Status synchronize() override {
    if (Status s = init(); !s.ok())
      return s;
    return deviceStatus(stream);
  }
  Status copy(void *dst, const void *src, size_t bytes) override {
    if (Status s = init(); !s.ok())
      return s;
    if (bytes == 0)
      return Status::success();
    return cudaCheck("cudaMemcpyAsync",
                     cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                     stream));
  }
  Status fillZero(void *dst, size_t bytes) override {
    if (Status s = init(); !s.ok())
      return s;
    if (bytes == 0)
      return Status::success();
    return cudaCheck("cudaMemsetAsync",
                     cudaMemsetAsync(dst, 0, bytes, stream));
  }
  Status accumulate(float *dst, const float *src, int64_t n,
                    float scale) override {
    if (Status s = init(); !s.ok())
      return s;
    if (n == 0)
      return Status::success();
    if (scale != 1.0f)
      return accumulateScaled(dst, src, n, scale, stream);
    int64_t shape[1] = {n};
    Tensor d{dst, DType::F32, 1, shape}, g{const_cast<float *>(src), DType::F32, 1, shape};
    return binary(BinaryOp::Add, d, g, d, stream);
  }
  Status accumulateMany(const GradientSum *sums, int count) override {
    if (Status s = init(); !s.ok())
      return s;
    return cuda::accumulateMany(sums, count, stream);
  }
  Status sumOfSquares(const Tensor *tensors, int n,
                      double *deviceResult) override {
    if (Status s = init(); !s.ok())
      return s;
    return cuda::sumOfSquares(tensors, n, deviceResult, stream);
  }
  Status clipByNorm(const Tensor *tensors, int n, double *deviceSumSq,
                    double maxNorm) override {
    if (Status s = init(); !s.ok())
      return s;
    if (Status s = sqrtInPlace(deviceSumSq, stream); !s.ok())
      return s;
    return scaleInPlace(tensors, n, deviceSumSq, float(maxNorm), stream);
  }
  const EntryTiming &entryTiming() const { return timing; }
  cudaStream_t computeStream() {
    return init().ok() ? stream : nullptr;
  }

  Status clipGradNorm(const Tensor *grads, int n, float maxNorm,
                      double &totalNorm) override {
    if (Status s = init(); !s.ok())
      return s;
    if (!(maxNorm > 0))
      return Status::error("clipGradNorm: max norm must be positive");
    if (Status s = cuda::sumOfSquares(grads, n, normSlot, stream); !s.ok())
      return s;
    double sumSq = 0;
    if (Status s = download(&sumSq, normSlot, sizeof(double)); !s.ok())
      return s;
    totalNorm = std::sqrt(sumSq);
    if (!std::isfinite(totalNorm) || totalNorm <= maxNorm)
      return Status::success();
    if (Status s = upload(normSlot, &totalNorm, sizeof(double)); !s.ok())
      return s;
    return scaleInPlace(grads, n, normSlot, maxNorm, stream);
  }

  Status optimizerUpdate(const OptimizerConfig &cfg, float lr, int64_t step,
                         const Tensor &param, const Tensor &grad,
                         const Tensor *state, const Tensor *copy) override {
    if (Status s = init(); !s.ok())
      return s;
    return optimizerStep(cfg, lr, step, param, grad, state, stream, copy);
  }
  Status optimizerUpdates(float lr, int64_t step, const ParamUpdate *updates,
                          int n) override {
    if (Status s = init(); !s.ok())
      return s;
    return optimizerSteps(lr, step, updates, n, stream);
  }
  Status cast(const Tensor &from, const Tensor &to) override {
    if (Status s = init(); !s.ok())
      return s;
    return cuda::cast(from, to, stream);
  }

  /// The device copy of a program constant (uploaded on first use).
  Status constant(const void *host, size_t bytes, void **out) {
    std::lock_guard<std::mutex> lock(constantsMutex);
    auto it = constants.find(host);
    if (it != constants.end()) {
      *out = it->second;
      return Status::success();
    }
    if (Status s = allocate(bytes, out); !s.ok())
      return s;
    if (Status s = upload(*out, host, bytes); !s.ok())
      return s;
    constants.emplace(host, *out);
    return Status::success();
  }

private:
  /// The entry's work on the compute stream: its launches, or with
  /// LAMINA_CUDA_GRAPHS its graph (captured on the second call).
  Status enqueue(EntryFn entry, const Tensor *args, int numArgs,
                 void *arena) {
    if (graphsRequested()) {
      GraphKey key{entry, arena, {}};
      for (int i = 0; i < numArgs; ++i)
        key.args.push_back(args[i].data);
      Replay &r = graphs[key];
      if (r.warm) {
        if (!r.exec)
          if (Status s = capture(entry, args, arena, r); !s.ok())
            return s;
        if (Status s =
                cudaCheck("cudaGraphLaunch", cudaGraphLaunch(r.exec, stream));
            !s.ok())
          return s;
        return cuda::detail::recordWorkspaceUse(stream);
      }
      r.warm = true;
    }
    return launch(entry, args, numArgs, arena);
  }

  /// Records the entry's launches on the compute stream as a graph
  /// (thread-local capture: another thread's CUDA calls are not affected).
  Status capture(EntryFn entry, const Tensor *args, void *arena, Replay &r) {
    const char *what = "LAMINA_CUDA_GRAPHS: capturing the step";
    if (Status s = cudaCheck(
            what,
            cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        !s.ok())
      return s;
    runningStream = stream;
    entry(args, arena);
    runningStream = nullptr;
    cudaGraph_t graph = nullptr;
    if (Status s = cudaCheck(what, cudaStreamEndCapture(stream, &graph));
        !s.ok())
      return Status::error(s.message() + " (run without LAMINA_CUDA_GRAPHS)");
    size_t nodes = 0;
    if (cudaGraphGetNodes(graph, nullptr, &nodes) != cudaSuccess)
      (void)cudaGetLastError();
    // Every scratch allocation is freed inside the step; AutoFreeOnLaunch
    // keeps a relaunch valid should one ever outlive it.
    Status s = cudaCheck(
        what, cudaGraphInstantiate(&r.exec, graph,
                                   cudaGraphInstantiateFlagAutoFreeOnLaunch));
    (void)cudaGraphDestroy(graph);
    if (!s.ok())
      return s;
    std::fprintf(stderr,
                 "lamina: LAMINA_CUDA_GRAPHS: captured a call of %zu device "
                 "operations as a CUDA graph\n",
                 nodes);
    return Status::success();
  }

  /// Picks and initialises the device once; the error, if any, every time.
  Status init() {
    std::call_once(once, [&] { initStatus = initOnce(); });
    return initStatus;
  }
  Status initOnce() {
    int count = deviceCount();
    if (count == 0)
      return Status::error("no CUDA device: cudaGetDeviceCount found none "
                           "(this program was compiled with --target cuda)");
    const char *local = std::getenv("LOCAL_RANK");
    if (local && *local) {
      char *end = nullptr;
      long v = std::strtol(local, &end, 10);
      if (*end || v < 0 || v >= count)
        return Status::error("LOCAL_RANK=" + std::string(local) +
                             " does not name one of the " +
                             std::to_string(count) + " CUDA devices");
      ordinal = int(v);
    }
    if (Status s = cudaCheck("cudaSetDevice", cudaSetDevice(ordinal)); !s.ok())
      return s;
    // The kernels' scratch (reduction partials, attention workspaces) comes
    // from the stream-ordered pool, which by default hands its memory back
    // to the driver at every synchronisation -- once a step -- and maps it
    // again on the next: keep it.
    cudaMemPool_t pool = nullptr;
    if (cudaDeviceGetDefaultMemPool(&pool, ordinal) == cudaSuccess) {
      uint64_t keep = UINT64_MAX;
      if (Status s = cudaCheck("cudaMemPoolSetAttribute",
                               cudaMemPoolSetAttribute(
                                   pool, cudaMemPoolAttrReleaseThreshold,
                                   &keep));
          !s.ok())
        return s;
    }
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, ordinal) == cudaSuccess)
      name = prop.name;
    if (Status s = cudaCheck("cudaStreamCreateWithFlags",
                             cudaStreamCreateWithFlags(&stream,
                                                       cudaStreamNonBlocking));
        !s.ok())
      return s;
    return cudaCheck("cudaMalloc", cudaMalloc(&normSlot, sizeof(double)));
  }
  Status copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    if (Status s = init(); !s.ok())
      return s;
    if (bytes == 0)
      return Status::success();
    if (Status s = cudaCheck("cudaMemcpyAsync",
                             cudaMemcpyAsync(dst, src, bytes, kind, stream));
        !s.ok())
      return s;
    return cudaCheck("cudaStreamSynchronize", cudaStreamSynchronize(stream));
  }

  std::once_flag once;
  Status initStatus;
  int ordinal = 0;
  std::string name;
  cudaStream_t stream = nullptr;
  double *normSlot = nullptr;
  std::mutex constantsMutex;
  std::unordered_map<const void *, void *> constants;
  /// LAMINA_CUDA_GRAPHS: the captured entries (kept for the process).
  std::map<GraphKey, Replay> graphs;
  EntryTiming timing;
};

CudaDevice &theDevice() {
  // Never destroyed: device memory is released by the driver at exit, and
  // static destruction order against the CUDA runtime's own is unspecified.
  static CudaDevice *device = new CudaDevice;
  return *device;
}

} // namespace

void EntryTiming::report() {
  const EntryTiming &t = theDevice().entryTiming();
  int k = 0;
  for (const auto &[entry, ms] : t.runs) {
    ++k;
    std::fprintf(stderr, "lamina: LAMINA_CUDA_TIMING: entry %d: %zu runs, GPU "
                 "ms per run: first %.3f", k, ms.size(), double(ms[0]));
    if (ms.size() > 1)
      std::fprintf(stderr, ", second %.3f", double(ms[1]));
    if (ms.size() > 2) {
      double sum = 0, lo = ms[2], hi = ms[2];
      for (size_t i = 2; i < ms.size(); ++i) {
        sum += ms[i];
        lo = std::min(lo, double(ms[i]));
        hi = std::max(hi, double(ms[i]));
      }
      std::fprintf(stderr, ", then mean %.3f (min %.3f, max %.3f)",
                   sum / double(ms.size() - 2), lo, hi);
    }
    std::fprintf(stderr, "\n");
  }
}

Device &lamina::rt::cuda::device() { return theDevice(); }

cudaStream_t lamina::rt::cuda::currentStream() { return runningStream; }

cudaStream_t lamina::rt::cuda::deviceStream() {
  return theDevice().computeStream();
}

Tensor lamina::rt::cuda::gen::constant(const void *host, DType dtype, int rank,
                                       const int64_t *shape) {
  size_t bytes = size_t(numElements(shape, rank)) * dtypeSize(dtype);
  void *data = nullptr;
  checkKernel(theDevice().constant(host, bytes, &data),
              "a constant of the program");
  return Tensor{data, dtype, rank, shape};
}

Tensor lamina::rt::cuda::gen::splat(const void *value, DType dtype, int rank,
                                    const int64_t *shape) {
  return splatView(theDevice(), value, dtype, rank, shape);
}
