//===- TensorParallel.h - module function collectives, GPU      -*- C++ -*-===//
//
// The CUDA twins of lamina/Runtime/TensorParallel.h's calls (the generated
// code switches lamina::rt:: to lamina::rt::cuda:: as for every kernel):
// the same checks and layouts on device memory, enqueued on `stream`; the
// process's group orders its collectives on the compute stream too. A
// gather or scatter along an inner axis is regrouped by a transpose
// through stream-ordered scratch. lib/Runtime/Cuda/TensorParallel.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_CUDA_TENSORPARALLEL_H
#define LAMINA_RUNTIME_CUDA_TENSORPARALLEL_H

#include "lamina/Runtime/TensorParallel.h"

#include <cuda_runtime_api.h>

namespace lamina::rt::cuda::tp {
Status allReduce(GroupReduce op, const Tensor &in, const Tensor &out,
                 cudaStream_t stream);
Status allGather(const Tensor &in, int64_t axis, const Tensor &out,
                 cudaStream_t stream);
Status reduceScatter(GroupReduce op, const Tensor &in, int64_t axis,
                     const Tensor &out, cudaStream_t stream);
Status allSlice(const Tensor &in, int64_t axis, const Tensor &out,
                cudaStream_t stream);
Status groupRank(const Tensor &out, cudaStream_t stream);
} // namespace lamina::rt::cuda::tp

#endif // LAMINA_RUNTIME_CUDA_TENSORPARALLEL_H
