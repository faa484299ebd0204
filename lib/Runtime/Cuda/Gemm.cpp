//===- Gemm.cpp - matmul through cuBLASLt ---------------------------------===//
//
// Host code only (no kernels), so it is compiled by the C++ compiler.
//
// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so
// cuBLASLt sees the rhs as its "A" and the lhs as its "B", each stored
// matrix described as its column-major transpose. Batches: one strided
// batched call when both operands have the result's batch dims (or the rhs
// is shared and the lhs not transposed: then the batch folds into m);
// otherwise one call per result batch. Compute type f32 (CUBLAS_COMPUTE_32F:
// no TF32), scale type f32, storage f32, f16 or bf16.
//
// One handle per process (created on first use, for the current device);
// the workspace is taken from the stream's memory pool per call.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include <cublasLt.h>

#include <mutex>

using namespace lamina::rt;
using namespace lamina::rt::cuda;
using namespace lamina::rt::cuda::detail;

namespace {
constexpr size_t kWorkspace = 32u << 20;

Status blasCheck(const char *what, cublasStatus_t st) {
  if (st == CUBLAS_STATUS_SUCCESS)
    return Status::success();
  return Status::error(std::string("matmul: ") + what + ": " +
                       cublasLtGetStatusName(st) + ": " +
                       cublasLtGetStatusString(st));
}

cublasLtHandle_t handle(Status &status) {
  static cublasLtHandle_t h = nullptr;
  static cublasStatus_t created;
  static std::once_flag once;
  std::call_once(once, [] { created = cublasLtCreate(&h); });
  status = blasCheck("cublasLtCreate", created);
  return h;
}

cudaDataType_t cudaType(DType t) {
  switch (t) {
  case DType::F16: return CUDA_R_16F;
  case DType::BF16: return CUDA_R_16BF;
  default: return CUDA_R_32F;
  }
}

/// Owns the descriptors of one cuBLASLt call.
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Plan() {
    if (pref)
      cublasLtMatmulPreferenceDestroy(pref);
    for (cublasLtMatrixLayout_t l : {a, b, c})
      if (l)
        cublasLtMatrixLayoutDestroy(l);
    if (op)
      cublasLtMatmulDescDestroy(op);
  }
};

Status layout(cublasLtMatrixLayout_t &l, cudaDataType_t type, uint64_t rows,
              uint64_t cols, int64_t ld, int32_t batch, int64_t stride) {
  if (Status s = blasCheck("layout",
                           cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld));
      !s.ok())
    return s;
  if (batch > 1) {
    if (Status s = blasCheck("layout", cublasLtMatrixLayoutSetAttribute(
                                           l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                           &batch, sizeof batch));
        !s.ok())
      return s;
    return blasCheck("layout",
                     cublasLtMatrixLayoutSetAttribute(
                         l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                         &stride, sizeof stride));
  }
  return Status::success();
}

/// result[batch] = op(lhs[batch]) op(rhs[batch]) for `batch` matrices at
/// the given element strides (row-major m x k / k x n views as the host).
Status gemm(cublasLtHandle_t h, DType dtype, const void *lhs, const void *rhs,
            void *result, int64_t m, int64_t n, int64_t k, bool tl, bool tr,
            int32_t batch, int64_t strideL, int64_t strideR, int64_t strideC,
            void *workspace, cudaStream_t stream) {
  cudaDataType_t type = cudaType(dtype);
  Plan p;
  if (Status s = blasCheck("desc", cublasLtMatmulDescCreate(
                                       &p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      !s.ok())
    return s;
  // cuBLAS "A" = the rhs, "B" = the lhs.
  cublasOperation_t opA = tr ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opB = tl ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (Status s = blasCheck("transa", cublasLtMatmulDescSetAttribute(
                                         p.op, CUBLASLT_MATMUL_DESC_TRANSA,
                                         &opA, sizeof opA));
      !s.ok())
    return s;
  if (Status s = blasCheck("transb", cublasLtMatmulDescSetAttribute(
                                         p.op, CUBLASLT_MATMUL_DESC_TRANSB,
                                         &opB, sizeof opB));
      !s.ok())
    return s;
  // Stored rhs: [k, n] (col-major n x k) or, transposed, [n, k] (k x n).
  if (Status s = layout(p.a, type, tr ? k : n, tr ? n : k, tr ? k : n, batch,
                        strideR);
      !s.ok())
    return s;
  // Stored lhs: [m, k] (col-major k x m) or, transposed, [k, m] (m x k).
  if (Status s = layout(p.b, type, tl ? m : k, tl ? k : m, tl ? m : k, batch,
                        strideL);
      !s.ok())
    return s;
  if (Status s = layout(p.c, type, n, m, n, batch, strideC); !s.ok())
    return s;
  if (Status s = blasCheck("preference",
                           cublasLtMatmulPreferenceCreate(&p.pref));
      !s.ok())
    return s;
  size_t ws = workspace ? kWorkspace : 0;
  if (Status s = blasCheck("preference",
                           cublasLtMatmulPreferenceSetAttribute(
                               p.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                               &ws, sizeof ws));
      !s.ok())
    return s;
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  if (Status s = blasCheck("heuristic", cublasLtMatmulAlgoGetHeuristic(
                                            h, p.op, p.a, p.b, p.c, p.c, p.pref,
                                            1, &heuristic, &found));
      !s.ok())
    return s;
  if (found == 0)
    return Status::error("matmul: cuBLASLt has no algorithm for this shape");
  float alpha = 1.0f, beta = 0.0f;
  return blasCheck("cublasLtMatmul",
                   cublasLtMatmul(h, p.op, &alpha, rhs, p.a, lhs, p.b, &beta,
                                  result, p.c, result, p.c, &heuristic.algo,
                                  workspace, ws, stream));
}

struct Workspace {
  void *ptr = nullptr;
  cudaStream_t stream;
  explicit Workspace(cudaStream_t s) : stream(s) {
    if (cudaMallocAsync(&ptr, kWorkspace, stream) != cudaSuccess) {
      ptr = nullptr; // run without a workspace
      (void)cudaGetLastError();
    }
  }
  ~Workspace() {
    if (ptr)
      (void)cudaFreeAsync(ptr, stream);
  }
};
} // namespace

Status lamina::rt::cuda::matmul(const Tensor &lhs, const Tensor &rhs,
                                const Tensor &result, bool transposeLhs,
                                bool transposeRhs, cudaStream_t stream) {
  if (lhs.rank < 2 || rhs.rank < 2 || lhs.dtype != rhs.dtype ||
      lhs.dtype != result.dtype || !isDeviceFloat(lhs.dtype))
    return Status::error("matmul: needs rank >= 2 operands of one float type "
                         "(f32, f16, bf16 on CUDA), got " +
                         describe(lhs) + " x " + describe(rhs) + " -> " +
                         describe(result));
  int64_t m = lhs.shape[lhs.rank - (transposeLhs ? 1 : 2)];
  int64_t k = lhs.shape[lhs.rank - (transposeLhs ? 2 : 1)];
  int64_t k2 = rhs.shape[rhs.rank - (transposeRhs ? 1 : 2)];
  int64_t n = rhs.shape[rhs.rank - (transposeRhs ? 2 : 1)];
  int lb = lhs.rank - 2, rb = rhs.rank - 2;
  int64_t batchShape[kMaxRank];
  int batchRank = 0;
  bool ok = k == k2 && lb <= kMaxRank && rb <= kMaxRank &&
            broadcastShape(lhs.shape, lb, rhs.shape, rb, batchShape,
                           &batchRank) &&
            result.rank == batchRank + 2;
  for (int i = 0; ok && i < batchRank; ++i)
    ok = result.shape[i] == batchShape[i];
  if (!ok || result.shape[batchRank] != m || result.shape[batchRank + 1] != n)
    return Status::error("matmul: shapes do not match: " + describe(lhs) +
                         (transposeLhs ? "^T" : "") + " x " + describe(rhs) +
                         (transposeRhs ? "^T" : "") + " -> " +
                         describe(result));
  int64_t batch = numElements(batchShape, batchRank);
  if (result.numElements() == 0)
    return Status::success();
  if (k == 0)
    return cudaCheck("matmul", cudaMemsetAsync(result.data, 0,
                                               result.byteSize(), stream));
  Status hs;
  cublasLtHandle_t h = handle(hs);
  if (!hs.ok())
    return hs;
  Workspace ws(stream);
  size_t es = lhs.elementSize();
  int64_t lBatch = numElements(lhs.shape, lb), rBatch = numElements(rhs.shape, rb);
  if (lBatch == batch && rBatch == batch)
    return gemm(h, lhs.dtype, lhs.data, rhs.data, result.data, m, n, k,
                transposeLhs, transposeRhs, int32_t(batch), m * k, k * n,
                m * n, ws.ptr, stream);
  if (rBatch == 1 && lBatch == batch && !transposeLhs)
    return gemm(h, lhs.dtype, lhs.data, rhs.data, result.data, batch * m, n,
                k, false, transposeRhs, 1, 0, 0, 0, ws.ptr, stream);
  // General broadcast: one call per result batch.
  int64_t ls[kMaxRank], rs[kMaxRank];
  if (!broadcastStrides(lhs.shape, lb, batchShape, batchRank, ls) ||
      !broadcastStrides(rhs.shape, rb, batchShape, batchRank, rs))
    return Status::error("matmul: batch dims do not broadcast");
  for (int64_t b = 0; b < batch; ++b) {
    const char *l = static_cast<const char *>(lhs.data) +
                    broadcastOffset(b, batchShape, batchRank, ls) * m * k * es;
    const char *r = static_cast<const char *>(rhs.data) +
                    broadcastOffset(b, batchShape, batchRank, rs) * k * n * es;
    char *c = static_cast<char *>(result.data) + b * m * n * es;
    if (Status s = gemm(h, lhs.dtype, l, r, c, m, n, k, transposeLhs,
                        transposeRhs, 1, 0, 0, 0, ws.ptr, stream);
        !s.ok())
      return s;
  }
  return Status::success();
}
