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
// matmulEpilogue (graph.fused_matmul): the addend is C with beta = 1 (C may
// be D), the bias cuBLASLt's bias epilogue (a vector over D's column-major
// rows = the row-major result's columns, broadcast over the batch: stride
// 0). Where the heuristic has no algorithm with the epilogue (or
// LAMINA_CUDA_EPILOGUE=off), the plan drops it and the bias is added by the
// broadcast add kernel after the GEMM (same values; one more pass).
//
// One handle per process (created on first use, for the current device).
// Descriptors, layouts and the heuristic's algorithm are cached per exact
// call description (PlanKey), so a training step's few dozen distinct GEMMs
// query the heuristic once each instead of on every call. The 32 MiB
// workspace is allocated once per device and shared by every stream; an
// event recorded after each use orders the next use (on any stream) after it.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include <cublasLt.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

using lamina::rt::detail::checkMatMulEpilogue;
using lamina::rt::detail::checkMatMulTypes;

using namespace lamina::rt;
using namespace lamina::rt::cuda;
using namespace lamina::rt::cuda::detail;

namespace {
constexpr size_t kWorkspace = 32u << 20;
/// Past this many distinct calls (shapes varying without end, say) the plan
/// cache is emptied rather than grown; a training step has a few dozen.
constexpr size_t kMaxPlans = 4096;
/// Candidates asked of the heuristic; the first usable one is kept.
constexpr int kCandidates = 8;

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

/// The largest power of two dividing the address, up to 256 (cuBLASLt's
/// default assumption, which arena offsets -- 64-byte aligned -- and
/// per-batch pointers need not meet).
uint32_t alignmentOf(const void *p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0)
    align /= 2;
  return align;
}

/// The alignment every matrix of a strided batch has: the base's, lowered
/// to what the stride between matrices keeps (batch 1 of a bf16 batch of
/// 6-element matrices is 4-byte aligned whatever the base is).
uint32_t alignmentOf(const void *p, int32_t batch, int64_t strideBytes) {
  uint32_t align = alignmentOf(p);
  if (batch > 1)
    while (align > 1 && strideBytes % align != 0)
      align /= 2;
  return align;
}

/// Everything a plan depends on. The leading dims follow from m, n, k and
/// the transposes but are listed so the key is literally the layouts'.
struct PlanKey {
  int device;
  DType dtype, resultType; // f16/bf16 operands may have an f32 result
  int64_t m, n, k;
  bool tl, tr;
  bool bias, accumulate; // the epilogue's bias; C = the addend, beta = 1
  int32_t batch;
  int64_t strideL, strideR, strideC;
  int64_t ldRhs, ldLhs, ldC;
  size_t workspaceBytes;
  uint32_t alignRhs, alignLhs, alignC, alignAddend, alignBias;

  auto tie() const {
    return std::make_tuple(device, int(dtype), int(resultType), m, n, k, tl,
                           tr, bias, accumulate, batch, strideL, strideR,
                           strideC, ldRhs, ldLhs, ldC, workspaceBytes,
                           alignRhs, alignLhs, alignC, alignAddend, alignBias);
  }
  bool operator<(const PlanKey &o) const { return tie() < o.tie(); }
};

/// The descriptors and algorithm of one cached call description.
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspaceBytes = 0; // what the algorithm uses, <= the key's
  bool biasInEpilogue = false; // else added after the GEMM
  Plan() = default;
  Plan(const Plan &) = delete;
  Plan &operator=(const Plan &) = delete;
  ~Plan() {
    for (cublasLtMatrixLayout_t l : {a, b, c})
      if (l)
        cublasLtMatrixLayoutDestroy(l);
    if (op)
      cublasLtMatmulDescDestroy(op);
  }
};

struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  ~Preference() {
    if (p)
      cublasLtMatmulPreferenceDestroy(p);
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

Status setPref(cublasLtMatmulPreference_t p,
               cublasLtMatmulPreferenceAttributes_t attr, const void *v,
               size_t size) {
  return blasCheck("preference",
                   cublasLtMatmulPreferenceSetAttribute(p, attr, v, size));
}

/// LAMINA_CUDA_EPILOGUE=off: the bias is always added by the broadcast add
/// kernel after the GEMM, never by cuBLASLt's epilogue (a first GPU run's
/// fallback if the epilogue path fails its tests; read once).
bool biasEpilogueAllowed() {
  static const bool allowed = [] {
    const char *v = std::getenv("LAMINA_CUDA_EPILOGUE");
    return !v || (std::strcmp(v, "off") != 0 && std::strcmp(v, "0") != 0);
  }();
  return allowed;
}

Status setEpilogue(cublasLtMatmulDesc_t op, cublasLtEpilogue_t epilogue,
                   const void *bias) {
  if (Status s = blasCheck("epilogue", cublasLtMatmulDescSetAttribute(
                                           op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                           &epilogue, sizeof epilogue));
      !s.ok() || epilogue == CUBLASLT_EPILOGUE_DEFAULT)
    return s;
  return blasCheck("bias", cublasLtMatmulDescSetAttribute(
                               op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                               sizeof bias));
}

/// Creates the descriptors for `key` and asks the heuristic for an
/// algorithm whose workspace fits (with the bias epilogue first, when the
/// key has a bias, then without). `bias` is the call's bias pointer: the
/// heuristic reads its alignment.
Status makePlan(cublasLtHandle_t h, const PlanKey &key, const void *bias,
                Plan &p) {
  cudaDataType_t type = cudaType(key.dtype);
  if (Status s = blasCheck("desc", cublasLtMatmulDescCreate(
                                       &p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
      !s.ok())
    return s;
  // cuBLAS "A" = the rhs, "B" = the lhs.
  cublasOperation_t opA = key.tr ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opB = key.tl ? CUBLAS_OP_T : CUBLAS_OP_N;
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
  int64_t m = key.m, n = key.n, k = key.k;
  // Stored rhs: [k, n] (col-major n x k) or, transposed, [n, k] (k x n).
  if (Status s = layout(p.a, type, key.tr ? k : n, key.tr ? n : k, key.ldRhs,
                        key.batch, key.strideR);
      !s.ok())
    return s;
  // Stored lhs: [m, k] (col-major k x m) or, transposed, [k, m] (m x k).
  if (Status s = layout(p.b, type, key.tl ? m : k, key.tl ? k : m, key.ldLhs,
                        key.batch, key.strideL);
      !s.ok())
    return s;
  if (Status s = layout(p.c, cudaType(key.resultType), n, m, key.ldC,
                        key.batch, key.strideC);
      !s.ok())
    return s;

  Preference pref;
  if (Status s = blasCheck("preference",
                           cublasLtMatmulPreferenceCreate(&pref.p));
      !s.ok())
    return s;
  size_t ws = key.workspaceBytes;
  if (Status s = setPref(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                         sizeof ws);
      !s.ok())
    return s;
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.alignRhs},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.alignLhs},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
       key.accumulate ? key.alignAddend : key.alignC},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.alignC}};
  for (const auto &[attr, value] : aligns)
    if (Status s = setPref(pref.p, attr, &value, sizeof value); !s.ok())
      return s;

  int count = 0;
  for (bool withBias : {true, false}) {
    if (withBias && (!key.bias || !biasEpilogueAllowed()))
      continue;
    if (Status s = setEpilogue(p.op,
                               withBias ? CUBLASLT_EPILOGUE_BIAS
                                        : CUBLASLT_EPILOGUE_DEFAULT,
                               bias);
        !s.ok())
      return s;
    cublasLtMatmulHeuristicResult_t found[kCandidates] = {};
    count = 0;
    // A heuristic error with the epilogue (not supported for these types)
    // is a reason to try without it, not a failure.
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
        h, p.op, p.a, p.b, p.c, p.c, pref.p, kCandidates, found, &count);
    if (st != CUBLAS_STATUS_SUCCESS) {
      if (withBias)
        continue;
      return blasCheck("heuristic", st);
    }
    for (int i = 0; i < count; ++i)
      if (found[i].state == CUBLAS_STATUS_SUCCESS &&
          found[i].workspaceSize <= ws) {
        p.algo = found[i].algo;
        p.workspaceBytes = found[i].workspaceSize;
        p.biasInEpilogue = withBias;
        return Status::success();
      }
  }
  return Status::error(
      "matmul: cuBLASLt has no algorithm for " +
      std::string(dtypeName(key.dtype)) + " -> " + dtypeName(key.resultType) +
      " m=" + std::to_string(m) +
      " n=" + std::to_string(n) + " k=" + std::to_string(k) +
      " batch=" + std::to_string(key.batch) + (key.tl ? " lhs^T" : "") +
      (key.tr ? " rhs^T" : "") + " within " + std::to_string(ws) +
      " bytes of workspace (" + std::to_string(count) + " candidates)");
}

/// The per-device workspace: cudaMalloc'd once, never freed (like the
/// handle: freeing at exit can race the CUDA runtime's teardown). `lastUse`
/// is recorded after every matmul and waited for by the next one, whatever
/// its stream: on the same stream the wait is already satisfied; on another
/// (or a new stream that reuses a destroyed one's handle) it keeps two
/// matmuls from sharing the workspace at once. In a stream capture (CUDA
/// graphs, docs/cuda.md) neither happens: a wait for an event recorded
/// outside the capture is an error there, and the capture's matmuls are
/// ordered by their stream; whoever launches the graph records `lastUse`
/// after it (recordWorkspaceUse).
struct Workspace {
  void *ptr = nullptr;
  cudaEvent_t lastUse = nullptr;
  cudaStream_t lastStream = nullptr;
  bool used = false;
};

/// The caches: only touched under `mutex` (programs call from one thread;
/// the lock keeps a second thread correct, not fast).
struct GemmState {
  std::mutex mutex;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;
  std::map<int, Workspace> workspaces;
};
GemmState &state() {
  static GemmState *s = new GemmState; // never destroyed: see Workspace
  return *s;
}

bool isCapturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &status) == cudaSuccess &&
         status != cudaStreamCaptureStatusNone;
}

/// The device's workspace, ready for a call on `stream` (`capturing`: in a
/// stream capture): allocated (a failed allocation is retried on the next
/// call; meanwhile matmuls run without one) and ordered after its last use.
Status acquireWorkspace(int device, cudaStream_t stream, bool capturing,
                        Workspace *&out) {
  Workspace &w = state().workspaces[device];
  out = &w;
  if (!w.ptr) {
    if (cudaMalloc(&w.ptr, kWorkspace) != cudaSuccess) {
      w.ptr = nullptr;
      (void)cudaGetLastError();
      return Status::success();
    }
  }
  if (!w.lastUse)
    if (Status s = cudaCheck("matmul: workspace event",
                             cudaEventCreateWithFlags(&w.lastUse,
                                                      cudaEventDisableTiming));
        !s.ok())
      return s;
  if (!w.used)
    return Status::success();
  if (capturing) {
    if (w.lastStream == stream)
      return Status::success();
    return Status::error("matmul: the cuBLASLt workspace was last used on "
                         "another stream than the one being captured (a "
                         "CUDA graph captures one stream)");
  }
  return cudaCheck("matmul: workspace wait",
                   cudaStreamWaitEvent(stream, w.lastUse, 0));
}

Status releaseWorkspace(Workspace &w, cudaStream_t stream, bool capturing) {
  if (!w.ptr)
    return Status::success();
  w.used = true;
  w.lastStream = stream;
  if (capturing)
    return Status::success();
  return cudaCheck("matmul: workspace event",
                   cudaEventRecord(w.lastUse, stream));
}

struct Call {
  cublasLtHandle_t h;
  int device;
  DType dtype, resultType;
  void *workspace; // null: run without one
  cudaStream_t stream;
  const void *bias = nullptr; // n elements of resultType, every row
  bool biasAdded = false;     // set when a GEMM's epilogue added it
};

/// result[batch] = op(lhs[batch]) op(rhs[batch]) (+ addend[batch], + the
/// call's bias where an epilogue algorithm exists) for `batch` matrices at
/// the given element strides (row-major m x k / k x n views as the host;
/// the addend strided as the result).
Status gemm(Call &call, const void *lhs, const void *rhs, const void *addend,
            void *result, int64_t m, int64_t n, int64_t k, bool tl, bool tr,
            int32_t batch, int64_t strideL, int64_t strideR, int64_t strideC) {
  int64_t ab = int64_t(dtypeSize(call.dtype)),
          cb = int64_t(dtypeSize(call.resultType));
  PlanKey key{call.device,
              call.dtype,
              call.resultType,
              m,
              n,
              k,
              tl,
              tr,
              call.bias != nullptr,
              addend != nullptr,
              batch,
              batch > 1 ? strideL : 0,
              batch > 1 ? strideR : 0,
              batch > 1 ? strideC : 0,
              tr ? k : n,
              tl ? m : k,
              n,
              call.workspace ? kWorkspace : 0,
              alignmentOf(rhs, batch, strideR * ab),
              alignmentOf(lhs, batch, strideL * ab),
              alignmentOf(result, batch, strideC * cb),
              addend ? alignmentOf(addend, batch, strideC * cb) : 0,
              call.bias ? alignmentOf(call.bias) : 0};
  auto &plans = state().plans;
  auto it = plans.find(key);
  if (it == plans.end()) {
    auto plan = std::make_unique<Plan>();
    if (Status s = makePlan(call.h, key, call.bias, *plan); !s.ok())
      return s; // not cached: a failure is reported on every call
    if (plans.size() >= kMaxPlans)
      plans.clear();
    it = plans.emplace(key, std::move(plan)).first;
  }
  const Plan &p = *it->second;
  // The descriptor is shared by every call of this description: the bias
  // pointer is this call's (read when the call is enqueued).
  if (p.biasInEpilogue)
    if (Status s = setEpilogue(p.op, CUBLASLT_EPILOGUE_BIAS, call.bias);
        !s.ok())
      return s;
  call.biasAdded = p.biasInEpilogue;
  float alpha = 1.0f, beta = addend ? 1.0f : 0.0f;
  return blasCheck("cublasLtMatmul",
                   cublasLtMatmul(call.h, p.op, &alpha, rhs, p.a, lhs, p.b,
                                  &beta, addend ? addend : result, p.c, result,
                                  p.c, &p.algo,
                                  p.workspaceBytes ? call.workspace : nullptr,
                                  p.workspaceBytes, call.stream));
}

/// The calls of one matmul (shapes already checked).
Status enqueue(Call &call, const Tensor &lhs, const Tensor &rhs,
               const Tensor *addend, const Tensor &result, bool transposeLhs,
               bool transposeRhs, int64_t m, int64_t n, int64_t k,
               const int64_t *batchShape, int batchRank) {
  const char *add = addend ? static_cast<const char *>(addend->data) : nullptr;
  int64_t batch = numElements(batchShape, batchRank);
  size_t es = lhs.elementSize();
  int lb = lhs.rank - 2, rb = rhs.rank - 2;
  int64_t lBatch = numElements(lhs.shape, lb);
  int64_t rBatch = numElements(rhs.shape, rb);
  if (lBatch == batch && rBatch == batch)
    return gemm(call, lhs.data, rhs.data, add, result.data, m, n, k,
                transposeLhs, transposeRhs, int32_t(batch), m * k, k * n,
                m * n);
  if (rBatch == 1 && lBatch == batch && !transposeLhs)
    return gemm(call, lhs.data, rhs.data, add, result.data, batch * m, n, k,
                false, transposeRhs, 1, 0, 0, 0);
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
    int64_t offset = b * m * n * int64_t(result.elementSize());
    char *c = static_cast<char *>(result.data) + offset;
    if (Status s = gemm(call, l, r, add ? add + offset : nullptr, c, m, n, k,
                        transposeLhs, transposeRhs, 1, 0, 0, 0);
        !s.ok())
      return s;
  }
  return Status::success();
}
} // namespace

namespace {
/// matmul and matmulEpilogue: lhs x rhs (+ addend) (+ bias).
Status product(const Tensor &lhs, const Tensor &rhs, const Tensor *bias,
               const Tensor *addend, const Tensor &result, bool transposeLhs,
               bool transposeRhs, cudaStream_t stream) {
  if (Status s = checkMatMulTypes(lhs, rhs, result); !s.ok())
    return s;
  if (lhs.rank < 2 || rhs.rank < 2 || !isDeviceFloat(lhs.dtype))
    return Status::error("matmul: needs rank >= 2 operands of one float type "
                         "(f32, f16, bf16 on CUDA), got " +
                         describe(lhs) + " x " + describe(rhs) + " -> " +
                         describe(result));
  if (Status s = checkMatMulEpilogue(bias, addend, result); !s.ok())
    return s;
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
  if (result.numElements() == 0)
    return Status::success();
  // Adds the bias where no GEMM's epilogue did.
  auto addBias = [&](bool added) {
    return bias && !added
               ? binary(BinaryOp::Add, result, *bias, result, stream)
               : Status::success();
  };
  if (k == 0) { // the empty sums are 0: the result is addend + bias
    Status s = !addend ? cudaCheck("matmul", cudaMemsetAsync(
                                                 result.data, 0,
                                                 result.byteSize(), stream))
               : addend->data == result.data
                   ? Status::success()
                   : cudaCheck("matmul",
                               cudaMemcpyAsync(result.data, addend->data,
                                               result.byteSize(),
                                               cudaMemcpyDeviceToDevice,
                                               stream));
    return s.ok() ? addBias(false) : s;
  }
  Status hs;
  cublasLtHandle_t h = handle(hs);
  if (!hs.ok())
    return hs;
  int device = 0;
  if (Status s = cudaCheck("matmul: cudaGetDevice", cudaGetDevice(&device));
      !s.ok())
    return s;

  Call call{h, device, lhs.dtype, result.dtype, nullptr, stream};
  call.bias = bias ? bias->data : nullptr;
  {
    std::lock_guard<std::mutex> lock(state().mutex);
    Workspace *ws = nullptr;
    const bool capturing = isCapturing(stream);
    if (Status s = acquireWorkspace(device, stream, capturing, ws); !s.ok())
      return s;
    call.workspace = ws->ptr;
    Status s = enqueue(call, lhs, rhs, addend, result, transposeLhs,
                       transposeRhs, m, n, k, batchShape, batchRank);
    // Recorded even after a failed call: earlier calls of this matmul may
    // have been enqueued and used the workspace.
    Status r = releaseWorkspace(*ws, stream, capturing);
    if (!s.ok() || !r.ok())
      return s.ok() ? r : s;
  }
  return addBias(call.biasAdded);
}
} // namespace

Status lamina::rt::cuda::matmul(const Tensor &lhs, const Tensor &rhs,
                                const Tensor &result, bool transposeLhs,
                                bool transposeRhs, cudaStream_t stream) {
  return product(lhs, rhs, nullptr, nullptr, result, transposeLhs,
                 transposeRhs, stream);
}

Status lamina::rt::cuda::matmulEpilogue(const Tensor &lhs, const Tensor &rhs,
                                        const Tensor *bias,
                                        const Tensor *addend,
                                        const Tensor &result,
                                        bool transposeLhs, bool transposeRhs,
                                        cudaStream_t stream) {
  return product(lhs, rhs, bias, addend, result, transposeLhs, transposeRhs,
                 stream);
}

Status lamina::rt::cuda::detail::recordWorkspaceUse(cudaStream_t stream) {
  int device = 0;
  if (Status s = cudaCheck("matmul: cudaGetDevice", cudaGetDevice(&device));
      !s.ok())
    return s;
  std::lock_guard<std::mutex> lock(state().mutex);
  auto it = state().workspaces.find(device);
  if (it == state().workspaces.end() || !it->second.used)
    return Status::success();
  return releaseWorkspace(it->second, stream, /*capturing=*/false);
}
