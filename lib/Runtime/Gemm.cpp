//===- Gemm.cpp - batched matmul on OpenBLAS ------------------------------===//
//
// One cblas_{s,d}gemm per result batch (split over threads by batches, or
// by rows/columns of one large product); when the rhs is shared by every
// batch and the lhs is not broadcast, the batches stack into a single
// [B*m, k] product, the linear-layer case. Transposed operands go to BLAS as
// transposed, never copied. f16/bf16 operands are widened to f32 first.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <mutex>

using namespace lamina::rt;
using namespace lamina::rt::detail;

// OpenBLAS always runs single-threaded: the runtime splits each product over
// its own threads (parallelFor), so OpenBLAS's idle threads never spin
// (sched_yield) against the elementwise kernels between calls.
void lamina::rt::detail::setBlasThreads(int) { openblas_set_num_threads(1); }

namespace {
std::once_flag blasInit;

CBLAS_TRANSPOSE tr(bool t) { return t ? CblasTrans : CblasNoTrans; }

/// C[m, n] (leading dim ldc) = op(A) op(B) + beta C on one thread (beta 0
/// or 1).
void gemm(const float *a, int lda, bool ta, const float *b, int ldb, bool tb,
          float *c, int ldc, int m, int n, int k, float beta) {
  cblas_sgemm(CblasRowMajor, tr(ta), tr(tb), m, n, k, 1.0f, a, lda, b, ldb,
              beta, c, ldc);
}
void gemm(const double *a, int lda, bool ta, const double *b, int ldb, bool tb,
          double *c, int ldc, int m, int n, int k, double beta) {
  cblas_dgemm(CblasRowMajor, tr(ta), tr(tb), m, n, k, 1.0, a, lda, b, ldb,
              beta, c, ldc);
}

/// One dense product C[m, n] = op(A) op(B), split over threads by rows of C
/// (or by columns when there are fewer rows than columns); each piece is a
/// single-threaded BLAS call on a sub-matrix.
template <typename E>
void gemmParallel(const E *a, bool ta, const E *b, bool tb, E *c, int64_t m,
                  int64_t n, int64_t k, E beta) {
  int lda = int(ta ? m : k), ldb = int(tb ? k : n), ldc = int(n);
  // Pieces of at least ~2 MFLOP, so small products stay on one thread.
  int64_t pieces = std::max<int64_t>(1, std::min<int64_t>(
      getNumThreads(), 2 * m * n * k / (int64_t(1) << 21)));
  bool byRows = m >= n;
  int64_t extent = byRows ? m : n;
  pieces = std::min(pieces, extent);
  parallelFor(pieces, 1, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      int64_t lo = extent * p / pieces, hi = extent * (p + 1) / pieces;
      if (hi == lo)
        continue;
      if (byRows)
        gemm(ta ? a + lo : a + lo * k, lda, ta, b, ldb, tb, c + lo * n, ldc,
             int(hi - lo), int(n), int(k), beta);
      else
        gemm(a, lda, ta, tb ? b + lo * k : b + lo, ldb, tb, c + lo, ldc,
             int(m), int(hi - lo), int(k), beta);
    }
  });
}

struct BatchPlan {
  int64_t m, n, k, batches;
  bool ta, tb;
  std::vector<int64_t> shape, lhsStrides, rhsStrides; // batch dims of result
  bool stack;                                         // one [batches*m, k] gemm
};

/// c (the result's elements, E = its accumulator type) = op(a) op(b), plus
/// what c holds already when `accumulate`.
template <typename E>
void matmulT(const E *a, const E *b, E *c, const BatchPlan &p,
             bool accumulate) {
  std::call_once(blasInit, [] { openblas_set_num_threads(1); });
  E beta = accumulate ? E(1) : E(0);
  if (p.k == 0) { // BLAS needs lda >= 1; the product of empty sums is 0
    if (!accumulate)
      std::fill(c, c + p.batches * p.m * p.n, E(0));
    return;
  }
  if (p.stack) {
    gemmParallel(a, false, b, p.tb, c, p.batches * p.m, p.n, p.k, beta);
    return;
  }
  int rank = int(p.shape.size());
  auto one = [&](int64_t i) {
    int64_t la = broadcastOffset(i, p.shape.data(), rank, p.lhsStrides.data());
    int64_t rb = broadcastOffset(i, p.shape.data(), rank, p.rhsStrides.data());
    gemmParallel(a + la * p.m * p.k, p.ta, b + rb * p.k * p.n, p.tb,
                 c + i * p.m * p.n, p.m, p.n, p.k, beta);
  };
  if (p.batches == 1)
    return one(0);
  // Many small products: one thread per group of batches.
  parallelFor(p.batches, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      one(i);
  });
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

Status lamina::rt::detail::checkMatMulTypes(const Tensor &lhs,
                                            const Tensor &rhs,
                                            const Tensor &result) {
  bool narrow = lhs.dtype == DType::F16 || lhs.dtype == DType::BF16;
  bool resultOk = result.dtype == lhs.dtype ||
                  (narrow && result.dtype == DType::F32);
  if (lhs.dtype != rhs.dtype || !resultOk || !isFloat(lhs.dtype))
    return Status::error("matmul: needs one float type (or f16/bf16 "
                         "operands and an f32 result), got " +
                         describe(lhs) + ", " + describe(rhs) + " -> " +
                         describe(result));
  return Status::success();
}

namespace {
/// Checks the operands of lhs x rhs -> result and fills `p`.
Status planMatMul(const Tensor &lhs, const Tensor &rhs, const Tensor &result,
                  bool transposeLhs, bool transposeRhs, BatchPlan &p) {
  if (Status s = checkMatMulTypes(lhs, rhs, result); !s.ok())
    return s;
  if (lhs.rank < 2 || rhs.rank < 2)
    return Status::error("matmul: operands need rank >= 2, got " +
                         describe(lhs) + ", " + describe(rhs));
  p.ta = transposeLhs;
  p.tb = transposeRhs;
  p.m = lhs.shape[lhs.rank - (p.ta ? 1 : 2)];
  p.k = lhs.shape[lhs.rank - (p.ta ? 2 : 1)];
  p.n = rhs.shape[rhs.rank - (p.tb ? 2 : 1)];
  int64_t rhsK = rhs.shape[rhs.rank - (p.tb ? 1 : 2)];
  int lb = lhs.rank - 2, rb = rhs.rank - 2;
  std::vector<int64_t> batch(std::max(lb, rb));
  int batchRank = 0;
  bool ok =
      rhsK == p.k &&
      broadcastShape(lhs.shape, lb, rhs.shape, rb, batch.data(), &batchRank);
  std::vector<int64_t> expected = batch;
  expected.insert(expected.end(), {p.m, p.n});
  if (!ok || !hasShape(result, expected))
    return Status::error(std::string("matmul: ") + describe(lhs) +
                         (p.ta ? "^T" : "") + " x " + describe(rhs) +
                         (p.tb ? "^T" : "") + " does not give " +
                         describe(result));
  p.shape = batch;
  p.batches = numElements(batch.data(), batchRank);
  p.lhsStrides.resize(batchRank);
  p.rhsStrides.resize(batchRank);
  broadcastStrides(lhs.shape, lb, batch.data(), batchRank, p.lhsStrides.data());
  broadcastStrides(rhs.shape, rb, batch.data(), batchRank, p.rhsStrides.data());
  if (p.m > INT_MAX || p.n > INT_MAX || p.k > INT_MAX)
    return Status::error("matmul: dims of " + describe(lhs) + " x " +
                         describe(rhs) + " exceed BLAS's int");
  bool rhsShared = numElements(rhs.shape, rb) == 1;
  bool lhsFull = numElements(lhs.shape, lb) == p.batches;
  p.stack = rhsShared && lhsFull && !p.ta && p.batches * p.m <= INT_MAX;
  return Status::success();
}

/// c[row, j] = addend[row, j] + bias[j] over the result's rows (either
/// absent: 0), in the accumulator type E; `T` is the result's type.
template <typename T, typename E>
void startWith(E *c, int64_t rows, int64_t n, const Tensor *bias,
               const Tensor *addend) {
  const T *a = addend ? addend->as<T>() : nullptr;
  const T *r = bias ? bias->as<T>() : nullptr;
  parallelFor(rows, std::max<int64_t>(1, kGrain / std::max<int64_t>(n, 1)),
              [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; ++i)
                  for (int64_t j = 0; j < n; ++j)
                    c[i * n + j] = (a ? E(load(a[i * n + j])) : E(0)) +
                                   (r ? E(load(r[j])) : E(0));
              });
}

/// The product after planMatMul, accumulated onto addend + bias when either
/// is given.
Status runMatMul(const Tensor &lhs, const Tensor &rhs, const Tensor &result,
                 const BatchPlan &p, const Tensor *bias,
                 const Tensor *addend) {
  if (result.numElements() == 0)
    return Status::success();
  bool epilogue = bias || addend;
  int64_t rows = result.numElements() / p.n;
  // c (the accumulator type E) = a b, started as addend + bias (of the
  // result's type R) when there is either.
  auto product = [&](const auto *a, const auto *b, auto *c, auto resultTag) {
    using E = std::remove_pointer_t<decltype(c)>;
    if (epilogue)
      startWith<typename decltype(resultTag)::type, E>(c, rows, p.n, bias,
                                                       addend);
    matmulT(a, b, c, p, epilogue);
  };
  switch (lhs.dtype) {
  case DType::F32:
    product(lhs.as<float>(), rhs.as<float>(), result.as<float>(), Tag<float>{});
    break;
  case DType::F64:
    product(lhs.as<double>(), rhs.as<double>(), result.as<double>(),
            Tag<double>{});
    break;
  default:
    dispatch(lhs.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
        std::vector<float> a = widen<T>(lhs), b = widen<T>(rhs);
        if (result.dtype == DType::F32) // the accumulator, unrounded
          return product(a.data(), b.data(), result.as<float>(), Tag<float>{});
        std::vector<float> c(result.numElements());
        product(a.data(), b.data(), c.data(), tag);
        T *y = result.as<T>();
        parallelFor(int64_t(c.size()), kGrain,
                    [&](int64_t begin, int64_t end) {
                      for (int64_t i = begin; i < end; ++i)
                        y[i] = store<T>(c[size_t(i)]);
                    });
      }
    });
  }
  return Status::success();
}
} // namespace

Status lamina::rt::matmul(const Tensor &lhs, const Tensor &rhs,
                          const Tensor &result, bool transposeLhs,
                          bool transposeRhs) {
  return matmulEpilogue(lhs, rhs, nullptr, nullptr, result, transposeLhs,
                        transposeRhs);
}

Status lamina::rt::detail::checkMatMulEpilogue(const Tensor *bias,
                                               const Tensor *addend,
                                               const Tensor &result) {
  int64_t n = result.rank ? result.shape[result.rank - 1] : 0;
  if (bias) {
    bool row = bias->dtype == result.dtype && bias->rank >= 1 &&
               bias->rank <= result.rank && bias->shape[bias->rank - 1] == n &&
               bias->numElements() == n;
    if (!row)
      return Status::error("matmul: bias " + describe(*bias) +
                           " is not a row of " + std::to_string(n) + " " +
                           dtypeName(result.dtype) + " for " +
                           describe(result));
  }
  if (addend && (addend->dtype != result.dtype || !sameShape(*addend, result)))
    return Status::error("matmul: addend " + describe(*addend) +
                         " is not of the result's type " + describe(result));
  return Status::success();
}

Status lamina::rt::matmulEpilogue(const Tensor &lhs, const Tensor &rhs,
                                  const Tensor *bias, const Tensor *addend,
                                  const Tensor &result, bool transposeLhs,
                                  bool transposeRhs) {
  BatchPlan p;
  if (Status s = planMatMul(lhs, rhs, result, transposeLhs, transposeRhs, p);
      !s.ok())
    return s;
  if (Status s = checkMatMulEpilogue(bias, addend, result); !s.ok())
    return s;
  return runMatMul(lhs, rhs, result, p, bias, addend);
}
