//===- Layout.cu - cumsum, reshape, concat, slice, broadcast, tile, trilu -===//
//
// The host's data-movement kernels on the device, with the host's checks and
// messages. slice, broadcast and tile are one strided copy each (Common.h's
// stridedCopy, the host's formulation: strides may be negative or 0); the
// rest are their own small kernels. Elements move as unsigned words of their
// size, so any element type works.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

using namespace lamina::rt;
using namespace lamina::rt::cuda;
using namespace lamina::rt::cuda::detail;

namespace {
/// One thread per column (o, c) of [outer, n, inner], walking the axis in
/// the host's order, so sums match the host's bit for bit. Reading each
/// element before writing it keeps the in-place case correct.
template <typename T>
__global__ void cumsumKernel(const T *x, T *y, int64_t outer, int64_t n,
                             int64_t inner, bool exclusive, bool reverse) {
  using C = Compute<T>;
  int64_t columns = outer * inner;
  for (int64_t col = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       col < columns; col += int64_t(gridDim.x) * blockDim.x) {
    int64_t o = col / inner, c = col % inner;
    C acc = C(0);
    for (int64_t s = 0; s < n; ++s) {
      int64_t i = reverse ? n - 1 - s : s;
      int64_t at = (o * n + i) * inner + c;
      C v = loadValue(x[at]);
      if (exclusive) {
        y[at] = storeValue<T>(acc);
        acc = math::add(acc, v);
      } else {
        acc = math::add(acc, v);
        y[at] = storeValue<T>(acc);
      }
    }
  }
}

/// Input rows of rowIn elements land in result rows of rowOut at colOff.
template <typename U>
__global__ void concatKernel(const U *x, U *y, int64_t rowIn, int64_t rowOut,
                             int64_t colOff, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[(i / rowIn) * rowOut + colOff + i % rowIn] = x[i];
}

/// [rows, m, n] matrices; zeroes what the band does not keep. In place, the
/// kept elements are rewritten with their own value by their own thread.
template <typename U>
__global__ void triluKernel(const U *x, U *y, int64_t m, int64_t n, int64_t k,
                            bool upper, int64_t total) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t col = i % n, row = (i / n) % m;
    bool keep = upper ? col - row >= k : col - row <= k;
    y[i] = keep ? x[i] : U(0);
  }
}

Status sameType(const char *op, const Tensor &in, const Tensor &out) {
  if (in.dtype != out.dtype)
    return Status::error(std::string(op) + ": result " + describe(out) +
                         " has another element type than " + describe(in));
  return Status::success();
}

std::vector<int64_t> stridesOf(const Tensor &t) {
  std::vector<int64_t> s(size_t(t.rank));
  rowMajorStrides(t.shape, t.rank, s.data());
  return s;
}

std::vector<int64_t> shapeOf(const Tensor &t) {
  return std::vector<int64_t>(t.shape, t.shape + t.rank);
}
} // namespace

Status lamina::rt::cuda::cumsum(const Tensor &input, int64_t axis,
                                bool exclusive, bool reverse,
                                const Tensor &result, cudaStream_t stream) {
  if (input.dtype != result.dtype || !sameShape(input, result))
    return Status::error("cumsum: result " + describe(result) +
                         " differs from input " + describe(input));
  if (input.dtype == DType::I1)
    return Status::error("cumsum: not defined on i1");
  if (!normaliseAxis(axis, input.rank))
    return Status::error("cumsum: axis out of range for " + describe(input));
  if (input.numElements() == 0)
    return Status::success();
  int64_t outer, n, inner;
  splitAround(input, int(axis), outer, n, inner);
  int64_t columns = outer * inner;
  dispatch(input.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, Bool>)
      cumsumKernel<T><<<gridFor(columns, 128), 128, 0, stream>>>(
          input.as<T>(), result.as<T>(), outer, n, inner, exclusive, reverse);
  });
  return launched("cumsum");
}

Status lamina::rt::cuda::reshape(const Tensor &input, const Tensor &result,
                                 cudaStream_t stream) {
  if (Status s = sameType("reshape", input, result); !s.ok())
    return s;
  if (input.numElements() != result.numElements())
    return Status::error("reshape: " + describe(input) + " and " +
                         describe(result) + " differ in element count");
  if (input.data == result.data || input.byteSize() == 0)
    return Status::success();
  return cudaCheck("reshape", cudaMemcpyAsync(result.data, input.data,
                                              input.byteSize(),
                                              cudaMemcpyDeviceToDevice,
                                              stream));
}

Status lamina::rt::cuda::concat(const Tensor *inputs, int numInputs,
                                int64_t axis, const Tensor &result,
                                cudaStream_t stream) {
  if (numInputs < 1)
    return Status::error("concat: no inputs");
  if (!normaliseAxis(axis, result.rank))
    return Status::error("concat: axis out of range for " + describe(result));
  int64_t total = 0;
  for (int k = 0; k < numInputs; ++k) {
    const Tensor &in = inputs[k];
    bool ok = in.dtype == result.dtype && in.rank == result.rank;
    for (int d = 0; ok && d < in.rank; ++d)
      ok = d == axis || in.shape[d] == result.shape[d];
    if (!ok)
      return Status::error("concat: input " + describe(in) +
                           " does not fit result " + describe(result));
    total += in.shape[axis];
  }
  if (total != result.shape[axis])
    return Status::error("concat: inputs' sizes along axis " +
                         std::to_string(axis) + " do not add up to " +
                         describe(result));
  int64_t outer = numElements(result.shape, int(axis));
  int64_t after =
      numElements(result.shape + axis + 1, result.rank - int(axis) - 1);
  int64_t rowOut = result.shape[axis] * after, colOff = 0;
  if (outer == 0 || rowOut == 0)
    return Status::success();
  for (int k = 0; k < numInputs; ++k) {
    int64_t rowIn = inputs[k].shape[axis] * after;
    if (rowIn == 0) // an empty input may have no data
      continue;
    int64_t n = outer * rowIn;
    dispatchSize(result.elementSize(), [&](auto tag) {
      using U = typename decltype(tag)::type;
      concatKernel<U><<<gridFor(n), 256, 0, stream>>>(
          inputs[k].as<U>(), result.as<U>(), rowIn, rowOut, colOff, n);
    });
    if (Status s = launched("concat"); !s.ok())
      return s;
    colOff += rowIn;
  }
  return Status::success();
}

Status lamina::rt::cuda::slice(const Tensor &input, const int64_t *starts,
                               const int64_t *sizes, const int64_t *steps,
                               const Tensor &result, cudaStream_t stream) {
  if (Status s = sameType("slice", input, result); !s.ok())
    return s;
  if (input.rank != result.rank)
    return Status::error("slice: rank mismatch " + describe(input) + " -> " +
                         describe(result));
  std::vector<int64_t> in = stridesOf(input), strides(size_t(input.rank));
  int64_t base = 0;
  bool empty = false;
  for (int d = 0; d < input.rank; ++d) {
    if (result.shape[d] != sizes[d] || steps[d] == 0 || sizes[d] < 0)
      return Status::error("slice: result " + describe(result) +
                           " does not match sizes, or a step is 0");
    int64_t last = starts[d] + (sizes[d] - 1) * steps[d];
    if (sizes[d] > 0 && (starts[d] < 0 || starts[d] >= input.shape[d] ||
                         last < 0 || last >= input.shape[d]))
      return Status::error("slice: dim " + std::to_string(d) + " of " +
                           describe(input) + " indexed out of bounds");
    empty |= sizes[d] == 0;
    base += starts[d] * in[size_t(d)];
    strides[size_t(d)] = steps[d] * in[size_t(d)];
  }
  if (empty)
    return Status::success();
  return stridedCopy("slice",
                     static_cast<const char *>(input.data) +
                         base * int64_t(input.elementSize()),
                     result.data, input.elementSize(), shapeOf(result),
                     strides, stream);
}

Status lamina::rt::cuda::broadcast(const Tensor &input, const Tensor &result,
                                   cudaStream_t stream) {
  if (Status s = sameType("broadcast", input, result); !s.ok())
    return s;
  std::vector<int64_t> strides(size_t(result.rank));
  if (!broadcastStrides(input.shape, input.rank, result.shape, result.rank,
                        strides.data()))
    return Status::error("broadcast: " + describe(input) +
                         " does not broadcast to " + describe(result));
  return stridedCopy("broadcast", input.data, result.data,
                     input.elementSize(), shapeOf(result), strides, stream);
}

Status lamina::rt::cuda::tile(const Tensor &input, const int64_t *repeats,
                              const Tensor &result, cudaStream_t stream) {
  if (Status s = sameType("tile", input, result); !s.ok())
    return s;
  if (input.rank != result.rank)
    return Status::error("tile: rank mismatch " + describe(input) + " -> " +
                         describe(result));
  // Result [r0*d0, r1*d1, ...] is row-major [r0, d0, r1, d1, ...]; the
  // repeat dims read with stride 0 (the merge in stridedCopy folds repeats
  // of 1, so rank 2 * kMaxRank rarely becomes a limit).
  std::vector<int64_t> in = stridesOf(input), shape, strides;
  for (int d = 0; d < input.rank; ++d) {
    if (repeats[d] < 0 || result.shape[d] != input.shape[d] * repeats[d])
      return Status::error("tile: result " + describe(result) +
                           " is not input " + describe(input) +
                           " times repeats");
    shape.insert(shape.end(), {repeats[d], input.shape[d]});
    strides.insert(strides.end(), {0, in[size_t(d)]});
  }
  return stridedCopy("tile", input.data, result.data, input.elementSize(),
                     shape, strides, stream);
}

Status lamina::rt::cuda::trilu(const Tensor &input, int64_t k, bool upper,
                               const Tensor &result, cudaStream_t stream) {
  if (Status s = sameType("trilu", input, result); !s.ok())
    return s;
  if (input.rank < 2 || !sameShape(input, result))
    return Status::error("trilu: needs rank >= 2 and equal shapes, got " +
                         describe(input) + " -> " + describe(result));
  int64_t m = input.shape[input.rank - 2], n = input.shape[input.rank - 1];
  int64_t total = input.numElements();
  if (total == 0)
    return Status::success();
  dispatchSize(input.elementSize(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    triluKernel<U><<<gridFor(total), 256, 0, stream>>>(
        input.as<U>(), result.as<U>(), m, n, k, upper, total);
  });
  return launched("trilu");
}
