//===- CublasLt.cpp - the cuBLASLt calls, on the host ----------------------===//
//
// The part of the cuBLASLt API that lib/Runtime/Cuda/Gemm.cpp calls, for
// lamina_cuda_emulated: handles, descriptors and preferences are host
// objects, the heuristic offers one algorithm (no workspace) for what is
// supported here, and cublasLtMatmul runs D = alpha op(A) op(B) + beta C
// (+ bias) when it is issued. Written from NVIDIA's cuBLASLt documentation
// and cublasLt.h, not from Gemm.cpp, so Gemm.cpp's row-major to
// column-major mapping (layouts, transposes, batch strides, the bias over
// D's rows) is checked against a second reading of the documentation rather
// than against itself. A reference loop (f32 accumulation, one rounding to
// D's type), not a performance model; nothing here talks to a GPU.
//
//===----------------------------------------------------------------------===//

#include "Streams.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

/// cublasLt.h only declares the handle's struct; the emulator defines it.
struct cublasLtContext {
  int unused = 0;
};

namespace {
// The descriptors' opaque types in cublasLt.h are fixed-size blobs; the
// emulator keeps its own structs behind the same pointers instead.
struct Layout {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch = 1;
  int64_t stride = 0; // elements
};

struct MatmulDesc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  int32_t pointerMode = CUBLASLT_POINTER_MODE_HOST;
  int32_t transA = CUBLAS_OP_N, transB = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void *bias = nullptr;
  int64_t biasStride = 0;   // elements, between batches
  int32_t biasType = -1;    // -1: D's type (the documented default)
  int32_t smCountTarget = 0; // accepted, no effect
};

struct Preference {
  uint32_t searchMode = CUBLASLT_SEARCH_BEST_FIT;
  uint64_t maxWorkspace = 0;
  uint32_t reductionMask = CUBLASLT_REDUCTION_SCHEME_MASK;
  uint32_t alignA = 256, alignB = 256, alignC = 256, alignD = 256;
  float maxWaves = 0.0f;
  uint64_t implMask = ~uint64_t(0);
};

Layout *get(cublasLtMatrixLayout_t l) { return reinterpret_cast<Layout *>(l); }
MatmulDesc *get(cublasLtMatmulDesc_t d) {
  return reinterpret_cast<MatmulDesc *>(d);
}
Preference *get(cublasLtMatmulPreference_t p) {
  return reinterpret_cast<Preference *>(p);
}

/// SetAttribute's common contract: buf non-null, sizeInBytes exactly the
/// attribute's storage.
template <typename T>
cublasStatus_t store(T &field, const void *buf, size_t size) {
  if (!buf || size != sizeof(T))
    return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

float load(const void *base, int type, int64_t i) {
  switch (type) {
  case CUDA_R_16F: return __half2float(static_cast<const __half *>(base)[i]);
  case CUDA_R_16BF:
    return __bfloat162float(static_cast<const __nv_bfloat16 *>(base)[i]);
  default: return static_cast<const float *>(base)[i];
  }
}

void storeElement(void *base, int type, int64_t i, float v) {
  switch (type) {
  case CUDA_R_16F: static_cast<__half *>(base)[i] = __float2half_rn(v); break;
  case CUDA_R_16BF:
    static_cast<__nv_bfloat16 *>(base)[i] = __float2bfloat16_rn(v);
    break;
  default: static_cast<float *>(base)[i] = v; break;
  }
}

/// The documented f32-compute rows of cublasLtMatmul's type table that this
/// emulator runs: A/B f32 -> C/D f32 (any 32F compute type; the _FAST ones
/// are computed at full f32, which they allow), and A/B f16 or bf16 -> C/D
/// of the same type or f32 (CUBLAS_COMPUTE_32F[_PEDANTIC] only).
bool supportedTypes(cublasComputeType_t compute, cudaDataType_t scale,
                    int ab, int cd) {
  if (scale != CUDA_R_32F)
    return false;
  bool plain32 =
      compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC;
  bool fast32 = compute == CUBLAS_COMPUTE_32F_FAST_16F ||
                compute == CUBLAS_COMPUTE_32F_FAST_16BF ||
                compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  if (ab == CUDA_R_32F)
    return cd == CUDA_R_32F && (plain32 || fast32);
  if (ab == CUDA_R_16F || ab == CUDA_R_16BF)
    return (cd == ab || cd == CUDA_R_32F) && plain32;
  return false;
}

/// One matmul's shape once the descriptors are checked.
struct Problem {
  const Layout *a, *b, *c, *d;
  bool transA, transB, bias;
  int biasType;
  uint64_t m, n, k;
};

/// What cublasLtMatmulAlgoGetHeuristic and cublasLtMatmul both check:
/// NOT_SUPPORTED for what this emulator (or cuBLASLt's type table) does not
/// run, INVALID_VALUE for shapes that do not compose.
cublasStatus_t check(cublasLtMatmulDesc_t descHandle, cublasLtMatrixLayout_t A,
                     cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C,
                     cublasLtMatrixLayout_t D, Problem &p) {
  if (!descHandle || !A || !B || !D)
    return CUBLAS_STATUS_INVALID_VALUE;
  const MatmulDesc &desc = *get(descHandle);
  p.a = get(A);
  p.b = get(B);
  p.d = get(D);
  p.c = C ? get(C) : p.d; // an omitted Cdesc is Ddesc
  if (p.a->type != p.b->type || p.c->type != p.d->type ||
      !supportedTypes(desc.compute, desc.scale, p.a->type, p.d->type))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  // Host and device scalars are both host memory here; vectors are not run.
  if (desc.pointerMode != CUBLASLT_POINTER_MODE_HOST &&
      desc.pointerMode != CUBLASLT_POINTER_MODE_DEVICE)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (desc.epilogue != CUBLASLT_EPILOGUE_DEFAULT &&
      desc.epilogue != CUBLASLT_EPILOGUE_BIAS)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  p.bias = desc.epilogue == CUBLASLT_EPILOGUE_BIAS;
  // The bias is of D's type: the documented exceptions (int8 IMMA, fp8) are
  // types not run here, so BIAS_DATA_TYPE may only restate it.
  p.biasType = desc.biasType == -1 ? int(p.d->type) : desc.biasType;
  if (p.bias && p.biasType != int(p.d->type))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  // For real types CUBLAS_OP_C is CUBLAS_OP_T.
  p.transA = desc.transA != CUBLAS_OP_N;
  p.transB = desc.transB != CUBLAS_OP_N;
  // op(A) is m x k, op(B) k x n, C and D m x n, each as stored before op.
  p.m = p.d->rows;
  p.n = p.d->cols;
  p.k = p.transA ? p.a->rows : p.a->cols;
  uint64_t am = p.transA ? p.a->cols : p.a->rows;
  uint64_t bk = p.transB ? p.b->cols : p.b->rows;
  uint64_t bn = p.transB ? p.b->rows : p.b->cols;
  if (am != p.m || bk != p.k || bn != p.n || p.c->rows != p.m ||
      p.c->cols != p.n)
    return CUBLAS_STATUS_INVALID_VALUE;
  // ld >= rows (col-major); C's ld may also be 0, which the documentation
  // allows for broadcasting C.
  for (const Layout *l : {p.a, p.b, p.d})
    if (l->ld < 0 || uint64_t(l->ld) < (l->rows ? l->rows : 1))
      return CUBLAS_STATUS_INVALID_VALUE;
  if (p.c->ld < 0 || (p.c->ld != 0 && uint64_t(p.c->ld) < p.c->rows))
    return CUBLAS_STATUS_INVALID_VALUE;
  // One batch count for all four; each matrix has its own stride (0
  // repeats a matrix across the batch).
  if (p.a->batch < 1 || p.a->batch != p.d->batch ||
      p.b->batch != p.d->batch || p.c->batch != p.d->batch)
    return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

/// op(X) of batch b as a float panel of `outer` rows of `inner` values:
/// op(X)'s rows, or its columns when `wantColumns`, so that each dot
/// product below reads two contiguous runs of k floats.
void panel(const void *base, const Layout &l, int32_t b, bool trans,
           bool wantColumns, uint64_t outer, uint64_t inner,
           std::vector<float> &out) {
  out.resize(outer * inner);
  int64_t offset = int64_t(b) * l.stride;
  for (uint64_t o = 0; o < outer; ++o)
    for (uint64_t i = 0; i < inner; ++i) {
      // (row, col) of op(X): the panel wants op(X)(o, i), or op(X)(i, o)
      // when it lists op(X)'s columns.
      uint64_t r = wantColumns ? i : o, c = wantColumns ? o : i;
      uint64_t sr = trans ? c : r, sc = trans ? r : c; // as stored
      out[o * inner + i] =
          load(base, l.type, offset + int64_t(sr) + int64_t(sc) * l.ld);
    }
}
/// D = alpha * op(A) op(B) + beta * C (+ bias), in f32, rounded once.
void multiply(const Problem &p, const MatmulDesc &d, float alpha, float beta,
              bool useAB, bool useC, const void *A, const void *B,
              const void *C, void *D) {
  std::vector<float> rowsA, colsB; // op(A)'s rows, op(B)'s columns
  for (int32_t b = 0; b < p.d->batch; ++b) {
    if (useAB) {
      panel(A, *p.a, b, p.transA, false, p.m, p.k, rowsA);
      panel(B, *p.b, b, p.transB, true, p.n, p.k, colsB);
    }
    int64_t cBase = int64_t(b) * p.c->stride, dBase = int64_t(b) * p.d->stride;
    for (uint64_t j = 0; j < p.n; ++j)
      for (uint64_t i = 0; i < p.m; ++i) {
        float acc = 0.0f;
        if (useAB) {
          const float *x = &rowsA[i * p.k], *y = &colsB[j * p.k];
          for (uint64_t q = 0; q < p.k; ++q)
            acc += x[q] * y[q];
        }
        float v = alpha * acc;
        if (useC)
          v += beta *
               load(C, p.c->type, cBase + int64_t(i) + int64_t(j) * p.c->ld);
        // The bias epilogue: one value per row of D, every column.
        if (p.bias)
          v += load(d.bias, p.biasType, int64_t(b) * d.biasStride + int64_t(i));
        storeElement(D, p.d->type, dBase + int64_t(i) + int64_t(j) * p.d->ld,
                     v);
      }
  }
}

} // namespace

extern "C" {
cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle) {
  if (!handle)
    return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new (std::nothrow) cublasLtContext;
  return *handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (!handle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

const char *cublasLtGetStatusName(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
  case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
  case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
  case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  default: return "CUBLAS_STATUS_UNKNOWN";
  }
}
const char *cublasLtGetStatusString(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "success";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "the handle is not initialized";
  case CUBLAS_STATUS_ALLOC_FAILED: return "host allocation failed";
  case CUBLAS_STATUS_INVALID_VALUE:
    return "an invalid value or inconsistent shapes were passed";
  case CUBLAS_STATUS_NOT_SUPPORTED:
    return "not supported (by cuBLASLt or by the emulator's subset of it)";
  default: return cublasLtGetStatusName(s);
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *out,
                                          cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (!out)
    return CUBLAS_STATUS_INVALID_VALUE;
  Layout *l = new (std::nothrow) Layout{type, rows, cols, ld};
  *out = reinterpret_cast<cublasLtMatrixLayout_t>(l);
  return l ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete get(l);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(
    cublasLtMatrixLayout_t handle, cublasLtMatrixLayoutAttribute_t attr,
    const void *buf, size_t size) {
  if (!handle)
    return CUBLAS_STATUS_INVALID_VALUE;
  Layout &l = *get(handle);
  switch (attr) {
  case CUBLASLT_MATRIX_LAYOUT_TYPE: {
    uint32_t t;
    cublasStatus_t s = store(t, buf, size);
    if (s == CUBLAS_STATUS_SUCCESS)
      l.type = cudaDataType(t);
    return s;
  }
  case CUBLASLT_MATRIX_LAYOUT_ORDER: {
    int32_t order;
    cublasStatus_t s = store(order, buf, size);
    return s != CUBLAS_STATUS_SUCCESS ? s
           : order == CUBLASLT_ORDER_COL ? CUBLAS_STATUS_SUCCESS
                                         : CUBLAS_STATUS_NOT_SUPPORTED;
  }
  case CUBLASLT_MATRIX_LAYOUT_ROWS: return store(l.rows, buf, size);
  case CUBLASLT_MATRIX_LAYOUT_COLS: return store(l.cols, buf, size);
  case CUBLASLT_MATRIX_LAYOUT_LD: return store(l.ld, buf, size);
  case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return store(l.batch, buf, size);
  case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
    return store(l.stride, buf, size);
  default: // planar complex, pointer-array batches: not emulated
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *out,
                                        cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  if (!out)
    return CUBLAS_STATUS_INVALID_VALUE;
  MatmulDesc *d = new (std::nothrow) MatmulDesc{compute, scale};
  *out = reinterpret_cast<cublasLtMatmulDesc_t>(d);
  return d ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete get(d);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(
    cublasLtMatmulDesc_t handle, cublasLtMatmulDescAttributes_t attr,
    const void *buf, size_t size) {
  if (!handle)
    return CUBLAS_STATUS_INVALID_VALUE;
  MatmulDesc &d = *get(handle);
  switch (attr) {
  case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return store(d.compute, buf, size);
  case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return store(d.scale, buf, size);
  case CUBLASLT_MATMUL_DESC_POINTER_MODE:
    return store(d.pointerMode, buf, size);
  case CUBLASLT_MATMUL_DESC_TRANSA:
  case CUBLASLT_MATMUL_DESC_TRANSB: {
    int32_t op;
    if (cublasStatus_t s = store(op, buf, size); s != CUBLAS_STATUS_SUCCESS)
      return s;
    if (op != CUBLAS_OP_N && op != CUBLAS_OP_T && op != CUBLAS_OP_C)
      return CUBLAS_STATUS_INVALID_VALUE;
    (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d.transA : d.transB) = op;
    return CUBLAS_STATUS_SUCCESS;
  }
  case CUBLASLT_MATMUL_DESC_EPILOGUE: return store(d.epilogue, buf, size);
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return store(d.bias, buf, size);
  case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
    return store(d.biasStride, buf, size);
  case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return store(d.biasType, buf, size);
  case CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET:
    return store(d.smCountTarget, buf, size);
  default: // TRANSC, fill mode, aux buffers, fp8 scales...: not emulated
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *out) {
  if (!out)
    return CUBLAS_STATUS_INVALID_VALUE;
  Preference *p = new (std::nothrow) Preference;
  *out = reinterpret_cast<cublasLtMatmulPreference_t>(p);
  return p ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete get(p);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t handle,
    cublasLtMatmulPreferenceAttributes_t attr, const void *buf, size_t size) {
  if (!handle)
    return CUBLAS_STATUS_INVALID_VALUE;
  // Stored for completeness: the one algorithm offered needs no workspace
  // and reads any alignment.
  Preference &p = *get(handle);
  switch (attr) {
  case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return store(p.searchMode, buf, size);
  case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
    return store(p.maxWorkspace, buf, size);
  case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
    return store(p.reductionMask, buf, size);
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
    return store(p.alignA, buf, size);
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
    return store(p.alignB, buf, size);
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
    return store(p.alignC, buf, size);
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
    return store(p.alignD, buf, size);
  case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT: return store(p.maxWaves, buf, size);
  case CUBLASLT_MATMUL_PREF_IMPL_MASK: return store(p.implMask, buf, size);
  default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
    cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
    cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D,
    cublasLtMatmulPreference_t, int requested,
    cublasLtMatmulHeuristicResult_t results[], int *returned) {
  if (!handle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  if (returned)
    *returned = 0;
  if (requested <= 0 || !results || !returned)
    return CUBLAS_STATUS_INVALID_VALUE;
  Problem p;
  if (cublasStatus_t s = check(desc, A, B, C, D, p); s != CUBLAS_STATUS_SUCCESS)
    return s;
  std::memset(&results[0], 0, sizeof results[0]); // the algo: all zeros
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alphaPtr,
    const void *A, cublasLtMatrixLayout_t Adesc, const void *B,
    cublasLtMatrixLayout_t Bdesc, const void *betaPtr, const void *C,
    cublasLtMatrixLayout_t Cdesc, void *D, cublasLtMatrixLayout_t Ddesc,
    const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t stream) {
  if (!handle)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  Problem p;
  if (cublasStatus_t s = check(desc, Adesc, Bdesc, Cdesc, Ddesc, p);
      s != CUBLAS_STATUS_SUCCESS)
    return s;
  if (!alphaPtr || !betaPtr)
    return CUBLAS_STATUS_INVALID_VALUE;
  // Scale type f32: alpha and beta are floats (host, or device = host here).
  float alpha = *static_cast<const float *>(alphaPtr);
  float beta = *static_cast<const float *>(betaPtr);
  const MatmulDesc &d = *get(desc);
  if (p.m == 0 || p.n == 0)
    return CUBLAS_STATUS_SUCCESS;
  bool useAB = alpha != 0.0f && p.k > 0; // else A and B are not read
  bool useC = beta != 0.0f;              // else C need not be valid
  if (!D || (useAB && (!A || !B)) || (useC && !C) || (p.bias && !d.bias))
    return CUBLAS_STATUS_INVALID_VALUE;
  // In place (C == D) needs Cdesc to describe D's memory exactly.
  if (useC && C == D &&
      (p.c->ld != p.d->ld || (p.d->batch > 1 && p.c->stride != p.d->stride)))
    return CUBLAS_STATUS_INVALID_VALUE;
  // Runs in stream order, on copies of the descriptors (the caller may
  // destroy them once the call returns).
  lamina::cuda_emulator::submit(stream, [p, a = *p.a, bl = *p.b, c = *p.c,
                                         dl = *p.d, d, alpha, beta, useAB, useC,
                                         A, B, C, D]() mutable {
    p.a = &a;
    p.b = &bl;
    p.c = &c;
    p.d = &dl;
    multiply(p, d, alpha, beta, useAB, useC, A, B, C, D);
  });
  return CUBLAS_STATUS_SUCCESS;
}

} // extern "C"
