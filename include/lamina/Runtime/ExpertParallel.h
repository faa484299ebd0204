//===- ExpertParallel.h - the expert-parallel all-to-all ------------*- C++
//-*-===//
//
// graph.moe_exchange's runtime call (docs/moe-design.md): a module
// function of an expert-parallel program sends each rank of its group the
// rows for that rank's experts, and gets back the rows the others send it.
// The distributed executor sets the group (the stage's data-parallel
// replicas, which hold the experts in order): over MPI on the host, over
// NCCL on GPUs (lamina/Runtime/Cuda/ExpertParallel.h).
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_EXPERTPARALLEL_H
#define LAMINA_RUNTIME_EXPERTPARALLEL_H

#include "lamina/Runtime/Status.h"
#include "lamina/Runtime/Tensor.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lamina::rt {

class ExpertParallelGroup {
public:
  virtual ~ExpertParallelGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Member q gets sendBytes[q] bytes from `send + q *
  /// blockBytes`; member p's bytes for this one land at `recv + p *
  /// blockBytes`, recvBytes[p] of them (each side knows its counts). The
  /// buffers are the transport's (host for MPI, device for NCCL); the
  /// work after the call sees the result (the host waits, or on a GPU the
  /// compute stream does).
  virtual Status allToAll(const void *send,
                          const std::vector<int64_t> &sendBytes, void *recv,
                          const std::vector<int64_t> &recvBytes,
                          size_t blockBytes) = 0;
};

/// The group graph.moe_exchange runs over (nullptr: none).
void setExpertParallelGroup(ExpertParallelGroup *group);
ExpertParallelGroup *expertParallelGroup();

namespace ep {
/// graph.moe_exchange: rows [R C, ...] in R blocks, counts [R, n] (i64;
/// block q holds sum(counts[q]) rows for member q); result block p is
/// member p's block for this member, zero past its rows; received[p] is
/// member p's counts for this member.
Status exchange(const Tensor &rows, const Tensor &counts, const Tensor &result,
                const Tensor &received);

namespace detail {
/// exchange's operands checked against the group (an error without one).
Status begin(const Tensor &rows, const Tensor &counts, const Tensor &result,
             const Tensor &received, ExpertParallelGroup *&group);
/// The counts' bytes: the members' blocks of `local` i64 each.
std::vector<int64_t> countBytes(const Tensor &counts);
/// From the counts sent and received (host memory, [n, local] each): the
/// rows' bytes to and from each member, and a block's bytes.
Status rowBytes(const Tensor &rows, const int64_t *sent, const int64_t *got,
                int n, int64_t local, std::vector<int64_t> &sendBytes,
                std::vector<int64_t> &recvBytes, size_t &blockBytes);
} // namespace detail
} // namespace ep

} // namespace lamina::rt

#endif // LAMINA_RUNTIME_EXPERTPARALLEL_H
