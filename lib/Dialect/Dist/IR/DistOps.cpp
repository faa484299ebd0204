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

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/DenseMap.h"

#include <map>
#include <tuple>

using namespace mlir;
using namespace lamina::ir::dist;

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

/// What an action's fields are checked against: its dist.schedule (peers
/// are global ranks) or its dist.program (peers are pipeline ranks).
struct Bounds {
  int64_t numModules = 0, microBatches = 0, numPeers = 0, self = 0;
};

std::optional<Bounds> boundsOf(Operation *op) {
  if (auto rank = op->getParentOfType<RankOp>())
    if (auto schedule = rank->getParentOfType<ScheduleOp>())
      return Bounds{schedule.getNumModules(), schedule.getMicroBatches(),
                    schedule.getNumRanks(), rank.getRank()};
  if (auto step = op->getParentOfType<StepOp>())
    if (auto program = step->getParentOfType<ProgramOp>())
      return Bounds{program.getNumModules(), program.getMicroBatches(),
                    program.getPp(), step.getPpRank()};
  return std::nullopt;
}

/// Range checks of an action against its schedule: `module` (a boundary when
/// `isBoundary`), micro-batch `mb` and `peer`, each when present.
LogicalResult verifyAction(Operation *op, std::optional<int64_t> module,
                           bool isBoundary, std::optional<int64_t> mb,
                           std::optional<int64_t> peer) {
  std::optional<Bounds> bounds = boundsOf(op);
  if (!bounds)
    return op->emitOpError() << "must be inside a dist.rank of a "
                                "dist.schedule or a dist.step of a "
                                "dist.program";
  int64_t numModules = bounds->numModules;
  if (module && failed(checkRange(op, isBoundary ? "boundary" : "module",
                                  *module, 0,
                                  isBoundary ? numModules - 1 : numModules)))
    return failure();
  if (mb && failed(checkRange(op, "micro-batch", *mb, 0,
                              bounds->microBatches)))
    return failure();
  if (peer) {
    if (failed(checkRange(op, "peer", *peer, 0, bounds->numPeers)))
      return failure();
    if (*peer == bounds->self)
      return op->emitOpError() << "peer " << *peer << " is the rank itself";
  }
  return success();
}

/// The attributes a dist.schedule and a dist.program share.
template <typename OpTy> LogicalResult verifyScheduleAttrs(OpTy op) {
  if (!lamina::schedule::parseScheduleKind(op.getKind().str()))
    return op.emitOpError() << "unknown schedule kind '" << op.getKind()
                            << "'; expected gpipe, 1f1b, interleaved-1f1b, "
                               "breadth-first or layered";
  if (failed(checkRange(op, "modules", op.getNumModules(), 1,
                        (1 << 20) + 1)) ||
      failed(checkRange(op, "pp", op.getPp(), 1, (1 << 16) + 1)) ||
      failed(checkRange(op, "dp", op.getDp(), 1, (1 << 16) + 1)) ||
      failed(checkRange(op, "micro_batches", op.getMicroBatches(), 1,
                        (1 << 20) + 1)) ||
      failed(checkRange(op, "zero", op.getZero(), 0, 4)))
    return failure();
  ArrayRef<int64_t> placement = op.getPlacement();
  if (static_cast<int64_t>(placement.size()) != op.getNumModules())
    return op.emitOpError() << "placement has " << placement.size()
                            << " entries for " << op.getNumModules()
                            << " modules";
  for (auto [l, r] : llvm::enumerate(placement))
    if (r < 0 || r >= op.getPp())
      return op.emitOpError() << "placement puts module " << l << " on rank "
                              << r << ", outside [0, " << op.getPp() << ")";
  return success();
}
} // namespace

LogicalResult ScheduleOp::verify() { return verifyScheduleAttrs(*this); }

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
  if (!schedule)
    return emitOpError() << "must be inside a dist.schedule";
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

//===----------------------------------------------------------------------===//
// dist.program and its steps
//===----------------------------------------------------------------------===//

LogicalResult ProgramOp::verify() { return verifyScheduleAttrs(*this); }

StepOp ProgramOp::getStep(int64_t p) {
  for (auto step : getBody().front().getOps<StepOp>())
    if (step.getPpRank() == p)
      return step;
  return {};
}

namespace {
/// A transfer's identity: (from, to, payload, boundary, micro-batch).
using TransferKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>;

template <typename OpTy> TransferKey keyOf(OpTy op, bool isSend) {
  int64_t self = op->template getParentOfType<StepOp>().getPpRank();
  int64_t from = isSend ? self : op.getPeer(), to = isSend ? op.getPeer() : self;
  return {from, to, int64_t(op.getPayload()), op.getBoundary(), op.getMb()};
}

/// "activation of boundary 0, micro-batch 1".
std::string describe(TransferKey k) {
  return (llvm::Twine(std::get<2>(k) == int64_t(TransferPayload::Activation)
                          ? "activation"
                          : "gradient") +
          " of boundary " + llvm::Twine(std::get<3>(k)) + ", micro-batch " +
          llvm::Twine(std::get<4>(k)))
      .str();
}
} // namespace

LogicalResult ProgramOp::verifyRegions() {
  llvm::DenseMap<int64_t, StepOp> seen;
  for (Operation &op : getBody().front()) {
    auto step = dyn_cast<StepOp>(op);
    if (!step)
      return op.emitOpError() << "inside a dist.program; only dist.step ops "
                                 "may appear there";
    auto [it, inserted] = seen.try_emplace(step.getPpRank(), step);
    if (!inserted) {
      InFlightDiagnostic diag = step.emitOpError()
                                << "pipeline rank " << step.getPpRank()
                                << " appears twice";
      diag.attachNote(it->second.getLoc()) << "first here";
      return diag;
    }
  }
  for (int64_t p = 0; p < getPp(); ++p)
    if (!seen.count(p))
      return emitOpError() << "has no dist.step " << p << " (pp = " << getPp()
                           << ")";
  // Every send has its receive, of the same types, and the other way round.
  std::map<TransferKey, P2PSendOp> sends;
  std::map<TransferKey, P2PRecvOp> recvs;
  for (auto step : getBody().front().getOps<StepOp>()) {
    for (auto send : step.getBody().front().getOps<P2PSendOp>())
      if (!sends.try_emplace(keyOf(send, true), send).second)
        return send.emitOpError() << "sends the " << describe(keyOf(send, true))
                                  << " to pipeline rank " << send.getPeer()
                                  << " twice";
    for (auto recv : step.getBody().front().getOps<P2PRecvOp>())
      if (!recvs.try_emplace(keyOf(recv, false), recv).second)
        return recv.emitOpError()
               << "receives the " << describe(keyOf(recv, false))
               << " from pipeline rank " << recv.getPeer() << " twice";
  }
  for (auto &[key, send] : sends) {
    auto it = recvs.find(key);
    if (it == recvs.end())
      return send.emitOpError()
             << "sends the " << describe(key) << " to pipeline rank "
             << std::get<1>(key) << ", which never receives it";
    if (TypeRange(send.getValues().getTypes()) !=
        TypeRange(it->second.getValues().getTypes())) {
      InFlightDiagnostic diag =
          it->second.emitOpError()
          << "receives the " << describe(key) << " as "
          << it->second.getValues().getTypes() << " but pipeline rank "
          << std::get<0>(key) << " sends " << send.getValues().getTypes();
      diag.attachNote(send.getLoc()) << "the send";
      return diag;
    }
  }
  for (auto &[key, recv] : recvs)
    if (!sends.count(key))
      return recv.emitOpError()
             << "receives the " << describe(key) << " from pipeline rank "
             << std::get<0>(key) << ", which never sends it";
  return success();
}

LogicalResult StepOp::verify() {
  auto program = (*this)->getParentOfType<ProgramOp>();
  if (failed(checkRange(*this, "pipeline rank", getPpRank(), 0,
                        program.getPp())))
    return failure();
  for (Operation &op : getBody().front())
    if (!isa<BatchOp, ParamOp, LossWeightOp, CallOp, AccumulateOp, P2PSendOp,
             P2PRecvOp, AllGatherOp, ReduceScatterOp, AllReduceOp,
             OptimizerStepOp>(op))
      return op.emitOpError()
             << "inside a dist.step; only dist.batch, dist.param, "
                "dist.loss_weight, dist.call, dist.accumulate, "
                "dist.p2p_send, dist.p2p_recv, the collectives and "
                "dist.optimizer_step may appear there";
  return success();
}

LogicalResult BatchOp::verify() {
  return verifyAction(*this, std::nullopt, false, getMb(), std::nullopt);
}

LogicalResult ParamOp::verify() {
  StringRef kind = getKind();
  if (kind != "trainable" && kind != "constant" && kind != "param_copy")
    return emitOpError() << "kind '" << kind
                         << "' is not trainable, constant or param_copy";
  return success();
}

LogicalResult LossWeightOp::verify() {
  auto type = cast<RankedTensorType>(getType());
  if (type.getRank() != 0 || !type.getElementType().isF32())
    return emitOpError() << "is an f32 scalar, not " << type;
  return verifyAction(*this, std::nullopt, false, getMb(), std::nullopt);
}

LogicalResult P2PSendOp::verify() {
  if (getValues().empty())
    return emitOpError() << "sends no values";
  return verifyAction(*this, getBoundary(), true, getMb(), getPeer());
}

LogicalResult P2PRecvOp::verify() {
  if (getValues().empty())
    return emitOpError() << "receives no values";
  return verifyAction(*this, getBoundary(), true, getMb(), getPeer());
}

LogicalResult AccumulateOp::verify() {
  if (getGrads().empty())
    return emitOpError() << "accumulates no gradients";
  auto call = getGrads().front().getDefiningOp<CallOp>();
  if (!call)
    return emitOpError() << "accumulates values that no dist.call produced";
  unsigned first = cast<OpResult>(getGrads().front()).getResultNumber();
  for (auto [i, g] : llvm::enumerate(getGrads()))
    if (g.getDefiningOp() != call.getOperation() ||
        cast<OpResult>(g).getResultNumber() != first + i)
      return emitOpError() << "operand #" << i
                           << " is not the next result of the backward "
                              "call that produces operand #0";
  if (first + getGrads().size() != call.getNumResults())
    return emitOpError() << "accumulates results #" << first << " to #"
                         << first + getGrads().size() - 1 << " of a call with "
                         << call.getNumResults()
                         << " results; the parameter gradients are its last";
  return success();
}

//===----------------------------------------------------------------------===//
// dist.call
//===----------------------------------------------------------------------===//

LogicalResult CallOp::verify() {
  return verifyAction(*this, std::nullopt, false, getMb(), std::nullopt);
}

namespace {
func::FuncOp calleeOf(Operation *op, FlatSymbolRefAttr callee,
                      SymbolTableCollection *tables = nullptr) {
  if (tables)
    return tables->lookupNearestSymbolFrom<func::FuncOp>(op, callee);
  return SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(op, callee);
}

bool sameShapeAndElement(ShapedType a, ShapedType b) {
  return a.hasRank() && b.hasRank() && a.getShape() == b.getShape() &&
         a.getElementType() == b.getElementType();
}

/// The call's types against the callee's: its tensors, or after
/// convert-graph-to-rt its buffers after the leading arena.
LogicalResult checkTypes(CallOp call, StringRef what, TypeRange mine,
                         TypeRange theirs) {
  if (!theirs.empty() && !isa<ShapedType>(theirs.front()))
    theirs = theirs.drop_front();
  if (mine.size() != theirs.size())
    return call.emitOpError() << "has " << mine.size() << " " << what
                              << " but @" << call.getCallee() << " has "
                              << theirs.size();
  for (auto [i, pair] : llvm::enumerate(llvm::zip(mine, theirs))) {
    auto [a, b] = pair;
    auto shaped = dyn_cast<ShapedType>(b);
    if (!shaped || !sameShapeAndElement(cast<ShapedType>(a), shaped))
      return call.emitOpError() << what.drop_back() << " #" << i << " is " << a
                                << " but @" << call.getCallee() << " has "
                                << b;
  }
  return success();
}
} // namespace

LogicalResult CallOp::verifySymbolUses(SymbolTableCollection &tables) {
  func::FuncOp callee = calleeOf(*this, getCalleeAttr(), &tables);
  if (!callee)
    return emitOpError() << "calls @" << getCallee()
                         << ", which is not a function";
  auto outlined =
      callee->getAttrOfType<OutlinedAttr>(DistDialect::kOutlinedAttr);
  if (!outlined)
    return emitOpError() << "calls @" << getCallee()
                         << ", which is not an outlined module function "
                            "(no 'dist.outlined')";
  auto program = (*this)->getParentOfType<ProgramOp>();
  int64_t k = outlined.getModule();
  if (k >= program.getNumModules())
    return emitOpError() << "calls module " << k << " of a program of "
                         << program.getNumModules() << " modules";
  int64_t self = (*this)->getParentOfType<StepOp>().getPpRank();
  if (program.getPlacement()[k] != self)
    return emitOpError() << "calls module " << k << " on pipeline rank "
                         << self << ", but the placement puts it on rank "
                         << program.getPlacement()[k];
  FunctionType type = callee.getFunctionType();
  if (failed(checkTypes(*this, "operands", getArgs().getTypes(),
                        type.getInputs())) ||
      failed(checkTypes(*this, "results", getResultTypes(),
                        type.getResults())))
    return failure();
  return success();
}

int64_t CallOp::getModule() {
  func::FuncOp callee = calleeOf(*this, getCalleeAttr());
  return callee->getAttrOfType<OutlinedAttr>(DistDialect::kOutlinedAttr)
      .getModule();
}

bool CallOp::isBackward() {
  func::FuncOp callee = calleeOf(*this, getCalleeAttr());
  for (unsigned i = 0; i < callee.getNumArguments(); ++i)
    if (auto kind = callee.getArgAttrOfType<StringAttr>(i, "graph.kind"))
      if (kind.getValue() == "cotangent")
        return true;
  return false;
}
