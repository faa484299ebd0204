//===- TensorParallel.cpp - collectives inside a module's function (GPU) --===//
//
// The CUDA twins of lib/Runtime/TensorParallel.cpp: the same checks and
// layouts on device memory, every copy and the group's collectives on the
// caller's stream. A gather or scatter along an inner axis goes through
// member-major scratch ([t, outer, block]) and a transpose of its first two
// dims.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include "lamina/Runtime/Cuda/TensorParallel.h"

#include <string>

using namespace lamina::rt;
using namespace lamina::rt::cuda;
using lamina::rt::cuda::detail::cudaCheck;
namespace shared = lamina::rt::tp::detail;
using Scratch = lamina::rt::cuda::detail::Scratch;

namespace {
/// [a, b, block] f32 at `from` to [b, a, block] at `to`.
Status swapOuter(const char *what, const void *from, void *to, int64_t a,
                 int64_t b, int64_t block, cudaStream_t stream) {
  const int64_t in[3] = {a, b, block}, outShape[3] = {b, a, block};
  const int64_t perm[3] = {1, 0, 2};
  Status s = transpose(Tensor{const_cast<void *>(from), DType::F32, 3, in},
                       perm, Tensor{to, DType::F32, 3, outShape}, stream);
  return s.ok() ? s : Status::error(std::string(what) + ": " + s.message());
}
} // namespace

Status lamina::rt::cuda::tp::allReduce(GroupReduce op, const Tensor &in,
                                       const Tensor &out, cudaStream_t stream) {
  TensorParallelGroup *g;
  if (Status s = shared::begin("all-reduce", in, true, g); !s.ok())
    return s;
  if (out.numElements() != in.numElements() || out.dtype != in.dtype)
    return Status::error("all-reduce: the result's type differs");
  if (out.data != in.data)
    if (Status s = cudaCheck("all-reduce",
                             cudaMemcpyAsync(out.data, in.data, in.byteSize(),
                                             cudaMemcpyDeviceToDevice, stream));
        !s.ok())
      return s;
  return g->allReduce(out.as<float>(), out.numElements(), op);
}

Status lamina::rt::cuda::tp::allGather(const Tensor &in, int64_t axis,
                                       const Tensor &out, cudaStream_t stream) {
  TensorParallelGroup *g;
  int64_t outer, block;
  if (Status s = shared::begin("all-gather", in, true, g); !s.ok())
    return s;
  if (Status s =
          shared::blocks("all-gather", in, out, axis, g->size(), outer, block);
      !s.ok())
    return s;
  const int64_t count = in.numElements();
  Scratch members(stream);
  float *buf = out.as<float>();
  if (outer > 1) {
    if (Status s =
            cudaCheck("all-gather",
                      cudaMallocAsync(&members.ptr, out.byteSize(), stream));
        !s.ok())
      return s;
    buf = static_cast<float *>(members.ptr);
  }
  if (Status s = cudaCheck("all-gather",
                           cudaMemcpyAsync(buf + count * g->rank(), in.data,
                                           in.byteSize(),
                                           cudaMemcpyDeviceToDevice, stream));
      !s.ok())
    return s;
  if (Status s = g->allGather(buf, count); !s.ok())
    return s;
  return outer > 1 ? swapOuter("all-gather", buf, out.data, g->size(), outer,
                               block, stream)
                   : Status::success();
}

Status lamina::rt::cuda::tp::reduceScatter(GroupReduce op, const Tensor &in,
                                           int64_t axis, const Tensor &out,
                                           cudaStream_t stream) {
  TensorParallelGroup *g;
  int64_t outer, block;
  if (op != GroupReduce::Sum)
    return Status::error("reduce-scatter: only sums are supported");
  if (Status s = shared::begin("reduce-scatter", in, true, g); !s.ok())
    return s;
  if (Status s = shared::blocks("reduce-scatter", out, in, axis, g->size(),
                                outer, block);
      !s.ok())
    return s;
  if (outer == 1)
    return g->reduceScatter(in.as<float>(), out.as<float>(), out.numElements());
  Scratch members(stream);
  if (Status s =
          cudaCheck("reduce-scatter",
                    cudaMallocAsync(&members.ptr, in.byteSize(), stream));
      !s.ok())
    return s;
  if (Status s = swapOuter("reduce-scatter", in.data, members.ptr, outer,
                           g->size(), block, stream);
      !s.ok())
    return s;
  return g->reduceScatter(static_cast<float *>(members.ptr), out.as<float>(),
                          out.numElements());
}

Status lamina::rt::cuda::tp::allSlice(const Tensor &in, int64_t axis,
                                      const Tensor &out, cudaStream_t stream) {
  TensorParallelGroup *g;
  int64_t outer, block;
  if (Status s = shared::begin("all-slice", in, false, g); !s.ok())
    return s;
  if (Status s =
          shared::blocks("all-slice", out, in, axis, g->size(), outer, block);
      !s.ok())
    return s;
  size_t bytes = size_t(block) * in.elementSize();
  return cudaCheck("all-slice",
                   cudaMemcpy2DAsync(out.data, bytes,
                                     static_cast<const char *>(in.data) +
                                         size_t(g->rank()) * bytes,
                                     bytes * size_t(g->size()), bytes,
                                     size_t(outer), cudaMemcpyDeviceToDevice,
                                     stream));
}

Status lamina::rt::cuda::tp::groupRank(const Tensor &out, cudaStream_t stream) {
  TensorParallelGroup *g;
  if (Status s = shared::begin("the group rank", out, false, g); !s.ok())
    return s;
  if (out.numElements() != 1 ||
      (out.dtype != DType::I64 && out.dtype != DType::I32))
    return Status::error("the group rank: the result is not one integer");
  // Static storage: the copy may run after this returns.
  static int64_t rank64;
  static int32_t rank32;
  rank64 = g->rank();
  rank32 = g->rank();
  const void *from =
      out.dtype == DType::I64 ? static_cast<const void *>(&rank64) : &rank32;
  return cudaCheck("the group rank",
                   cudaMemcpyAsync(out.data, from, out.elementSize(),
                                   cudaMemcpyHostToDevice, stream));
}
