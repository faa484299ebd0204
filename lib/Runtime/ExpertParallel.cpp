//===- ExpertParallel.cpp - graph.moe_exchange over the group -------------===//
//
// The counts first (each member learns how many rows it gets), then the
// rows, each block's valid rows only.
//
//===----------------------------------------------------------------------===//

#include "lamina/Runtime/ExpertParallel.h"

#include "Internal.h"

#include <cstring>
#include <numeric>
#include <string>

using namespace lamina::rt;
using namespace lamina::rt::detail;

namespace {
ExpertParallelGroup *theGroup = nullptr;
} // namespace

void lamina::rt::setExpertParallelGroup(ExpertParallelGroup *g) {
  theGroup = g;
}

ExpertParallelGroup *lamina::rt::expertParallelGroup() { return theGroup; }

Status ep::detail::begin(const Tensor &rows, const Tensor &counts,
                         const Tensor &result, const Tensor &received,
                         ExpertParallelGroup *&g) {
  g = theGroup;
  if (!g)
    return Status::error("moe_exchange: the program runs no expert-parallel "
                         "group");
  const int n = g->size();
  if (counts.rank != 2 || counts.dtype != DType::I64 || counts.dim(0) != n ||
      received.dtype != DType::I64 ||
      received.numElements() != counts.numElements() || rows.rank < 1 ||
      rows.dim(0) % n != 0 || result.dtype != rows.dtype ||
      result.numElements() != rows.numElements())
    return Status::error("moe_exchange: " + describe(rows) + " and " +
                         describe(counts) + " are no blocks for the " +
                         std::to_string(n) + " members of the group");
  return Status::success();
}

std::vector<int64_t> ep::detail::countBytes(const Tensor &counts) {
  return std::vector<int64_t>(static_cast<size_t>(counts.dim(0)),
                              counts.dim(1) * int64_t(sizeof(int64_t)));
}

Status ep::detail::rowBytes(const Tensor &rows, const int64_t *sent,
                            const int64_t *got, int n, int64_t local,
                            std::vector<int64_t> &sendBytes,
                            std::vector<int64_t> &recvBytes,
                            size_t &blockBytes) {
  const int64_t capacity = rows.dim(0) / n;
  const size_t rowSize = rows.byteSize() / size_t(rows.dim(0));
  sendBytes.assign(static_cast<size_t>(n), 0);
  recvBytes.assign(static_cast<size_t>(n), 0);
  for (int q = 0; q < n; ++q) {
    int64_t out = std::accumulate(sent + q * local, sent + (q + 1) * local,
                                  int64_t(0)),
            in = std::accumulate(got + q * local, got + (q + 1) * local,
                                 int64_t(0));
    if (out < 0 || out > capacity || in < 0 || in > capacity)
      return Status::error("moe_exchange: member " + std::to_string(q) +
                           "'s rows exceed a block of " +
                           std::to_string(capacity));
    sendBytes[size_t(q)] = out * int64_t(rowSize);
    recvBytes[size_t(q)] = in * int64_t(rowSize);
  }
  blockBytes = size_t(capacity) * rowSize;
  return Status::success();
}

Status ep::exchange(const Tensor &rows, const Tensor &counts,
                    const Tensor &result, const Tensor &received) {
  ExpertParallelGroup *g;
  if (Status s = detail::begin(rows, counts, result, received, g); !s.ok())
    return s;
  if (Status s = g->allToAll(counts.data, detail::countBytes(counts),
                             received.data, detail::countBytes(counts),
                             size_t(counts.dim(1)) * sizeof(int64_t));
      !s.ok())
    return s;
  std::vector<int64_t> sendBytes, recvBytes;
  size_t blockBytes;
  if (Status s = detail::rowBytes(
          rows, counts.as<int64_t>(), received.as<int64_t>(), g->size(),
          counts.dim(1), sendBytes, recvBytes, blockBytes);
      !s.ok())
    return s;
  std::memset(result.data, 0, result.byteSize());
  return g->allToAll(rows.data, sendBytes, result.data, recvBytes, blockBytes);
}
