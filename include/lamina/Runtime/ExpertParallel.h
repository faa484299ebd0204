//===- ExpertParallel.h - the expert-parallel all-to-all ------------*- C++
//-*-===//
//
// graph.moe_exchange's runtime call (docs/moe-design.md): a module
// function of an expert-parallel program sends each rank of its group the
// rows for that rank's experts, and gets back the rows the others send it.
// The distributed executor sets the group (the stage's data-parallel
// replicas, which hold the experts in order). Host only.
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
  /// Blocking: member q gets sendBytes[q] bytes from `send + q *
  /// blockBytes`; member p's bytes for this one land at `recv + p *
  /// blockBytes`, recvBytes[p] of them (each side knows its counts).
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
} // namespace ep

} // namespace lamina::rt

#endif // LAMINA_RUNTIME_EXPERTPARALLEL_H
