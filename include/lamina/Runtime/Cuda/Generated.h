//===- Generated.h - what generated CUDA programs include -------*- C++ -*-===//
//
// The only header `lamina compile --target cuda` output includes. The
// program is host C++ like the host backend's (convert-rt-to-emitc with
// target=cuda): the same views into an arena -- here device memory -- and
// the same calls, to the lamina::rt::cuda:: twins of the kernels with the
// stream the entry runs on appended. `main` hands cuda::device() to the
// driver (Device.h), which uploads the weights, runs the entry on its
// stream and reads results back.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_CUDA_GENERATED_H
#define LAMINA_RUNTIME_CUDA_GENERATED_H

#include "lamina/Runtime/Cuda/ExpertParallel.h"
#include "lamina/Runtime/Cuda/Kernels.h"
#include "lamina/Runtime/Cuda/TensorParallel.h"
#include "lamina/Runtime/Device.h"
#include "lamina/Runtime/Generated.h"

#include <cstddef>
#include <tuple>
#include <utility>

namespace lamina::rt::cuda {

/// The process's GPU as a Device: the device picked by LOCAL_RANK (or
/// device 0), one compute stream. Created on first use.
Device &device();

/// device()'s compute stream (initialising the device; null if that
/// fails): what lamina_nccl's communication orders itself against.
cudaStream_t deviceStream();

/// The stream the entry being run enqueues on (set by device().run).
cudaStream_t currentStream();

namespace gen {

/// A constant of the program: copied to device memory on first use (one
/// copy per constant for the life of the process) and viewed there.
Tensor constant(const void *host, DType dtype, int rank, const int64_t *shape);
/// A splat constant on the device (splatConstant, Device.h).
Tensor splat(const void *value, DType dtype, int rank, const int64_t *shape);

/// matmulEpilogue with its bias and addend each a tensor or nullptr.
template <typename Bias, typename Addend>
inline Status matmulEpilogue(const Tensor &lhs, const Tensor &rhs,
                             const Bias &bias, const Addend &addend,
                             const Tensor &result, bool transposeLhs,
                             bool transposeRhs, cudaStream_t stream) {
  return cuda::matmulEpilogue(lhs, rhs, rt::gen::optional(bias),
                              rt::gen::optional(addend), result, transposeLhs,
                              transposeRhs, stream);
}

inline Status layerNorm(const Tensor &input, const Tensor &scale,
                        const Tensor &bias, int64_t axis, double epsilon,
                        const Tensor &result, cudaStream_t stream) {
  return cuda::layerNorm(input, scale, &bias, axis, epsilon, result, stream);
}
inline Status layerNorm(const Tensor &input, const Tensor &scale,
                        std::nullptr_t, int64_t axis, double epsilon,
                        const Tensor &result, cudaStream_t stream) {
  return cuda::layerNorm(input, scale, nullptr, axis, epsilon, result, stream);
}

/// The norms' gradients with the addend and gradBias each a tensor or
/// nullptr (the host adapters' argument order).
template <typename Addend, typename GradBias>
inline Status layerNormBackward(const Tensor &input, const Tensor &scale,
                                const Tensor &gradResult, const Addend &addend,
                                int64_t axis, double epsilon,
                                const Tensor &gradInput,
                                const Tensor &gradScale,
                                const GradBias &gradBias, cudaStream_t stream) {
  return cuda::layerNormBackward(input, scale, gradResult, axis, epsilon,
                                 gradInput, &gradScale,
                                 rt::gen::optional(gradBias),
                                 rt::gen::optional(addend), stream);
}
template <typename Addend>
inline Status rmsNormBackward(const Tensor &input, const Tensor &scale,
                              const Tensor &gradResult, const Addend &addend,
                              int64_t axis, double epsilon,
                              const Tensor &gradInput, const Tensor &gradScale,
                              cudaStream_t stream) {
  return cuda::rmsNormBackward(input, scale, gradResult, axis, epsilon,
                               gradInput, &gradScale,
                               rt::gen::optional(addend), stream);
}

/// attention and its gradients with the optional bias as a tensor or
/// nullptr and the layout after `causal`, as the lowering passes them.
template <typename Bias>
inline Status attention(const Tensor &q, const Tensor &k, const Tensor &v,
                        const Bias &bias, double scale, bool causal,
                        AttentionLayout layout, const Tensor &out,
                        const Tensor &lse, cudaStream_t stream) {
  return cuda::attention(q, k, v, rt::gen::optional(bias), scale, causal, out,
                         lse, layout, stream);
}
template <typename Bias>
inline Status attentionBackward(const Tensor &q, const Tensor &k,
                                const Tensor &v, const Bias &bias,
                                const Tensor &out, const Tensor &lse,
                                const Tensor &gradOut, double scale,
                                bool causal, AttentionLayout layout,
                                const Tensor &gradQ, const Tensor &gradK,
                                const Tensor &gradV, cudaStream_t stream) {
  return cuda::attentionBackward(q, k, v, rt::gen::optional(bias), out, lse,
                                 gradOut, scale, causal, gradQ, gradK, gradV,
                                 layout, stream);
}

template <typename Tuple, size_t... I>
inline Status concatList(const Tensor &result, int64_t axis, const Tuple &t,
                         std::index_sequence<I...>) {
  const Tensor list[] = {std::get<I>(t)...};
  return cuda::concat(list, int(sizeof...(I)), axis, result,
                      std::get<sizeof...(I)>(t));
}
/// concat(result, axis, inputs..., stream): the host adapter's order with
/// the stream last, like every other call.
template <typename... Args>
inline Status concat(const Tensor &result, int64_t axis, const Args &...args) {
  static_assert(sizeof...(Args) >= 2, "concat: inputs and a stream");
  return concatList(result, axis, std::forward_as_tuple(args...),
                    std::make_index_sequence<sizeof...(Args) - 1>());
}

template <typename Tuple, size_t... I>
inline Status fusedList(const Tensor &result, const Tensor *sum,
                        const int64_t *packed, int64_t numSteps,
                        const Tuple &t, std::index_sequence<I...>) {
  FusedStep steps[kMaxFusedSteps];
  rt::gen::decodeFusedSteps(packed, numSteps, steps);
  const Tensor list[] = {std::get<I>(t)...};
  return cuda::fusedElementwise(list, int(sizeof...(I)), steps, int(numSteps),
                                result, sum, std::get<sizeof...(I)>(t));
}
/// fusedElementwise(result, packed steps, numSteps, inputs..., stream): the
/// host adapter's order with the stream last.
template <typename... Args>
inline Status fusedElementwise(const Tensor &result, const int64_t *packed,
                               int64_t numSteps, const Args &...args) {
  static_assert(sizeof...(Args) >= 2, "fusedElementwise: inputs and a stream");
  return fusedList(result, nullptr, packed, numSteps,
                   std::forward_as_tuple(args...),
                   std::make_index_sequence<sizeof...(Args) - 1>());
}
/// fusedElementwiseSum(result, sum, packed steps, numSteps, inputs...,
/// stream): the same with the sum over the leading dims.
template <typename... Args>
inline Status fusedElementwiseSum(const Tensor &result, const Tensor &sum,
                                  const int64_t *packed, int64_t numSteps,
                                  const Args &...args) {
  static_assert(sizeof...(Args) >= 2,
                "fusedElementwiseSum: inputs and a stream");
  return fusedList(result, &sum, packed, numSteps,
                   std::forward_as_tuple(args...),
                   std::make_index_sequence<sizeof...(Args) - 1>());
}

/// graph.conv with its bias a tensor or nullptr.
template <typename Bias>
inline Status conv(const Tensor &input, const Tensor &weight, const Bias &bias,
                   const int64_t *strides, const int64_t *dilations,
                   const int64_t *pads, int64_t group, const Tensor &result,
                   cudaStream_t stream) {
  return cuda::conv(input, weight, rt::gen::optional(bias), strides,
                    dilations, pads, group, result, stream);
}

} // namespace gen
} // namespace lamina::rt::cuda

#endif // LAMINA_RUNTIME_CUDA_GENERATED_H
