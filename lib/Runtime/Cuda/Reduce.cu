//===- Reduce.cu - sum, mean, max, prod over axes -------------------------===//
//
// The input is viewed as kept dims x reduced dims (size-1 dims dropped,
// neighbours of the same kind merged). When the innermost input dim is
// reduced, one block reduces one output (its threads read consecutive
// elements); otherwise a block of 32 outputs x 16 row lanes reads 32
// consecutive elements per step. Both orders are fixed: deterministic.
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

template <typename T>
__global__ void reduceInnerKernel(ReduceOp op, float identity, const T *x,
                                  Dims kept, Dims red, int64_t count, T *y) {
  __shared__ float scratch[32];
  int64_t o = blockIdx.x;
  const T *base = x + stridedOffset(o, kept);
  float acc = identity;
  for (int64_t r = threadIdx.x; r < count; r += blockDim.x)
    acc = combine(op, acc, load(base[stridedOffset(r, red)]));
  acc = blockReduce(acc, CombineOp{op}, identity, scratch);
  if (threadIdx.x == 0)
    y[o] = store<T>(finish(op, acc, count));
}

template <typename T>
__global__ void reduceOuterKernel(ReduceOp op, float identity, const T *x,
                                  Dims kept, Dims red, int64_t outputs,
                                  int64_t count, T *y) {
  __shared__ float part[16][33];
  int64_t o = blockIdx.x * 32 + threadIdx.x;
  float acc = identity;
  if (o < outputs) {
    const T *base = x + stridedOffset(o, kept);
    for (int64_t r = threadIdx.y; r < count; r += 16)
      acc = combine(op, acc, load(base[stridedOffset(r, red)]));
  }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && o < outputs) {
    for (int k = 1; k < 16; ++k)
      acc = combine(op, acc, part[k][threadIdx.x]);
    y[o] = store<T>(finish(op, acc, count));
  }
}
} // namespace

Status lamina::rt::cuda::reduce(ReduceOp op, const Tensor &input,
                                const int64_t *axes, int numAxes,
                                bool keepdims, const Tensor &result,
                                cudaStream_t stream) {
  if (input.dtype != result.dtype)
    return Status::error("reduce: result " + describe(result) +
                         " has another element type than " + describe(input));
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
      reduceSerialKernel<T><<<gridFor(outputs, 128), 128, 0, stream>>>(
          op, input.as<T>(), kept, red, outputs, count, result.as<T>());
    });
    return launched("reduce");
  }
  float identity = op == ReduceOp::Max    ? -__builtin_huge_valf()
                   : op == ReduceOp::Prod ? 1.0f
                                          : 0.0f;
  dispatchFloat(input.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (innerReduced)
      reduceInnerKernel<T><<<unsigned(outputs), rowThreads(count), 0,
                             stream>>>(op, identity, input.as<T>(), kept, red,
                                       count, result.as<T>());
    else
      reduceOuterKernel<T><<<unsigned((outputs + 31) / 32), dim3(32, 16), 0,
                             stream>>>(op, identity, input.as<T>(), kept, red,
                                       outputs, count, result.as<T>());
  });
  return launched("reduce");
}
