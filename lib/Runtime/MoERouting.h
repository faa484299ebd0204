//===- MoERouting.h - the experts' rows, grouped ----------------*- C++ -*-===//
//
// Private to lib/Runtime: how moe and moe_grad group the (token, pick)
// pairs by expert, shared by the host kernels (MoE.cpp) and the CUDA ones
// (Cuda/MoE.cu), which route on the host too, so both run each expert over
// the same rows in the same order.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_MOEROUTING_H
#define LAMINA_LIB_RUNTIME_MOEROUTING_H

#include "Internal.h"

#include <algorithm>
#include <initializer_list>
#include <numeric>
#include <string>
#include <vector>

namespace lamina::rt::detail {

/// The MoE kernels' float operands: f32 or f64, all alike.
inline Status checkMoEFloats(const char *op,
                             std::initializer_list<const Tensor *> ts) {
  DType first = (*ts.begin())->dtype;
  for (const Tensor *t : ts)
    if ((t->dtype != DType::F32 && t->dtype != DType::F64) || t->dtype != first)
      return Status::error(std::string(op) +
                           ": expects f32 or f64 tensors alike, got " +
                           describe(*t));
  return Status::success();
}

/// moe_grad's gradients: each shaped as its value.
inline Status checkMoEGradients(const Tensor &input, const Tensor &weights,
                                const Tensor &gateUp, const Tensor &down,
                                const Tensor &gradResult,
                                const Tensor &gradInput,
                                const Tensor &gradWeights,
                                const Tensor &gradGateUp,
                                const Tensor &gradDown) {
  if (gradResult.numElements() != input.numElements() ||
      gradInput.numElements() != input.numElements() ||
      gradWeights.numElements() != weights.numElements() ||
      gradGateUp.numElements() != gateUp.numElements() ||
      gradDown.numElements() != down.numElements())
    return Status::error("moe_grad: gradients shaped unlike their values");
  return Status::success();
}

/// topk's shapes: `values` and `indices` (i64) the k largest of each row
/// of `input`'s last dim.
inline Status checkTopK(const Tensor &input, int64_t k, const Tensor &values,
                        const Tensor &indices) {
  if (input.rank < 1 || k < 1 || k > input.dim(input.rank - 1) ||
      values.rank != input.rank || indices.rank != input.rank ||
      indices.dtype != DType::I64 || values.dim(values.rank - 1) != k ||
      values.numElements() != indices.numElements() ||
      values.numElements() * input.dim(input.rank - 1) !=
          input.numElements() * k)
    return Status::error("topk: " + describe(input) + " with k " +
                         std::to_string(k) + " cannot give " +
                         describe(values) + " and " + describe(indices));
  return Status::success();
}

/// Who each expert serves: rows [offset[e], offset[e+1]) of `slot` are the
/// (token * k + j) pairs routed to expert e, in token order; `row` maps a
/// pair back to its row (-1: a negative index, no expert).
struct Routing {
  int64_t tokens = 0, k = 0, experts = 0, hidden = 0, inner = 0;
  std::vector<int64_t> offset, slot, row;

  /// moe's and moe_grad's operands, then group().
  Status build(const Tensor &input, const Tensor &indices,
               const Tensor &weights, const Tensor &gateUp,
               const Tensor &down) {
    if (input.rank != 2 || indices.rank != 2 || weights.rank != 2 ||
        gateUp.rank != 3 || down.rank != 3)
      return Status::error("moe: expects input [T, H], indices and weights "
                           "[T, k], gate_up [E, 2I, H] and down [E, H, I]");
    hidden = input.dim(1), inner = down.dim(2);
    if (indices.dim(0) != input.dim(0) || weights.dim(0) != input.dim(0) ||
        weights.dim(1) != indices.dim(1) || gateUp.dim(1) != 2 * inner ||
        gateUp.dim(2) != hidden || down.dim(0) != gateUp.dim(0) ||
        down.dim(1) != hidden)
      return Status::error("moe: inconsistent shapes " + describe(input) +
                           ", " + describe(indices) + ", " + describe(weights) +
                           ", " + describe(gateUp) + ", " + describe(down));
    return group("moe", indices, gateUp.dim(0));
  }

  /// The counting sort of `indices` [T, k] (i32 or i64) over `experts`.
  Status group(const char *op, const Tensor &indices, int64_t numExperts) {
    if (indices.rank != 2 ||
        (indices.dtype != DType::I32 && indices.dtype != DType::I64))
      return Status::error(std::string(op) +
                           ": indices must be i32 or i64 [T, k], got " +
                           describe(indices));
    tokens = indices.dim(0), k = indices.dim(1), experts = numExperts;
    std::vector<int64_t> expert(size_t(tokens * k));
    offset.assign(size_t(experts + 1), 0);
    for (int64_t p = 0; p < tokens * k; ++p) {
      int64_t e = indices.dtype == DType::I64
                      ? indices.as<int64_t>()[p]
                      : int64_t(indices.as<int32_t>()[p]);
      // Negative: no expert (an expert-parallel rank's empty rows).
      if (e >= experts)
        return Status::error(std::string(op) + ": expert index " +
                             std::to_string(e) + " of token " +
                             std::to_string(p / k) + " is outside [0, " +
                             std::to_string(experts) + ")");
      expert[size_t(p)] = e;
      if (e >= 0)
        ++offset[size_t(e + 1)];
    }
    std::partial_sum(offset.begin(), offset.end(), offset.begin());
    slot.assign(size_t(offset.back()), 0);
    row.assign(size_t(tokens * k), -1);
    std::vector<int64_t> next(offset.begin(), offset.end() - 1);
    for (int64_t p = 0; p < tokens * k; ++p) {
      if (expert[size_t(p)] < 0)
        continue;
      int64_t r = next[size_t(expert[size_t(p)])]++;
      slot[size_t(r)] = p;
      row[size_t(p)] = r;
    }
    return Status::success();
  }
  int64_t count(int64_t e) const {
    return offset[size_t(e + 1)] - offset[size_t(e)];
  }
  /// Token t's slots in expert order (what the sum runs over), without
  /// those that go to no expert.
  void slotsInExpertOrder(int64_t t, std::vector<int64_t> &out) const {
    out.clear();
    for (int64_t p = t * k; p < (t + 1) * k; ++p)
      if (row[size_t(p)] >= 0)
        out.push_back(p);
    std::sort(out.begin(), out.end(), [&](int64_t a, int64_t b) {
      return row[size_t(a)] < row[size_t(b)];
    });
  }
};

/// Expert parallelism's rows (moe_dispatch, moe_combine and its gradient):
/// the pairs grouped by expert (Routing), each rank's experts' rows in its
/// block of `capacity` rows: row[p] for pair p = t * k + j (-1: none).
/// Only `rows`' shape is read (it may be device memory); `indices` must be
/// host memory.
struct RowLayout {
  Routing r;
  int64_t capacity = 0, local = 0;
  std::vector<int64_t> row;

  Status build(const char *op, const Tensor &rows, const Tensor &indices,
               int64_t experts, int64_t ranks) {
    if (rows.rank != 2 || ranks < 1 || experts < 1 || experts % ranks != 0 ||
        rows.dim(0) % ranks != 0)
      return Status::error(std::string(op) + ": " + describe(rows) +
                           " is no row blocks for " + std::to_string(experts) +
                           " experts over " + std::to_string(ranks) + " ranks");
    if (Status s = r.group(op, indices, experts); !s.ok())
      return s;
    r.hidden = rows.dim(1);
    capacity = rows.dim(0) / ranks, local = experts / ranks;
    // Routing's rows, experts in order, cut at each rank's experts.
    std::vector<int64_t> blocked(size_t(r.offset.back()));
    for (int64_t q = 0; q < ranks; ++q) {
      int64_t first = r.offset[size_t(q * local)],
              last = r.offset[size_t((q + 1) * local)];
      if (last - first > capacity)
        return Status::error(std::string(op) + ": " +
                             std::to_string(last - first) + " rows for rank " +
                             std::to_string(q) + " exceed its block of " +
                             std::to_string(capacity));
      for (int64_t d = first; d < last; ++d)
        blocked[size_t(d)] = q * capacity + d - first;
    }
    row.resize(r.row.size());
    for (size_t p = 0; p < row.size(); ++p)
      row[p] = r.row[p] < 0 ? -1 : blocked[size_t(r.row[p])];
    return Status::success();
  }
};

/// dst[t] = sum over token t's pairs p, in expert order, of rows[rowOf[p]]
/// (H wide; times scale[p] when given): moe's combine and its input
/// gradient's sum, and moe_combine's over the expert-parallel layout
/// (whose rows keep the experts' order).
template <typename T>
void combineInExpertOrder(const Routing &r, const int64_t *rowOf,
                          const T *rows, int64_t hidden, const T *scale,
                          T *dst) {
  parallelFor(r.tokens, 16, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> slots;
    for (int64_t t = begin; t < end; ++t) {
      T *to = dst + t * hidden;
      std::fill_n(to, hidden, T(0));
      r.slotsInExpertOrder(t, slots);
      for (int64_t p : slots) {
        const T *src = rows + rowOf[p] * hidden;
        T w = scale ? scale[p] : T(1);
        for (int64_t c = 0; c < hidden; ++c)
          to[c] += src[c] * w;
      }
    }
  });
}

} // namespace lamina::rt::detail

#endif // LAMINA_LIB_RUNTIME_MOEROUTING_H
