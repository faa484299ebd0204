//===- ExpertParallel.h - the expert-parallel all-to-all, GPU ---*- C++ -*-===//
//
// The CUDA twin of lamina/Runtime/ExpertParallel.h's exchange (the
// generated code switches lamina::rt:: to lamina::rt::cuda:: as for every
// kernel): the counts exchanged first over the group (NCCL), copied back
// (a wait for the stream: the rows' sizes follow from them, as
// Megatron-Core's dispatcher waits for its counts), then each block's
// valid rows. lib/Runtime/Cuda/ExpertParallel.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_CUDA_EXPERTPARALLEL_H
#define LAMINA_RUNTIME_CUDA_EXPERTPARALLEL_H

#include "lamina/Runtime/ExpertParallel.h"

#include <cuda_runtime_api.h>

namespace lamina::rt::cuda::ep {
Status exchange(const Tensor &rows, const Tensor &counts, const Tensor &result,
                const Tensor &received, cudaStream_t stream);
} // namespace lamina::rt::cuda::ep

#endif // LAMINA_RUNTIME_CUDA_EXPERTPARALLEL_H
