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

Status CommExpertParallelGroup::allToAll(const void *send,
                                         const std::vector<int64_t> &sendBytes,
                                         void *recv,
                                         const std::vector<int64_t> &recvBytes,
                                         size_t blockBytes) {
  const size_t n = static_cast<size_t>(size_);
  std::vector<int> sb(n), rb(n), offsets(n);
  for (int q = 0; q < size_; ++q) {
    sb[size_t(q)] = int(sendBytes[size_t(q)]);
    rb[size_t(q)] = int(recvBytes[size_t(q)]);
    offsets[size_t(q)] = int(size_t(q) * blockBytes);
    if (q != rank_)
      bytes += double(sendBytes[size_t(q)]);
  }
  Request r;
  if (Status s = net.allToAll(send, sb, offsets, recv, rb, offsets, group, r);
      !s.ok())
    return s;
  return net.waitForCompute(r, "an expert-parallel all-to-all did not complete",
                            "; a rank of the group may have died");
}

std::vector<int64_t> lamina::rt::dist::wholeShape(const ArgSpec &a, int t) {
  std::vector<int64_t> shape(a.shape, a.shape + a.rank);
  if (a.splitDim >= 0 && a.splitDim < a.rank)
    shape[size_t(a.splitDim)] *= t;
  return shape;
}

namespace {
/// Around a's split dim: `outer` rows of `t * parts` chunks, each `chunk`
/// bytes. The whole dim is `parts` equal parts side by side, each split
/// `t` ways; member r's block is chunk r of each part, the parts in order
/// (with one part: the r-th `chunk` of each row).
struct BlockGeometry {
  int64_t outer = 1, parts = 1;
  size_t chunk = 0;
  BlockGeometry(const ArgSpec &a) {
    int64_t inner = 1;
    for (int i = 0; i < a.rank; ++i)
      (i < a.splitDim ? outer : inner) *= a.shape[i];
    parts = a.splitParts > 1 ? a.splitParts : 1;
    chunk = size_t(inner / parts) * dtypeSize(a.dtype);
  }
  /// Byte offsets of part j of row o in member `index`'s block and in the
  /// whole value.
  size_t inBlock(int64_t o, int64_t j) const {
    return (size_t(o) * size_t(parts) + size_t(j)) * chunk;
  }
  size_t inWhole(int64_t o, int64_t j, int t, int index) const {
    return ((size_t(o) * size_t(parts) + size_t(j)) * size_t(t) +
            size_t(index)) *
           chunk;
  }
};
} // namespace

Status lamina::rt::dist::takeBlock(const ArgSpec &a, int t, int index,
                                   OwnedTensor &init) {
  std::vector<int64_t> whole = wholeShape(a, t);
  int64_t parts = a.splitParts > 1 ? a.splitParts : 1;
  if (a.splitDim < 0 || a.splitDim >= a.rank || init.dtype != a.dtype ||
      init.shape != whole || a.shape[a.splitDim] % parts != 0)
    return Status::error(
        "initializer '" + std::string(a.name) + "': expected " +
        describeType(a.dtype, whole.data(), int(whole.size())) + " (split " +
        std::to_string(t) + " ways on dim " + std::to_string(a.splitDim) +
        (parts > 1 ? " in " + std::to_string(parts) + " parts" : "") +
        "), got " +
        describeType(init.dtype, init.shape.data(), int(init.shape.size())));
  BlockGeometry g(a);
  OwnedTensor block;
  block.allocate(a.dtype, std::vector<int64_t>(a.shape, a.shape + a.rank));
  const char *from = static_cast<const char *>(init.data());
  char *to = static_cast<char *>(block.data());
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t j = 0; j < g.parts; ++j)
      std::memcpy(to + g.inBlock(o, j), from + g.inWhole(o, j, t, index),
                  g.chunk);
  init = std::move(block);
  return Status::success();
}

void lamina::rt::dist::putBlock(const ArgSpec &a, int t, int index,
                                const void *block, void *whole) {
  BlockGeometry g(a);
  const char *from = static_cast<const char *>(block);
  char *to = static_cast<char *>(whole);
  for (int64_t o = 0; o < g.outer; ++o)
    for (int64_t j = 0; j < g.parts; ++j)
      std::memcpy(to + g.inWhole(o, j, t, index), from + g.inBlock(o, j),
                  g.chunk);
}

ArgSpec lamina::rt::dist::expertBlocks(const ArgSpec &a) {
  ArgSpec b = a;
  b.splitDim = 0;
  b.splitParts = 1;
  return b;
}
