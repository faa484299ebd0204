//===- TensorParallelGroup.h - a group over the communicator    -*- C++ -*-===//
//
// TensorParallel.h's group on the program's Communicator: a sub-group of
// neighbouring ranks (DistSpec::tp), blocking collectives with the
// --comm-timeout, their bytes counted apart from the data-parallel ones
// (--stats: tensor-parallel bytes per step), and the weights' blocks:
// which block of a whole initializer a member loads, and the whole
// parameter the export assembles from the members' blocks.
//
// Private to lamina_dist.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_DIST_TENSORPARALLELGROUP_H
#define LAMINA_LIB_RUNTIME_DIST_TENSORPARALLELGROUP_H

#include "Communicator.h"

#include "lamina/Runtime/ExpertParallel.h"
#include "lamina/Runtime/Program.h"
#include "lamina/Runtime/TensorIO.h"
#include "lamina/Runtime/TensorParallel.h"

namespace lamina::rt::dist {

class CommTensorParallelGroup : public TensorParallelGroup {
public:
  CommTensorParallelGroup(Communicator &net, int group, int rank, int size)
      : net(net), group(group), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status allReduce(float *buf, int64_t count, GroupReduce op) override;
  Status allGather(float *buf, int64_t count) override;
  Status reduceScatter(const float *in, float *out, int64_t count) override;

  /// Bytes the group's collectives moved (ring volumes, as
  /// Communicator::collectiveBytes counts them; they are in its count too).
  double bytes = 0;

private:
  Status finish(Status started, Request &r, double before, const char *what);
  ShardLayout equalBlocks(int64_t count) const;

  Communicator &net;
  int group, rank_, size_;
};

/// ExpertParallel.h's group: the stage's data-parallel replicas, each
/// holding its share of every layer's experts (ArgSpec::expertSplit). Its
/// bytes (the rows and counts sent to the other members) are counted apart
/// (--stats: expert-parallel bytes per step).
class CommExpertParallelGroup : public ExpertParallelGroup {
public:
  CommExpertParallelGroup(Communicator &net, int group, int rank, int size)
      : net(net), group(group), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status allToAll(const void *send, const std::vector<int64_t> &sendBytes,
                  void *recv, const std::vector<int64_t> &recvBytes,
                  size_t blockBytes) override;

  double bytes = 0;

private:
  Communicator &net;
  int group, rank_, size_;
};

/// The whole shape of a split argument: its block's, `splitDim` `t` times as
/// long.
std::vector<int64_t> wholeShape(const ArgSpec &a, int t);
/// `init` (the whole initializer of `a`, checked against wholeShape)
/// replaced by member `index`'s block of it, of `t`.
Status takeBlock(const ArgSpec &a, int t, int index, OwnedTensor &init);
/// `a` (ArgSpec::expertSplit) as blocks of its experts' dim, for
/// takeBlock, putBlock and wholeShape over the expert-parallel group.
ArgSpec expertBlocks(const ArgSpec &a);
/// Member `index`'s block `block` (a's shape) copied into `whole`.
void putBlock(const ArgSpec &a, int t, int index, const void *block,
              void *whole);

} // namespace lamina::rt::dist

#endif // LAMINA_LIB_RUNTIME_DIST_TENSORPARALLELGROUP_H
