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

/// Input rows of rowIn elements land in result rows of rowOut at colOff;
/// I: the index type.
template <typename U, typename I>
__global__ void concatKernel(const U *x, U *y, I rowIn, I rowOut, I colOff,
                             I n) {
  for (I i = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); i < n;
       i += I(gridDim.x) * I(blockDim.x))
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

/// Runs a shared plan (Internal.h) on the device.
Status copy(const char *op, Status planned, const CopyPlan &plan,
            const Tensor &input, const Tensor &result, cudaStream_t stream) {
  if (!planned.ok())
    return planned;
  return stridedCopy(op, plan.source(input), result.data,
                     input.elementSize(), plan.shape, plan.strides, stream);
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
      launchKernel(cumsumKernel<T>, gridFor(columns, 128), 128, 0, stream,
                   input.as<T>(), result.as<T>(), outer, n, inner, exclusive,
                   reverse);
  });
  return launched("cumsum");
}

Status lamina::rt::cuda::reshape(const Tensor &input, const Tensor &result,
                                 cudaStream_t stream) {
  if (Status s = checkReshape(input, result); !s.ok())
    return s;
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
  if (Status s = checkConcat(inputs, numInputs, axis, result); !s.ok())
    return s;
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
    // Up to 16 bytes per load and store when the row pieces, the offset
    // and both pointers are whole units.
    size_t size = result.elementSize();
    size_t unit = widestUnit(size, [&](int64_t e, size_t w) {
      return rowIn % e == 0 && rowOut % e == 0 && colOff % e == 0 &&
             alignedTo(inputs[k].data, w) && alignedTo(result.data, w);
    });
    int64_t e = int64_t(unit / size), n = outer * rowIn / e;
    bool narrow = fitsInt32(n, outer * rowOut / e);
    dispatchUnit(unit, [&](auto tag) {
      using U = typename decltype(tag)::type;
      const U *x = static_cast<const U *>(inputs[k].data);
      U *y = static_cast<U *>(result.data);
      if (narrow)
        launchKernel(concatKernel<U, int32_t>, gridFor(n), 256, 0, stream, x, y,
                     int32_t(rowIn / e), int32_t(rowOut / e),
                     int32_t(colOff / e), int32_t(n));
      else
        launchKernel(concatKernel<U, int64_t>, gridFor(n), 256, 0, stream, x, y,
                     rowIn / e, rowOut / e, colOff / e, n);
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
  CopyPlan plan;
  return copy("slice", planSlice(input, starts, sizes, steps, result, plan),
              plan, input, result, stream);
}

Status lamina::rt::cuda::broadcast(const Tensor &input, const Tensor &result,
                                   cudaStream_t stream) {
  CopyPlan plan;
  return copy("broadcast", planBroadcastCopy(input, result, plan), plan, input,
              result, stream);
}

Status lamina::rt::cuda::tile(const Tensor &input, const int64_t *repeats,
                              const Tensor &result, cudaStream_t stream) {
  CopyPlan plan;
  return copy("tile", planTile(input, repeats, result, plan), plan, input,
              result, stream);
}

Status lamina::rt::cuda::trilu(const Tensor &input, int64_t k, bool upper,
                               const Tensor &result, cudaStream_t stream) {
  if (Status s = checkTrilu(input, result); !s.ok())
    return s;
  int64_t m = input.shape[input.rank - 2], n = input.shape[input.rank - 1];
  int64_t total = input.numElements();
  if (total == 0)
    return Status::success();
  dispatchSize(input.elementSize(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    launchKernel(triluKernel<U>, gridFor(total), 256, 0, stream, input.as<U>(),
                 result.as<U>(), m, n, k, upper, total);
  });
  return launched("trilu");
}
