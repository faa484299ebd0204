//===- TensorParallel.h - collectives in a module function      -*- C++ -*-===//
//
// What a tensor-parallel module function calls where upstream's
// shard-partition put a collective (convert-graph-to-rt lowers
// `shard.all_reduce`, `shard.all_gather`, `shard.reduce_scatter`,
// `shard.all_slice` and the group rank to these; docs/tp-design.md). Every
// call is blocking: its result is read by the next kernel. The calls run on
// the process's tensor-parallel group, which the distributed driver sets
// before the first step (lib/Runtime/Dist: over the program's communicator);
// a program without one fails the call with an error.
//
// No MPI dependency: the group is an interface.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_TENSORPARALLEL_H
#define LAMINA_RUNTIME_TENSORPARALLEL_H

#include "lamina/Runtime/Status.h"
#include "lamina/Runtime/Tensor.h"

#include <stdint.h>

namespace lamina::rt {

enum class GroupReduce : uint8_t { Sum, Max };

/// The members of one tensor-parallel group, over contiguous f32 buffers in
/// the memory the program's kernels read (the host's, the staged device's,
/// or a GPU's: then ordered on the compute stream, as the kernels are).
class TensorParallelGroup {
public:
  virtual ~TensorParallelGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// `buf` (count elements) replaced by its reduction over the members.
  virtual Status allReduce(float *buf, int64_t count, GroupReduce op) = 0;
  /// In place: `buf` (size() * count) holds this member's `count` elements
  /// at rank() * count; afterwards every member's, in member order.
  virtual Status allGather(float *buf, int64_t count) = 0;
  /// `in` (size() * count): member r receives the sum over the members of
  /// block r into `out` (count).
  virtual Status reduceScatter(const float *in, float *out, int64_t count) = 0;
};

/// The group the calls below (and their CUDA twins, Cuda/Kernels.h) run
/// on; null: none. Set by the driver.
void setTensorParallelGroup(TensorParallelGroup *group);
TensorParallelGroup *tensorParallelGroup();

namespace tp {
/// out = the reduction of every member's `in` (same shape).
Status allReduce(GroupReduce op, const Tensor &in, const Tensor &out);
/// out = the members' `in` concatenated along `axis` (out's axis is
/// size() times in's).
Status allGather(const Tensor &in, int64_t axis, const Tensor &out);
/// The sum of the members' `in`, of which this member keeps block rank()
/// along `axis` (out's axis is in's / size()).
Status reduceScatter(GroupReduce op, const Tensor &in, int64_t axis,
                     const Tensor &out);
/// out = block rank() of `in` along `axis` (no communication).
Status allSlice(const Tensor &in, int64_t axis, const Tensor &out);
/// out (one integer) = this member's index in the group.
Status groupRank(const Tensor &out);

/// What the host calls and their CUDA twins share.
namespace detail {
/// The process's group for `what`, whose operand `in` must be f32 when
/// `f32Only` (the collectives move f32; a slice copies any type).
Status begin(const char *what, const Tensor &in, bool f32Only,
             TensorParallelGroup *&group);
/// Checks that `whole` is `part` (same type) with `axis` n times as long,
/// and gives `part` as [outer, block] around `axis` (block: the axis and
/// the dims after it).
Status blocks(const char *what, const Tensor &part, const Tensor &whole,
              int64_t axis, int n, int64_t &outer, int64_t &block);
} // namespace detail
} // namespace tp

} // namespace lamina::rt

#endif // LAMINA_RUNTIME_TENSORPARALLEL_H
