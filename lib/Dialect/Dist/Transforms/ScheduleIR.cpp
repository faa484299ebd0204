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
using namespace lamina::ir::dist;
using schedule::Action;
using schedule::ActionKind;
using schedule::Payload;

namespace {
int narrow(int64_t v) { return static_cast<int>(v); }

Payload payloadOf(TransferPayload p) {
  return p == TransferPayload::Activation ? Payload::Activation
                                          : Payload::ActivationGrad;
}

/// The action an op of a dist.rank or dist.step stands for; none for the
/// ops that only make values (dist.batch, dist.param, ...). Peers are as
/// written (global ranks in a dist.rank, pipeline ranks in a dist.step).
std::optional<Action> actionOf(Operation *op) {
  return llvm::TypeSwitch<Operation *, std::optional<Action>>(op)
      .Case([](CallOp c) {
        int k = narrow(c.getModule()), mb = narrow(c.getMb());
        return c.isBackward() ? Action::backward(k, mb)
                              : Action::forward(k, mb);
      })
      .Case([](P2PSendOp s) {
        return Action::send(payloadOf(s.getPayload()), narrow(s.getBoundary()),
                            narrow(s.getMb()), narrow(s.getPeer()));
      })
      .Case([](P2PRecvOp r) {
        return Action::recv(payloadOf(r.getPayload()), narrow(r.getBoundary()),
                            narrow(r.getMb()), narrow(r.getPeer()));
      })
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
      .Case([](OptimizerStepOp) { return Action::optimizerStep(); })
      .Default([](Operation *) { return std::nullopt; });
}

/// The ops of a step that are actions, in order.
SmallVector<Operation *> actionOps(StepOp step) {
  SmallVector<Operation *> ops;
  for (Operation &op : step.getBody().front())
    if (actionOf(&op))
      ops.push_back(&op);
  return ops;
}

/// Copies the configuration a dist.schedule or dist.program holds.
template <typename OpTy> schedule::Schedule configOf(OpTy op) {
  schedule::Schedule s;
  schedule::ScheduleConfig &c = s.config;
  c.kind = *schedule::parseScheduleKind(op.getKind().str());
  c.numModules = narrow(op.getNumModules());
  c.pipelineRanks = narrow(op.getPp());
  c.dataParallel = narrow(op.getDp());
  c.microBatches = narrow(op.getMicroBatches());
  c.zeroLevel = narrow(op.getZero());
  c.forwardOnly = op.getForwardOnly();
  s.placement.numRanks = c.pipelineRanks;
  for (int64_t r : op.getPlacement())
    s.placement.rankOf.push_back(narrow(r));
  s.ranks.resize(c.pipelineRanks * c.dataParallel);
  return s;
}

/// Emits `message` on the op that `find(rank, index)` or
/// `findRank(rank)` selects from the message's first "rank G (pp P, dp D)
/// action #I" or "rank G (pp ...", else on `fallback`.
InFlightDiagnostic
emitOnNamedOp(Operation *fallback, StringRef message,
              llvm::function_ref<Operation *(int64_t, int64_t)> find,
              llvm::function_ref<Operation *(int64_t)> findRank) {
  SmallVector<StringRef, 3> m;
  int64_t rank = 0, index = 0;
  const llvm::Regex action("rank ([0-9]+) \\(pp [0-9]+, dp [0-9]+\\) "
                           "action #([0-9]+)");
  if (action.match(message, &m) && !m[1].getAsInteger(10, rank) &&
      !m[2].getAsInteger(10, index))
    if (Operation *target = find(rank, index))
      return target->emitError(message);
  const llvm::Regex rankOnly("rank ([0-9]+) \\(pp ");
  if (rankOnly.match(message, &m) && !m[1].getAsInteger(10, rank))
    if (Operation *target = findRank(rank))
      return target->emitError(message);
  return fallback->emitError(message);
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

FailureOr<schedule::Schedule> ir::dist::readSchedule(ScheduleOp op) {
  if (failed(mlir::verify(op)))
    return failure();
  schedule::Schedule s = configOf(op);
  for (auto rank : op.getBody().front().getOps<RankOp>()) {
    std::vector<Action> &list = s.ranks[rank.getRank()];
    for (Operation &action : rank.getBody().front())
      list.push_back(*actionOf(&action));
  }
  return s;
}

FailureOr<schedule::Schedule> ir::dist::readSchedule(ProgramOp op) {
  if (failed(mlir::verify(op)))
    return failure();
  schedule::Schedule s = configOf(op);
  const int pp = s.config.pipelineRanks;
  for (auto step : op.getBody().front().getOps<StepOp>()) {
    std::vector<Action> list;
    for (Operation *action : actionOps(step))
      list.push_back(*actionOf(action));
    // Replica d runs the same step; its peers are in its own replica.
    for (int d = 0; d < s.config.dataParallel; ++d) {
      std::vector<Action> &out = s.ranks[d * pp + step.getPpRank()];
      out = list;
      for (Action &a : out)
        if (a.kind == ActionKind::Send || a.kind == ActionKind::Recv)
          a.peer += d * pp;
    }
  }
  return s;
}

ScheduleOp ir::dist::buildSchedule(OpBuilder &builder, Location loc,
                                   const schedule::Schedule &s) {
  OpBuilder::InsertionGuard guard(builder);
  const schedule::ScheduleConfig &c = s.config;
  SmallVector<int64_t> placement(s.placement.rankOf.begin(),
                                 s.placement.rankOf.end());
  auto op = ScheduleOp::create(builder, loc,
                               schedule::scheduleKindName(c.kind), c.numModules,
                               c.pipelineRanks, c.dataParallel, c.microBatches,
                               c.zeroLevel, placement, c.forwardOnly);
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
ir::dist::buildComputeSchedule(OpBuilder &builder, Location loc,
                               const schedule::ScheduleConfig &config) {
  schedule::Expected<schedule::Schedule> compute =
      schedule::generateComputeOrder(config);
  if (!compute)
    return compute.status();
  return buildSchedule(builder, loc, *compute);
}

Operation *ir::dist::findAction(ScheduleOp op, int64_t rank, int64_t index) {
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

InFlightDiagnostic ir::dist::emitScheduleError(ScheduleOp op,
                                               StringRef message) {
  return emitOnNamedOp(
      op, message,
      [&](int64_t rank, int64_t index) { return findAction(op, rank, index); },
      [&](int64_t rank) -> Operation * {
        for (auto r : op.getBody().front().getOps<RankOp>())
          if (r.getRank() == rank)
            return r;
        return nullptr;
      });
}

InFlightDiagnostic ir::dist::emitScheduleError(ProgramOp op,
                                               StringRef message) {
  auto stepOf = [&](int64_t rank) { return op.getStep(rank % op.getPp()); };
  return emitOnNamedOp(
      op, message,
      [&](int64_t rank, int64_t index) -> Operation * {
        StepOp step = stepOf(rank);
        if (!step)
          return nullptr;
        SmallVector<Operation *> ops = actionOps(step);
        return index < int64_t(ops.size()) ? ops[index] : nullptr;
      },
      [&](int64_t rank) -> Operation * { return stepOf(rank); });
}
