//===- Kernels.h - CUDA kernels mirroring the host runtime ------*- C++ -*-===//
//
// The device half of the runtime (library `lamina_cuda_runtime`, built when
// LAMINA_ENABLE_CUDA is on). Each function mirrors the host kernel of the
// same name in lamina/Runtime/Kernels.h -- same Tensor views (whose `data`
// is a device pointer; `shape` stays a host array), same argument order,
// same enums, same Status -- plus a trailing cudaStream_t: every call only
// enqueues work on that stream and returns without synchronising, so a
// lowering can switch callee names from lamina::rt:: to lamina::rt::cuda::.
//
// Errors:
// * Anything decidable from the views (element types, shapes, axes, a
//   launch failure) is returned as an error Status at once, before anything
//   is enqueued.
// * Errors that depend on the data (an out-of-range gather, gather_nd or
//   scatter_nd index, a label) cannot be returned without a
//   synchronisation: the kernel records the first one in a per-process
//   device slot and writes 0 for that element (scatter_nd skips the
//   tuple); deviceStatus(stream) synchronises and returns it (then clears
//   it). Unlike the host kernels, the other elements are still written.
//
// Element types: the elementwise, logic, cast, cumsum, reduce, gather /
// scatter and data-movement kernels take every type their host twin takes.
// Arithmetic computes as on the host (f16/bf16 in f32, rounded to nearest
// even on store with Math.h's conversions; f64 in f64; integers in their
// own type, wrapping, with Math.h's division rules); data movement copies
// 1, 2, 4 or 8-byte words. softmax, logSoftmax, the norms, matmul and the
// fused forms (the softmax and norm backward passes, softmax
// cross-entropy, fusedElementwise, attention) take f32, f16 and bf16 only,
// and say so in an error.
//
// Differences from the host, all documented at the function: float sums
// reduce in another order (f32 trees, not the host's f64 or serial sums);
// float scatter_nd add/mul combine duplicates in an unspecified order; a
// NaN result may carry another payload (the GPU's canonical NaN).
//
// Per-element math (exp, gelu, sigmoid, ...) is Math.h's, compiled for the
// device through LAMINA_HD, so host and device agree up to the platforms'
// libm (a few ulp) and the order of summation.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_CUDA_KERNELS_H
#define LAMINA_RUNTIME_CUDA_KERNELS_H

#include "lamina/Runtime/Kernels.h"

#include <cuda_runtime_api.h>

#include <vector>

namespace lamina::rt::cuda {

/// Most dims a device kernel takes (shapes travel to kernels by value).
constexpr int kMaxRank = 8;

/// CUDA devices visible to this process; 0 (not an error) when there is no
/// driver or no device, so callers and tests can skip cleanly.
int deviceCount();

/// Waits for `stream` and returns the first data-dependent error recorded by
/// a kernel since the last call (an out-of-range index or label), or a CUDA
/// error the stream hit; clears the recorded error.
Status deviceStatus(cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

/// result = op(input), every op on the host's types (Neg/Abs/Relu on any
/// numeric type, the rest on floats, Not on i1). In place allowed.
Status unary(UnaryOp op, const Tensor &input, const Tensor &result,
             cudaStream_t stream);
/// Numpy broadcasting; arithmetic on every numeric type (integer division
/// truncates, x / 0 = 0, MIN / -1 wraps: Math.h), And/Or on i1.
Status binary(BinaryOp op, const Tensor &lhs, const Tensor &rhs,
              const Tensor &result, cudaStream_t stream);
/// Numpy broadcasting, any operand type; result i1 (one byte, 0 or 1).
/// Comparisons with NaN are false.
Status compare(CompareOp op, const Tensor &lhs, const Tensor &rhs,
               const Tensor &result, cudaStream_t stream);
/// result = condition ? lhs : rhs, all three broadcasting; condition i1,
/// values of any type.
Status select(const Tensor &condition, const Tensor &lhs, const Tensor &rhs,
              const Tensor &result, cudaStream_t stream);
/// Between any two element types with the host's semantics (bit-identical):
/// float -> integer truncates, saturating, NaN -> 0; -> i1 is `!= 0`;
/// narrowing integers wrap; to f16/bf16 rounds once to nearest even.
Status cast(const Tensor &input, const Tensor &result, cudaStream_t stream);

/// The host's fused chain (Kernels.h: FusedStep, kMaxFusedInputs,
/// kMaxFusedSteps), same contract: inputs of any of f32/f16/bf16 widened
/// on load, values f32 between steps, one rounding to the result's type.
using ::lamina::rt::FusedStep;
using ::lamina::rt::kMaxFusedInputs;
using ::lamina::rt::kMaxFusedSteps;
/// With `sum` (f32, the result's trailing dims), also the sum over the
/// leading dims of the unrounded values, with the bits of cuda::reduce(Sum)
/// of the f32 chain; null for none.
Status fusedElementwise(const Tensor *inputs, int numInputs,
                        const FusedStep *steps, int numSteps,
                        const Tensor &result, const Tensor *sum,
                        cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Contraction (cuBLASLt)
//===----------------------------------------------------------------------===//

/// The host matmul's contract ([..., m, k] x [..., k, n], batch dims
/// broadcasting, transposes) through cuBLASLt: f32, f16 or bf16 storage
/// (both operands and the result alike), f32 accumulation (no TF32).
Status matmul(const Tensor &lhs, const Tensor &rhs, const Tensor &result,
              bool transposeLhs, bool transposeRhs, cudaStream_t stream);
/// The host matmulEpilogue's contract: the addend as cuBLASLt's C (beta =
/// 1), the bias through its bias epilogue, or, where the heuristic offers
/// no algorithm with it, one broadcast add after the GEMM.
Status matmulEpilogue(const Tensor &lhs, const Tensor &rhs, const Tensor *bias,
                      const Tensor *addend, const Tensor &result,
                      bool transposeLhs, bool transposeRhs,
                      cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Normalisation and losses (one thread block per row)
//===----------------------------------------------------------------------===//

Status softmax(const Tensor &input, int64_t axis, const Tensor &result,
               cudaStream_t stream);
Status logSoftmax(const Tensor &input, int64_t axis, const Tensor &result,
                  cudaStream_t stream);
/// The host's softmaxBackward / logSoftmaxBackward from the forward result
/// (row sums in an f32 tree).
Status softmaxBackward(const Tensor &result, const Tensor &gradResult,
                       int64_t axis, const Tensor &gradInput,
                       cudaStream_t stream);
Status logSoftmaxBackward(const Tensor &result, const Tensor &gradResult,
                          int64_t axis, const Tensor &gradInput,
                          cudaStream_t stream);

Status layerNorm(const Tensor &input, const Tensor &scale, const Tensor *bias,
                 int64_t axis, double epsilon, const Tensor &result,
                 cudaStream_t stream);
Status rmsNorm(const Tensor &input, const Tensor &scale, int64_t axis,
               double epsilon, const Tensor &result, cudaStream_t stream);

/// Gradients of layerNorm from its input (the statistics are recomputed):
/// gradInput (required; plus `addend` unless nullptr, as on the host),
/// gradScale and gradBias (nullptr to skip; summed over the rows,
/// deterministically). `scale` has the host's shape.
Status layerNormBackward(const Tensor &input, const Tensor &scale,
                         const Tensor &gradResult, int64_t axis,
                         double epsilon, const Tensor &gradInput,
                         const Tensor *gradScale, const Tensor *gradBias,
                         const Tensor *addend, cudaStream_t stream);
/// Gradients of rmsNorm: gradInput, and gradScale unless nullptr.
Status rmsNormBackward(const Tensor &input, const Tensor &scale,
                       const Tensor &gradResult, int64_t axis, double epsilon,
                       const Tensor &gradInput, const Tensor *gradScale,
                       const Tensor *addend, cudaStream_t stream);
/// The same without an addend (the host's default argument).
inline Status layerNormBackward(const Tensor &input, const Tensor &scale,
                                const Tensor &gradResult, int64_t axis,
                                double epsilon, const Tensor &gradInput,
                                const Tensor *gradScale,
                                const Tensor *gradBias, cudaStream_t stream) {
  return layerNormBackward(input, scale, gradResult, axis, epsilon, gradInput,
                           gradScale, gradBias, nullptr, stream);
}
inline Status rmsNormBackward(const Tensor &input, const Tensor &scale,
                              const Tensor &gradResult, int64_t axis,
                              double epsilon, const Tensor &gradInput,
                              const Tensor *gradScale, cudaStream_t stream) {
  return rmsNormBackward(input, scale, gradResult, axis, epsilon, gradInput,
                         gradScale, nullptr, stream);
}

/// Softmax cross-entropy over the last axis of `logits` [..., V] with
/// integer `labels` [...] (i32 or i64), the host's softmaxCrossEntropy:
/// loss[...] (the logits' type, or f32 for f16/bf16 logits) =
/// logsumexp(row) - row[label]; rows whose
/// label is ignoreIndex get 0; any other label outside [0, V) is a
/// deviceStatus error (the row's loss is then 0).
Status softmaxCrossEntropy(const Tensor &logits, const Tensor &labels,
                           int64_t ignoreIndex, const Tensor &loss,
                           cudaStream_t stream);
/// Its gradient, the host's softmaxCrossEntropyBackward: gradLogits =
/// (softmax(row) - onehot(label)) * gradLoss[row] (gradLoss typed as the
/// loss), 0 on ignored rows; in the logits' type, or f16/bf16 for f32
/// logits (rounded once on store).
/// Both read a row once for its maximum and sum (rescaling the sum as the
/// maximum grows), the gradient once more.
Status softmaxCrossEntropyBackward(const Tensor &logits, const Tensor &labels,
                                   const Tensor &gradLoss, int64_t ignoreIndex,
                                   const Tensor &gradLogits,
                                   cudaStream_t stream);

/// The host's attention (graph.attention: same shapes in either layout,
/// types, causal rule and -inf rows): f32, f16 or bf16 operands, bias of any float type, lse
/// f32. Tiled with an online softmax (the score matrix is never stored),
/// so out and lse match the host up to f32 summation order; for f16/bf16
/// with D == Dv in {64, 128} tensor cores compute the products, with the
/// probabilities rounded to that type before they meet v. D and Dv above
/// 256 are an error. LAMINA_CUDA_ATTENTION=generic forces the scalar path.
Status attention(const Tensor &q, const Tensor &k, const Tensor &v,
                 const Tensor *bias, double scale, bool causal,
                 const Tensor &out, const Tensor &lse, AttentionLayout layout,
                 cudaStream_t stream);
inline Status attention(const Tensor &q, const Tensor &k, const Tensor &v,
                        const Tensor *bias, double scale, bool causal,
                        const Tensor &out, const Tensor &lse,
                        cudaStream_t stream) {
  return attention(q, k, v, bias, scale, causal, out, lse,
                   AttentionLayout::HeadMajor, stream);
}
/// graph.packed_attention: attention (seq-major, no bias) on q, k and v
/// packed in each token's row of qkv [B, S, (heads + 2 kvHeads) D]. cuDNN
/// reads them in place (a row stride); where it is not used, the three
/// slices are copied out first (cudaMemcpy2DAsync) for the kernels. No
/// host twin: graph-pack-attention runs for this target only.
Status packedAttention(const Tensor &qkv, int64_t heads, int64_t kvHeads,
                       double scale, bool causal, const Tensor &out,
                       const Tensor &lse, cudaStream_t stream);
/// graph.packed_attention_grad: attentionBackward's gradients written side
/// by side into gradQkv (qkv's shape), by cuDNN in place or copied there.
Status packedAttentionBackward(const Tensor &qkv, const Tensor &out,
                               const Tensor &lse, const Tensor &gradOut,
                               int64_t heads, int64_t kvHeads, double scale,
                               bool causal, const Tensor &gradQkv,
                               cudaStream_t stream);
/// The host's attentionBackward: probabilities recomputed from lse, gradK
/// and gradV summed over the query heads of a kv head in a fixed order
/// (deterministic, no atomics; f32 sums in another order than the host's;
/// the tensor-core path rounds P and dS to the operands' type). Takes
/// B*H*Sq floats of stream-ordered scratch (cudaMallocAsync) for
/// dO . out per row.
Status attentionBackward(const Tensor &q, const Tensor &k, const Tensor &v,
                         const Tensor *bias, const Tensor &out,
                         const Tensor &lse, const Tensor &gradOut,
                         double scale, bool causal, const Tensor &gradQ,
                         const Tensor &gradK, const Tensor &gradV,
                         AttentionLayout layout, cudaStream_t stream);
inline Status attentionBackward(const Tensor &q, const Tensor &k,
                                const Tensor &v, const Tensor *bias,
                                const Tensor &out, const Tensor &lse,
                                const Tensor &gradOut, double scale,
                                bool causal, const Tensor &gradQ,
                                const Tensor &gradK, const Tensor &gradV,
                                cudaStream_t stream) {
  return attentionBackward(q, k, v, bias, out, lse, gradOut, scale, causal,
                           gradQ, gradK, gradV, AttentionLayout::HeadMajor,
                           stream);
}

//===----------------------------------------------------------------------===//
// Reductions, data movement, gather / scatter
//===----------------------------------------------------------------------===//

/// Sum, Mean, Max and Prod, as the host (i1: max only). f32/f16/bf16
/// accumulate in f32 in a fixed tree per output (deterministic; another
/// order than the host's); f64 and integers take one thread per output
/// walking its elements in order (integer results bit-identical).
Status reduce(ReduceOp op, const Tensor &input, const int64_t *axes,
              int numAxes, bool keepdims, const Tensor &result,
              cudaStream_t stream);

// Mixture of experts (MoE.cu; f32): the host kernels' twins. moe and
// moe_grad route on the host (the indices copied back: a wait for the
// stream), then run each expert's GEMMs on its rows.
Status topk(const Tensor &input, int64_t k, const Tensor &values,
            const Tensor &indices, cudaStream_t stream);
Status moe(const Tensor &input, const Tensor &indices, const Tensor &weights,
           const Tensor &gateUp, const Tensor &down, const Tensor &result,
           cudaStream_t stream);
Status moeBackward(const Tensor &input, const Tensor &indices,
                   const Tensor &weights, const Tensor &gateUp,
                   const Tensor &down, const Tensor &gradResult,
                   const Tensor &gradInput, const Tensor &gradWeights,
                   const Tensor &gradGateUp, const Tensor &gradDown,
                   cudaStream_t stream);
/// One row-major f32 product c [m, n] = op(a) op(b), op(a) [m, k], op(b)
/// [k, n] (a stored [k, m] when transA, b stored [n, k] when transB).
struct GemmProblem {
  const float *a, *b;
  float *c;
  int64_t m, n, k;
  bool transA, transB;
};
/// The problems as one cuBLAS grouped GEMM (GroupedGemm.cpp). A problem
/// with m, n or k zero is skipped: its c is left as it is (the product
/// over no rows is zero; the caller clears it).
Status groupedMatmul(const std::vector<GemmProblem> &problems,
                     cudaStream_t stream);
// Expert parallelism's row layout (graph.moe_dispatch, moe_combine and its
// gradient, moe_row_experts): the host kernels' layout, routed on the host
// as moe is; f32.
Status moeDispatch(const Tensor &input, const Tensor &indices, int64_t experts,
                   int64_t ranks, const Tensor &rows, const Tensor &counts,
                   cudaStream_t stream);
Status moeCombine(const Tensor &rows, const Tensor &indices,
                  const Tensor &weights, int64_t experts, int64_t ranks,
                  const Tensor &result, cudaStream_t stream);
Status moeCombineBackward(const Tensor &rows, const Tensor &indices,
                          const Tensor &weights, const Tensor &gradResult,
                          int64_t experts, int64_t ranks,
                          const Tensor &gradRows, const Tensor &gradWeights,
                          cudaStream_t stream);
Status moeRowExperts(const Tensor &counts, const Tensor &result,
                     cudaStream_t stream);

/// Running sum along `axis`, any numeric type, accumulating in the host's
/// compute type in the host's (serial) order, so results are bit-identical:
/// one thread per column, which suits the short axes of position ids and
/// masks rather than long scans. In place allowed.
Status cumsum(const Tensor &input, int64_t axis, bool exclusive, bool reverse,
              const Tensor &result, cudaStream_t stream);

/// Same elements, another shape: cudaMemcpyAsync, nothing when aliased.
Status reshape(const Tensor &input, const Tensor &result, cudaStream_t stream);

/// Any element type; swaps of the last two dims go through shared-memory
/// tiles.
Status transpose(const Tensor &input, const int64_t *perm,
                 const Tensor &result, cudaStream_t stream);

/// Inputs (host array of views of device data) joined along `axis`; one
/// copy kernel per non-empty input. Any element type.
Status concat(const Tensor *inputs, int numInputs, int64_t axis,
              const Tensor &result, cudaStream_t stream);
/// Result dim i takes input indices starts[i] + j * steps[i], j < sizes[i];
/// negative steps reverse. starts/sizes/steps are host arrays.
Status slice(const Tensor &input, const int64_t *starts, const int64_t *sizes,
             const int64_t *steps, const Tensor &result, cudaStream_t stream);
/// Numpy broadcast of input to result's shape.
Status broadcast(const Tensor &input, const Tensor &result,
                 cudaStream_t stream);
/// Repeats input repeats[i] times along dim i (repeats: a host array).
Status tile(const Tensor &input, const int64_t *repeats, const Tensor &result,
            cudaStream_t stream);
/// Keeps elements of the last two dims with j - i >= k (upper) or
/// j - i <= k (lower); zeroes the rest. In place allowed.
Status trilu(const Tensor &input, int64_t k, bool upper, const Tensor &result,
             cudaStream_t stream);

/// Any element type (the embedding lookup); i32/i64 indices, negative ones
/// from the end.
Status gather(const Tensor &data, const Tensor &indices, int64_t axis,
              const Tensor &result, cudaStream_t stream);
/// ONNX GatherND with `batchDims` leading batch dims; any element type. A
/// bad index is a deviceStatus error ("gather_nd: index ...") and its slice
/// is written as zeros.
Status gatherND(const Tensor &data, const Tensor &indices, int64_t batchDims,
                const Tensor &result, cudaStream_t stream);

/// ONNX ScatterND: result = data (copied unless aliased) with updates
/// written or combined at the index tuples; a bad index is a deviceStatus
/// error and its tuple is skipped (the others are still written).
/// * None, any element type: where tuples repeat, the last one in index
///   order wins, as on the host (a winner per target slot is chosen first
///   with an atomic max, so the result is deterministic; the winners take 4
///   bytes per slot of data's first k dims from the stream's memory pool).
/// * Add, Mul, Max, Min on every numeric type (Max and Min also on i1), with
///   atomics (compare-and-swap loops on the enclosing 32-bit word for 1- and
///   2-byte types and for float mul/max/min). Integer results, and float
///   max/min up to the sign of zero, do not depend on the order in which
///   duplicates combine; float add and mul do (not bit-reproducible).
Status scatterND(const Tensor &data, const Tensor &indices,
                 const Tensor &updates, ScatterReduction reduction,
                 const Tensor &result, cudaStream_t stream);

/// Convolution and pooling (Vision.cu): the host kernels' geometry and
/// checks; f32, f16 and bf16, accumulating in f32. Direct kernels, one
/// thread per element written (deterministic, no scratch).
Status conv(const Tensor &input, const Tensor &weight, const Tensor *bias,
            const int64_t *strides, const int64_t *dilations,
            const int64_t *pads, int64_t group, const Tensor &result,
            cudaStream_t stream);
Status convBackwardInput(const Tensor &weight, const Tensor &gradResult,
                         const int64_t *strides, const int64_t *dilations,
                         const int64_t *pads, int64_t group,
                         const Tensor &gradInput, cudaStream_t stream);
Status convBackwardWeight(const Tensor &input, const Tensor &gradResult,
                          const int64_t *strides, const int64_t *dilations,
                          const int64_t *pads, int64_t group,
                          const Tensor &gradWeight, cudaStream_t stream);
Status maxPool(const Tensor &input, const int64_t *kernel,
               const int64_t *strides, const int64_t *dilations,
               const int64_t *pads, const Tensor &result, cudaStream_t stream);
Status maxPoolIndices(const Tensor &input, const int64_t *kernel,
                      const int64_t *strides, const int64_t *dilations,
                      const int64_t *pads, bool columnMajor,
                      const Tensor &indices, cudaStream_t stream);
Status maxPoolBackward(const Tensor &input, const Tensor &gradResult,
                       const int64_t *kernel, const int64_t *strides,
                       const int64_t *dilations, const int64_t *pads,
                       const Tensor &gradInput, cudaStream_t stream);
Status avgPool(const Tensor &input, const int64_t *kernel,
               const int64_t *strides, const int64_t *dilations,
               const int64_t *pads, bool countIncludePad, const Tensor &result,
               cudaStream_t stream);
Status avgPoolBackward(const Tensor &gradResult, const int64_t *kernel,
                       const int64_t *strides, const int64_t *dilations,
                       const int64_t *pads, bool countIncludePad,
                       const Tensor &gradInput, cudaStream_t stream);

} // namespace lamina::rt::cuda

#endif // LAMINA_RUNTIME_CUDA_KERNELS_H
