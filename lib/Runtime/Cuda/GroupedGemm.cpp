//===- GroupedGemm.cpp - one cuBLAS call for many row-major products ------===//
//
// The experts' products (MoE.cu): each expert's rows against its weights,
// a different row count per expert, as one cublasSgemmGroupedBatched call
// per product instead of one GEMM per expert. Row-major operands are read
// as cuBLAS's column-major transposes: C = op(A) op(B) is computed as
// C^T = op(B)^T op(A)^T. f32; the problems' pointers are uploaded to
// stream-ordered scratch.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include <cublas_v2.h>

#include <mutex>
#include <string>
#include <vector>

using namespace lamina::rt;
using namespace lamina::rt::cuda;
using lamina::rt::cuda::detail::cudaCheck;
using Scratch = lamina::rt::cuda::detail::Scratch;

namespace {
Status blasCheck(const char *what, cublasStatus_t st) {
  if (st == CUBLAS_STATUS_SUCCESS)
    return Status::success();
  return Status::error(std::string("grouped GEMM: ") + what + ": " +
                       cublasGetStatusName(st) + ": " +
                       cublasGetStatusString(st));
}

/// The process's cuBLAS handle (one device per process, as Gemm.cpp's
/// cuBLASLt handle).
cublasHandle_t handle(Status &status) {
  static cublasHandle_t h = nullptr;
  static cublasStatus_t created;
  static std::once_flag once;
  std::call_once(once, [] { created = cublasCreate(&h); });
  status = blasCheck("cublasCreate", created);
  return h;
}
} // namespace

Status lamina::rt::cuda::groupedMatmul(const std::vector<GemmProblem> &problems,
                                       cudaStream_t stream) {
  const char *op = "grouped GEMM";
  std::vector<const float *> a, b;
  std::vector<float *> c;
  std::vector<cublasOperation_t> opA, opB;
  std::vector<int> m, n, k, lda, ldb, ldc, ones;
  std::vector<float> alpha, beta;
  for (const GemmProblem &p : problems) {
    if (p.m < 0 || p.n < 0 || p.k < 0 || p.m > INT32_MAX || p.n > INT32_MAX ||
        p.k > INT32_MAX)
      return Status::error("grouped GEMM: sizes " + std::to_string(p.m) + "x" +
                           std::to_string(p.n) + "x" + std::to_string(p.k) +
                           " out of range");
    if (p.m == 0 || p.n == 0 || p.k == 0)
      continue; // nothing to compute (the caller clears a k = 0 product)
    // cuBLAS's C (column-major N x M) is the row-major M x N result; its A
    // is op(B)^T, its B op(A)^T.
    a.push_back(p.b);
    b.push_back(p.a);
    c.push_back(p.c);
    opA.push_back(p.transB ? CUBLAS_OP_T : CUBLAS_OP_N);
    opB.push_back(p.transA ? CUBLAS_OP_T : CUBLAS_OP_N);
    m.push_back(int(p.n));
    n.push_back(int(p.m));
    k.push_back(int(p.k));
    lda.push_back(int(p.transB ? p.k : p.n));
    ldb.push_back(int(p.transA ? p.m : p.k));
    ldc.push_back(int(p.n));
    ones.push_back(1);
    alpha.push_back(1.0f);
    beta.push_back(0.0f);
  }
  if (a.empty())
    return Status::success();
  Status s;
  cublasHandle_t h = handle(s);
  if (!s.ok())
    return s;
  if (Status st = blasCheck("cublasSetStream", cublasSetStream(h, stream));
      !st.ok())
    return st;
  // The pointer arrays live in device memory: A's, B's, then C's.
  const size_t groups = a.size();
  std::vector<const void *> pointers;
  pointers.insert(pointers.end(), a.begin(), a.end());
  pointers.insert(pointers.end(), b.begin(), b.end());
  pointers.insert(pointers.end(), c.begin(), c.end());
  Scratch table(stream);
  const size_t bytes = pointers.size() * sizeof(void *);
  if (Status st = cudaCheck(op, cudaMallocAsync(&table.ptr, bytes, stream));
      !st.ok())
    return st;
  if (Status st =
          cudaCheck(op, cudaMemcpyAsync(table.ptr, pointers.data(), bytes,
                                        cudaMemcpyHostToDevice, stream));
      !st.ok())
    return st;
  auto *devA = static_cast<const float *const *>(table.ptr);
  const float *const *devB = devA + groups;
  float *const *devC = const_cast<float *const *>(
      reinterpret_cast<const float *const *>(devA + 2 * groups));
  return blasCheck(
      "cublasSgemmGroupedBatched",
      cublasSgemmGroupedBatched(h, opA.data(), opB.data(), m.data(), n.data(),
                                k.data(), alpha.data(), devA, lda.data(), devB,
                                ldb.data(), beta.data(), devC, ldc.data(),
                                int(groups), ones.data()));
}
