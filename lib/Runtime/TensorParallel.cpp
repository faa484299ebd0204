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

Status group(const char *what, TensorParallelGroup *&g) {
  g = theGroup;
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

/// A tensor as [outer, axis, inner] around `axis`.
struct Blocks {
  int64_t outer = 1, axis = 1, inner = 1;
};

Status blocksOf(const char *what, const Tensor &t, int64_t axis, Blocks &b) {
  if (axis < 0 || axis >= t.rank)
    return Status::error(std::string(what) + ": axis " + std::to_string(axis) +
                         " of a rank-" + std::to_string(t.rank) + " tensor");
  for (int i = 0; i < t.rank; ++i)
    (i < axis ? b.outer : i == axis ? b.axis : b.inner) *= t.shape[i];
  return Status::success();
}

/// Checks that `whole` is `part` with `axis` n times as long.
Status checkParts(const char *what, const Tensor &part, const Tensor &whole,
                  int64_t axis, int n) {
  bool ok = part.rank == whole.rank;
  for (int i = 0; ok && i < part.rank; ++i)
    ok = whole.shape[i] == (i == axis ? part.shape[i] * n : part.shape[i]);
  if (!ok)
    return Status::error(std::string(what) + ": shapes do not split " +
                         std::to_string(n) + " ways on axis " +
                         std::to_string(axis));
  return Status::success();
}

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

Status tp::allReduce(GroupReduce op, const Tensor &in, const Tensor &out) {
  TensorParallelGroup *g;
  if (Status s = group("all-reduce", g); !s.ok())
    return s;
  if (Status s = checkF32("all-reduce", in); !s.ok())
    return s;
  if (out.numElements() != in.numElements() || out.dtype != in.dtype)
    return Status::error("all-reduce: the result's type differs");
  if (out.data != in.data)
    std::memcpy(out.data, in.data, in.byteSize());
  return g->allReduce(out.as<float>(), out.numElements(), op);
}

Status tp::allGather(const Tensor &in, int64_t axis, const Tensor &out) {
  TensorParallelGroup *g;
  Blocks b;
  if (Status s = group("all-gather", g); !s.ok())
    return s;
  if (Status s = checkF32("all-gather", in); !s.ok())
    return s;
  if (Status s = blocksOf("all-gather", in, axis, b); !s.ok())
    return s;
  if (Status s = checkParts("all-gather", in, out, axis, g->size()); !s.ok())
    return s;
  const int64_t count = in.numElements();
  if (b.outer == 1) {
    std::memcpy(out.as<float>() + count * g->rank(), in.data, in.byteSize());
    return g->allGather(out.as<float>(), count);
  }
  std::vector<float> members(size_t(out.numElements()));
  std::memcpy(members.data() + count * g->rank(), in.data, in.byteSize());
  if (Status s = g->allGather(members.data(), count); !s.ok())
    return s;
  regroup(members.data(), out.as<float>(), b.outer, g->size(), b.axis * b.inner,
          false);
  return Status::success();
}

Status tp::reduceScatter(GroupReduce op, const Tensor &in, int64_t axis,
                         const Tensor &out) {
  TensorParallelGroup *g;
  Blocks b;
  if (op != GroupReduce::Sum)
    return Status::error("reduce-scatter: only sums are supported");
  if (Status s = group("reduce-scatter", g); !s.ok())
    return s;
  if (Status s = checkF32("reduce-scatter", in); !s.ok())
    return s;
  if (Status s = blocksOf("reduce-scatter", out, axis, b); !s.ok())
    return s;
  if (Status s = checkParts("reduce-scatter", out, in, axis, g->size());
      !s.ok())
    return s;
  if (b.outer == 1)
    return g->reduceScatter(in.as<float>(), out.as<float>(), out.numElements());
  std::vector<float> members(size_t(in.numElements()));
  regroup(in.as<float>(), members.data(), b.outer, g->size(), b.axis * b.inner,
          true);
  return g->reduceScatter(members.data(), out.as<float>(), out.numElements());
}

Status tp::allSlice(const Tensor &in, int64_t axis, const Tensor &out) {
  TensorParallelGroup *g;
  Blocks b;
  if (Status s = group("all-slice", g); !s.ok())
    return s;
  if (Status s = blocksOf("all-slice", out, axis, b); !s.ok())
    return s;
  if (Status s = checkParts("all-slice", out, in, axis, g->size()); !s.ok())
    return s;
  if (in.dtype != out.dtype)
    return Status::error("all-slice: the result's type differs");
  size_t block = size_t(b.axis * b.inner) * in.elementSize();
  const char *from = static_cast<const char *>(in.data);
  char *to = static_cast<char *>(out.data);
  for (int64_t o = 0; o < b.outer; ++o)
    std::memcpy(to + o * block,
                from + (o * g->size() + g->rank()) * int64_t(block), block);
  return Status::success();
}

Status tp::groupRank(const Tensor &out) {
  TensorParallelGroup *g;
  if (Status s = group("the group rank", g); !s.ok())
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
