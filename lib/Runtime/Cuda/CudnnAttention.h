//===- CudnnAttention.h - fused attention through cuDNN --------*- C++ -*-===//
//
// Private to Attention.cu: cuDNN's fused scaled dot-product attention
// (flash attention on the GPU's own instructions: wgmma and TMA on Hopper)
// for the calls it covers, ahead of the WMMA and generic kernels. Built
// only where CMake found cuDNN and its C++ frontend (LAMINA_HAVE_CUDNN);
// the kernel emulator has neither, so it always takes the kernels.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_CUDA_CUDNNATTENTION_H
#define LAMINA_LIB_RUNTIME_CUDA_CUDNNATTENTION_H

#include "lamina/Runtime/Status.h"
#include "lamina/Runtime/Tensor.h"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace lamina::rt::cuda::detail::cudnn_attention {

/// One attention call: Attention.cu's Args without the kernel-only parts.
/// q, k, v, out (and dO, dq, dk, dv) are [B, heads, S, D] or, with
/// seqMajor, [B, S, heads, D]; lse is [B, H, Sq] f32.
struct Call {
  DType dtype;
  const void *q, *k, *v;
  void *out;
  float *lse;
  const void *dO = nullptr;
  void *dq = nullptr, *dk = nullptr, *dv = nullptr;
  int64_t B, H, Hk, Sq, Sk, D;
  float scale;
  bool causal, seqMajor;
  /// Nonzero: q, k, v (and dq, dk, dv) are views into one seq-major packed
  /// tensor whose tokens are this many elements apart (out and dO are not).
  int64_t qkvStride = 0;
};

/// Whether cuDNN may take the call at all: f16/bf16, no bias, D == Dv a
/// multiple of 8 up to 128, the causal diagonal of a square (Sq == Sk, where
/// cuDNN's top-left alignment is the graph's rule), not Sq == Sk == 1,
/// 16-byte aligned operands, and not turned off (LAMINA_CUDA_ATTENTION=
/// generic or tensor-core).
bool eligible(const Call &c, bool hasBias, int64_t dv);

/// Runs the forward (out, lse) or the backward (dq, dk, dv from out, dO and
/// lse) on `stream` when cuDNN supports this shape on this GPU: true, with
/// `result` its Status. False, with nothing enqueued, when cuDNN has no
/// plan for it (remembered per shape, so the kernels take it from then on).
bool forward(const Call &c, cudaStream_t stream, Status &result);
bool backward(const Call &c, cudaStream_t stream, Status &result);

} // namespace lamina::rt::cuda::detail::cudnn_attention

#endif // LAMINA_LIB_RUNTIME_CUDA_CUDNNATTENTION_H
