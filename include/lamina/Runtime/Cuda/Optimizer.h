//===- Optimizer.h - device optimizer step and clipping ---------*- C++ -*-===//
//
// The device half of lamina/Runtime/Optimizer.h (library
// lamina_cuda_runtime). The state lives wherever the caller keeps it (device
// buffers it allocated and checkpoints), so these are free functions over
// one parameter at a time, stream-ordered like the kernels in Kernels.h:
// arguments are checked on the host, work is enqueued, nothing
// synchronises.
//
// Host and device agree to rounding: the per-element arithmetic is the host
// Optimizer::step's, in its order, with f32 operations that nvcc may not
// contract into FMAs (__fmul_rn, __fadd_rn, ...), and the scalars the host
// derives in double (bias corrections, step size, decay factor) are derived
// by the same host code before the launch.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_CUDA_OPTIMIZER_H
#define LAMINA_RUNTIME_CUDA_OPTIMIZER_H

#include "lamina/Runtime/Optimizer.h"

#include <cuda_runtime_api.h>

namespace lamina::rt::cuda {

/// One update of one parameter, the host Optimizer::step for it: `step` is
/// PyTorch's state['step'] after its increment (1 on the first update; SGD
/// seeds the momentum buffer with the gradient then, AdamW's bias
/// corrections use it). param, grad and the `state` buffers (0 for SGD
/// without momentum, 1 for SGD's momentum_buffer, 2 for AdamW's exp_avg and
/// exp_avg_sq, as Optimizer::numSlots) (a host array of views of device data;
/// nullptr when there are none) are f32 of param's shape. The configuration is
/// checked with the host Optimizer::init's rules. With `copy` (f16 or bf16,
/// param's shape; null: none) the kernel also stores the updated parameter
/// rounded to it, as cast() rounds: the parameter's low-precision copy costs a
/// 2-byte store, not another pass.
Status optimizerStep(const OptimizerConfig &cfg, float lr, int64_t step,
                     const Tensor &param, const Tensor &grad,
                     const Tensor *state, cudaStream_t stream,
                     const Tensor *copy = nullptr);

/// optimizerStep for each of n parameters, with fewer launches: the AdamW
/// updates whose tensors allow 16-byte access (a multiple of 4 elements,
/// 16-byte aligned; the copy 8-byte aligned) go up to 64 to a launch,
/// grouped by their coefficients and copy type; the others take
/// optimizerStep's own launch. Each element is computed as optimizerStep
/// computes it, so the results are the same bits. Every update is checked
/// before the first launch: an invalid one changes nothing.
Status optimizerSteps(float lr, int64_t step, const ParamUpdate *updates, int n,
                      cudaStream_t stream);

/// *deviceResult (a device double) = the sum of squares of every element of
/// the n f32 tensors, accumulated in double. Deterministic: each tensor is
/// split into a number of blocks fixed by its size, each block sums in a
/// fixed order and tree, and one final block adds the partial sums in
/// order; no atomics.
Status sumOfSquares(const Tensor *tensors, int n, double *deviceResult,
                    cudaStream_t stream);

/// dst[i] += scale * src[i] for n f32 elements (each product and sum
/// rounded as written): a micro-batch's gradient weighted into the
/// accumulated one (run --grad-accum).
Status accumulateScaled(float *dst, const float *src, int64_t n, float scale,
                        cudaStream_t stream);

/// Each of `count` sums (GradientSum), up to 64 a launch, each operation
/// rounded as written: dst + scale * src as accumulateScaled computes it
/// (scale 1: dst + src, as binary Add), or, intoZeros, 0 + scale * src,
/// what a zero fill and that leave, without the fill or the read of dst.
Status accumulateMany(const GradientSum *sums, int count, cudaStream_t stream);

/// *deviceValue = sqrt(*deviceValue): a sum of squares (after an all-reduce
/// across ranks, say) to the norm that scaleInPlace takes.
Status sqrtInPlace(double *deviceValue, cudaStream_t stream);

/// clip_grad_norm_'s scaling with the host clipGradNorm's rule, reading the
/// norm on the device (no host synchronisation): with c = maxNorm /
/// (norm + 1e-6) in double, every element of the n f32 tensors is
/// multiplied by float(c) when c < 1; a non-finite norm, or c >= 1, leaves
/// them untouched. maxNorm must be positive.
Status scaleInPlace(const Tensor *tensors, int n, const double *deviceNorm,
                    float maxNorm, cudaStream_t stream);

/// The host clipGradNorm on one device: sumOfSquares, sqrtInPlace and
/// scaleInPlace; the norm is left in *deviceNorm.
Status clipGradNorm(const Tensor *grads, int n, float maxNorm,
                    double *deviceNorm, cudaStream_t stream);

} // namespace lamina::rt::cuda

#endif // LAMINA_RUNTIME_CUDA_OPTIMIZER_H
