//===- Common.h - shared machinery of the CUDA kernels ----------*- C++ -*-===//
//
// Private to lib/Runtime/Cuda. The host-side part (shape structs, launch
// checks, the data-error slot) compiles with any C++ compiler; the device
// part (loads, stores, block reductions) only under nvcc.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_CUDA_COMMON_H
#define LAMINA_LIB_RUNTIME_CUDA_COMMON_H

#include "../Internal.h"
#include "lamina/Runtime/Cuda/Kernels.h"

#include <cuda_runtime.h>

#include <string>
#include <tuple>

namespace lamina::rt::cuda::detail {
// The host runtime's shape checks and messages (not its loads and stores:
// the device has its own below).
using lamina::rt::detail::Bool;
using lamina::rt::detail::BroadcastPlan;
using lamina::rt::detail::checkConcat;
using lamina::rt::detail::checkFloatAlongAxis;
using lamina::rt::detail::checkFused;
using lamina::rt::detail::checkGather;
using lamina::rt::detail::checkGatherND;
using lamina::rt::detail::checkNorm;
using lamina::rt::detail::checkReduce;
using lamina::rt::detail::checkReshape;
using lamina::rt::detail::checkScatterND;
using lamina::rt::detail::checkTrilu;
using lamina::rt::detail::CopyPlan;
using lamina::rt::detail::Compute;
using lamina::rt::detail::describe;
using lamina::rt::detail::dispatch;
using lamina::rt::detail::dispatchSize;
using lamina::rt::detail::isFloatStorage;
using lamina::rt::detail::isIntStorage;
using lamina::rt::detail::hasShape;
using lamina::rt::detail::normaliseAxis;
using lamina::rt::detail::planBroadcast;
using lamina::rt::detail::planBroadcastCopy;
using lamina::rt::detail::planSlice;
using lamina::rt::detail::planTile;
using lamina::rt::detail::planTranspose;
using lamina::rt::detail::sameShape;
using lamina::rt::detail::shapeString;
using lamina::rt::detail::splitAround;
using lamina::rt::detail::Tag;

/// A shape (and optionally strides) passed to a kernel by value.
struct Dims {
  int rank = 0;
  int64_t size[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};
};

/// Data-dependent errors, recorded on the device (first one wins).
enum class DataError : int {
  None = 0,
  GatherIndex,
  ScatterIndex,
  Label,
  GatherNDIndex
};
struct ErrorSlot {
  int code;
  int64_t position, value, bound;
};
/// The process's slot in device memory (allocated, zeroed, on first use).
ErrorSlot *errorSlot();

/// An error Status for a failed CUDA call, or success.
Status cudaCheck(const char *op, cudaError_t err);
/// After a launch: the launch error, if any.
inline Status launched(const char *op) {
  return cudaCheck(op, cudaGetLastError());
}

/// After a CUDA graph holding matmuls was launched on `stream`: the
/// cuBLASLt workspace's last use is that launch (Gemm.cpp, Workspace), so a
/// matmul on another stream waits for the graph.
Status recordWorkspaceUse(cudaStream_t stream);

/// LAMINA_CUDA_ATTENTION, read once: the attention paths a call may take
/// (docs/cuda.md, "Attention"). Default: cuDNN where it takes the call,
/// else the tensor-core kernels where they apply, else the generic ones;
/// Cudnn: the same, but an eligible call cuDNN refuses is an error;
/// TensorCore: no cuDNN; Generic: the generic kernels only.
enum class AttentionPath { Default, Cudnn, TensorCore, Generic };
AttentionPath attentionPath();

/// LAMINA_CUDA_NORM=rows, read at each call (so that a benchmark can time
/// both in one process): the norms take the one-block-a-row kernels that
/// re-read the row for each pass and a second pass over x and dy for the
/// parameter gradients, not the packed kernels (NN.cu). For measuring one
/// against the other on a GPU; the packed kernels are the default.
bool rowNormKernels();

/// Float element types the device kernels compute on.
inline bool isDeviceFloat(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}
Status unsupported(const char *op, const Tensor &t);

/// Operand k of a broadcast plan as kernel dims: the plan's collapsed shape
/// (dims of 1 dropped, contiguous neighbours merged) with k's strides, so
/// the per-element index arithmetic is as short as the host's. False if the
/// collapsed rank still exceeds kMaxRank.
inline bool planDims(const BroadcastPlan &p, int k, Dims &d) {
  if (p.shape.size() > size_t(kMaxRank))
    return false;
  d.rank = int(p.shape.size());
  for (int i = 0; i < d.rank; ++i) {
    d.size[i] = p.shape[size_t(i)];
    d.stride[i] = p.strides[k][size_t(i)];
  }
  return true;
}

/// dst (dense, row-major over `shape`) = src's elements at element strides
/// `strides` (any sign; 0 repeats), like the host's detail::stridedCopy:
/// dims of 1 are dropped and source-contiguous neighbours merged first, so
/// an error (rank above kMaxRank after merging) is rare. Movement.cu.
Status stridedCopy(const char *op, const void *src, void *dst,
                   size_t elementSize, std::vector<int64_t> shape,
                   std::vector<int64_t> strides, cudaStream_t stream);

/// N elements moved as one aligned unit: a vector load or store.
template <typename T, int N> struct alignas(sizeof(T) * N) Pack { T v[N]; };
/// 16 bytes, the widest a thread loads or stores in one instruction.
struct alignas(16) Bytes16 {
  uint64_t lo, hi;
};

inline bool alignedTo(const void *p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

/// The widest copy unit, in bytes (elementSize up to 16), for which
/// fits(elementsPerUnit, unitBytes) holds; copies move whole units, so
/// one load and store carry up to 16 bytes.
template <typename Fits> size_t widestUnit(size_t elementSize, Fits &&fits) {
  for (size_t w = 16; w > elementSize; w /= 2)
    if (fits(int64_t(w / elementSize), w))
      return w;
  return elementSize;
}

/// Calls f(Tag<U>{}) for the unsigned type (or Bytes16) of `bytes`.
template <typename F> void dispatchUnit(size_t bytes, F &&f) {
  if (bytes == 16)
    f(Tag<Bytes16>{});
  else
    dispatchSize(bytes, f);
}

/// Column sums over many rows (an outer `reduce`, the norms' parameter
/// gradients) split the rows into this many chunks, each block summing 32
/// columns of one chunk, then add the chunks' partials in chunk order: a
/// function of the shape only, so the order -- and the result -- does not
/// depend on the device. Chunks of at least 256 rows (16 per lane), enough
/// for about 1024 blocks (a few per SM on a 132-SM H200).
inline int64_t columnSumChunks(int64_t columns, int64_t rows) {
  constexpr int64_t kMinChunkRows = 256, kTargetBlocks = 1024;
  int64_t colBlocks = (columns + 31) / 32;
  if (colBlocks >= kTargetBlocks || rows < 2 * kMinChunkRows)
    return 1;
  int64_t want = (kTargetBlocks + colBlocks - 1) / colBlocks;
  int64_t chunks = want < rows / kMinChunkRows ? want : rows / kMinChunkRows;
  int64_t per = (rows + chunks - 1) / chunks;
  return (rows + per - 1) / per; // no empty chunk
}

/// Column sums' row lanes and column groups per block (Reduce.cu's outer
/// path, and fusedElementwise's sums, which keep its order and so its bits).
constexpr int kOuterCols = 32, kOuterLanes = 16;

/// y[o] = the f32 partials [chunks, outputs] of output o added in chunk
/// order (Reduce.cu): the second pass of a chunked column sum.
Status sumChunks(const float *partial, int64_t chunks, int64_t outputs,
                 float *y, cudaStream_t stream);

/// Blocks for a grid-stride loop over n items.
inline unsigned gridFor(int64_t n, int threads = 256) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks > 65536)
    blocks = 65536;
  return unsigned(blocks < 1 ? 1 : blocks);
}

#if defined(__CUDACC__) || defined(LAMINA_CUDA_EMULATOR)
//===----------------------------------------------------------------------===//
// Device helpers (nvcc, or the host compiler for the kernel emulator)
//===----------------------------------------------------------------------===//

/// kernel<<<grid, block, sharedBytes, stream>>>(args...). One spelling for
/// nvcc and for lamina_cuda_emulated, which runs the kernel's threads as
/// fibers on the CPU (Emulator/Emulator.h) with the arguments converted to
/// the kernel's parameter types, as a launch does.
template <typename... P, typename... A>
void launchKernel(void (*kernel)(P...), dim3 grid, dim3 block,
                  size_t sharedBytes, cudaStream_t stream, A &&...args) {
#ifdef LAMINA_CUDA_EMULATOR
  // Queued on the stream with copies of the arguments, as a launch is.
  namespace emu = ::lamina::cuda_emulator;
  const void *id = reinterpret_cast<const void *>(kernel);
  if (!emu::checkLaunch(id, grid, block, sharedBytes))
    return;
  emu::submit(stream, [id, kernel, grid, block, sharedBytes,
                       params = std::make_tuple(P(args)...)] {
    emu::launch(id, grid, block, sharedBytes,
                [&] { std::apply(kernel, params); });
  });
#else
  kernel<<<grid, block, sharedBytes, stream>>>(std::forward<A>(args)...);
#endif
}

/// A kernel's dynamic shared memory, `extern __shared__ T name[]`.
#ifdef LAMINA_CUDA_EMULATOR
#define LAMINA_DYNAMIC_SHARED(T, name)                                         \
  T *name = static_cast<T *>(::lamina::cuda_emulator::dynamicShared())
#else
#define LAMINA_DYNAMIC_SHARED(T, name) extern __shared__ __align__(128) T name[]
#endif

__device__ inline float load(Half h) { return math::halfToFloat(h.bits); }
__device__ inline float load(BFloat16 b) { return math::bf16ToFloat(b.bits); }
__device__ inline float load(float f) { return f; }
template <typename T> __device__ inline T store(float v);
template <> __device__ inline float store<float>(float v) { return v; }
template <> __device__ inline Half store<Half>(float v) {
  return Half{math::floatToHalf(v)};
}
template <> __device__ inline BFloat16 store<BFloat16>(float v) {
  return BFloat16{math::floatToBf16(v)};
}

/// Internal.h's load and store (LAMINA_HD), under names that do not clash
/// with the f32 store<T> specialisations above: the device converts between
/// storage and compute types exactly as the host does.
template <typename T> __device__ inline Compute<T> loadValue(T v) {
  return lamina::rt::detail::load(v);
}
template <typename T, typename C> __device__ inline T storeValue(C v) {
  return lamina::rt::detail::store<T>(v);
}

/// Calls f(Tag<Storage>{}) for f32, f16 or bf16.
template <typename F> void dispatchFloat(DType t, F &&f) {
  switch (t) {
  case DType::F16: f(Tag<Half>{}); return;
  case DType::BF16: f(Tag<BFloat16>{}); return;
  default: f(Tag<float>{}); return;
  }
}

__device__ inline int64_t readIndex(const void *p, bool wide, int64_t i) {
  return wide ? static_cast<const int64_t *>(p)[i]
              : int64_t(static_cast<const int32_t *>(p)[i]);
}

__device__ inline void recordError(ErrorSlot *slot, DataError code,
                                   int64_t position, int64_t value,
                                   int64_t bound) {
  if (atomicCAS(&slot->code, 0, int(code)) == 0) {
    slot->position = position;
    slot->value = value;
    slot->bound = bound;
  }
}

/// Row-major offset of element `index` of `d` through d.stride.
__device__ inline int64_t stridedOffset(int64_t index, const Dims &d) {
  int64_t off = 0;
  for (int i = d.rank - 1; i >= 0; --i) {
    off += (index % d.size[i]) * d.stride[i];
    index /= d.size[i];
  }
  return off;
}

/// stridedOffset in index type I: int32_t where the caller checked that
/// every index and offset fits (32-bit division is several times cheaper
/// than 64-bit), and no modulo for the outermost dim (index < n there).
template <typename I>
__device__ inline I stridedOffsetIn(I index, const Dims &d) {
  I off = 0;
  for (int i = d.rank - 1; i > 0; --i) {
    I size = I(d.size[i]);
    off += (index % size) * I(d.stride[i]);
    index /= size;
  }
  return d.rank > 0 ? off + index * I(d.stride[0]) : off;
}

/// Whether a grid-stride loop over n items at offsets up to `extent`
/// (absolute) can index in int32_t: both at most 2^30, so that an index
/// plus a grid's stride (< 2^25) cannot overflow.
inline bool fitsInt32(int64_t n, int64_t extent) {
  return n <= (int64_t(1) << 30) && extent <= (int64_t(1) << 30);
}

struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const {
    return math::maximum(a, b);
  }
};

/// Reduces v over the block (blockDim.x a multiple of 32, <= 1024); every
/// thread gets the result. `scratch` is __shared__ float[32].
template <typename Op>
__device__ float blockReduce(float v, Op op, float identity, float *scratch) {
  for (int o = 16; o > 0; o >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads(); // scratch may still be read by a previous reduction
  if (lane == 0)
    scratch[warp] = v;
  __syncthreads();
  int warps = blockDim.x >> 5;
  v = lane < warps ? scratch[lane] : identity;
  for (int o = 16; o > 0; o >>= 1)
    v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// The second stage of a column sum over a (kOuterCols, kOuterLanes) block:
/// each thread holds V columns' accumulators over its lane's rows; after
/// the call the lane-0 threads hold each column's lanes combined in lane
/// order. Reduce.cu's outer kernels and fusedElementwise's sums share it,
/// so their order -- and their bits -- are one. `part` is the caller's
/// __shared__ float[kOuterLanes][kOuterCols * V + 1]; every thread calls.
template <int V, typename Combine>
__device__ void combineLanes(float (&acc)[V],
                             float (*part)[kOuterCols * V + 1],
                             Combine combine) {
  for (int v = 0; v < V; ++v)
    part[threadIdx.y][threadIdx.x * V + v] = acc[v];
  __syncthreads();
  if (threadIdx.y != 0)
    return;
  for (int v = 0; v < V; ++v)
    for (int k = 1; k < kOuterLanes; ++k)
      acc[v] = combine(acc[v], part[k][threadIdx.x * V + v]);
}

/// Threads for a block that walks a row of n elements: a power of two in
/// [32, 512].
inline int rowThreads(int64_t n) {
  int t = 32;
  while (t < 512 && t < n)
    t *= 2;
  return t;
}
#endif

/// Temporary device memory of one call (row statistics, attention's
/// Delta): cudaMallocAsync'd by the caller into `ptr`, returned to the
/// stream's pool after the kernels that use it (stream-ordered).
struct Scratch {
  void *ptr = nullptr;
  cudaStream_t stream;
  explicit Scratch(cudaStream_t s) : stream(s) {}
  ~Scratch() {
    if (ptr)
      (void)cudaFreeAsync(ptr, stream);
  }
};

} // namespace lamina::rt::cuda::detail

#endif // LAMINA_LIB_RUNTIME_CUDA_COMMON_H
