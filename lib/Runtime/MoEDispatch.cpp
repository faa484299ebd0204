//===- MoEDispatch.cpp - expert parallelism's row layout ------------------===//
//
// graph.moe_dispatch, graph.moe_combine (and its gradient) and
// graph.moe_row_experts: the (token, pick) pairs sorted by expert, each
// rank's pairs in its block of the static row buffer (GraphMoEOps.td).
// The combine sums a token's rows in expert order, as moe does, so an
// expert-parallel layer's result equals the single-process one's.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"
#include "MoERouting.h"

#include <algorithm>
#include <vector>

using namespace lamina::rt;
using namespace lamina::rt::detail;

namespace {

/// Where each pair's row lies: row[p] for pair p = t * k + j; counts[q *
/// local + e] pairs for rank q's expert e.
struct RowLayout {
  int64_t tokens = 0, k = 0, hidden = 0, capacity = 0, local = 0;
  std::vector<int64_t> row, counts;

  Status build(const char *op, const Tensor &rows, const Tensor &indices,
               int64_t experts, int64_t ranks) {
    if (rows.rank != 2 || indices.rank != 2 || ranks < 1 || experts < 1 ||
        experts % ranks != 0 || rows.dim(0) % ranks != 0 ||
        (indices.dtype != DType::I64 && indices.dtype != DType::I32))
      return Status::error(std::string(op) + ": " + describe(rows) + " and " +
                           describe(indices) + " do not split " +
                           std::to_string(experts) + " experts over " +
                           std::to_string(ranks) + " ranks");
    tokens = indices.dim(0), k = indices.dim(1), hidden = rows.dim(1);
    capacity = rows.dim(0) / ranks, local = experts / ranks;
    std::vector<int64_t> expert(size_t(tokens * k));
    counts.assign(size_t(experts), 0);
    for (int64_t p = 0; p < tokens * k; ++p) {
      int64_t e = indices.dtype == DType::I64
                      ? indices.as<int64_t>()[p]
                      : int64_t(indices.as<int32_t>()[p]);
      if (e < 0 || e >= experts)
        return Status::error(std::string(op) + ": expert index " +
                             std::to_string(e) + " of token " +
                             std::to_string(p / k) + " is outside [0, " +
                             std::to_string(experts) + ")");
      expert[size_t(p)] = e;
      ++counts[size_t(e)];
    }
    // Each expert's first row: its rank's block, after the rank's lower
    // experts.
    std::vector<int64_t> next(static_cast<size_t>(experts));
    for (int64_t q = 0; q < ranks; ++q) {
      int64_t at = q * capacity;
      for (int64_t e = q * local; e < (q + 1) * local; ++e) {
        next[size_t(e)] = at;
        at += counts[size_t(e)];
      }
      if (at > (q + 1) * capacity)
        return Status::error(
            std::string(op) + ": " + std::to_string(at - q * capacity) +
            " rows for rank " + std::to_string(q) + " exceed its block of " +
            std::to_string(capacity));
    }
    row.resize(size_t(tokens * k));
    for (int64_t p = 0; p < tokens * k; ++p)
      row[size_t(p)] = next[size_t(expert[size_t(p)])]++;
    return Status::success();
  }

  /// Token t's pairs in expert order (their rows ascending).
  void pairsInOrder(int64_t t, std::vector<int64_t> &out) const {
    out.resize(size_t(k));
    for (int64_t j = 0; j < k; ++j)
      out[size_t(j)] = t * k + j;
    std::sort(out.begin(), out.end(), [&](int64_t a, int64_t b) {
      return row[size_t(a)] < row[size_t(b)];
    });
  }
};

template <typename T>
void dispatchRows(const RowLayout &l, const T *in, T *rows, size_t rowCount) {
  std::fill_n(rows, rowCount * size_t(l.hidden), T(0));
  for (int64_t p = 0; p < l.tokens * l.k; ++p)
    std::copy_n(in + (p / l.k) * l.hidden, l.hidden,
                rows + l.row[size_t(p)] * l.hidden);
}

template <typename T>
void combineRows(const RowLayout &l, const T *rows, const T *weights, T *out) {
  const int64_t h = l.hidden;
  parallelFor(l.tokens, 16, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> pairs;
    for (int64_t t = begin; t < end; ++t) {
      T *to = out + t * h;
      std::fill_n(to, h, T(0));
      l.pairsInOrder(t, pairs);
      for (int64_t p : pairs) {
        const T *src = rows + l.row[size_t(p)] * h;
        T w = weights[p];
        for (int64_t c = 0; c < h; ++c)
          to[c] += src[c] * w;
      }
    }
  });
}

template <typename T>
void combineGradients(const RowLayout &l, const T *rows, const T *weights,
                      const T *grad, T *gradRows, size_t rowCount,
                      T *gradWeights) {
  const int64_t h = l.hidden;
  std::fill_n(gradRows, rowCount * size_t(h), T(0));
  parallelFor(l.tokens * l.k, 64, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const T *g = grad + (p / l.k) * h, *src = rows + l.row[size_t(p)] * h;
      T *to = gradRows + l.row[size_t(p)] * h;
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
  if (input.rank != 2 || input.dim(0) != l.tokens || input.dim(1) != l.hidden ||
      counts.dtype != DType::I64 || counts.numElements() != experts)
    return Status::error("moe_dispatch: " + describe(input) + " and " +
                         describe(counts) + " do not match " + describe(rows));
  std::copy(l.counts.begin(), l.counts.end(), counts.as<int64_t>());
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
  if (weights.numElements() != l.tokens * l.k ||
      result.numElements() != l.tokens * l.hidden)
    return Status::error("moe_combine: " + describe(weights) + " and " +
                         describe(result) + " do not match " +
                         describe(indices));
  if (rows.dtype == DType::F64)
    combineRows(l, rows.as<double>(), weights.as<double>(),
                result.as<double>());
  else
    combineRows(l, rows.as<float>(), weights.as<float>(), result.as<float>());
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
  if (weights.numElements() != l.tokens * l.k ||
      gradWeights.numElements() != l.tokens * l.k ||
      gradResult.numElements() != l.tokens * l.hidden ||
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
