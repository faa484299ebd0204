//===- TensorParallel.cpp - collectives inside a module's function --------===//
//
// The tensor layouts of TensorParallel.h's calls over the group's flat
// collectives: a gather or scatter along an inner axis moves whole blocks
// per member, so the block order of the flat buffer is rearranged on the
// way (member-major there, axis-major in the tensor).
//
//===----------------------------------------------------------------------===//

#include "lamina/Runtime/TensorParallel.h"

#include <cstring>
#include <string>
#include <vector>

using namespace lamina::rt;

namespace {
TensorParallelGroup *theGroup = nullptr;

/// Copies [outer, n, block] (tensor order) to [n, outer, block] (member
/// order), or back.
void regroup(const float *from, float *to, int64_t outer, int n, int64_t block,
             bool toMembers) {
  for (int64_t o = 0; o < outer; ++o)
    for (int r = 0; r < n; ++r) {
      const float *src = toMembers ? from + (o * n + r) * block
                                   : from + (int64_t(r) * outer + o) * block;
      float *dst = toMembers ? to + (int64_t(r) * outer + o) * block
                             : to + (o * n + r) * block;
      std::memcpy(dst, src, size_t(block) * sizeof(float));
    }
}
} // namespace

void lamina::rt::setTensorParallelGroup(TensorParallelGroup *g) {
  theGroup = g;
}

TensorParallelGroup *lamina::rt::tensorParallelGroup() { return theGroup; }

Status tp::detail::begin(const char *what, const Tensor &in, bool f32Only,
                         TensorParallelGroup *&g) {
  g = theGroup;
  if (!g)
    return Status::error(std::string(what) +
                         ": the program runs no tensor-parallel group");
  if (f32Only && in.dtype != DType::F32)
    return Status::error(std::string(what) + " of " + dtypeName(in.dtype) +
                         ": tensor-parallel collectives move f32 only");
  return Status::success();
}

Status tp::detail::blocks(const char *what, const Tensor &part,
                          const Tensor &whole, int64_t axis, int n,
                          int64_t &outer, int64_t &block) {
  bool ok = axis >= 0 && axis < part.rank && part.rank == whole.rank &&
            part.dtype == whole.dtype;
  outer = 1, block = 1;
  for (int i = 0; ok && i < part.rank; ++i) {
    ok = whole.shape[i] == (i == axis ? part.shape[i] * n : part.shape[i]);
    (i < axis ? outer : block) *= part.shape[i];
  }
  if (!ok)
    return Status::error(std::string(what) + ": shapes do not split " +
                         std::to_string(n) + " ways on axis " +
                         std::to_string(axis));
  return Status::success();
}

Status tp::allReduce(GroupReduce op, const Tensor &in, const Tensor &out) {
  TensorParallelGroup *g;
  if (Status s = detail::begin("all-reduce", in, true, g); !s.ok())
    return s;
  if (out.numElements() != in.numElements() || out.dtype != in.dtype)
    return Status::error("all-reduce: the result's type differs");
  if (out.data != in.data)
    std::memcpy(out.data, in.data, in.byteSize());
  return g->allReduce(out.as<float>(), out.numElements(), op);
}

Status tp::allGather(const Tensor &in, int64_t axis, const Tensor &out) {
  TensorParallelGroup *g;
  int64_t outer, block;
  if (Status s = detail::begin("all-gather", in, true, g); !s.ok())
    return s;
  if (Status s =
          detail::blocks("all-gather", in, out, axis, g->size(), outer, block);
      !s.ok())
    return s;
  const int64_t count = in.numElements();
  std::vector<float> members(size_t(outer > 1 ? out.numElements() : 0));
  float *buf = outer > 1 ? members.data() : out.as<float>();
  std::memcpy(buf + count * g->rank(), in.data, in.byteSize());
  if (Status s = g->allGather(buf, count); !s.ok())
    return s;
  if (outer > 1)
    regroup(buf, out.as<float>(), outer, g->size(), block, false);
  return Status::success();
}

Status tp::reduceScatter(GroupReduce op, const Tensor &in, int64_t axis,
                         const Tensor &out) {
  TensorParallelGroup *g;
  int64_t outer, block;
  if (op != GroupReduce::Sum)
    return Status::error("reduce-scatter: only sums are supported");
  if (Status s = detail::begin("reduce-scatter", in, true, g); !s.ok())
    return s;
  if (Status s = detail::blocks("reduce-scatter", out, in, axis, g->size(),
                                outer, block);
      !s.ok())
    return s;
  if (outer == 1)
    return g->reduceScatter(in.as<float>(), out.as<float>(), out.numElements());
  std::vector<float> members(size_t(in.numElements()));
  regroup(in.as<float>(), members.data(), outer, g->size(), block, true);
  return g->reduceScatter(members.data(), out.as<float>(), out.numElements());
}

Status tp::allSlice(const Tensor &in, int64_t axis, const Tensor &out) {
  TensorParallelGroup *g;
  int64_t outer, block;
  if (Status s = detail::begin("all-slice", in, false, g); !s.ok())
    return s;
  if (Status s =
          detail::blocks("all-slice", out, in, axis, g->size(), outer, block);
      !s.ok())
    return s;
  size_t bytes = size_t(block) * in.elementSize();
  const char *from = static_cast<const char *>(in.data);
  char *to = static_cast<char *>(out.data);
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(to + o * bytes,
                from + (o * g->size() + g->rank()) * int64_t(bytes), bytes);
  return Status::success();
}

Status tp::groupRank(const Tensor &out) {
  TensorParallelGroup *g;
  if (Status s = detail::begin("the group rank", out, false, g); !s.ok())
    return s;
  if (out.numElements() != 1)
    return Status::error("the group rank: the result is not one element");
  switch (out.dtype) {
  case DType::I64:
    *out.as<int64_t>() = g->rank();
    return Status::success();
  case DType::I32:
    *out.as<int32_t>() = g->rank();
    return Status::success();
  default:
    return Status::error(std::string("the group rank as ") +
                         dtypeName(out.dtype));
  }
}
