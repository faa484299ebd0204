//===- Gemm.cpp - batched matmul on OpenBLAS ------------------------------===//
//
// One cblas_{s,d}gemm per result batch; when the rhs is shared by every batch
// and the lhs is not broadcast, the batches stack into a single [B*m, k]
// product, which is the linear-layer case and lets OpenBLAS use its threads
// on one large call. f16/bf16 operands are widened to f32 copies first.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstring>

using namespace lamina::rt;
using namespace lamina::rt::detail;

void lamina::rt::detail::setBlasThreads(int n) { openblas_set_num_threads(n); }

namespace {
void gemm(const float *a, const float *b, float *c, int m, int n, int k) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k, b,
              n, 0.0f, c, n);
}
void gemm(const double *a, const double *b, double *c, int m, int n, int k) {
  cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0, a, k, b,
              n, 0.0, c, n);
}

struct BatchPlan {
  int64_t m, n, k, batches;
  std::vector<int64_t> shape, lhsStrides, rhsStrides; // batch dims of result
  bool stack;                                         // one [batches*m, k] gemm
};

template <typename E>
void matmulT(const E *a, const E *b, E *c, const BatchPlan &p) {
  if (p.k == 0) { // BLAS needs lda >= 1; the product of empty sums is 0
    std::fill(c, c + p.batches * p.m * p.n, E(0));
    return;
  }
  if (p.stack) {
    gemm(a, b, c, int(p.batches * p.m), int(p.n), int(p.k));
    return;
  }
  int rank = int(p.shape.size());
  for (int64_t i = 0; i < p.batches; ++i) {
    int64_t la = broadcastOffset(i, p.shape.data(), rank, p.lhsStrides.data());
    int64_t rb = broadcastOffset(i, p.shape.data(), rank, p.rhsStrides.data());
    gemm(a + la * p.m * p.k, b + rb * p.k * p.n, c + i * p.m * p.n, int(p.m),
         int(p.n), int(p.k));
  }
}

template <typename T> std::vector<float> widen(const Tensor &t) {
  std::vector<float> v(t.numElements());
  const T *x = t.as<T>();
  parallelFor(int64_t(v.size()), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      v[i] = load(x[i]);
  });
  return v;
}
} // namespace

Status lamina::rt::matmul(const Tensor &lhs, const Tensor &rhs,
                          const Tensor &result) {
  if (lhs.dtype != rhs.dtype || lhs.dtype != result.dtype ||
      !isFloat(lhs.dtype))
    return Status::error("matmul: needs one float type, got " + describe(lhs) +
                         ", " + describe(rhs) + " -> " + describe(result));
  if (lhs.rank < 2 || rhs.rank < 2)
    return Status::error("matmul: operands need rank >= 2, got " +
                         describe(lhs) + ", " + describe(rhs));
  BatchPlan p;
  p.m = lhs.shape[lhs.rank - 2];
  p.k = lhs.shape[lhs.rank - 1];
  p.n = rhs.shape[rhs.rank - 1];
  int lb = lhs.rank - 2, rb = rhs.rank - 2;
  std::vector<int64_t> batch(std::max(lb, rb));
  int batchRank = 0;
  bool ok =
      rhs.shape[rhs.rank - 2] == p.k &&
      broadcastShape(lhs.shape, lb, rhs.shape, rb, batch.data(), &batchRank);
  std::vector<int64_t> expected = batch;
  expected.insert(expected.end(), {p.m, p.n});
  if (!ok || !hasShape(result, expected))
    return Status::error("matmul: " + describe(lhs) + " x " + describe(rhs) +
                         " does not give " + describe(result));
  p.shape = batch;
  p.batches = numElements(batch.data(), batchRank);
  p.lhsStrides.resize(batchRank);
  p.rhsStrides.resize(batchRank);
  broadcastStrides(lhs.shape, lb, batch.data(), batchRank, p.lhsStrides.data());
  broadcastStrides(rhs.shape, rb, batch.data(), batchRank, p.rhsStrides.data());
  if (result.numElements() == 0)
    return Status::success();
  if (p.m > INT_MAX || p.n > INT_MAX || p.k > INT_MAX)
    return Status::error("matmul: dims of " + describe(lhs) + " x " +
                         describe(rhs) + " exceed BLAS's int");
  bool rhsShared = numElements(rhs.shape, rb) == 1;
  bool lhsFull = numElements(lhs.shape, lb) == p.batches;
  p.stack = rhsShared && lhsFull && p.batches * p.m <= INT_MAX;

  switch (lhs.dtype) {
  case DType::F32:
    matmulT(lhs.as<float>(), rhs.as<float>(), result.as<float>(), p);
    break;
  case DType::F64:
    matmulT(lhs.as<double>(), rhs.as<double>(), result.as<double>(), p);
    break;
  default:
    dispatch(lhs.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
        std::vector<float> a = widen<T>(lhs), b = widen<T>(rhs);
        std::vector<float> c(result.numElements());
        matmulT(a.data(), b.data(), c.data(), p);
        T *y = result.as<T>();
        for (size_t i = 0; i < c.size(); ++i)
          y[i] = store<T>(c[i]);
      }
    });
  }
  return Status::success();
}
