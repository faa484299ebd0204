//===- Reduce.cu - sum, mean, max, prod over axes -------------------------===//
//
// The input is viewed as kept dims x reduced dims (size-1 dims dropped,
// neighbours of the same kind merged). When the innermost input dim is
// reduced, one block reduces one output (its threads read consecutive
// elements). Otherwise (the bias gradient: a sum over the leading rows) a
// block of 32 outputs x 16 row lanes reads 32 consecutive elements per step,
// over one chunk of the reduced rows: the rows are split into a number of
// chunks that depends on the shape alone (columnSumChunks), each block writes
// its chunk's f32 partial, and a second kernel combines the partials in
// chunk order. Every order is fixed by the shape, never by the device or the
// scheduling: deterministic, and the same on every GPU. Mean, max and prod
// share that path (partials of sums, maxima, products).
//
// f64, integers and i1 (max only) take one thread per output that walks its
// reduced elements in row-major order, the host's order for integer
// results (exact in any order anyway) and, apart from the host's split of a
// few huge rows over threads, for f64 sums too. Masks and lengths, not
// large reductions, are what generated programs reduce in those types.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

using namespace lamina::rt;
using namespace lamina::rt::cuda;
using namespace lamina::rt::cuda::detail;

namespace {
__device__ float combine(ReduceOp op, float a, float x) {
  switch (op) {
  case ReduceOp::Max: return math::maximum(a, x);
  case ReduceOp::Prod: return a * x;
  default: return a + x;
  }
}
struct CombineOp {
  ReduceOp op;
  __device__ float operator()(float a, float b) const {
    return combine(op, a, b);
  }
};
__device__ float finish(ReduceOp op, float acc, int64_t count) {
  return op == ReduceOp::Mean ? acc / float(count) : acc;
}

/// The host's identity: the lowest value (-inf for floats), 1 or 0.
template <typename A> __device__ A identityOf(ReduceOp op) {
  if (op == ReduceOp::Prod)
    return A(1);
  if (op != ReduceOp::Max)
    return A(0);
  if constexpr (std::is_floating_point_v<A>)
    return A(-HUGE_VAL);
  else if constexpr (std::is_unsigned_v<A>)
    return A(0);
  else // the sign bit alone: the most negative value
    return A(std::make_unsigned_t<A>(1) << (8 * sizeof(A) - 1));
}

template <typename T>
__global__ void reduceSerialKernel(ReduceOp op, const T *x, Dims kept,
                                   Dims red, int64_t outputs, int64_t count,
                                   T *y) {
  using A = Compute<T>;
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       o < outputs; o += int64_t(gridDim.x) * blockDim.x) {
    const T *base = x + stridedOffset(o, kept);
    A acc = identityOf<A>(op);
    for (int64_t r = 0; r < count; ++r) {
      A v = loadValue(base[stridedOffset(r, red)]);
      acc = op == ReduceOp::Max    ? math::maximum(acc, v)
            : op == ReduceOp::Prod ? math::mul(acc, v)
                                   : math::add(acc, v);
    }
    if (op == ReduceOp::Mean) {
      if constexpr (std::is_integral_v<A>) { // the count may not fit in A
        using W = std::conditional_t<std::is_signed_v<A>, int64_t, uint64_t>;
        acc = A(math::div(W(acc), W(count)));
      } else {
        acc = acc / A(count);
      }
    }
    y[o] = storeValue<T>(acc);
  }
}

template <typename T, typename R>
__global__ void reduceInnerKernel(ReduceOp op, float identity, const T *x,
                                  Dims kept, Dims red, int64_t count, R *y) {
  __shared__ float scratch[32];
  int64_t o = blockIdx.x;
  const T *base = x + stridedOffset(o, kept);
  float acc = identity;
  for (int64_t r = threadIdx.x; r < count; r += blockDim.x)
    acc = combine(op, acc, load(base[stridedOffset(r, red)]));
  acc = blockReduce(acc, CombineOp{op}, identity, scratch);
  if (threadIdx.x == 0)
    y[o] = store<R>(finish(op, acc, count));
}

/// Offset of reduced row r: one merged reduced dim (the common case) needs
/// no division.
__device__ inline int64_t rowOffset(int64_t r, const Dims &red) {
  return red.rank == 1 ? r * red.stride[0] : stridedOffset(r, red);
}

/// Block (32, 16), grid (column blocks, chunks): rows [y * chunkRows,
/// (y + 1) * chunkRows) of 32 consecutive outputs. With one chunk the result
/// is finished and stored; otherwise the f32 partial goes to
/// partial[chunk * outputs + o].
template <typename T, typename R>
__global__ void reduceOuterKernel(ReduceOp op, float identity, const T *x,
                                  Dims kept, Dims red, int64_t outputs,
                                  int64_t count, int64_t chunkRows,
                                  float *partial, R *y) {
  __shared__ float part[kOuterLanes][kOuterCols + 1];
  int64_t o = blockIdx.x * int64_t(kOuterCols) + threadIdx.x;
  int64_t begin = blockIdx.y * chunkRows;
  int64_t end = begin + chunkRows < count ? begin + chunkRows : count;
  float acc[1] = {identity};
  if (o < outputs) {
    const T *base = x + stridedOffset(o, kept);
#pragma unroll 4
    for (int64_t r = begin + threadIdx.y; r < end; r += kOuterLanes)
      acc[0] = combine(op, acc[0], load(base[rowOffset(r, red)]));
  }
  combineLanes<1>(acc, part, CombineOp{op});
  if (threadIdx.y == 0 && o < outputs) {
    if (partial)
      partial[blockIdx.y * outputs + o] = acc[0];
    else
      y[o] = store<R>(finish(op, acc[0], count));
  }
}

/// reduceOuterKernel for contiguous outputs, V consecutive ones a thread
/// with one 16-byte load a row (f32: V = 4; f16/bf16: V = 8): the launcher
/// checks that the rows are `rowStride` elements apart, that outputs,
/// rowStride and x's alignment are multiples of V, and uses the scalar
/// kernel's chunks. Each output's order is the scalar kernel's (lane y takes
/// rows y, y + 16, ... of the chunk, the lanes combined in order), so the
/// bits are the same; only the loads are wider.
template <typename T, typename R, int V>
__global__ void reduceOuterVecKernel(ReduceOp op, float identity, const T *x,
                                     int64_t rowStride, int64_t outputs,
                                     int64_t count, int64_t chunkRows,
                                     float *partial, R *y) {
  __shared__ float part[kOuterLanes][kOuterCols * V + 1];
  int64_t o0 = (blockIdx.x * int64_t(kOuterCols) + threadIdx.x) * V;
  int64_t begin = blockIdx.y * chunkRows;
  int64_t end = begin + chunkRows < count ? begin + chunkRows : count;
  float acc[V];
#pragma unroll
  for (int v = 0; v < V; ++v)
    acc[v] = identity;
  if (o0 < outputs) { // outputs % V == 0: the whole group is in range
    const T *base = x + o0;
#pragma unroll 4
    for (int64_t r = begin + threadIdx.y; r < end; r += kOuterLanes) {
      Pack<T, V> w =
          *reinterpret_cast<const Pack<T, V> *>(base + r * rowStride);
#pragma unroll
      for (int v = 0; v < V; ++v)
        acc[v] = combine(op, acc[v], load(w.v[v]));
    }
  }
  combineLanes<V>(acc, part, CombineOp{op});
  if (threadIdx.y == 0 && o0 < outputs) {
#pragma unroll
    for (int v = 0; v < V; ++v) {
      if (partial)
        partial[blockIdx.y * outputs + o0 + v] = acc[v];
      else
        y[o0 + v] = store<R>(finish(op, acc[v], count));
    }
  }
}

/// y[o] = the chunks' partials of output o combined in chunk order.
template <typename R>
__global__ void reduceChunksKernel(ReduceOp op, const float *partial,
                                   int64_t chunks, int64_t outputs,
                                   int64_t count, R *y) {
  for (int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       o < outputs; o += int64_t(gridDim.x) * blockDim.x) {
    float acc = partial[o];
    for (int64_t c = 1; c < chunks; ++c)
      acc = combine(op, acc, partial[c * outputs + o]);
    y[o] = store<R>(finish(op, acc, count));
  }
}

/// The outer path: one pass, or partials per chunk and a second pass.
template <typename T, typename R>
Status reduceOuter(ReduceOp op, float identity, const T *x, const Dims &kept,
                   const Dims &red, int64_t outputs, int64_t count, R *y,
                   cudaStream_t stream) {
  int64_t chunks = columnSumChunks(outputs, count);
  int64_t chunkRows = (count + chunks - 1) / chunks;
  dim3 grid(unsigned((outputs + kOuterCols - 1) / kOuterCols),
            unsigned(chunks));
  dim3 block(kOuterCols, kOuterLanes);
  // 16-byte loads where the kept outputs are one contiguous run and the
  // reduced rows one strided dim (a bias gradient's [rows, outputs]).
  constexpr int V = sizeof(T) == 4 ? 4 : 8;
  bool vec = kept.rank == 1 && kept.stride[0] == 1 && red.rank == 1 &&
             outputs % V == 0 && red.stride[0] % V == 0 &&
             alignedTo(x, 16);
  dim3 vgrid(unsigned((outputs / V + kOuterCols - 1) / kOuterCols),
             unsigned(chunks));
  auto pass = [&](float *partial) {
    if (vec)
      launchKernel(reduceOuterVecKernel<T, R, V>, vgrid, block, 0, stream, op,
                   identity, x, red.stride[0], outputs, count, chunkRows,
                   partial, y);
    else
      launchKernel(reduceOuterKernel<T, R>, grid, block, 0, stream, op,
                   identity, x, kept, red, outputs, count, chunkRows, partial,
                   y);
  };
  if (chunks == 1) {
    pass(nullptr);
    return launched("reduce");
  }
  float *partial = nullptr;
  // No single-pass fallback when this fails: the order, and so the result,
  // must not depend on free memory.
  if (Status s = cudaCheck("reduce: partials",
                           cudaMallocAsync(reinterpret_cast<void **>(&partial),
                                           size_t(chunks * outputs) *
                                               sizeof(float),
                                           stream));
      !s.ok())
    return s;
  pass(partial);
  Status first = launched("reduce");
  if (first.ok())
    launchKernel(reduceChunksKernel<R>, gridFor(outputs, 256), 256, 0, stream,
                 op, partial, chunks, outputs, count, y);
  Status second = first.ok() ? launched("reduce") : Status::success();
  Status freed = cudaCheck("reduce: partials", cudaFreeAsync(partial, stream));
  return !first.ok() ? first : !second.ok() ? second : freed;
}
} // namespace

Status lamina::rt::cuda::detail::sumChunks(const float *partial,
                                           int64_t chunks, int64_t outputs,
                                           float *y, cudaStream_t stream) {
  launchKernel(reduceChunksKernel<float>, gridFor(outputs, 256), 256, 0,
               stream, ReduceOp::Sum, partial, chunks, outputs, outputs, y);
  return launched("reduce");
}

Status lamina::rt::cuda::reduce(ReduceOp op, const Tensor &input,
                                const int64_t *axes, int numAxes,
                                bool keepdims, const Tensor &result,
                                cudaStream_t stream) {
  if (Status s = lamina::rt::detail::checkReduceTypes(input, result);
      !s.ok())
    return s;
  if (input.dtype == DType::I1 && op != ReduceOp::Max)
    return Status::error("reduce: only max is defined on i1");
  if (input.rank > kMaxRank)
    return Status::error("reduce: rank above " + std::to_string(kMaxRank) +
                         ": " + describe(input));
  std::vector<bool> reduced;
  if (Status s = checkReduce(input, axes, numAxes, keepdims, result, reduced);
      !s.ok())
    return s;
  int64_t outputs = result.numElements();
  if (outputs == 0)
    return Status::success();

  std::vector<int64_t> strides(input.rank);
  rowMajorStrides(input.shape, input.rank, strides.data());
  Dims kept, red;
  int lastKind = -1;
  bool innerReduced = false;
  int64_t count = 1;
  for (int d = 0; d < input.rank; ++d) {
    if (reduced[d])
      count *= input.shape[d];
    if (input.shape[d] == 1)
      continue;
    Dims &list = reduced[d] ? red : kept;
    if (lastKind == int(reduced[d])) {
      list.size[list.rank - 1] *= input.shape[d];
      list.stride[list.rank - 1] = strides[d];
    } else {
      list.size[list.rank] = input.shape[d];
      list.stride[list.rank] = strides[d];
      ++list.rank;
    }
    lastKind = reduced[d];
    innerReduced = reduced[d];
  }
  if (!isDeviceFloat(input.dtype)) {
    dispatch(input.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      launchKernel(reduceSerialKernel<T>, gridFor(outputs, 128), 128, 0, stream,
                   op, input.as<T>(), kept, red, outputs, count,
                   result.as<T>());
    });
    return launched("reduce");
  }
  float identity = op == ReduceOp::Max    ? -__builtin_huge_valf()
                   : op == ReduceOp::Prod ? 1.0f
                                          : 0.0f;
  // The float paths, the result in the input's type or (f16/bf16 input)
  // f32.
  auto run = [&](auto *x, auto *y) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(x)>>;
    using R = std::remove_pointer_t<decltype(y)>;
    if (innerReduced) {
      launchKernel(reduceInnerKernel<T, R>, unsigned(outputs),
                   rowThreads(count), 0, stream, op, identity, x, kept, red,
                   count, y);
      return launched("reduce");
    }
    return reduceOuter(op, identity, x, kept, red, outputs, count, y, stream);
  };
  bool wide = result.dtype == DType::F32;
  switch (input.dtype) {
  case DType::F16:
    return wide ? run(input.as<Half>(), result.as<float>())
                : run(input.as<Half>(), result.as<Half>());
  case DType::BF16:
    return wide ? run(input.as<BFloat16>(), result.as<float>())
                : run(input.as<BFloat16>(), result.as<BFloat16>());
  default:
    return run(input.as<float>(), result.as<float>());
  }
}
