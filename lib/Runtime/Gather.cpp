//===- Gather.cpp - gather, gather_nd, scatter_nd -------------------------===//
//
// Each kernel first turns its indices into element offsets, checking every
// one, so an out-of-range index is reported before anything is written. The
// copies then move whole slices with memcpy.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <cstring>

using namespace lamina::rt;
using namespace lamina::rt::detail;

namespace {
Status checkIndexType(const char *op, const Tensor &indices) {
  if (indices.dtype != DType::I32 && indices.dtype != DType::I64)
    return Status::error(std::string(op) +
                         ": indices must be i32 or i64, got " +
                         describe(indices));
  return Status::success();
}

int64_t readIndex(const Tensor &indices, int64_t i) {
  return indices.dtype == DType::I64 ? indices.as<int64_t>()[i]
                                     : int64_t(indices.as<int32_t>()[i]);
}

/// idx in [-size, size) becomes idx in [0, size); anything else is an error
/// naming the index's position in the indices tensor.
Status normaliseIndex(const char *op, int64_t &idx, int64_t size,
                      int64_t position) {
  int64_t original = idx;
  if (idx < 0)
    idx += size;
  if (idx < 0 || idx >= size)
    return Status::error(
        std::string(op) + ": index " + std::to_string(original) +
        " at position " + std::to_string(position) +
        " is out of range for a dim of size " + std::to_string(size));
  return Status::success();
}

/// Element offsets into `data` of the k-tuples that make up the last dim of
/// `indices` (each tuple indexes dims first..first+k-1 of data), plus
/// `batchStride` times the tuple's batch number (`perBatch` tuples each).
Status tupleOffsets(const char *op, const Tensor &data, const Tensor &indices,
                    int first, int64_t batchStride, int64_t perBatch,
                    std::vector<int64_t> &offsets) {
  int64_t k = indices.shape[indices.rank - 1];
  int64_t tuples = numElements(indices.shape, indices.rank - 1);
  std::vector<int64_t> strides(data.rank);
  rowMajorStrides(data.shape, data.rank, strides.data());
  offsets.resize(tuples);
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = (t / perBatch) * batchStride;
    for (int64_t j = 0; j < k; ++j) {
      int64_t idx = readIndex(indices, t * k + j);
      Status s = normaliseIndex(op, idx, data.shape[first + j], t * k + j);
      if (!s.ok())
        return s;
      off += idx * strides[first + j];
    }
    offsets[t] = off;
  }
  return Status::success();
}

/// result slice t (of `slice` elements) = data at offsets[t].
void copySlices(const Tensor &data, const std::vector<int64_t> &offsets,
                int64_t slice, const Tensor &result) {
  size_t bytes = size_t(slice) * data.elementSize();
  const char *src = static_cast<const char *>(data.data);
  char *dst = static_cast<char *>(result.data);
  size_t es = data.elementSize();
  parallelFor(int64_t(offsets.size()),
              std::max<int64_t>(1, kGrain / std::max<int64_t>(slice, 1)),
              [&](int64_t b, int64_t e) {
                for (int64_t t = b; t < e; ++t)
                  std::memcpy(dst + t * bytes, src + offsets[t] * es, bytes);
              });
}
} // namespace

Status lamina::rt::gather(const Tensor &data, const Tensor &indices,
                          int64_t axis, const Tensor &result) {
  Status s = checkGather(data, indices, axis, result);
  if (!s.ok())
    return s;
  int64_t outer, size, inner;
  splitAround(data, int(axis), outer, size, inner);
  int64_t count = indices.numElements();
  std::vector<int64_t> idx(count);
  for (int64_t i = 0; i < count; ++i) {
    idx[i] = readIndex(indices, i);
    s = normaliseIndex("gather", idx[i], size, i);
    if (!s.ok())
      return s;
  }
  std::vector<int64_t> offsets(outer * count);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < count; ++i)
      offsets[o * count + i] = (o * size + idx[i]) * inner;
  copySlices(data, offsets, inner, result);
  return Status::success();
}

Status lamina::rt::detail::checkGatherND(const Tensor &data,
                                         const Tensor &indices,
                                         int64_t batchDims,
                                         const Tensor &result, int64_t &k) {
  if (Status s = checkIndexType("gather_nd", indices); !s.ok())
    return s;
  int r = data.rank, q = indices.rank;
  int64_t b = batchDims;
  k = q >= 1 ? indices.shape[q - 1] : 0;
  bool ok = q >= 1 && b >= 0 && b < std::min(r, q) && k >= 1 && b + k <= r;
  for (int d = 0; ok && d < b; ++d)
    ok = data.shape[d] == indices.shape[d];
  if (!ok)
    return Status::error("gather_nd: indices " + describe(indices) +
                         " with batch_dims " + std::to_string(b) +
                         " do not index " + describe(data));
  std::vector<int64_t> expected(indices.shape, indices.shape + q - 1);
  expected.insert(expected.end(), data.shape + b + k, data.shape + r);
  if (result.dtype != data.dtype || !hasShape(result, expected))
    return Status::error("gather_nd: result " + describe(result) +
                         " should be " +
                         shapeString(expected.data(), int(expected.size())) +
                         "x" + dtypeName(data.dtype));
  return Status::success();
}

Status lamina::rt::gatherND(const Tensor &data, const Tensor &indices,
                            int64_t batchDims, const Tensor &result) {
  int64_t k;
  Status s = checkGatherND(data, indices, batchDims, result, k);
  if (!s.ok())
    return s;
  int r = data.rank, q = indices.rank;
  int64_t b = batchDims;
  int64_t perBatch = numElements(indices.shape + b, q - 1 - int(b));
  int64_t batchStride = numElements(data.shape + b, r - int(b));
  int64_t slice = numElements(data.shape + b + k, r - int(b + k));
  if (result.numElements() == 0)
    return Status::success();
  std::vector<int64_t> offsets;
  s = tupleOffsets("gather_nd", data, indices, int(b), batchStride,
                   std::max<int64_t>(perBatch, 1), offsets);
  if (!s.ok())
    return s;
  copySlices(data, offsets, slice, result);
  return Status::success();
}

bool lamina::rt::parseScatterReduction(const char *name,
                                       ScatterReduction &out) {
  static const struct {
    const char *name;
    ScatterReduction value;
  } table[] = {{"none", ScatterReduction::None},
               {"add", ScatterReduction::Add},
               {"mul", ScatterReduction::Mul},
               {"max", ScatterReduction::Max},
               {"min", ScatterReduction::Min}};
  for (const auto &entry : table)
    if (std::strcmp(name, entry.name) == 0) {
      out = entry.value;
      return true;
    }
  return false;
}

Status lamina::rt::detail::checkScatterND(const Tensor &data,
                                          const Tensor &indices,
                                          const Tensor &updates,
                                          ScatterReduction reduction,
                                          const Tensor &result, int64_t &k) {
  if (Status s = checkIndexType("scatter_nd", indices); !s.ok())
    return s;
  if (result.dtype != data.dtype || !sameShape(data, result) ||
      updates.dtype != data.dtype)
    return Status::error("scatter_nd: data " + describe(data) + ", updates " +
                         describe(updates) + " and result " + describe(result) +
                         " must share a type");
  int q = indices.rank;
  k = q >= 1 ? indices.shape[q - 1] : -1;
  std::vector<int64_t> expected;
  if (q >= 1 && k <= data.rank) {
    expected.assign(indices.shape, indices.shape + q - 1);
    expected.insert(expected.end(), data.shape + k, data.shape + data.rank);
  }
  if (k < 0 || k > data.rank || !hasShape(updates, expected))
    return Status::error("scatter_nd: updates " + describe(updates) +
                         " do not match indices " + describe(indices) +
                         " into " + describe(data));
  if (data.dtype == DType::I1 && (reduction == ScatterReduction::Add ||
                                  reduction == ScatterReduction::Mul))
    return Status::error("scatter_nd: add/mul are not defined on i1");
  return Status::success();
}

Status lamina::rt::scatterND(const Tensor &data, const Tensor &indices,
                             const Tensor &updates, ScatterReduction reduction,
                             const Tensor &result) {
  int64_t k;
  Status s = checkScatterND(data, indices, updates, reduction, result, k);
  if (!s.ok())
    return s;
  int64_t slice = numElements(data.shape + k, data.rank - int(k));
  std::vector<int64_t> offsets;
  s = tupleOffsets("scatter_nd", data, indices, 0, 0, 1, offsets);
  if (!s.ok())
    return s;
  if (data.data != result.data)
    std::memcpy(result.data, data.data, data.byteSize());
  // In order, serially: with duplicate indices a later update sees (or, for
  // None, overwrites) the earlier ones.
  if (reduction == ScatterReduction::None) {
    size_t bytes = size_t(slice) * data.elementSize();
    for (size_t t = 0; t < offsets.size(); ++t)
      std::memcpy(static_cast<char *>(result.data) +
                      offsets[t] * data.elementSize(),
                  static_cast<const char *>(updates.data) + t * bytes, bytes);
    return Status::success();
  }
  dispatch(data.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = Compute<T>;
    T *y = result.as<T>();
    const T *u = updates.as<T>();
    for (size_t t = 0; t < offsets.size(); ++t) {
      T *dst = y + offsets[t];
      const T *src = u + t * slice;
      for (int64_t i = 0; i < slice; ++i) {
        C a = load(dst[i]), v = load(src[i]);
        switch (reduction) {
        case ScatterReduction::Add:
          a = math::add(a, v);
          break;
        case ScatterReduction::Mul:
          a = math::mul(a, v);
          break;
        case ScatterReduction::Max:
          a = math::maximum(a, v);
          break;
        default:
          a = math::minimum(a, v);
          break;
        }
        dst[i] = store<T>(a);
      }
    }
  });
  return Status::success();
}

Status lamina::rt::detail::checkGather(const Tensor &data,
                                       const Tensor &indices, int64_t &axis,
                                       const Tensor &result) {
  if (Status s = checkIndexType("gather", indices); !s.ok())
    return s;
  if (!normaliseAxis(axis, data.rank))
    return Status::error("gather: axis out of range for " + describe(data));
  std::vector<int64_t> expected(data.shape, data.shape + axis);
  expected.insert(expected.end(), indices.shape, indices.shape + indices.rank);
  expected.insert(expected.end(), data.shape + axis + 1,
                  data.shape + data.rank);
  if (result.dtype != data.dtype || !hasShape(result, expected))
    return Status::error("gather: result " + describe(result) + " should be " +
                         shapeString(expected.data(), int(expected.size())) +
                         "x" + dtypeName(data.dtype));
  return Status::success();
}
