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
// * Errors that depend on the data (an out-of-range gather index or label)
//   cannot be returned without a synchronisation: the kernel records the
//   first one in a per-process device slot and writes 0 for that element;
//   deviceStatus(stream) synchronises and returns it (then clears it).
//   Unlike the host kernels, the other elements are still written.
//
// Element types: float kernels take f32, f16 and bf16 (f16/bf16 compute in
// f32 and round to nearest even on store, with the host's Math.h
// conversions); f64 and integer arithmetic are not implemented on the
// device yet and return an error. Data movement (transpose, gather) takes
// any element type.
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

/// result = op(input); float ops (not Not). In place allowed.
Status unary(UnaryOp op, const Tensor &input, const Tensor &result,
             cudaStream_t stream);
/// Numpy broadcasting; Add, Sub, Mul, Div, Pow, Min, Max on float types.
Status binary(BinaryOp op, const Tensor &lhs, const Tensor &rhs,
              const Tensor &result, cudaStream_t stream);
/// Between f32, f16 and bf16 (round to nearest even), same shape.
Status cast(const Tensor &input, const Tensor &result, cudaStream_t stream);

/// A fused elementwise chain: registers r0..r(numInputs-1) hold the inputs
/// (each broadcast to `result`), step i writes register numInputs + i, and
/// the last step's register is stored into `result`. All tensors share one
/// float type; values stay in f32 between steps (no rounding to f16/bf16 in
/// between, unlike the same ops run one by one).
struct FusedStep {
  bool isBinary;
  uint8_t op; ///< a UnaryOp or BinaryOp
  uint8_t lhs, rhs; ///< registers (rhs unused for unary)
};
constexpr int kMaxFusedInputs = 4;
constexpr int kMaxFusedSteps = 16;
Status fusedElementwise(const Tensor *inputs, int numInputs,
                        const FusedStep *steps, int numSteps,
                        const Tensor &result, cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Contraction (cuBLASLt)
//===----------------------------------------------------------------------===//

/// The host matmul's contract ([..., m, k] x [..., k, n], batch dims
/// broadcasting, transposes) through cuBLASLt: f32, f16 or bf16 storage
/// (both operands and the result alike), f32 accumulation (no TF32).
Status matmul(const Tensor &lhs, const Tensor &rhs, const Tensor &result,
              bool transposeLhs, bool transposeRhs, cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Normalisation and losses (one thread block per row)
//===----------------------------------------------------------------------===//

Status softmax(const Tensor &input, int64_t axis, const Tensor &result,
               cudaStream_t stream);
Status logSoftmax(const Tensor &input, int64_t axis, const Tensor &result,
                  cudaStream_t stream);

Status layerNorm(const Tensor &input, const Tensor &scale, const Tensor *bias,
                 int64_t axis, double epsilon, const Tensor &result,
                 cudaStream_t stream);
Status rmsNorm(const Tensor &input, const Tensor &scale, int64_t axis,
               double epsilon, const Tensor &result, cudaStream_t stream);

/// Gradients of layerNorm from its input (the statistics are recomputed):
/// gradInput (required), gradScale and gradBias (nullptr to skip; summed
/// over the rows, deterministically). `scale` has the host's shape.
Status layerNormBackward(const Tensor &input, const Tensor &scale,
                         const Tensor &gradResult, int64_t axis,
                         double epsilon, const Tensor &gradInput,
                         const Tensor *gradScale, const Tensor *gradBias,
                         cudaStream_t stream);
/// Gradients of rmsNorm: gradInput, and gradScale unless nullptr.
Status rmsNormBackward(const Tensor &input, const Tensor &scale,
                       const Tensor &gradResult, int64_t axis, double epsilon,
                       const Tensor &gradInput, const Tensor *gradScale,
                       cudaStream_t stream);

/// Softmax cross-entropy over the last axis of `logits` [..., V] with
/// integer `labels` [...] (i32 or i64): loss[...] (f32) = logsumexp(row) -
/// row[label]. With gradLogits (same type and shape as logits), also
/// (softmax(row) - onehot(label)) * gradScale -- the backward of a mean
/// over N rows is gradScale = 1/N. Rows whose label is ignoreIndex get loss
/// 0 and gradient 0; any other label outside [0, V) is a deviceStatus error.
Status softmaxCrossEntropy(const Tensor &logits, const Tensor &labels,
                           int64_t ignoreIndex, float gradScale,
                           const Tensor &loss, const Tensor *gradLogits,
                           cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Reductions, data movement, gather / scatter
//===----------------------------------------------------------------------===//

/// Sum, Mean, Max and Prod over float types; sums accumulate in f32.
Status reduce(ReduceOp op, const Tensor &input, const int64_t *axes,
              int numAxes, bool keepdims, const Tensor &result,
              cudaStream_t stream);

/// Any element type; swaps of the last two dims go through shared-memory
/// tiles.
Status transpose(const Tensor &input, const int64_t *perm,
                 const Tensor &result, cudaStream_t stream);

/// Any element type (the embedding lookup); i32/i64 indices, negative ones
/// from the end.
Status gather(const Tensor &data, const Tensor &indices, int64_t axis,
              const Tensor &result, cudaStream_t stream);

/// ScatterND with ScatterReduction::Add only (the gradient of gather:
/// data = zeros, indices [..., 1], updates = the gradient), on float types,
/// with atomic adds: duplicates accumulate in an unspecified order.
Status scatterND(const Tensor &data, const Tensor &indices,
                 const Tensor &updates, ScatterReduction reduction,
                 const Tensor &result, cudaStream_t stream);

} // namespace lamina::rt::cuda

#endif // LAMINA_RUNTIME_CUDA_KERNELS_H
