//===- DistOps.cpp - dist dialect schedule ops ----------------------------===//
//
// The verifiers check what makes a schedule op well-formed on its own:
// attribute ranges and one dist.rank per global rank. Whether the lists are
// a correct, deadlock-free step is dist-verify-schedule's job (it simulates
// them with the schedule library's verifier).
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Dist/IR/DistOps.h"
#include "lamina/Schedule/Schedule.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/DenseMap.h"

using namespace mlir;
using namespace lamina::dist;

#define GET_OP_CLASSES
#include "lamina/Dialect/Dist/IR/DistOps.cpp.inc"

namespace {
/// `value` in [lo, hi), else an error naming `what`.
LogicalResult checkRange(Operation *op, StringRef what, int64_t value,
                         int64_t lo, int64_t hi) {
  if (value >= lo && value < hi)
    return success();
  return op->emitOpError() << what << " " << value << " is outside [" << lo
                           << ", " << hi << ")";
}

/// Range checks of an action against its schedule: `module` (a boundary when
/// `isBoundary`), micro-batch `mb` and `peer`, each when present.
LogicalResult verifyAction(Operation *op, std::optional<int64_t> module,
                           bool isBoundary, std::optional<int64_t> mb,
                           std::optional<int64_t> peer) {
  auto rank = op->getParentOfType<RankOp>();
  auto schedule = rank ? rank->getParentOfType<ScheduleOp>() : ScheduleOp();
  if (!schedule)
    return op->emitOpError() << "must be inside a dist.rank of a dist.schedule";
  int64_t numModules = schedule.getNumModules();
  if (module && failed(checkRange(op, isBoundary ? "boundary" : "module",
                                  *module, 0,
                                  isBoundary ? numModules - 1 : numModules)))
    return failure();
  if (mb && failed(checkRange(op, "micro-batch", *mb, 0,
                              schedule.getMicroBatches())))
    return failure();
  if (peer) {
    if (failed(checkRange(op, "peer", *peer, 0, schedule.getNumRanks())))
      return failure();
    if (*peer == rank.getRank())
      return op->emitOpError() << "peer " << *peer << " is the rank itself";
  }
  return success();
}
} // namespace

LogicalResult ScheduleOp::verify() {
  if (!lamina::schedule::parseScheduleKind(getKind().str()))
    return emitOpError() << "unknown schedule kind '" << getKind()
                         << "'; expected gpipe, 1f1b, interleaved-1f1b, "
                            "breadth-first or layered";
  if (failed(checkRange(*this, "modules", getNumModules(), 1, (1 << 20) + 1)) ||
      failed(checkRange(*this, "pp", getPp(), 1, (1 << 16) + 1)) ||
      failed(checkRange(*this, "dp", getDp(), 1, (1 << 16) + 1)) ||
      failed(checkRange(*this, "micro_batches", getMicroBatches(), 1,
                        (1 << 20) + 1)) ||
      failed(checkRange(*this, "zero", getZero(), 0, 4)))
    return failure();
  ArrayRef<int64_t> placement = getPlacement();
  if (static_cast<int64_t>(placement.size()) != getNumModules())
    return emitOpError() << "placement has " << placement.size()
                         << " entries for " << getNumModules() << " modules";
  for (auto [l, r] : llvm::enumerate(placement))
    if (r < 0 || r >= getPp())
      return emitOpError() << "placement puts module " << l << " on rank "
                           << r << ", outside [0, " << getPp() << ")";
  return success();
}

LogicalResult ScheduleOp::verifyRegions() {
  int64_t numRanks = getNumRanks();
  llvm::DenseMap<int64_t, RankOp> seen;
  for (Operation &op : getBody().front()) {
    auto rank = dyn_cast<RankOp>(op);
    if (!rank)
      return op.emitOpError() << "inside a dist.schedule; only dist.rank ops "
                                 "may appear there";
    auto [it, inserted] = seen.try_emplace(rank.getRank(), rank);
    if (!inserted) {
      InFlightDiagnostic diag = rank.emitOpError()
                                << "rank " << rank.getRank()
                                << " appears twice";
      diag.attachNote(it->second.getLoc()) << "first here";
      return diag;
    }
  }
  for (int64_t g = 0; g < numRanks; ++g)
    if (!seen.count(g))
      return emitOpError() << "has no dist.rank " << g << " (pp = " << getPp()
                           << " x dp = " << getDp() << " = " << numRanks
                           << " ranks)";
  return success();
}

LogicalResult RankOp::verify() {
  auto schedule = (*this)->getParentOfType<ScheduleOp>();
  if (failed(checkRange(*this, "rank", getRank(), 0, schedule.getNumRanks())))
    return failure();
  for (Operation &op : getBody().front())
    if (!isa<ForwardOp, BackwardOp, SendOp, RecvOp, AllGatherOp,
             ReduceScatterOp, AllReduceOp, OptimizerStepOp>(op))
      return op.emitOpError() << "inside a dist.rank; only action ops "
                                 "(dist.forward, dist.send, ...) may appear "
                                 "there";
  return success();
}

LogicalResult ForwardOp::verify() {
  return verifyAction(*this, getModule(), false, getMb(), std::nullopt);
}
LogicalResult BackwardOp::verify() {
  return verifyAction(*this, getModule(), false, getMb(), std::nullopt);
}
LogicalResult SendOp::verify() {
  return verifyAction(*this, getBoundary(), true, getMb(), getPeer());
}
LogicalResult RecvOp::verify() {
  return verifyAction(*this, getBoundary(), true, getMb(), getPeer());
}
LogicalResult AllGatherOp::verify() {
  return verifyAction(*this, getModule(), false, std::nullopt, std::nullopt);
}
LogicalResult ReduceScatterOp::verify() {
  return verifyAction(*this, getModule(), false, std::nullopt, std::nullopt);
}
LogicalResult AllReduceOp::verify() {
  return verifyAction(*this, getModule(), false, std::nullopt, std::nullopt);
}
