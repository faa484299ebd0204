//===- MoEDispatch.cpp - expert parallelism's row layout ------------------===//
//
// graph.moe_dispatch, graph.moe_combine (and its gradient) and
// graph.moe_row_experts: the (token, pick) pairs sorted by expert, each
// rank's pairs in its block of the static row buffer (GraphMoEOps.td).
// The layout is moe's grouping (MoERouting.h) cut into the ranks' blocks,
// and the combine is moe's, so an expert-parallel layer's result equals
// the single-process one's.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"
#include "MoERouting.h"

#include <algorithm>
#include <vector>

using namespace lamina::rt;
using namespace lamina::rt::detail;

namespace {

template <typename T>
void dispatchRows(const RowLayout &l, const T *in, T *rows, size_t rowCount) {
  const int64_t h = l.r.hidden;
  std::fill_n(rows, rowCount * size_t(h), T(0));
  for (size_t p = 0; p < l.row.size(); ++p)
    if (l.row[p] >= 0)
      std::copy_n(in + int64_t(p) / l.r.k * h, h, rows + l.row[p] * h);
}

template <typename T>
void combineGradients(const RowLayout &l, const T *rows, const T *weights,
                      const T *grad, T *gradRows, size_t rowCount,
                      T *gradWeights) {
  const int64_t h = l.r.hidden, k = l.r.k;
  std::fill_n(gradRows, rowCount * size_t(h), T(0));
  parallelFor(l.r.tokens * k, 64, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      int64_t q = l.row[size_t(p)];
      if (q < 0) {
        gradWeights[p] = T(0);
        continue;
      }
      const T *g = grad + (p / k) * h, *src = rows + q * h;
      T *to = gradRows + q * h;
      T dot = 0, w = weights[p];
      for (int64_t c = 0; c < h; ++c) {
        dot += g[c] * src[c];
        to[c] = g[c] * w;
      }
      gradWeights[p] = dot;
    }
  });
}

} // namespace

Status lamina::rt::moeDispatch(const Tensor &input, const Tensor &indices,
                               int64_t experts, int64_t ranks,
                               const Tensor &rows, const Tensor &counts) {
  if (Status s = checkMoEFloats("moe_dispatch", {&input, &rows}); !s.ok())
    return s;
  RowLayout l;
  if (Status s = l.build("moe_dispatch", rows, indices, experts, ranks);
      !s.ok())
    return s;
  if (input.rank != 2 || input.dim(0) != l.r.tokens ||
      input.dim(1) != l.r.hidden || counts.dtype != DType::I64 ||
      counts.numElements() != experts)
    return Status::error("moe_dispatch: " + describe(input) + " and " +
                         describe(counts) + " do not match " + describe(rows));
  for (int64_t e = 0; e < experts; ++e)
    counts.as<int64_t>()[e] = l.r.count(e);
  if (input.dtype == DType::F64)
    dispatchRows(l, input.as<double>(), rows.as<double>(), size_t(rows.dim(0)));
  else
    dispatchRows(l, input.as<float>(), rows.as<float>(), size_t(rows.dim(0)));
  return Status::success();
}

Status lamina::rt::moeCombine(const Tensor &rows, const Tensor &indices,
                              const Tensor &weights, int64_t experts,
                              int64_t ranks, const Tensor &result) {
  if (Status s = checkMoEFloats("moe_combine", {&rows, &weights, &result});
      !s.ok())
    return s;
  RowLayout l;
  if (Status s = l.build("moe_combine", rows, indices, experts, ranks); !s.ok())
    return s;
  if (weights.numElements() != l.r.tokens * l.r.k ||
      result.numElements() != l.r.tokens * l.r.hidden)
    return Status::error("moe_combine: " + describe(weights) + " and " +
                         describe(result) + " do not match " +
                         describe(indices));
  if (rows.dtype == DType::F64)
    combineInExpertOrder(l.r, l.row.data(), rows.as<double>(), l.r.hidden,
                         weights.as<double>(), result.as<double>());
  else
    combineInExpertOrder(l.r, l.row.data(), rows.as<float>(), l.r.hidden,
                         weights.as<float>(), result.as<float>());
  return Status::success();
}

Status lamina::rt::moeCombineBackward(const Tensor &rows, const Tensor &indices,
                                      const Tensor &weights,
                                      const Tensor &gradResult, int64_t experts,
                                      int64_t ranks, const Tensor &gradRows,
                                      const Tensor &gradWeights) {
  if (Status s =
          checkMoEFloats("moe_combine_grad", {&rows, &weights, &gradResult,
                                              &gradRows, &gradWeights});
      !s.ok())
    return s;
  RowLayout l;
  if (Status s = l.build("moe_combine_grad", rows, indices, experts, ranks);
      !s.ok())
    return s;
  if (weights.numElements() != l.r.tokens * l.r.k ||
      gradWeights.numElements() != l.r.tokens * l.r.k ||
      gradResult.numElements() != l.r.tokens * l.r.hidden ||
      gradRows.numElements() != rows.numElements())
    return Status::error("moe_combine_grad: gradients shaped unlike their "
                         "values");
  if (rows.dtype == DType::F64)
    combineGradients(l, rows.as<double>(), weights.as<double>(),
                     gradResult.as<double>(), gradRows.as<double>(),
                     size_t(rows.dim(0)), gradWeights.as<double>());
  else
    combineGradients(l, rows.as<float>(), weights.as<float>(),
                     gradResult.as<float>(), gradRows.as<float>(),
                     size_t(rows.dim(0)), gradWeights.as<float>());
  return Status::success();
}

Status lamina::rt::moeRowExperts(const Tensor &counts, const Tensor &result) {
  if (counts.rank != 2 || counts.dtype != DType::I64 || result.rank != 2 ||
      result.dim(1) != 1 || result.dtype != DType::I64 ||
      result.dim(0) % counts.dim(0) != 0)
    return Status::error("moe_row_experts: " + describe(counts) +
                         " cannot give " + describe(result));
  const int64_t ranks = counts.dim(0), local = counts.dim(1),
                capacity = result.dim(0) / ranks;
  const int64_t *n = counts.as<int64_t>();
  int64_t *out = result.as<int64_t>();
  for (int64_t q = 0; q < ranks; ++q) {
    int64_t at = q * capacity;
    for (int64_t e = 0; e < local; ++e) {
      int64_t c = n[q * local + e];
      if (c < 0 || at + c > (q + 1) * capacity)
        return Status::error("moe_row_experts: rank " + std::to_string(q) +
                             "'s counts exceed its block of " +
                             std::to_string(capacity) + " rows");
      std::fill_n(out + at, c, e);
      at += c;
    }
    std::fill(out + at, out + (q + 1) * capacity, int64_t(-1));
  }
  return Status::success();
}
