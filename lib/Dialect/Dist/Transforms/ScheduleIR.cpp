//===- ScheduleIR.cpp - schedules to and from dist.schedule ops -----------===//
//
// Action ops map one to one onto lamina::schedule::Action: the transfer
// payload `activation`/`gradient` is Payload::Activation/ActivationGrad, a
// transfer's boundary is Action::module, collectives carry their implied
// payload (Weights for all-gather, WeightGrads for the reductions).
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Dist/Transforms/ScheduleIR.h"

#include "mlir/IR/Verifier.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/Regex.h"

using namespace mlir;
using namespace lamina;
using namespace lamina::dist;
using schedule::Action;
using schedule::ActionKind;
using schedule::Payload;

namespace {
int narrow(int64_t v) { return static_cast<int>(v); }

Payload payloadOf(TransferPayload p) {
  return p == TransferPayload::Activation ? Payload::Activation
                                          : Payload::ActivationGrad;
}

Action actionOf(Operation *op) {
  return llvm::TypeSwitch<Operation *, Action>(op)
      .Case([](ForwardOp f) {
        return Action::forward(narrow(f.getModule()), narrow(f.getMb()));
      })
      .Case([](BackwardOp b) {
        return Action::backward(narrow(b.getModule()), narrow(b.getMb()));
      })
      .Case([](SendOp s) {
        return Action::send(payloadOf(s.getPayload()), narrow(s.getBoundary()),
                            narrow(s.getMb()), narrow(s.getPeer()));
      })
      .Case([](RecvOp r) {
        return Action::recv(payloadOf(r.getPayload()), narrow(r.getBoundary()),
                            narrow(r.getMb()), narrow(r.getPeer()));
      })
      .Case([](AllGatherOp c) { return Action::allGather(narrow(c.getModule())); })
      .Case([](ReduceScatterOp c) {
        return Action::reduceScatter(narrow(c.getModule()));
      })
      .Case([](AllReduceOp c) { return Action::allReduce(narrow(c.getModule())); })
      .Default([](Operation *) { return Action::optimizerStep(); });
}

void buildAction(OpBuilder &b, Location loc, const Action &a) {
  auto transfer = [&] {
    return a.payload == Payload::Activation ? TransferPayload::Activation
                                            : TransferPayload::Gradient;
  };
  switch (a.kind) {
  case ActionKind::Forward:
    ForwardOp::create(b, loc, a.module, a.microBatch);
    return;
  case ActionKind::Backward:
    BackwardOp::create(b, loc, a.module, a.microBatch);
    return;
  case ActionKind::Send:
    SendOp::create(b, loc, transfer(), a.module, a.microBatch, a.peer);
    return;
  case ActionKind::Recv:
    RecvOp::create(b, loc, transfer(), a.module, a.microBatch, a.peer);
    return;
  case ActionKind::AllGather:
    AllGatherOp::create(b, loc, a.module);
    return;
  case ActionKind::ReduceScatter:
    ReduceScatterOp::create(b, loc, a.module);
    return;
  case ActionKind::AllReduce:
    AllReduceOp::create(b, loc, a.module);
    return;
  case ActionKind::OptimizerStep:
    OptimizerStepOp::create(b, loc);
    return;
  }
}
} // namespace

FailureOr<schedule::Schedule> dist::readSchedule(ScheduleOp op) {
  if (failed(mlir::verify(op)))
    return failure();
  schedule::Schedule s;
  schedule::ScheduleConfig &c = s.config;
  c.kind = *schedule::parseScheduleKind(op.getKind().str());
  c.numModules = narrow(op.getNumModules());
  c.pipelineRanks = narrow(op.getPp());
  c.dataParallel = narrow(op.getDp());
  c.microBatches = narrow(op.getMicroBatches());
  c.zeroLevel = narrow(op.getZero());
  s.placement.numRanks = c.pipelineRanks;
  for (int64_t r : op.getPlacement())
    s.placement.rankOf.push_back(narrow(r));
  s.ranks.resize(op.getNumRanks());
  for (auto rank : op.getBody().front().getOps<RankOp>()) {
    std::vector<Action> &list = s.ranks[rank.getRank()];
    for (Operation &action : rank.getBody().front())
      list.push_back(actionOf(&action));
  }
  return s;
}

ScheduleOp dist::buildSchedule(OpBuilder &builder, Location loc,
                               const schedule::Schedule &s) {
  OpBuilder::InsertionGuard guard(builder);
  const schedule::ScheduleConfig &c = s.config;
  SmallVector<int64_t> placement(s.placement.rankOf.begin(),
                                 s.placement.rankOf.end());
  auto op = ScheduleOp::create(builder, loc,
                               schedule::scheduleKindName(c.kind), c.numModules,
                               c.pipelineRanks, c.dataParallel, c.microBatches,
                               c.zeroLevel, placement);
  builder.setInsertionPointToEnd(&op.getBody().emplaceBlock());
  for (int g = 0; g < s.numRanks(); ++g) {
    OpBuilder::InsertionGuard rankGuard(builder);
    auto rank = RankOp::create(builder, loc, g);
    builder.setInsertionPointToEnd(&rank.getBody().emplaceBlock());
    for (const Action &a : s.ranks[g])
      buildAction(builder, loc, a);
  }
  return op;
}

schedule::Expected<ScheduleOp>
dist::buildComputeSchedule(OpBuilder &builder, Location loc,
                           const schedule::ScheduleConfig &config) {
  schedule::Expected<schedule::Schedule> compute =
      schedule::generateComputeOrder(config);
  if (!compute)
    return compute.status();
  return buildSchedule(builder, loc, *compute);
}

Operation *dist::findAction(ScheduleOp op, int64_t rank, int64_t index) {
  for (auto r : op.getBody().front().getOps<RankOp>()) {
    if (r.getRank() != rank)
      continue;
    for (Operation &action : r.getBody().front())
      if (index-- == 0)
        return &action;
    return nullptr;
  }
  return nullptr;
}

InFlightDiagnostic dist::emitScheduleError(ScheduleOp op, StringRef message) {
  SmallVector<StringRef, 3> m;
  int64_t rank = 0, index = 0;
  const llvm::Regex action("rank ([0-9]+) \\(pp [0-9]+, dp [0-9]+\\) "
                           "action #([0-9]+)");
  if (action.match(message, &m) && !m[1].getAsInteger(10, rank) &&
      !m[2].getAsInteger(10, index))
    if (Operation *target = findAction(op, rank, index))
      return target->emitError(message);
  const llvm::Regex rankOnly("rank ([0-9]+) \\(pp ");
  if (rankOnly.match(message, &m) && !m[1].getAsInteger(10, rank))
    for (auto r : op.getBody().front().getOps<RankOp>())
      if (r.getRank() == rank)
        return r.emitError(message);
  return op.emitError(message);
}
