//===- Movement.cpp - reshape, transpose, concat, slice, broadcast, tile --===//
//
// Everything but concat and trilu is one strided copy: the result is dense
// and each source element sits at sum(index[d] * srcStride[d]) with strides
// that may be negative (reversed slices) or 0 (broadcast, tile).
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <algorithm>
#include <cstring>

using namespace lamina::rt;
using namespace lamina::rt::detail;

//===----------------------------------------------------------------------===//
// Strided copy
//===----------------------------------------------------------------------===//

namespace {
constexpr int64_t kTile = 32;

/// Walks rows [begin, end) of the collapsed shape (all dims but the last),
/// calling row(rowIndex, srcOffset).
template <typename F>
void forRows(const std::vector<int64_t> &shape,
             const std::vector<int64_t> &strides, int outerDims, int64_t begin,
             int64_t end, F row) {
  std::vector<int64_t> idx(std::max(outerDims, 1), 0);
  int64_t off = 0;
  for (int64_t r = begin, d = outerDims - 1; d >= 0; --d) {
    idx[d] = r % shape[d];
    r /= shape[d];
    off += idx[d] * strides[d];
  }
  for (int64_t r = begin; r < end; ++r) {
    row(r, off);
    for (int d = outerDims - 1; d >= 0; --d) {
      off += strides[d];
      if (++idx[d] < shape[d])
        break;
      off -= idx[d] * strides[d];
      idx[d] = 0;
    }
  }
}

template <typename U>
void stridedCopyT(const U *src, U *dst, const std::vector<int64_t> &shape,
                  const std::vector<int64_t> &strides) {
  int rank = int(shape.size());
  int64_t inner = shape.back(), innerStride = strides.back();
  // A transpose of the last two dims: copy in tiles so both sides stay in
  // cache instead of striding through the source one element per line.
  if (rank >= 2 && innerStride != 1 && innerStride != 0 &&
      strides[rank - 2] == 1) {
    int64_t rowsPerBlock = shape[rank - 2];
    int64_t tileRows = (rowsPerBlock + kTile - 1) / kTile;
    int64_t blocks = numElements(shape.data(), rank - 2);
    int64_t minItems = std::max<int64_t>(1, kGrain / (kTile * inner));
    parallelFor(blocks * tileRows, minItems, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        int64_t block = t / tileRows, r0 = (t % tileRows) * kTile;
        int64_t off = 0;
        for (int64_t rem = block, d = rank - 3; d >= 0; --d) {
          off += (rem % shape[d]) * strides[d];
          rem /= shape[d];
        }
        U *out = dst + block * rowsPerBlock * inner;
        int64_t r1 = std::min(r0 + kTile, rowsPerBlock);
        for (int64_t c0 = 0; c0 < inner; c0 += kTile) {
          int64_t c1 = std::min(c0 + kTile, inner);
          for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = c0; c < c1; ++c)
              out[r * inner + c] = src[off + r + c * innerStride];
        }
      }
    });
    return;
  }
  int64_t rows = numElements(shape.data(), rank - 1);
  int64_t minRows = std::max<int64_t>(1, kGrain / inner);
  parallelFor(rows, minRows, [&](int64_t b, int64_t e) {
    forRows(shape, strides, rank - 1, b, e, [&](int64_t r, int64_t off) {
      U *out = dst + r * inner;
      const U *in = src + off;
      if (innerStride == 1) {
        std::memcpy(out, in, size_t(inner) * sizeof(U));
      } else if (innerStride == 0) {
        std::fill(out, out + inner, in[0]);
      } else {
        for (int64_t i = 0; i < inner; ++i)
          out[i] = in[i * innerStride];
      }
    });
  });
}
} // namespace

void lamina::rt::detail::stridedCopy(const void *src, void *dst,
                                     size_t elementSize,
                                     std::vector<int64_t> shape,
                                     std::vector<int64_t> srcStrides) {
  // Drop dims of size 1 and merge neighbours that are contiguous in the
  // source, so the inner loop is as long as possible.
  std::vector<int64_t> s, st;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0)
      return;
    if (shape[d] == 1)
      continue;
    if (!s.empty() && st.back() == srcStrides[d] * shape[d]) {
      s.back() *= shape[d];
      st.back() = srcStrides[d];
    } else {
      s.push_back(shape[d]);
      st.push_back(srcStrides[d]);
    }
  }
  if (s.empty()) {
    s = {1};
    st = {0};
  }
  dispatchSize(elementSize, [&](auto tag) {
    using U = typename decltype(tag)::type;
    stridedCopyT(static_cast<const U *>(src), static_cast<U *>(dst), s, st);
  });
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

static Status sameType(const char *op, const Tensor &in, const Tensor &out) {
  if (in.dtype != out.dtype)
    return Status::error(std::string(op) + ": result " + describe(out) +
                         " has another element type than " + describe(in));
  return Status::success();
}

static std::vector<int64_t> stridesOf(const Tensor &t) {
  std::vector<int64_t> s(t.rank);
  rowMajorStrides(t.shape, t.rank, s.data());
  return s;
}

static std::vector<int64_t> shapeOf(const Tensor &t) {
  return std::vector<int64_t>(t.shape, t.shape + t.rank);
}

Status lamina::rt::detail::planTranspose(const Tensor &input,
                                         const int64_t *perm,
                                         const Tensor &result,
                                         CopyPlan &plan) {
  if (Status s = sameType("transpose", input, result); !s.ok())
    return s;
  if (input.rank != result.rank)
    return Status::error("transpose: rank mismatch " + describe(input) +
                         " -> " + describe(result));
  std::vector<bool> seen(input.rank, false);
  for (int i = 0; i < input.rank; ++i) {
    if (perm[i] < 0 || perm[i] >= input.rank || seen[perm[i]])
      return Status::error("transpose: perm is not a permutation of " +
                           std::to_string(input.rank) + " dims");
    seen[perm[i]] = true;
  }
  std::vector<int64_t> in = stridesOf(input);
  plan = CopyPlan{shapeOf(result), std::vector<int64_t>(input.rank), 0};
  for (int i = 0; i < input.rank; ++i) {
    if (result.shape[i] != input.shape[perm[i]])
      return Status::error("transpose: result " + describe(result) +
                           " does not match perm of " + describe(input));
    plan.strides[i] = in[perm[i]];
  }
  return Status::success();
}

Status lamina::rt::detail::planSlice(const Tensor &input,
                                     const int64_t *starts,
                                     const int64_t *sizes,
                                     const int64_t *steps,
                                     const Tensor &result, CopyPlan &plan) {
  if (Status s = sameType("slice", input, result); !s.ok())
    return s;
  if (input.rank != result.rank)
    return Status::error("slice: rank mismatch " + describe(input) + " -> " +
                         describe(result));
  std::vector<int64_t> in = stridesOf(input);
  plan = CopyPlan{shapeOf(result), std::vector<int64_t>(input.rank), 0};
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
    plan.base += starts[d] * in[d];
    plan.strides[d] = steps[d] * in[d];
  }
  if (empty) // nothing is read: starts need not be in range
    plan.base = 0;
  return Status::success();
}

Status lamina::rt::detail::planBroadcastCopy(const Tensor &input,
                                         const Tensor &result,
                                         CopyPlan &plan) {
  if (Status s = sameType("broadcast", input, result); !s.ok())
    return s;
  plan = CopyPlan{shapeOf(result), std::vector<int64_t>(result.rank), 0};
  if (!broadcastStrides(input.shape, input.rank, result.shape, result.rank,
                        plan.strides.data()))
    return Status::error("broadcast: " + describe(input) +
                         " does not broadcast to " + describe(result));
  return Status::success();
}

Status lamina::rt::detail::planTile(const Tensor &input,
                                    const int64_t *repeats,
                                    const Tensor &result, CopyPlan &plan) {
  if (Status s = sameType("tile", input, result); !s.ok())
    return s;
  if (input.rank != result.rank)
    return Status::error("tile: rank mismatch " + describe(input) + " -> " +
                         describe(result));
  // Result [r0*d0, r1*d1, ...] is row-major [r0, d0, r1, d1, ...]; the
  // repeat dims read with stride 0.
  std::vector<int64_t> in = stridesOf(input);
  plan = CopyPlan{};
  for (int d = 0; d < input.rank; ++d) {
    if (repeats[d] < 0 || result.shape[d] != input.shape[d] * repeats[d])
      return Status::error("tile: result " + describe(result) +
                           " is not input " + describe(input) +
                           " times repeats");
    plan.shape.insert(plan.shape.end(), {repeats[d], input.shape[d]});
    plan.strides.insert(plan.strides.end(), {0, in[d]});
  }
  return Status::success();
}

Status lamina::rt::detail::checkReshape(const Tensor &input,
                                        const Tensor &result) {
  if (Status s = sameType("reshape", input, result); !s.ok())
    return s;
  if (input.numElements() != result.numElements())
    return Status::error("reshape: " + describe(input) + " and " +
                         describe(result) + " differ in element count");
  return Status::success();
}

Status lamina::rt::detail::checkConcat(const Tensor *inputs, int numInputs,
                                       int64_t &axis, const Tensor &result) {
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
  return Status::success();
}

Status lamina::rt::detail::checkTrilu(const Tensor &input,
                                      const Tensor &result) {
  if (Status s = sameType("trilu", input, result); !s.ok())
    return s;
  if (input.rank < 2 || !sameShape(input, result))
    return Status::error("trilu: needs rank >= 2 and equal shapes, got " +
                         describe(input) + " -> " + describe(result));
  return Status::success();
}

Status lamina::rt::reshape(const Tensor &input, const Tensor &result) {
  if (Status s = checkReshape(input, result); !s.ok())
    return s;
  if (input.data != result.data)
    std::memcpy(result.data, input.data, input.byteSize());
  return Status::success();
}

/// Runs a plan on the host.
static Status copy(Status planned, const CopyPlan &plan, const Tensor &input,
                   const Tensor &result) {
  if (!planned.ok())
    return planned;
  stridedCopy(plan.source(input), result.data, input.elementSize(),
              plan.shape, plan.strides);
  return Status::success();
}

Status lamina::rt::transpose(const Tensor &input, const int64_t *perm,
                             const Tensor &result) {
  CopyPlan plan;
  return copy(planTranspose(input, perm, result, plan), plan, input, result);
}

Status lamina::rt::concat(const Tensor *inputs, int numInputs, int64_t axis,
                          const Tensor &result) {
  if (Status s = checkConcat(inputs, numInputs, axis, result); !s.ok())
    return s;
  size_t es = result.elementSize();
  int64_t outer = numElements(result.shape, int(axis));
  int64_t after =
      numElements(result.shape + axis + 1, result.rank - int(axis) - 1);
  int64_t innerElems = result.shape[axis] * after;
  if (outer == 0 || innerElems == 0)
    return Status::success();
  std::vector<size_t> rowBytes(numInputs);
  for (int k = 0; k < numInputs; ++k)
    rowBytes[k] = size_t(inputs[k].shape[axis] * after) * es;
  size_t outRow = size_t(innerElems) * es;
  parallelFor(outer, std::max<int64_t>(1, kGrain / innerElems),
              [&](int64_t b, int64_t e) {
                for (int64_t r = b; r < e; ++r) {
                  char *dst = static_cast<char *>(result.data) + r * outRow;
                  for (int k = 0; k < numInputs; ++k) {
                    if (rowBytes[k] == 0) // an empty input may have no data
                      continue;
                    std::memcpy(dst,
                                static_cast<const char *>(inputs[k].data) +
                                    r * rowBytes[k],
                                rowBytes[k]);
                    dst += rowBytes[k];
                  }
                }
              });
  return Status::success();
}

Status lamina::rt::slice(const Tensor &input, const int64_t *starts,
                         const int64_t *sizes, const int64_t *steps,
                         const Tensor &result) {
  CopyPlan plan;
  return copy(planSlice(input, starts, sizes, steps, result, plan), plan,
              input, result);
}

Status lamina::rt::broadcast(const Tensor &input, const Tensor &result) {
  CopyPlan plan;
  return copy(planBroadcastCopy(input, result, plan), plan, input, result);
}

Status lamina::rt::tile(const Tensor &input, const int64_t *repeats,
                        const Tensor &result) {
  CopyPlan plan;
  return copy(planTile(input, repeats, result, plan), plan, input, result);
}

Status lamina::rt::trilu(const Tensor &input, int64_t k, bool upper,
                         const Tensor &result) {
  if (Status s = checkTrilu(input, result); !s.ok())
    return s;
  int64_t m = input.shape[input.rank - 2], n = input.shape[input.rank - 1];
  int64_t rows = numElements(input.shape, input.rank - 1);
  size_t es = input.elementSize();
  bool inPlace = input.data == result.data;
  parallelFor(
      rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1)),
      [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          int64_t i = r % m;
          // Kept columns [lo, hi): j - i >= k, or j - i <= k.
          int64_t lo = upper ? std::clamp<int64_t>(i + k, 0, n) : 0;
          int64_t hi = upper ? n : std::clamp<int64_t>(i + k + 1, 0, n);
          char *out = static_cast<char *>(result.data) + r * n * es;
          const char *in = static_cast<const char *>(input.data) + r * n * es;
          std::memset(out, 0, size_t(lo) * es);
          if (!inPlace && hi > lo)
            std::memcpy(out + lo * es, in + lo * es, size_t(hi - lo) * es);
          std::memset(out + hi * es, 0, size_t(n - hi) * es);
        }
      });
  return Status::success();
}
