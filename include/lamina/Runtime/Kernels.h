//===- Kernels.h - host kernels for every graph op --------------*- C++ -*-===//
//
// One function per graph op family; semantics are those of the op in
// include/lamina/Dialect/Graph/IR/GraphOps.td. Conventions:
//
// * The result comes last and is preallocated by the caller with the op's
//   result type; every kernel checks shapes and element types (cheap, O(rank))
//   and returns an error Status instead of reading out of bounds.
// * Float tensors compute in fp32 (f16/bf16 widened, rounded back to nearest
//   even on store); f64 computes in f64; integers in their own type, wrapping.
// * Axis attributes are in [0, rank) as in the IR; negative values count
//   from the end for convenience.
// * A result may alias an input (same pointer) only for: unary, binary,
//   compare, select and fusedElementwise when the aliased operand has the
//   result's shape and element size, reshape, cumsum, trilu, softmax,
//   logSoftmax, layerNorm, rmsNorm (input), softmaxBackward and
//   logSoftmaxBackward (either input) and scatterND (data). Other kernels
//   need disjoint memory.
// * Large tensors are split over threads (setNumThreads); matmul splits
//   its products over the same threads and runs oneDNN (f32) or OpenBLAS
//   (f64) single-threaded.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_KERNELS_H
#define LAMINA_RUNTIME_KERNELS_H

#include "lamina/Runtime/Status.h"
#include "lamina/Runtime/Tensor.h"

#include <stdint.h>

#include <string>

namespace lamina::rt {

//===----------------------------------------------------------------------===//
// Threading
//===----------------------------------------------------------------------===//

/// Threads the runtime may use, for its own loops and for its GEMMs. n < 1
/// means the hardware concurrency (the default).
void setNumThreads(int n);
int getNumThreads();

/// The GEMM libraries and the kernel family each picked for this CPU, e.g.
/// "oneDNN 2.6.3 avx512_core (f32), OpenBLAS SkylakeX (f64)".
std::string gemmKernels();

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

enum class UnaryOp : uint8_t {
  Neg, Abs, Relu,                            // any numeric type
  Exp, Log, Sqrt, Reciprocal, Tanh, Erf,     // float types only
  Sigmoid, Gelu, GeluTanh, Cos, Sin,         // float types only
  GeluDerivative, GeluTanhDerivative,        // float: d gelu(x) / dx
  Not,                                       // i1 only
};
/// result = op(input), same shape and element type.
Status unary(UnaryOp op, const Tensor &input, const Tensor &result);

enum class BinaryOp : uint8_t {
  Add, Sub, Mul, Div, Pow, Min, Max, // numeric, not i1
  And, Or,                           // i1 only
};
/// Numpy broadcasting; operands and result share the element type.
Status binary(BinaryOp op, const Tensor &lhs, const Tensor &rhs,
              const Tensor &result);

enum class CompareOp : uint8_t {
  Equal, Greater, GreaterEqual, Less, LessEqual
};
/// Numpy broadcasting; result is i1. Comparisons with NaN are false.
Status compare(CompareOp op, const Tensor &lhs, const Tensor &rhs,
               const Tensor &result);

/// result = condition ? lhs : rhs, all three broadcasting; condition is i1.
Status select(const Tensor &condition, const Tensor &lhs, const Tensor &rhs,
              const Tensor &result);

/// A fused elementwise chain: registers r0..r(numInputs-1) hold the inputs
/// (each broadcast to `result`), step i writes register numInputs + i, and
/// the last step's register is stored into `result`. Each input and the
/// result is f32, f16 or bf16, independently: inputs are widened to f32 on
/// load, values stay in f32 between steps (no rounding to f16/bf16 in
/// between, unlike the same ops run one by one) and the last register is
/// rounded once to the result's type. So cast-to-f32 inputs and a final
/// cast from f32 are exact when fused. The CUDA twin (Cuda/Kernels.h) has
/// the same contract.
struct FusedStep {
  bool isBinary;
  uint8_t op;       ///< a UnaryOp (not Not) or BinaryOp (Add..Max)
  uint8_t lhs, rhs; ///< registers (rhs unused for unary)
};
constexpr int kMaxFusedInputs = 4;
constexpr int kMaxFusedSteps = 16;
/// With `sum` (f32, the result's trailing dims), it also writes the sum of
/// the last register's f32 values (before the rounding) over the result's
/// leading dims, with the bits reduce(Sum) of those values gives.
Status fusedElementwise(const Tensor *inputs, int numInputs,
                        const FusedStep *steps, int numSteps,
                        const Tensor &result, const Tensor *sum = nullptr);

/// Element type conversion between any two types, same shape. Float to
/// integer truncates toward zero, saturating at the type's range, NaN -> 0;
/// anything to i1 is `!= 0`; integer to narrower integer wraps; to f16/bf16
/// rounds to nearest even (once, also from f64).
Status cast(const Tensor &input, const Tensor &result);

//===----------------------------------------------------------------------===//
// Contraction and normalisation
//===----------------------------------------------------------------------===//

/// [..., m, k] x [..., k, n] -> [..., m, n], batch dims broadcasting; both
/// operands rank >= 2 and the same float type. With transposeLhs the lhs is
/// stored as [..., k, m], with transposeRhs the rhs as [..., n, k] (what a
/// graph.transpose of the last two dims feeding the matmul would make).
/// OpenBLAS sgemm/dgemm (f16 and bf16 go through f32 copies); f16/bf16
/// operands may have an f32 result, the f32 product unrounded.
Status matmul(const Tensor &lhs, const Tensor &rhs, const Tensor &result,
              bool transposeLhs = false, bool transposeRhs = false);
/// matmul plus, each optional (nullptr), `bias` added to every row (n
/// elements, shape [n] or [1, ..., 1, n]) and `addend` (the result's shape;
/// it may be the result's own buffer), both of the result's type and added
/// to the accumulator before its one rounding (graph.fused_matmul): sgemm
/// with beta = 1 over a result that starts as addend + bias.
Status matmulEpilogue(const Tensor &lhs, const Tensor &rhs, const Tensor *bias,
                      const Tensor *addend, const Tensor &result,
                      bool transposeLhs = false, bool transposeRhs = false);

/// exp(x - max) / sum along `axis`.
Status softmax(const Tensor &input, int64_t axis, const Tensor &result);
/// x - max - log(sum exp(x - max)) along `axis`.
Status logSoftmax(const Tensor &input, int64_t axis, const Tensor &result);
/// The gradients of softmax and logSoftmax (graph.softmax_grad,
/// graph.log_softmax_grad) from the forward result y and its gradient g,
/// row sums in double: y (g - sum(g y)), and g - exp(y) sum(g).
Status softmaxBackward(const Tensor &result, const Tensor &gradResult,
                       int64_t axis, const Tensor &gradInput);
Status logSoftmaxBackward(const Tensor &result, const Tensor &gradResult,
                          int64_t axis, const Tensor &gradInput);

/// (x - mean) / sqrt(var + epsilon) * scale + bias over dims axis..rank-1;
/// scale and bias (nullptr when absent) have exactly those dims. Statistics
/// accumulate in double.
Status layerNorm(const Tensor &input, const Tensor &scale, const Tensor *bias,
                 int64_t axis, double epsilon, const Tensor &result);
/// x / sqrt(mean(x^2) + epsilon) * scale over dims axis..rank-1. (Both
/// norms: the result has the input's type, or f16/bf16 for an f32 input,
/// the f32 value rounded once.)
Status rmsNorm(const Tensor &input, const Tensor &scale, int64_t axis,
               double epsilon, const Tensor &result);

/// The gradients of layerNorm (graph.layer_norm_grad) from its input and
/// the result's gradient, the statistics recomputed: gradInput (required;
/// plus `addend`, the input's shape, unless nullptr: the input's other
/// gradient contributions, added before the one rounding), gradScale and
/// gradBias (nullptr to skip; column sums over the rows in a fixed order).
/// All have the input's element type.
Status layerNormBackward(const Tensor &input, const Tensor &scale,
                         const Tensor &gradResult, int64_t axis,
                         double epsilon, const Tensor &gradInput,
                         const Tensor *gradScale, const Tensor *gradBias,
                         const Tensor *addend = nullptr);
/// The gradients of rmsNorm (graph.rms_norm_grad): gradInput (plus
/// `addend` as layerNormBackward's), and gradScale unless nullptr.
Status rmsNormBackward(const Tensor &input, const Tensor &scale,
                       const Tensor &gradResult, int64_t axis, double epsilon,
                       const Tensor &gradInput, const Tensor *gradScale,
                       const Tensor *addend = nullptr);

/// Softmax cross-entropy over the last axis (graph.softmax_cross_entropy):
/// loss[...] = logsumexp(logits[..., :]) - logits[..., label] for integer
/// `labels` [...] (i32 or i64), 0 where the label is `ignoreIndex`; `loss`
/// has the logits' element type, or f32 for f16/bf16 logits (read
/// widened). Any other label outside [0, V) is an error naming it and its
/// row.
Status softmaxCrossEntropy(const Tensor &logits, const Tensor &labels,
                           int64_t ignoreIndex, const Tensor &loss);
/// Its gradient (graph.softmax_cross_entropy_grad): gradLogits[..., i] =
/// (softmax(row)[i] - (i == label)) * gradLoss[...], 0 on ignored rows.
/// `gradLoss` is shaped like the labels, in the logits' element type (or
/// f32 for f16/bf16 logits); `gradLogits` in the logits' type, or f16/bf16
/// for f32 logits (the f32 gradient rounded once on store).
Status softmaxCrossEntropyBackward(const Tensor &logits, const Tensor &labels,
                                   const Tensor &gradLoss, int64_t ignoreIndex,
                                   const Tensor &gradLogits);

/// Where attention's q, k, v and out keep their heads (lse is [B, H, Sq]
/// either way): HeadMajor [B, heads, S, D] (graph.attention's default);
/// SeqMajor [B, S, heads, D], the projections' own layout, which the
/// unfused model transposes from and back to (graph.attention's
/// `seq_major`).
enum class AttentionLayout : uint8_t { HeadMajor, SeqMajor };

/// Scaled dot-product attention (graph.attention), the score matrix never
/// stored whole. q [B, H, Sq, D], k [B, Hk, Sk, D], v [B, Hk, Sk, Dv] of one
/// float type (SeqMajor: [B, Sq, H, D], [B, Sk, Hk, D], [B, Sk, Hk, Dv]), H
/// a multiple of Hk (query head h reads kv head h / (H / Hk)):
///   s[i, j] = scale * q[i, :] . k[j, :] + bias[b, h, i, j]
/// with `bias` nullptr or a float tensor broadcastable to [B, H, Sq, Sk] in
/// either layout; with `causal`, keys j > i + Sk - Sq are left out. out
/// [B, H, Sq, Dv] (SeqMajor [B, Sq, H, Dv]; q's type) = softmax_j(s) v;
/// lse [B, H, Sq] (f32; f64 for f64 operands) = log sum_j exp(s[i, j]),
/// which the backward reads. A row with no key left (causal, Sq > Sk) or
/// only -inf scores gives out 0 and lse -inf. Accumulates in f32 (f64).
Status attention(const Tensor &q, const Tensor &k, const Tensor &v,
                 const Tensor *bias, double scale, bool causal,
                 const Tensor &out, const Tensor &lse,
                 AttentionLayout layout = AttentionLayout::HeadMajor);
/// The gradients of attention (graph.attention_grad) from its operands, its
/// out and lse and gradOut (out's shape and type): gradQ, gradK, gradV,
/// shaped and typed like q, k, v (for shared kv heads summed over their
/// query heads in a fixed order). The probabilities are recomputed from
/// lse; the bias gets no gradient (graph.attention's bias is a mask).
Status attentionBackward(const Tensor &q, const Tensor &k, const Tensor &v,
                         const Tensor *bias, const Tensor &out,
                         const Tensor &lse, const Tensor &gradOut,
                         double scale, bool causal, const Tensor &gradQ,
                         const Tensor &gradK, const Tensor &gradV,
                         AttentionLayout layout = AttentionLayout::HeadMajor);

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

enum class ReduceOp : uint8_t { Sum, Mean, Max, Prod };
/// Reduces the `numAxes` dims in `axes` (distinct); with keepdims they stay
/// as size-1 dims of the result. Float sums accumulate in the compute type
/// (f32, or f64); integer mean truncates; max propagates NaN; an empty
/// reduction gives 0, 0/0, the lowest value, 1. i1 supports only Max (any).
/// The result has the input's type, or f32 for an f16/bf16 input (the f32
/// accumulator stored unrounded: the reduction of the widened input).
Status reduce(ReduceOp op, const Tensor &input, const int64_t *axes,
              int numAxes, bool keepdims, const Tensor &result);

/// Running sum along `axis`; `exclusive` leaves out the element itself,
/// `reverse` sums from the end.
Status cumsum(const Tensor &input, int64_t axis, bool exclusive, bool reverse,
              const Tensor &result);

//===----------------------------------------------------------------------===//
// Data movement (any element type; copies bytes)
//===----------------------------------------------------------------------===//

/// Same elements, another shape: a copy, or nothing when result aliases input.
Status reshape(const Tensor &input, const Tensor &result);
/// Result dim i is input dim perm[i] (perm has rank entries).
Status transpose(const Tensor &input, const int64_t *perm,
                 const Tensor &result);
Status concat(const Tensor *inputs, int numInputs, int64_t axis,
              const Tensor &result);
/// Result dim i takes input indices starts[i] + j * steps[i], j < sizes[i];
/// steps may be negative (never 0); every index touched must be in bounds.
Status slice(const Tensor &input, const int64_t *starts, const int64_t *sizes,
             const int64_t *steps, const Tensor &result);
/// Numpy broadcast of input to result's shape.
Status broadcast(const Tensor &input, const Tensor &result);
/// Repeats input repeats[i] times along dim i.
Status tile(const Tensor &input, const int64_t *repeats, const Tensor &result);
/// Keeps elements of the last two dims with j - i >= k (upper) or
/// j - i <= k (lower); zeroes the rest.
Status trilu(const Tensor &input, int64_t k, bool upper, const Tensor &result);

//===----------------------------------------------------------------------===//
// Gather / scatter (indices are i32 or i64; negative ones count from the end;
// an index out of range is an error and nothing is written)
//===----------------------------------------------------------------------===//

/// result = data[:axis] + indices + data[axis+1:] shaped.
Status gather(const Tensor &data, const Tensor &indices, int64_t axis,
              const Tensor &result);
/// ONNX GatherND with `batchDims` leading batch dims.
Status gatherND(const Tensor &data, const Tensor &indices, int64_t batchDims,
                const Tensor &result);

enum class ScatterReduction : uint8_t { None, Add, Mul, Max, Min };
/// The graph dialect's spelling ("none", "add", ...); false if unknown.
bool parseScatterReduction(const char *name, ScatterReduction &out);
/// ONNX ScatterND: result = data with updates written (or combined) at the
/// index tuples, in order (a later duplicate wins for None). i1 data allows
/// None, Max and Min.
Status scatterND(const Tensor &data, const Tensor &indices,
                 const Tensor &updates, ScatterReduction reduction,
                 const Tensor &result);

//===----------------------------------------------------------------------===//
// Mixture of experts (MoE.cpp; f32 and f64): graph.topk, graph.moe,
// graph.moe_grad
//===----------------------------------------------------------------------===//

/// The k largest values of each row of `input`'s last dim in descending
/// order (NaN first, equal values by index) and their i64 positions.
Status topk(const Tensor &input, int64_t k, const Tensor &values,
            const Tensor &indices);
/// result [T, H] = sum_j weights[t, j] * down[e] (silu(gate[e] x_t) *
/// up[e] x_t), e = indices[t, j] (i32 or i64, below E; a negative index
/// sends its row to no expert, its result zero); gate_up [E, 2I,
/// H] holds the gate rows then the up rows, down is [E, H, I]. One GEMM
/// per expert over its tokens; each token's sum in expert order.
Status moe(const Tensor &input, const Tensor &indices, const Tensor &weights,
           const Tensor &gateUp, const Tensor &down, const Tensor &result);
/// The gradients of moe with respect to input, weights, gate_up and down
/// (gradResult: the result's), the experts' activations recomputed.
Status moeBackward(const Tensor &input, const Tensor &indices,
                   const Tensor &weights, const Tensor &gateUp,
                   const Tensor &down, const Tensor &gradResult,
                   const Tensor &gradInput, const Tensor &gradWeights,
                   const Tensor &gradGateUp, const Tensor &gradDown);

// Expert parallelism's row layout (MoEDispatch.cpp; f32 and f64):
// graph.moe_dispatch, graph.moe_combine and its gradient,
// graph.moe_row_experts (GraphMoEOps.td). `rows` is [R C, H]: `ranks` (R)
// blocks of C rows, block q the pairs for rank q's experts.

/// rows: each (token, pick) pair's input row, sorted by expert, rank q's
/// pairs from row q C on (the rest zero); counts [R, E/R] (i64).
Status moeDispatch(const Tensor &input, const Tensor &indices, int64_t experts,
                   int64_t ranks, const Tensor &rows, const Tensor &counts);
/// result[t] = sum_j weights[t, j] rows[row(t, j)], in expert order.
Status moeCombine(const Tensor &rows, const Tensor &indices,
                  const Tensor &weights, int64_t experts, int64_t ranks,
                  const Tensor &result);
/// gradRows[row(t, j)] = weights[t, j] gradResult[t] (zero elsewhere);
/// gradWeights[t, j] = rows[row(t, j)] . gradResult[t].
Status moeCombineBackward(const Tensor &rows, const Tensor &indices,
                          const Tensor &weights, const Tensor &gradResult,
                          int64_t experts, int64_t ranks,
                          const Tensor &gradRows, const Tensor &gradWeights);
/// result [R C, 1] (i64): block q holds counts[q, e] rows of expert e in
/// order, then -1.
Status moeRowExperts(const Tensor &counts, const Tensor &result);

//===----------------------------------------------------------------------===//
// Vision (Vision.cpp): convolution and pooling over 1 to 3 spatial dims
//===----------------------------------------------------------------------===//

// The geometry of graph.conv and the pools: `strides` and `dilations` hold
// one value per spatial dim, `pads` the begin pads then the end pads; f32
// and f64 (im2col and the GEMM above).

/// result [N, M, O...] = input [N, C, S...] (*) weight [M, C/group, K...]
/// (+ bias [M] unless nullptr).
Status conv(const Tensor &input, const Tensor &weight, const Tensor *bias,
            const int64_t *strides, const int64_t *dilations,
            const int64_t *pads, int64_t group, const Tensor &result);
/// graph.conv_grad_input: the input's gradient (shaped as the input).
Status convBackwardInput(const Tensor &weight, const Tensor &gradResult,
                         const int64_t *strides, const int64_t *dilations,
                         const int64_t *pads, int64_t group,
                         const Tensor &gradInput);
/// graph.conv_grad_weight: the weight's gradient, summed over the batch.
Status convBackwardWeight(const Tensor &input, const Tensor &gradResult,
                          const int64_t *strides, const int64_t *dilations,
                          const int64_t *pads, int64_t group,
                          const Tensor &gradWeight);
/// graph.max_pool (f32, f64 and integers); the result's spatial dims say
/// whether ceil_mode was on.
Status maxPool(const Tensor &input, const int64_t *kernel,
               const int64_t *strides, const int64_t *dilations,
               const int64_t *pads, const Tensor &result);
/// graph.max_pool_indices: i64 `indices` shaped as maxPool's result.
Status maxPoolIndices(const Tensor &input, const int64_t *kernel,
                      const int64_t *strides, const int64_t *dilations,
                      const int64_t *pads, bool columnMajor,
                      const Tensor &indices);
/// graph.max_pool_grad: each window's gradient to its first maximum.
Status maxPoolBackward(const Tensor &input, const Tensor &gradResult,
                       const int64_t *kernel, const int64_t *strides,
                       const int64_t *dilations, const int64_t *pads,
                       const Tensor &gradInput);
/// graph.avg_pool.
Status avgPool(const Tensor &input, const int64_t *kernel,
               const int64_t *strides, const int64_t *dilations,
               const int64_t *pads, bool countIncludePad,
               const Tensor &result);
/// graph.avg_pool_grad.
Status avgPoolBackward(const Tensor &gradResult, const int64_t *kernel,
                       const int64_t *strides, const int64_t *dilations,
                       const int64_t *pads, bool countIncludePad,
                       const Tensor &gradInput);

} // namespace lamina::rt

#endif // LAMINA_RUNTIME_KERNELS_H
