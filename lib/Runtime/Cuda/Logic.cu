//===- Logic.cu - compare and select --------------------------------------===//
//
// compare writes i1 (one byte, 0 or 1) from any element type, comparing in
// the host's compute type (so NaN compares false); select copies elements
// as unsigned words of their size, so one kernel per size serves every
// type. Both broadcast through the host's collapsed BroadcastPlan.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

using namespace lamina::rt;
using namespace lamina::rt::cuda;
using namespace lamina::rt::cuda::detail;

namespace {
template <typename C> __device__ uint8_t applyCompare(CompareOp op, C a, C b) {
  switch (op) {
  case CompareOp::Equal: return a == b;
  case CompareOp::Greater: return a > b;
  case CompareOp::GreaterEqual: return a >= b;
  case CompareOp::Less: return a < b;
  default: return a <= b;
  }
}

template <typename T>
__global__ void compareKernel(CompareOp op, const T *a, Dims da, const T *b,
                              Dims db, uint8_t *y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = applyCompare(op, loadValue(a[stridedOffset(i, da)]),
                        loadValue(b[stridedOffset(i, db)]));
}

template <typename U>
__global__ void selectKernel(const uint8_t *c, Dims dc, const U *a, Dims da,
                             const U *b, Dims db, U *y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    y[i] = c[stridedOffset(i, dc)] ? a[stridedOffset(i, da)]
                                   : b[stridedOffset(i, db)];
}

Status rankError(const char *op, const Tensor &result) {
  return Status::error(std::string(op) + ": rank above " +
                       std::to_string(kMaxRank) + " after merging dims: " +
                       describe(result));
}
} // namespace

Status lamina::rt::cuda::compare(CompareOp op, const Tensor &lhs,
                                 const Tensor &rhs, const Tensor &result,
                                 cudaStream_t stream) {
  if (lhs.dtype != rhs.dtype)
    return Status::error("compare: operand types differ: " + describe(lhs) +
                         " and " + describe(rhs));
  if (result.dtype != DType::I1)
    return Status::error("compare: result must be i1, got " + describe(result));
  const Tensor *inputs[] = {&lhs, &rhs};
  BroadcastPlan plan;
  if (Status s = planBroadcast("compare", inputs, 2, result, plan); !s.ok())
    return s;
  int64_t n = result.numElements();
  if (n == 0)
    return Status::success();
  Dims da, db;
  if (!planDims(plan, 0, da) || !planDims(plan, 1, db))
    return rankError("compare", result);
  dispatch(lhs.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    launchKernel(compareKernel<T>, gridFor(n), 256, 0, stream, op, lhs.as<T>(),
                 da, rhs.as<T>(), db, result.as<uint8_t>(), n);
  });
  return launched("compare");
}

Status lamina::rt::cuda::select(const Tensor &condition, const Tensor &lhs,
                                const Tensor &rhs, const Tensor &result,
                                cudaStream_t stream) {
  if (condition.dtype != DType::I1)
    return Status::error("select: condition must be i1, got " +
                         describe(condition));
  if (lhs.dtype != rhs.dtype)
    return Status::error("select: operand types differ: " + describe(lhs) +
                         " and " + describe(rhs));
  if (result.dtype != lhs.dtype)
    return Status::error("select: result " + describe(result) +
                         " has another element type than " + describe(lhs));
  const Tensor *inputs[] = {&condition, &lhs, &rhs};
  BroadcastPlan plan;
  if (Status s = planBroadcast("select", inputs, 3, result, plan); !s.ok())
    return s;
  int64_t n = result.numElements();
  if (n == 0)
    return Status::success();
  Dims dc, da, db;
  if (!planDims(plan, 0, dc) || !planDims(plan, 1, da) ||
      !planDims(plan, 2, db))
    return rankError("select", result);
  dispatchSize(result.elementSize(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    launchKernel(selectKernel<U>, gridFor(n), 256, 0, stream,
                 condition.as<uint8_t>(), dc, lhs.as<U>(), da, rhs.as<U>(), db,
                 result.as<U>(), n);
  });
  return launched("select");
}
