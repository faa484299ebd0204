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
using Scratch = lamina::rt::cuda::detail::Scratch;

namespace {
Status group(const char *what, TensorParallelGroup *&g) {
  g = tensorParallelGroup();
  if (!g)
    return Status::error(std::string(what) +
                         ": the program runs no tensor-parallel group");
  return Status::success();
}

Status checkF32(const char *what, const Tensor &t) {
  if (t.dtype != DType::F32)
    return Status::error(std::string(what) + " of " + dtypeName(t.dtype) +
                         ": tensor-parallel collectives move f32 only");
  return Status::success();
}

/// [outer, n * inner] of `whole` around `axis`, `part` that with axis / n;
/// false when they do not split so.
bool split(const Tensor &part, const Tensor &whole, int64_t axis, int n,
           int64_t &outer, int64_t &block) {
  if (axis < 0 || axis >= part.rank || part.rank != whole.rank ||
      part.dtype != whole.dtype)
    return false;
  outer = 1, block = 1;
  for (int i = 0; i < part.rank; ++i) {
    if (whole.shape[i] != (i == axis ? part.shape[i] * n : part.shape[i]))
      return false;
    (i < axis ? outer : block) *= part.shape[i];
  }
  return true;
}

Status badSplit(const char *what, int64_t axis, int n) {
  return Status::error(std::string(what) + ": shapes do not split " +
                       std::to_string(n) + " ways on axis " +
                       std::to_string(axis));
}

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
  if (Status s = group("all-reduce", g); !s.ok())
    return s;
  if (Status s = checkF32("all-reduce", in); !s.ok())
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
  if (Status s = group("all-gather", g); !s.ok())
    return s;
  if (Status s = checkF32("all-gather", in); !s.ok())
    return s;
  if (!split(in, out, axis, g->size(), outer, block))
    return badSplit("all-gather", axis, g->size());
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
  if (Status s = group("reduce-scatter", g); !s.ok())
    return s;
  if (Status s = checkF32("reduce-scatter", in); !s.ok())
    return s;
  if (!split(out, in, axis, g->size(), outer, block))
    return badSplit("reduce-scatter", axis, g->size());
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
  if (Status s = group("all-slice", g); !s.ok())
    return s;
  if (!split(out, in, axis, g->size(), outer, block))
    return badSplit("all-slice", axis, g->size());
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
  if (Status s = group("the group rank", g); !s.ok())
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
