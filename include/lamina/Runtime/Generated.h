//===- Generated.h - what generated programs include ------------*- C++ -*-===//
//
// The only header `lamina compile` output includes: the kernels, the
// program driver, and small adapters that give every kernel call a flat
// argument list (convert-rt-to-emitc emits `callee(arg, arg, ...)`).
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_GENERATED_H
#define LAMINA_RUNTIME_GENERATED_H

#include "lamina/Runtime/Device.h"
#include "lamina/Runtime/ExpertParallel.h"
#include "lamina/Runtime/Kernels.h"
#include "lamina/Runtime/Program.h"
#include "lamina/Runtime/TensorParallel.h"

#include <cstddef>
#include <cstdint>

namespace lamina::rt::gen {

/// A buffer of the arena at a planned byte offset.
inline Tensor view(void *arena, int64_t offset, DType dtype, int rank,
                   const int64_t *shape) {
  return Tensor{static_cast<char *>(arena) + offset, dtype, rank, shape};
}

/// Entry argument `index`, retyped with the compiled shape (programMain
/// checked that they agree).
inline Tensor arg(const Tensor *args, int index, DType dtype, int rank,
                  const int64_t *shape) {
  return Tensor{args[index].data, dtype, rank, shape};
}

/// A constant in static storage. Kernels never write their inputs, so the
/// const_cast is only to fit the (non-owning, mutable) view.
inline Tensor constant(const void *data, DType dtype, int rank,
                       const int64_t *shape) {
  return Tensor{const_cast<void *>(data), dtype, rank, shape};
}

/// A splat constant (every element equals *value): one shared filled
/// buffer on the program's device, not an array literal (Device.h).
inline Tensor splat(const void *value, DType dtype, int rank,
                    const int64_t *shape) {
  return splatView(hostDevice(), value, dtype, rank, shape);
}

inline Status layerNorm(const Tensor &input, const Tensor &scale,
                        const Tensor &bias, int64_t axis, double epsilon,
                        const Tensor &result) {
  return rt::layerNorm(input, scale, &bias, axis, epsilon, result);
}
inline Status layerNorm(const Tensor &input, const Tensor &scale,
                        std::nullptr_t, int64_t axis, double epsilon,
                        const Tensor &result) {
  return rt::layerNorm(input, scale, nullptr, axis, epsilon, result);
}

/// An optional tensor argument as the lowering passes it: a tensor, or
/// nullptr when absent.
inline const Tensor *optional(const Tensor &t) { return &t; }
inline const Tensor *optional(std::nullptr_t) { return nullptr; }

/// graph.conv with its bias a tensor or nullptr.
template <typename Bias>
inline Status conv(const Tensor &input, const Tensor &weight, const Bias &bias,
                   const int64_t *strides, const int64_t *dilations,
                   const int64_t *pads, int64_t group, const Tensor &result) {
  return rt::conv(input, weight, optional(bias), strides, dilations, pads,
                  group, result);
}

/// The norms' fused gradients as the lowering passes them: the addend
/// (after gradResult) and gradBias each a tensor or nullptr, the parameter
/// gradients as tensors.
template <typename Addend, typename GradBias>
inline Status layerNormBackward(const Tensor &input, const Tensor &scale,
                                const Tensor &gradResult, const Addend &addend,
                                int64_t axis, double epsilon,
                                const Tensor &gradInput,
                                const Tensor &gradScale,
                                const GradBias &gradBias) {
  return rt::layerNormBackward(input, scale, gradResult, axis, epsilon,
                               gradInput, &gradScale, optional(gradBias),
                               optional(addend));
}
template <typename Addend>
inline Status rmsNormBackward(const Tensor &input, const Tensor &scale,
                              const Tensor &gradResult, const Addend &addend,
                              int64_t axis, double epsilon,
                              const Tensor &gradInput,
                              const Tensor &gradScale) {
  return rt::rmsNormBackward(input, scale, gradResult, axis, epsilon,
                             gradInput, &gradScale, optional(addend));
}

/// attention and its gradients with the optional bias as a tensor or
/// nullptr and the layout after `causal`, as the lowering passes them.
template <typename Bias>
inline Status attention(const Tensor &q, const Tensor &k, const Tensor &v,
                        const Bias &bias, double scale, bool causal,
                        AttentionLayout layout, const Tensor &out,
                        const Tensor &lse) {
  return rt::attention(q, k, v, optional(bias), scale, causal, out, lse,
                       layout);
}
template <typename Bias>
inline Status attentionBackward(const Tensor &q, const Tensor &k,
                                const Tensor &v, const Bias &bias,
                                const Tensor &out, const Tensor &lse,
                                const Tensor &gradOut, double scale,
                                bool causal, AttentionLayout layout,
                                const Tensor &gradQ, const Tensor &gradK,
                                const Tensor &gradV) {
  return rt::attentionBackward(q, k, v, optional(bias), out, lse, gradOut,
                               scale, causal, gradQ, gradK, gradV, layout);
}

/// matmulEpilogue with its bias and addend each a tensor or nullptr.
template <typename Bias, typename Addend>
inline Status matmulEpilogue(const Tensor &lhs, const Tensor &rhs,
                             const Bias &bias, const Addend &addend,
                             const Tensor &result, bool transposeLhs,
                             bool transposeRhs) {
  return rt::matmulEpilogue(lhs, rhs, optional(bias), optional(addend), result,
                            transposeLhs, transposeRhs);
}

/// concat with the inputs last, so any number can follow.
template <typename... Inputs>
inline Status concat(const Tensor &result, int64_t axis,
                     const Inputs &...inputs) {
  const Tensor list[] = {inputs...};
  return rt::concat(list, int(sizeof...(inputs)), axis, result);
}

/// fusedElementwise's steps as the lowering writes them: a static array of
/// four int64 per step (isBinary, op, lhs, rhs). Decodes at most
/// kMaxFusedSteps; the kernel rejects a longer chain.
inline void decodeFusedSteps(const int64_t *packed, int64_t numSteps,
                             FusedStep *steps) {
  for (int64_t s = 0; s < numSteps && s < kMaxFusedSteps; ++s)
    steps[s] = FusedStep{packed[4 * s] != 0, uint8_t(packed[4 * s + 1]),
                         uint8_t(packed[4 * s + 2]),
                         uint8_t(packed[4 * s + 3])};
}

/// fusedElementwise(result, packed steps, numSteps, inputs...): the inputs
/// last, so any number can follow.
template <typename... Inputs>
inline Status fusedElementwise(const Tensor &result, const int64_t *packed,
                               int64_t numSteps, const Inputs &...inputs) {
  FusedStep steps[kMaxFusedSteps];
  decodeFusedSteps(packed, numSteps, steps);
  const Tensor list[] = {inputs...};
  return rt::fusedElementwise(list, int(sizeof...(inputs)), steps,
                              int(numSteps), result);
}

/// fusedElementwiseSum(result, sum, packed steps, numSteps, inputs...):
/// fusedElementwise that also sums over the leading dims into `sum`.
template <typename... Inputs>
inline Status fusedElementwiseSum(const Tensor &result, const Tensor &sum,
                                  const int64_t *packed, int64_t numSteps,
                                  const Inputs &...inputs) {
  FusedStep steps[kMaxFusedSteps];
  decodeFusedSteps(packed, numSteps, steps);
  const Tensor list[] = {inputs...};
  return rt::fusedElementwise(list, int(sizeof...(inputs)), steps,
                              int(numSteps), result, &sum);
}

} // namespace lamina::rt::gen

#endif // LAMINA_RUNTIME_GENERATED_H
