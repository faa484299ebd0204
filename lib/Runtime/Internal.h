//===- Internal.h - shared machinery of the runtime kernels -----*- C++ -*-===//
//
// Private to lib/Runtime: element-type dispatch, widening loads and rounding
// stores, the thread splitter, shape checks and the strided copy that all
// data-movement kernels reduce to.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_INTERNAL_H
#define LAMINA_LIB_RUNTIME_INTERNAL_H

#include "lamina/Runtime/Kernels.h"

#include <algorithm>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

namespace lamina::rt::detail {

/// i1 storage: one byte, read as `!= 0` so a stray 2 still means true.
struct Bool {
  uint8_t value;
};

template <typename T> struct Tag {
  using type = T;
};

/// Calls f(Tag<StorageType>{}) for the tensor's element type.
template <typename F> decltype(auto) dispatch(DType t, F &&f) {
  switch (t) {
  case DType::F32: return f(Tag<float>{});
  case DType::F64: return f(Tag<double>{});
  case DType::F16: return f(Tag<Half>{});
  case DType::BF16: return f(Tag<BFloat16>{});
  case DType::I1: return f(Tag<Bool>{});
  case DType::I8: return f(Tag<int8_t>{});
  case DType::I16: return f(Tag<int16_t>{});
  case DType::I32: return f(Tag<int32_t>{});
  case DType::I64: return f(Tag<int64_t>{});
  case DType::U8: return f(Tag<uint8_t>{});
  case DType::U16: return f(Tag<uint16_t>{});
  case DType::U32: return f(Tag<uint32_t>{});
  default: return f(Tag<uint64_t>{});
  }
}

/// The type a storage type computes in.
template <typename T> struct ComputeOf { using type = T; };
template <> struct ComputeOf<Half> { using type = float; };
template <> struct ComputeOf<BFloat16> { using type = float; };
template <> struct ComputeOf<Bool> { using type = uint8_t; };
template <typename T> using Compute = typename ComputeOf<T>::type;

template <typename T>
constexpr bool isFloatStorage =
    std::is_floating_point_v<T> || std::is_same_v<T, Half> ||
    std::is_same_v<T, BFloat16>;
template <typename T>
constexpr bool isIntStorage = std::is_integral_v<T>; // excludes Bool
/// f16 or bf16: stored narrow, computed in f32.
template <typename T>
constexpr bool isNarrowStorage =
    std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
inline bool isNarrowFloat(DType t) {
  return t == DType::F16 || t == DType::BF16;
}

LAMINA_HD inline float load(Half h) { return math::halfToFloat(h.bits); }
LAMINA_HD inline float load(BFloat16 b) { return math::bf16ToFloat(b.bits); }
LAMINA_HD inline uint8_t load(Bool b) { return b.value != 0; }
template <typename T> LAMINA_HD inline T load(T v) { return v; }

/// Rounds a compute value into storage type T.
template <typename T, typename C> LAMINA_HD inline T store(C v) {
  if constexpr (std::is_same_v<T, Half>) {
    if constexpr (std::is_same_v<C, double> || std::is_integral_v<C>)
      return Half{math::doubleToHalf(double(v))};
    else
      return Half{math::floatToHalf(float(v))};
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    if constexpr (std::is_same_v<C, double> || std::is_integral_v<C>)
      return BFloat16{math::doubleToBf16(double(v))};
    else
      return BFloat16{math::floatToBf16(float(v))};
  } else if constexpr (std::is_same_v<T, Bool>) {
    return Bool{uint8_t(v != C(0))};
  } else {
    return T(v);
  }
}

/// The unsigned integer type of a given element size, for byte copies.
template <size_t N> struct UIntOfSize;
template <> struct UIntOfSize<1> { using type = uint8_t; };
template <> struct UIntOfSize<2> { using type = uint16_t; };
template <> struct UIntOfSize<4> { using type = uint32_t; };
template <> struct UIntOfSize<8> { using type = uint64_t; };

/// Calls f(Tag<uintN_t>{}) for an element size of 1, 2, 4 or 8 bytes.
template <typename F> decltype(auto) dispatchSize(size_t size, F &&f) {
  switch (size) {
  case 1: return f(Tag<uint8_t>{});
  case 2: return f(Tag<uint16_t>{});
  case 4: return f(Tag<uint32_t>{});
  default: return f(Tag<uint64_t>{});
  }
}

//===----------------------------------------------------------------------===//
// Threads
//===----------------------------------------------------------------------===//

/// Elements of simple work per thread below which splitting does not pay
/// (waking a worker and the cache lines it pulls cost microseconds).
constexpr int64_t kGrain = 1 << 15;

/// Runs body(begin, end) over [0, n) in contiguous chunks of at least
/// `minChunk` items, on up to getNumThreads() threads (the caller's included).
void parallelFor(int64_t n, int64_t minChunk,
                 const std::function<void(int64_t, int64_t)> &body);

/// C[m, n] (leading dim ldc) = alpha op(A) op(B) + beta C on the calling
/// thread (Gemm.cpp): oneDNN for f32, OpenBLAS for f64.
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
          const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
          float *c, int64_t ldc);
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
          const double *a, int64_t lda, const double *b, int64_t ldb,
          double beta, double *c, int64_t ldc);

/// A convolution's or pool's geometry over three spatial dims (D, H, W);
/// 1-D and 2-D ops have leading dims of size 1 (kernel 1, stride 1, no
/// pads). `channels` are the input's; `outChannels` the result's.
struct WindowGeometry {
  int64_t batch = 0, channels = 0, outChannels = 0, group = 1;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, kernel[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1}, dilation[3] = {1, 1, 1};
  int64_t padBegin[3] = {0, 0, 0}, padEnd[3] = {0, 0, 0};
  LAMINA_HD int64_t inSize() const { return in[0] * in[1] * in[2]; }
  LAMINA_HD int64_t outSize() const { return out[0] * out[1] * out[2]; }
  LAMINA_HD int64_t kernelSize() const {
    return kernel[0] * kernel[1] * kernel[2];
  }
};
/// graph.conv's operands: float `input` [N, C, S...] (1 to 3 spatial dims),
/// `weight` [M, C/group, K...], `bias` [M] (nullptr: none) and `result`
/// [N, M, O...] with O the floor-mode window count, all of one element
/// type. The backward kernels pass their gradInput / gradWeight as `input`
/// / `weight` and gradResult as `result`.
Status checkConv(const char *name, const Tensor &input, const Tensor &weight,
                 const Tensor *bias, const int64_t *strides,
                 const int64_t *dilations, const int64_t *pads, int64_t group,
                 const Tensor &result, WindowGeometry &g);
/// A pool's: `input` [N, C, S...] (not i1) and `result` [N, C, O...] of
/// one element type, O the floor- or ceil-mode window count.
Status checkPool(const char *name, const Tensor &input, const int64_t *kernel,
                 const int64_t *strides, const int64_t *dilations,
                 const int64_t *pads, const Tensor &result, WindowGeometry &g);
/// The average pool's divisor of output position (od, oh, ow): the
/// window's taps inside the input or, `includePad`, inside the padded
/// input.
LAMINA_HD inline int64_t poolDivisor(const WindowGeometry &g, int64_t od,
                                     int64_t oh, int64_t ow, bool includePad) {
  int64_t o[3] = {od, oh, ow}, count = 1;
  for (int d = 0; d < 3; ++d) {
    int64_t lo = includePad ? -g.padBegin[d] : 0;
    int64_t hi = includePad ? g.in[d] + g.padEnd[d] : g.in[d];
    int64_t n = 0;
    for (int64_t k = 0; k < g.kernel[d]; ++k) {
      int64_t p = o[d] * g.stride[d] - g.padBegin[d] + k * g.dilation[d];
      n += p >= lo && p < hi;
    }
    count *= n;
  }
  return count;
}

//===----------------------------------------------------------------------===//
// Checks and messages
//===----------------------------------------------------------------------===//

/// "[2,3]xf32".
std::string describe(const Tensor &t);
std::string shapeString(const int64_t *shape, int rank);
bool sameShape(const Tensor &a, const Tensor &b);
bool hasShape(const Tensor &t, const std::vector<int64_t> &shape);
/// Normalises `axis` into [0, rank); false if out of range.
bool normaliseAxis(int64_t &axis, int rank);

// Argument checks shared by the host and CUDA kernels (lib/Runtime/Cuda).

/// Softmax and the norms: a float result shaped like the input, and an axis
/// inside it (normalised in place).
Status checkFloatAlongAxis(const char *name, const Tensor &input,
                           int64_t &axis, const Tensor &result);
/// A normalisation: the above, and params (nullptr entries skipped) shaped
/// like the dims from `axis` with the input's element type. Sets rows and n.
Status checkNorm(const char *name, const Tensor &input, int64_t &axis,
                 const Tensor *const *params, int numParams,
                 const Tensor &result, int64_t &rows, int64_t &n);
/// softmax / logSoftmax backward: checkFloatAlongAxis on the forward result
/// and gradInput, and gradResult shaped and typed like the result.
Status checkSoftmaxBackward(const char *name, const Tensor &result,
                            const Tensor &gradResult, int64_t &axis,
                            const Tensor &gradInput);
/// A normalisation's backward: checkNorm on the input, scale and the
/// parameter gradients (nullptr skipped) with gradInput as the result, and
/// gradResult and the addend (nullptr skipped) shaped and typed like the
/// input.
Status checkNormBackward(const char *name, const Tensor &input, int64_t &axis,
                         const Tensor &scale, const Tensor &gradResult,
                         const Tensor &gradInput, const Tensor *gradScale,
                         const Tensor *gradBias, int64_t &rows, int64_t &n,
                         const Tensor *addend = nullptr);
/// Whether cross-entropy's per-row value (the loss, or its gradient) is
/// f32 for f16/bf16 logits (else it has the logits' type).
inline bool wideRowValue(const Tensor &logits, const Tensor &rowValue) {
  return isNarrowFloat(logits.dtype) && rowValue.dtype == DType::F32;
}
/// Calls f(Tag<L>) for the per-row value's type L over T logits: f32 when
/// `wide` (wideRowValue), else T. The host and CUDA kernels' dispatch.
template <typename T, typename F> void dispatchRowValue(bool wide, F &&f) {
  if constexpr (isNarrowStorage<T>)
    if (wide)
      return f(Tag<float>{});
  f(Tag<T>{});
}
/// Softmax cross-entropy: float logits [..., V] (rank >= 1), i32/i64
/// labels [...], and `rowValue` (the loss, or the loss's gradient) and
/// `gradLogits` (nullptr to skip) typed and shaped as the op says.
/// Sets rows and v.
Status checkCrossEntropy(const char *name, const Tensor &logits,
                         const Tensor &labels, const Tensor &rowValue,
                         const Tensor *gradLogits, int64_t &rows, int64_t &v);
/// attention's operands as dims: [B, H, Sq, D] queries, Hk kv heads of Sk
/// keys, Dv value dims, and the bias's element strides over [B, H, Sq, Sk]
/// (0 where it broadcasts; all 0 without a bias).
struct AttentionDims {
  int64_t batch = 0, heads = 0, kvHeads = 0, sq = 0, sk = 0, d = 0, dv = 0;
  int64_t biasStrides[4] = {0, 0, 0, 0};
  bool seqMajor = false; // AttentionLayout::SeqMajor

  /// Where row i (a position along S of `len` rows) of head h of batch b
  /// starts in a q/k/v/out-like tensor with `numHeads` heads of `width`
  /// elements, and the elements from one row to the next.
  int64_t rowOffset(int64_t b, int64_t h, int64_t i, int64_t numHeads,
                    int64_t len, int64_t width) const {
    return seqMajor ? ((b * len + i) * numHeads + h) * width
                    : ((b * numHeads + h) * len + i) * width;
  }
  int64_t rowStride(int64_t numHeads, int64_t width) const {
    return seqMajor ? numHeads * width : width;
  }
};
/// attention: q, k, v, bias (nullptr skipped), out and lse as Kernels.h
/// says for `layout`; with `gradOut` (nullptr skipped) shaped and typed
/// like out, and the three gradients (nullptr skipped) like q, k and v.
Status checkAttention(const char *name, const Tensor &q, const Tensor &k,
                      const Tensor &v, const Tensor *bias, const Tensor &out,
                      const Tensor &lse, const Tensor *gradOut,
                      const Tensor *gradQ, const Tensor *gradK,
                      const Tensor *gradV, AttentionLayout layout,
                      AttentionDims &dims);
/// When an op narrows an f32 input to an f16/bf16 result (a norm's output,
/// the cross-entropy gradient), calls f(Tag<float>, Tag<R>) and returns
/// true; otherwise false (the caller dispatches on the input type with
/// R = T).
template <typename F>
bool dispatchNarrowed(const Tensor &input, const Tensor &result, F &&f) {
  if (input.dtype != DType::F32)
    return false;
  if (result.dtype == DType::BF16)
    f(Tag<float>{}, Tag<BFloat16>{});
  else if (result.dtype == DType::F16)
    f(Tag<float>{}, Tag<Half>{});
  else
    return false;
  return true;
}
/// layerNorm / rmsNorm: checkNorm, the result also f16/bf16 for an f32
/// input (the f32 value rounded once).
Status checkNormForward(const char *name, const Tensor &input, int64_t &axis,
                        const Tensor *const *params, int numParams,
                        const Tensor &result, int64_t &rows, int64_t &n);
/// reduce's element types: the input's, or f32 for an f16/bf16 input.
Status checkReduceTypes(const Tensor &input, const Tensor &result);
/// reduce's axes (distinct, in range) and result shape; sets `reduced`
/// (one flag per input dim).
Status checkReduce(const Tensor &input, const int64_t *axes, int numAxes,
                   bool keepdims, const Tensor &result,
                   std::vector<bool> &reduced);
/// matmul's element types: one float type, or f16/bf16 operands with an
/// f32 result (the accumulator stored unrounded).
Status checkMatMulTypes(const Tensor &lhs, const Tensor &rhs,
                        const Tensor &result);
/// matmulEpilogue's bias (a row of n of the result's type) and addend (the
/// result's type and shape), each optional.
Status checkMatMulEpilogue(const Tensor *bias, const Tensor *addend,
                           const Tensor &result);
/// gather's index type, axis (normalised in place) and result shape.
Status checkGather(const Tensor &data, const Tensor &indices, int64_t &axis,
                   const Tensor &result);

//===----------------------------------------------------------------------===//
// Broadcast iteration and strided copy
//===----------------------------------------------------------------------===//

/// Up to four operands (fusedElementwise's limit) broadcast to a result,
/// with dims of size 1 dropped and adjacent dims merged where every operand
/// allows. The innermost dim's stride is then 1 or 0 for each operand.
constexpr int kMaxBroadcastInputs = kMaxFusedInputs;
struct BroadcastPlan {
  int numInputs = 0;
  std::vector<int64_t> shape; // collapsed result shape, rank >= 1
  std::vector<int64_t> strides[kMaxBroadcastInputs]; // 0 where broadcast
};
/// Fails unless each input broadcasts to `result` and, when `exact`,
/// `result` is exactly their broadcast.
Status planBroadcast(const char *op, const Tensor *const *inputs, int n,
                     const Tensor &result, BroadcastPlan &plan,
                     bool exact = true);

/// Calls body(outOffset, inOffsets, length) for each innermost run of the
/// plan (or piece of one); inner strides are plan.strides[k].back(). Splits
/// over threads by rows, and splits rows too when there are few of them.
template <typename Body>
void forEachRun(const BroadcastPlan &p, int64_t costPerElement, Body &&body) {
  int rank = int(p.shape.size());
  int64_t inner = p.shape.back(), rows = 1;
  for (int d = 0; d + 1 < rank; ++d)
    rows *= p.shape[d];
  if (rows == 0 || inner == 0)
    return;
  int64_t grain = std::max<int64_t>(1, kGrain / costPerElement);
  int threads = getNumThreads();
  if (rows < threads && inner >= 2 * grain) {
    // Pieces of rows: each item finds its offsets from scratch.
    int64_t pieceLen = std::max(grain, (inner + threads - 1) / threads);
    int64_t pieces = (inner + pieceLen - 1) / pieceLen;
    parallelFor(rows * pieces, 1, [&](int64_t begin, int64_t end) {
      for (int64_t item = begin; item < end; ++item) {
        int64_t r = item / pieces, start = (item % pieces) * pieceLen;
        int64_t off[kMaxBroadcastInputs] = {};
        for (int64_t rem = r, d = rank - 2; d >= 0; --d) {
          for (int k = 0; k < p.numInputs; ++k)
            off[k] += (rem % p.shape[d]) * p.strides[k][d];
          rem /= p.shape[d];
        }
        for (int k = 0; k < p.numInputs; ++k)
          off[k] += start * p.strides[k].back();
        body(r * inner + start, off, std::min(pieceLen, inner - start));
      }
    });
    return;
  }
  int64_t minRows = (grain + inner - 1) / inner;
  parallelFor(rows, minRows, [&](int64_t begin, int64_t end) {
    std::vector<int64_t> idx(rank > 1 ? rank - 1 : 1, 0);
    int64_t off[kMaxBroadcastInputs] = {};
    for (int64_t r = begin, d = rank - 2; d >= 0; --d) {
      idx[d] = r % p.shape[d];
      r /= p.shape[d];
      for (int k = 0; k < p.numInputs; ++k)
        off[k] += idx[d] * p.strides[k][d];
    }
    for (int64_t r = begin; r < end; ++r) {
      body(r * inner, off, inner);
      for (int d = rank - 2; d >= 0; --d) { // odometer step
        for (int k = 0; k < p.numInputs; ++k)
          off[k] += p.strides[k][d];
        if (++idx[d] < p.shape[d])
          break;
        for (int k = 0; k < p.numInputs; ++k)
          off[k] -= idx[d] * p.strides[k][d];
        idx[d] = 0;
      }
    }
  });
}

/// dst (dense, row-major over `shape`) = elements of `src` at element
/// strides `srcStrides` (any sign, 0 repeats). Used by transpose, slice,
/// broadcast and tile.
void stridedCopy(const void *src, void *dst, size_t elementSize,
                 std::vector<int64_t> shape, std::vector<int64_t> srcStrides);

/// A data-movement kernel as a strided copy: result element (i_0, ..., i_k)
/// over `shape` is input element `base + sum i_d * strides[d]` (element
/// units). The plan* functions check a kernel's arguments and plan it; the
/// host and device kernels share them, so both accept and refuse alike.
struct CopyPlan {
  std::vector<int64_t> shape, strides;
  int64_t base = 0;
  /// The source of the copy (input.data advanced by `base` elements).
  const void *source(const Tensor &input) const {
    return static_cast<const char *>(input.data) +
           base * int64_t(input.elementSize());
  }
};
Status planTranspose(const Tensor &input, const int64_t *perm,
                     const Tensor &result, CopyPlan &plan);
Status planSlice(const Tensor &input, const int64_t *starts,
                 const int64_t *sizes, const int64_t *steps,
                 const Tensor &result, CopyPlan &plan);
Status planBroadcastCopy(const Tensor &input, const Tensor &result,
                         CopyPlan &plan);
Status planTile(const Tensor &input, const int64_t *repeats,
                const Tensor &result, CopyPlan &plan);
/// Checks of the kernels that are not strided copies; concat normalises
/// `axis`.
Status checkReshape(const Tensor &input, const Tensor &result);
Status checkConcat(const Tensor *inputs, int numInputs, int64_t &axis,
                   const Tensor &result);
Status checkTrilu(const Tensor &input, const Tensor &result);

/// fusedElementwise's checks (counts, every input and the result f32, f16
/// or bf16, each its own, registers defined before use, known ops, the sum
/// f32 of the result's trailing dims), shared
/// with the device kernel; broadcasting is checked where each plans it.
Status checkFused(const Tensor *inputs, int numInputs, const FusedStep *steps,
                  int numSteps, const Tensor &result,
                  const Tensor *sum = nullptr);

/// gather_nd's and scatter_nd's argument checks (Gather.cpp), shared by the
/// host and device kernels; `k` is the length of an index tuple.
Status checkGatherND(const Tensor &data, const Tensor &indices,
                     int64_t batchDims, const Tensor &result, int64_t &k);
Status checkScatterND(const Tensor &data, const Tensor &indices,
                      const Tensor &updates, ScatterReduction reduction,
                      const Tensor &result, int64_t &k);

/// [outer, n, inner] around `axis`.
inline void splitAround(const Tensor &t, int axis, int64_t &outer, int64_t &n,
                        int64_t &inner) {
  outer = numElements(t.shape, axis);
  n = t.shape[axis];
  inner = numElements(t.shape + axis + 1, t.rank - axis - 1);
}

} // namespace lamina::rt::detail

#endif // LAMINA_LIB_RUNTIME_INTERNAL_H
