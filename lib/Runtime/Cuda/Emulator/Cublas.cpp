//===- Cublas.cpp - the cuBLAS calls, on the host
//--------------------------===//
//
// The part of the cuBLAS API that lib/Runtime/Cuda/GroupedGemm.cpp calls,
// for lamina_cuda_emulated: a handle holding its stream, and
// cublasSgemmGroupedBatched run when it is issued in stream order. Written
// from NVIDIA's cuBLAS documentation (column-major C = alpha op(A) op(B) +
// beta C per problem; the problem sizes, scalars and transposes in host
// arrays, one entry per group; the matrix pointers in device arrays, one
// per problem), not from GroupedGemm.cpp, so its row-major mapping is
// checked against a second reading. A reference loop (f32 accumulation),
// not a performance model.
//
//===----------------------------------------------------------------------===//

#include "Streams.h"

#include <cublas_v2.h>

#include <new>
#include <vector>

/// cublas_api.h only declares the handle's struct; the emulator defines it.
struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace {
struct Gemm {
  bool transA, transB;
  int m, n, k, lda, ldb, ldc;
  float alpha, beta;
  const float *A, *B;
  float *C;
};

float at(const float *x, bool trans, int row, int col, int ld) {
  return trans ? x[col + int64_t(row) * ld] : x[row + int64_t(col) * ld];
}

void run(const Gemm &g) {
  for (int j = 0; j < g.n; ++j)
    for (int i = 0; i < g.m; ++i) {
      float acc = 0.0f;
      if (g.alpha != 0.0f)
        for (int q = 0; q < g.k; ++q)
          acc +=
              at(g.A, g.transA, i, q, g.lda) * at(g.B, g.transB, q, j, g.ldb);
      float &c = g.C[i + int64_t(j) * g.ldc];
      c = g.alpha * acc + (g.beta != 0.0f ? g.beta * c : 0.0f);
    }
}
} // namespace

extern "C" {
cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
  if (!handle)
    return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new (std::nothrow) cublasContext;
  return *handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (!handle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusName(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS:
    return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED:
    return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED:
    return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE:
    return "CUBLAS_STATUS_INVALID_VALUE";
  default:
    return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
}

const char *cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS:
    return "success";
  case CUBLAS_STATUS_NOT_INITIALIZED:
    return "the library was not initialized";
  case CUBLAS_STATUS_ALLOC_FAILED:
    return "the resource allocation failed";
  case CUBLAS_STATUS_INVALID_VALUE:
    return "an invalid numeric value was used "
           "as an argument";
  default:
    return "the functionality is not supported (emulator)";
  }
}

cublasStatus_t cublasSgemmGroupedBatched(
    cublasHandle_t handle, const cublasOperation_t transa_array[],
    const cublasOperation_t transb_array[], const int m_array[],
    const int n_array[], const int k_array[], const float alpha_array[],
    const float *const Aarray[], const int lda_array[],
    const float *const Barray[], const int ldb_array[],
    const float beta_array[], float *const Carray[], const int ldc_array[],
    int group_count, const int group_size[]) {
  if (!handle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (group_count < 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  // The host arrays are read now (the caller may free them on return), the
  // device pointer arrays when the work runs, in stream order.
  std::vector<Gemm> groups;
  std::vector<int> sizes;
  for (int g = 0; g < group_count; ++g) {
    const cublasOperation_t ta = transa_array[g], tb = transb_array[g];
    const int m = m_array[g], n = n_array[g], k = k_array[g];
    if (m < 0 || n < 0 || k < 0 || group_size[g] < 0 ||
        (ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) ||
        (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) ||
        lda_array[g] < (ta == CUBLAS_OP_N ? m : k) ||
        ldb_array[g] < (tb == CUBLAS_OP_N ? k : n) || ldc_array[g] < m ||
        lda_array[g] < 1 || ldb_array[g] < 1 || ldc_array[g] < 1)
      return CUBLAS_STATUS_INVALID_VALUE;
    groups.push_back(Gemm{ta == CUBLAS_OP_T, tb == CUBLAS_OP_T, m, n, k,
                          lda_array[g], ldb_array[g], ldc_array[g],
                          alpha_array[g], beta_array[g], nullptr, nullptr,
                          nullptr});
    sizes.push_back(group_size[g]);
  }
  lamina::cuda_emulator::submit(
      handle->stream, [groups, sizes, Aarray, Barray, Carray]() {
        int64_t problem = 0;
        for (size_t g = 0; g < groups.size(); ++g)
          for (int i = 0; i < sizes[g]; ++i, ++problem) {
            Gemm p = groups[g];
            p.A = Aarray[problem];
            p.B = Barray[problem];
            p.C = Carray[problem];
            if (p.m && p.n)
              run(p);
          }
      });
  return CUBLAS_STATUS_SUCCESS;
}
} // extern "C"
