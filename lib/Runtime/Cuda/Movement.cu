//===- Movement.cu - transpose, gather, the strided copy ------------------===//
//
// Copies move elements as unsigned integers of the element's size, so one
// kernel per size serves every element type.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

using namespace lamina::rt;
using namespace lamina::rt::cuda;
using namespace lamina::rt::cuda::detail;

namespace {
/// y (dense over d.size) = x at strides d.stride; I: the index type.
template <typename U, typename I>
__global__ void stridedCopyKernel(const U *x, U *y, Dims d, I n) {
  for (I i = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); i < n;
       i += I(gridDim.x) * I(blockDim.x))
    y[i] = x[stridedOffsetIn<I>(i, d)];
}

/// [batch, rows, cols] -> [batch, cols, rows] through a 32x32 tile; block
/// (32, 8), grid (cols tiles, rows tiles, batch).
template <typename U>
__global__ void transposeTileKernel(const U *x, U *y, int64_t rows,
                                    int64_t cols) {
  __shared__ U tile[32][33];
  int64_t b = blockIdx.z;
  const U *xb = x + b * rows * cols;
  U *yb = y + b * rows * cols;
  int64_t c = blockIdx.x * 32 + threadIdx.x;
  for (int k = threadIdx.y; k < 32; k += 8) {
    int64_t r = blockIdx.y * 32 + k;
    if (r < rows && c < cols)
      tile[k][threadIdx.x] = xb[r * cols + c];
  }
  __syncthreads();
  int64_t r = blockIdx.y * 32 + threadIdx.x;
  for (int k = threadIdx.y; k < 32; k += 8) {
    int64_t cc = blockIdx.x * 32 + k;
    if (r < rows && cc < cols)
      yb[cc * rows + r] = tile[threadIdx.x][k];
  }
}

/// result[o, p, i] = data[o, idx[p], i]; a bad index writes 0.
template <typename U>
__global__ void gatherKernel(const U *data, const void *indices, bool wide,
                             U *y, int64_t numIdx, int64_t axisSize,
                             int64_t inner, int64_t n, ErrorSlot *slot) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t in = i % inner, rest = i / inner;
    int64_t p = rest % numIdx, o = rest / numIdx;
    int64_t idx = readIndex(indices, wide, p);
    int64_t norm = idx < 0 ? idx + axisSize : idx;
    if (norm < 0 || norm >= axisSize) {
      if (in == 0)
        recordError(slot, DataError::GatherIndex, p, idx, axisSize);
      y[i] = U(0);
      continue;
    }
    y[i] = data[(o * axisSize + norm) * inner + in];
  }
}

} // namespace

Status lamina::rt::cuda::detail::stridedCopy(const char *op, const void *src,
                                             void *dst, size_t elementSize,
                                             std::vector<int64_t> shape,
                                             std::vector<int64_t> strides,
                                             cudaStream_t stream) {
  // As the host: drop dims of 1, merge neighbours contiguous in the source.
  Dims d;
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    n *= shape[i];
    if (shape[i] == 1)
      continue;
    if (d.rank > 0 && d.stride[d.rank - 1] == strides[i] * shape[i]) {
      d.size[d.rank - 1] *= shape[i];
      d.stride[d.rank - 1] = strides[i];
      continue;
    }
    if (d.rank == kMaxRank)
      return Status::error(std::string(op) + ": more than " +
                           std::to_string(kMaxRank) +
                           " dims after merging: " +
                           shapeString(shape.data(), int(shape.size())));
    d.size[d.rank] = shape[i];
    d.stride[d.rank] = strides[i];
    ++d.rank;
  }
  if (n == 0)
    return Status::success();
  // Rows contiguous in the source (a slice along the last dim, say) move
  // in units of up to 16 bytes when sizes, strides and pointers allow.
  int last = d.rank - 1;
  size_t unit = widestUnit(elementSize, [&](int64_t k, size_t w) {
    if (last < 0 || d.stride[last] != 1 || d.size[last] % k != 0 ||
        !alignedTo(src, w) || !alignedTo(dst, w))
      return false;
    for (int i = 0; i < last; ++i)
      if (d.stride[i] % k != 0)
        return false;
    return true;
  });
  if (int64_t k = int64_t(unit / elementSize); k > 1) {
    d.size[last] /= k;
    for (int i = 0; i < last; ++i)
      d.stride[i] /= k;
    n /= k;
  }
  int64_t extent = 0;
  for (int i = 0; i < d.rank; ++i)
    extent += (d.size[i] - 1) * (d.stride[i] < 0 ? -d.stride[i] : d.stride[i]);
  bool narrow = fitsInt32(n, extent);
  dispatchUnit(unit, [&](auto tag) {
    using U = typename decltype(tag)::type;
    if (narrow)
      launchKernel(stridedCopyKernel<U, int32_t>, gridFor(n), 256, 0, stream,
                   static_cast<const U *>(src), static_cast<U *>(dst), d,
                   int32_t(n));
    else
      launchKernel(stridedCopyKernel<U, int64_t>, gridFor(n), 256, 0, stream,
                   static_cast<const U *>(src), static_cast<U *>(dst), d, n);
  });
  return launched(op);
}

Status lamina::rt::cuda::transpose(const Tensor &input, const int64_t *perm,
                                   const Tensor &result, cudaStream_t stream) {
  CopyPlan plan;
  if (Status s = planTranspose(input, perm, result, plan); !s.ok())
    return s;
  if (input.rank > kMaxRank)
    return Status::error("transpose: rank above " + std::to_string(kMaxRank) +
                         ": " + describe(input));
  int64_t n = input.numElements();
  if (n == 0)
    return Status::success();
  Dims d;
  d.rank = input.rank;
  for (int i = 0; i < input.rank; ++i) {
    d.size[i] = plan.shape[i];
    d.stride[i] = plan.strides[i];
  }
  int r = input.rank;
  bool lastTwoSwap = r >= 2 && perm[r - 2] == r - 1 && perm[r - 1] == r - 2;
  for (int i = 0; i + 2 < r && lastTwoSwap; ++i)
    lastTwoSwap = perm[i] == i;
  int64_t rows = r >= 2 ? input.shape[r - 2] : 1;
  int64_t cols = r >= 2 ? input.shape[r - 1] : 1;
  int64_t batch = lastTwoSwap ? n / (rows * cols) : 0;
  bool tiled = lastTwoSwap && batch <= 65535 && (rows + 31) / 32 <= 65535;
  dispatchSize(input.elementSize(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    if (tiled)
      launchKernel(transposeTileKernel<U>,
                   dim3(unsigned((cols + 31) / 32), unsigned((rows + 31) / 32),
                        unsigned(batch)),
                   dim3(32, 8), 0, stream, input.as<U>(), result.as<U>(), rows,
                   cols);
    else
      launchKernel(stridedCopyKernel<U, int64_t>, gridFor(n), 256, 0, stream,
                   input.as<U>(), result.as<U>(), d, n);
  });
  return launched("transpose");
}

Status lamina::rt::cuda::gather(const Tensor &data, const Tensor &indices,
                                int64_t axis, const Tensor &result,
                                cudaStream_t stream) {
  if (Status s = checkGather(data, indices, axis, result); !s.ok())
    return s;
  int64_t n = result.numElements();
  if (n == 0)
    return Status::success();
  ErrorSlot *slot = errorSlot();
  if (!slot)
    return Status::error("gather: no device error slot");
  int64_t inner = numElements(data.shape + axis + 1, data.rank - int(axis) - 1);
  int64_t numIdx = indices.numElements(), axisSize = data.shape[axis];
  dispatchSize(data.elementSize(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    launchKernel(gatherKernel<U>, gridFor(n), 256, 0, stream, data.as<U>(),
                 indices.data, indices.dtype == DType::I64, result.as<U>(),
                 numIdx, axisSize, inner, n, slot);
  });
  return launched("gather");
}
