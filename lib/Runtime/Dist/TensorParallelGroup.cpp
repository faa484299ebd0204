//===- TensorParallelGroup.cpp - a tensor-parallel group over the net -----===//

#include "TensorParallelGroup.h"

#include <cstring>

using namespace lamina::rt;
using namespace lamina::rt::dist;

ShardLayout CommTensorParallelGroup::equalBlocks(int64_t count) const {
  ShardLayout l;
  for (int r = 0; r < size_; ++r) {
    l.counts.push_back(int(count));
    l.offsets.push_back(int(count * r));
  }
  l.fullCapacity = count * size_;
  l.shardCapacity = count;
  return l;
}

Status CommTensorParallelGroup::finish(Status started, Request &r,
                                       double before, const char *what) {
  if (!started.ok())
    return started;
  // The kernels after it see its result (on a GPU: the compute stream
  // waits for it; on the host: the host waits, bounded).
  Status s = net.waitForCompute(
      r, std::string("a tensor-parallel ") + what + " did not complete",
      "; a rank of the group may have died");
  bytes += net.collectiveBytes - before;
  return s;
}

Status CommTensorParallelGroup::allReduce(float *buf, int64_t count,
                                          GroupReduce op) {
  double before = net.collectiveBytes;
  Request r;
  Status s = op == GroupReduce::Sum ? net.allReduce(buf, count, group, r)
                                    : net.allReduceMax(buf, count, group, r);
  return finish(std::move(s), r, before, "all-reduce");
}

Status CommTensorParallelGroup::allGather(float *buf, int64_t count) {
  double before = net.collectiveBytes;
  Request r;
  Status s = net.allGather(buf, DType::F32, equalBlocks(count), group, r);
  return finish(std::move(s), r, before, "all-gather");
}

Status CommTensorParallelGroup::reduceScatter(const float *in, float *out,
                                              int64_t count) {
  double before = net.collectiveBytes;
  Request r;
  Status s = net.reduceScatter(in, out, equalBlocks(count), group, r);
  return finish(std::move(s), r, before, "reduce-scatter");
}

std::vector<int64_t> lamina::rt::dist::wholeShape(const ArgSpec &a, int t) {
  std::vector<int64_t> shape(a.shape, a.shape + a.rank);
  if (a.splitDim >= 0 && a.splitDim < a.rank)
    shape[size_t(a.splitDim)] *= t;
  return shape;
}

namespace {
/// [outer, t * inner] around a's split dim: member r's block is the r-th
/// `inner` of each row.
void blockGeometry(const ArgSpec &a, int64_t &outer, int64_t &inner) {
  outer = 1, inner = 1;
  for (int i = 0; i < a.rank; ++i)
    (i < a.splitDim ? outer : inner) *= a.shape[i];
}
} // namespace

Status lamina::rt::dist::takeBlock(const ArgSpec &a, int t, int index,
                                   OwnedTensor &init) {
  std::vector<int64_t> whole = wholeShape(a, t);
  if (a.splitDim < 0 || a.splitDim >= a.rank || init.dtype != a.dtype ||
      init.shape != whole)
    return Status::error(
        "initializer '" + std::string(a.name) + "': expected " +
        describeType(a.dtype, whole.data(), int(whole.size())) + " (split " +
        std::to_string(t) + " ways on dim " + std::to_string(a.splitDim) +
        "), got " +
        describeType(init.dtype, init.shape.data(), int(init.shape.size())));
  int64_t outer, inner;
  blockGeometry(a, outer, inner);
  size_t rowBytes = size_t(inner) * dtypeSize(a.dtype);
  OwnedTensor block;
  block.allocate(a.dtype, std::vector<int64_t>(a.shape, a.shape + a.rank));
  const char *from = static_cast<const char *>(init.data());
  char *to = static_cast<char *>(block.data());
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(to + size_t(o) * rowBytes,
                from + (size_t(o) * size_t(t) + size_t(index)) * rowBytes,
                rowBytes);
  init = std::move(block);
  return Status::success();
}

void lamina::rt::dist::putBlock(const ArgSpec &a, int t, int index,
                                const void *block, void *whole) {
  int64_t outer, inner;
  blockGeometry(a, outer, inner);
  size_t rowBytes = size_t(inner) * dtypeSize(a.dtype);
  const char *from = static_cast<const char *>(block);
  char *to = static_cast<char *>(whole);
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(to + (size_t(o) * size_t(t) + size_t(index)) * rowBytes,
                from + size_t(o) * rowBytes, rowBytes);
}
