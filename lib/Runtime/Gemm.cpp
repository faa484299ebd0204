//===- Gemm.cpp - batched matmul on oneDNN --------------------------------===//
//
// One GEMM per result batch (split over threads by batches, or by
// rows/columns of one large product); when the rhs is shared by every batch
// and the lhs is not broadcast, the batches stack into a single [B*m, k]
// product, the linear-layer case. Transposed operands go to the GEMM as
// transposed, never copied. f16/bf16 operands are widened to f32 first.
//
// f32 products run on oneDNN's sgemm, which JIT-compiles its kernels for the
// instruction sets the CPU reports (AVX2, AVX-512, ...), not for a table of
// CPU models: OpenBLAS fell back to its SSE3 kernels on virtual CPUs it did
// not recognise, 4x slower. oneDNN has no f64 GEMM; f64 (reference and
// conformance programs) stays on OpenBLAS.
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

using namespace lamina::rt;
using namespace lamina::rt::detail;

extern "C" char *openblas_get_corename(void);

// The GEMM libraries always run single-threaded: the runtime splits each
// product over its own threads (parallelFor), so no second thread pool
// (oneDNN's OpenMP team, OpenBLAS's threads) spins against the elementwise
// kernels between calls.
namespace {
std::once_flag blasInit;

/// oneDNN sizes its OpenMP team by the calling thread's omp_get_max_threads;
/// every thread that calls it (the caller and parallelFor's workers) asks
/// for one.
void singleThreadedOneDnn() {
  static thread_local bool once = [] {
    omp_set_num_threads(1);
    return true;
  }();
  (void)once;
}
} // namespace

void lamina::rt::detail::gemm(bool ta, bool tb, int64_t m, int64_t n,
                              int64_t k, float alpha, const float *a,
                              int64_t lda, const float *b, int64_t ldb,
                              float beta, float *c, int64_t ldc) {
  if (m == 0 || n == 0)
    return;
  singleThreadedOneDnn();
  dnnl_status_t s = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha,
                               a, std::max<int64_t>(lda, 1), b,
                               std::max<int64_t>(ldb, 1), beta, c, ldc);
  if (s != dnnl_success) { // the callers checked the shapes: a runtime bug
    std::fprintf(stderr, "lamina runtime: dnnl_sgemm failed (status %d) for "
                         "%lldx%lldx%lld\n",
                 int(s), (long long)m, (long long)n, (long long)k);
    std::abort();
  }
}

void lamina::rt::detail::gemm(bool ta, bool tb, int64_t m, int64_t n,
                              int64_t k, double alpha, const double *a,
                              int64_t lda, const double *b, int64_t ldb,
                              double beta, double *c, int64_t ldc) {
  if (m == 0 || n == 0)
    return;
  std::call_once(blasInit, [] { openblas_set_num_threads(1); });
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
              tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(k), alpha, a,
              int(std::max<int64_t>(lda, 1)), b,
              int(std::max<int64_t>(ldb, 1)), beta, c, int(ldc));
}

std::string lamina::rt::gemmKernels() {
  const dnnl_version_t *v = dnnl_version();
  const char *isa = "sse4.1";
  switch (dnnl_get_effective_cpu_isa()) {
  case dnnl_cpu_isa_avx: isa = "avx"; break;
  case dnnl_cpu_isa_avx2: isa = "avx2"; break;
  case dnnl_cpu_isa_avx2_vnni: isa = "avx2_vnni"; break;
  case dnnl_cpu_isa_avx512_mic:
  case dnnl_cpu_isa_avx512_mic_4ops: isa = "avx512_mic"; break;
  case dnnl_cpu_isa_avx512_core: isa = "avx512_core"; break;
  case dnnl_cpu_isa_avx512_core_vnni: isa = "avx512_core_vnni"; break;
  case dnnl_cpu_isa_avx512_core_bf16: isa = "avx512_core_bf16"; break;
  case dnnl_cpu_isa_avx512_core_amx: isa = "avx512_core_amx"; break;
  default: break;
  }
  const char *core = openblas_get_corename();
  return "oneDNN " + std::to_string(v->major) + "." +
         std::to_string(v->minor) + "." + std::to_string(v->patch) + " " +
         isa + " (f32), OpenBLAS " + (core ? core : "?") + " (f64)";
}

namespace {
/// One dense product C[m, n] = op(A) op(B), split over threads by rows of C
/// (or by columns when there are fewer rows than columns); each piece is a
/// single-threaded GEMM on a sub-matrix.
template <typename E>
void gemmParallel(const E *a, bool ta, const E *b, bool tb, E *c, int64_t m,
                  int64_t n, int64_t k, E beta) {
  int64_t lda = ta ? m : k, ldb = tb ? k : n, ldc = n;
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
        gemm(ta, tb, hi - lo, n, k, E(1), ta ? a + lo : a + lo * k, lda, b,
             ldb, beta, c + lo * n, ldc);
      else
        gemm(ta, tb, m, hi - lo, k, E(1), a, lda, tb ? b + lo * k : b + lo,
             ldb, beta, c + lo, ldc);
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
  E beta = accumulate ? E(1) : E(0);
  if (p.k == 0) { // the product of empty sums is 0
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
