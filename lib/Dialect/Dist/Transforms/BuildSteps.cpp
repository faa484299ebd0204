//===- BuildSteps.cpp - dist.schedule to dist.program over values ---------===//
//
// One dist.step per pipeline rank, built from replica 0's action lists (the
// other replicas must run the same lists, peers shifted into their replica).
// Each action becomes the op that computes, sends or receives its values;
// the maps below remember which value holds what, so an operand that was
// never produced on the rank is found here, with the action that needs it.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Dist/IR/DistOps.h"
#include "lamina/Dialect/Dist/Transforms/Passes.h"
#include "lamina/Dialect/Dist/Transforms/ScheduleIR.h"
#include "lamina/Dialect/Graph/IR/GraphDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <map>

namespace lamina::ir::dist {
#define GEN_PASS_DEF_DISTBUILDSTEPS
#include "lamina/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace lamina::ir::dist

using namespace mlir;
using namespace lamina;
using namespace lamina::ir::dist;
using schedule::Action;
using schedule::ActionKind;
using schedule::Payload;

namespace {
/// Module k's outlined functions and the counts of its contract
/// (include/lamina/Runtime/DistProgram.h).
struct ModuleFns {
  func::FuncOp fwd, bwd;
  int64_t numIn = 0, numOut = 0; // residuals: the forward results after numOut
};

StringRef argKind(func::FuncOp f, unsigned i) {
  auto kind = f.getArgAttrOfType<StringAttr>(i, ir::graph::kKindAttr);
  return kind ? kind.getValue() : StringRef();
}

/// The types of `f`'s arguments of `kind`, in order.
SmallVector<Type> argTypesOfKind(func::FuncOp f, StringRef kind) {
  SmallVector<Type> types;
  for (unsigned i = 0; i < f.getNumArguments(); ++i)
    if (argKind(f, i) == kind)
      types.push_back(f.getArgumentTypes()[i]);
  return types;
}

using Key = std::pair<int64_t, int64_t>; // (module, micro-batch)

class StepBuilder {
public:
  StepBuilder(StepOp step, ArrayRef<ModuleFns> fns, ArrayRef<int64_t> placement)
      : step(step), fns(fns), placement(placement),
        b(OpBuilder::atBlockEnd(&step.getBody().front())), loc(step.getLoc()) {}

  /// Appends `a`'s ops; on failure the returned message says what is
  /// missing (the caller attaches it to the action).
  std::string add(const Action &a) {
    const int64_t k = a.module, mb = a.microBatch;
    switch (a.kind) {
    case ActionKind::Forward:
      return forward(k, mb);
    case ActionKind::Backward:
      return backward(k, mb);
    case ActionKind::Send:
      return send(a);
    case ActionKind::Recv:
      return recv(a);
    case ActionKind::AllGather:
      AllGatherOp::create(b, loc, k);
      return "";
    case ActionKind::ReduceScatter:
      ReduceScatterOp::create(b, loc, k);
      return "";
    case ActionKind::AllReduce:
      AllReduceOp::create(b, loc, k);
      return "";
    case ActionKind::OptimizerStep:
      OptimizerStepOp::create(b, loc);
      return "";
    }
    return "unknown action";
  }

private:
  int64_t self() { return step.getPpRank(); }

  /// One dist.param per weight and step, at the top in order of first use.
  Value param(StringRef kind, StringRef name, Type type) {
    Value &v = params[{kind.str(), name.str()}];
    if (v)
      return v;
    OpBuilder top(step.getContext());
    if (lastParam)
      top.setInsertionPointAfter(lastParam);
    else
      top.setInsertionPointToStart(&step.getBody().front());
    auto op = ParamOp::create(top, loc, type, kind, name);
    lastParam = op;
    return v = op;
  }

  Value batch(StringRef name, int64_t mb, Type type) {
    Value &v = batches[{name.str(), mb}];
    if (!v)
      v = BatchOp::create(b, loc, type, name, mb);
    return v;
  }

  /// Module k's boundary inputs for `mb`: computed here or received.
  FailureOr<SmallVector<Value>> boundaryInputs(int64_t k, int64_t mb) {
    if (auto it = received.find({k, mb}); it != received.end())
      return it->second;
    if (k > 0 && placement[k - 1] == self())
      if (auto it = fwdResults.find({k - 1, mb}); it != fwdResults.end())
        return SmallVector<Value>(
            ArrayRef<Value>(it->second).take_front(fns[k - 1].numOut));
    return failure();
  }

  /// The gradients of module k's outputs for `mb`.
  FailureOr<SmallVector<Value>> cotangents(int64_t k, int64_t mb) {
    if (k + 1 == int64_t(fns.size())) {
      SmallVector<Type> types =
          argTypesOfKind(fns[k].bwd, ir::graph::kKindCotangent);
      if (types.size() != 1)
        return failure();
      return SmallVector<Value>{LossWeightOp::create(b, loc, types[0], mb)};
    }
    if (auto it = receivedGrads.find({k, mb}); it != receivedGrads.end())
      return it->second;
    if (placement[k + 1] == self())
      if (auto it = bwdResults.find({k + 1, mb}); it != bwdResults.end())
        return SmallVector<Value>(
            ArrayRef<Value>(it->second).take_front(fns[k + 1].numIn));
    return failure();
  }

  std::string where(int64_t k, int64_t mb) {
    return "module " + std::to_string(k) + ", micro-batch " + std::to_string(mb);
  }

  std::string forward(int64_t k, int64_t mb) {
    func::FuncOp fwd = fns[k].fwd;
    SmallVector<Value> operands;
    unsigned nextBoundary = 0;
    SmallVector<Value> boundary;
    for (unsigned i = 0; i < fwd.getNumArguments(); ++i) {
      StringRef kind = argKind(fwd, i);
      Type type = fwd.getArgumentTypes()[i];
      auto name = fwd.getArgAttrOfType<StringAttr>(i, ir::graph::kNameAttr);
      if (kind == ir::graph::kKindBoundary) {
        if (nextBoundary == 0) {
          FailureOr<SmallVector<Value>> in = boundaryInputs(k, mb);
          if (failed(in))
            return "the forward of " + where(k, mb) +
                   " needs its boundary input, which pipeline rank " +
                   std::to_string(self()) + " has neither computed nor "
                   "received by then";
          boundary = *in;
        }
        if (nextBoundary >= boundary.size())
          return "the forward of " + where(k, mb) + " takes more boundary "
                 "values than module " + std::to_string(k - 1) + " produces";
        operands.push_back(boundary[nextBoundary++]);
      } else if (kind == ir::graph::kKindInput && name) {
        operands.push_back(batch(name.getValue(), mb, type));
      } else if ((kind == ir::graph::kKindTrainable ||
                  kind == ir::graph::kKindConstant ||
                  kind == ir::graph::kKindParamCopy) &&
                 name) {
        operands.push_back(param(kind, name.getValue(), type));
      } else {
        return "argument #" + std::to_string(i) + " of @" +
               fwd.getName().str() + " has kind '" + kind.str() +
               "', which a forward does not take";
      }
    }
    auto call = CallOp::create(b, loc, fwd.getResultTypes(), fwd.getName(), mb,
                               operands);
    fwdOperands[{k, mb}] = operands;
    fwdResults[{k, mb}] = SmallVector<Value>(call.getResults());
    return "";
  }

  std::string backward(int64_t k, int64_t mb) {
    ModuleFns m = fns[k];
    auto fwdIt = fwdOperands.find({k, mb});
    if (fwdIt == fwdOperands.end())
      return "the backward of " + where(k, mb) +
             " runs before its forward on pipeline rank " +
             std::to_string(self());
    SmallVector<Value> operands(fwdIt->second);
    ArrayRef<Value> results = fwdResults[{k, mb}];
    llvm::append_range(operands, results.drop_front(m.numOut));
    FailureOr<SmallVector<Value>> cots = cotangents(k, mb);
    if (failed(cots))
      return "the backward of " + where(k, mb) +
             " needs the gradient of its outputs, which pipeline rank " +
             std::to_string(self()) + " has neither computed nor received "
             "by then";
    llvm::append_range(operands, *cots);
    auto call = CallOp::create(b, loc, m.bwd.getResultTypes(), m.bwd.getName(),
                               mb, operands);
    bwdResults[{k, mb}] = SmallVector<Value>(call.getResults());
    if (call.getNumResults() > unsigned(m.numIn))
      AccumulateOp::create(b, loc, call.getResults().drop_front(m.numIn));
    return "";
  }

  TransferPayload payload(const Action &a) {
    return a.payload == Payload::Activation ? TransferPayload::Activation
                                            : TransferPayload::Gradient;
  }

  std::string send(const Action &a) {
    const int64_t bnd = a.module, mb = a.microBatch;
    SmallVector<Value> values;
    if (a.payload == Payload::Activation) {
      auto it = fwdResults.find({bnd, mb});
      if (it == fwdResults.end())
        return "the activation of boundary " + std::to_string(bnd) +
               ", micro-batch " + std::to_string(mb) +
               " is sent before the forward of " + where(bnd, mb);
      values.assign(it->second.begin(),
                    it->second.begin() + fns[bnd].numOut);
    } else {
      auto it = bwdResults.find({bnd + 1, mb});
      if (it == bwdResults.end())
        return "the gradient of boundary " + std::to_string(bnd) +
               ", micro-batch " + std::to_string(mb) +
               " is sent before the backward of " + where(bnd + 1, mb);
      values.assign(it->second.begin(),
                    it->second.begin() + fns[bnd + 1].numIn);
    }
    P2PSendOp::create(b, loc, payload(a), bnd, mb, a.peer, values);
    return "";
  }

  std::string recv(const Action &a) {
    const int64_t bnd = a.module, mb = a.microBatch;
    bool activation = a.payload == Payload::Activation;
    SmallVector<Type> types =
        activation ? argTypesOfKind(fns[bnd + 1].fwd, ir::graph::kKindBoundary)
                   : argTypesOfKind(fns[bnd].bwd, ir::graph::kKindCotangent);
    auto op = P2PRecvOp::create(b, loc, types, payload(a), bnd, mb, a.peer);
    SmallVector<Value> values(op.getResults());
    if (activation)
      received[{bnd + 1, mb}] = values;
    else
      receivedGrads[{bnd, mb}] = values;
    return "";
  }

  StepOp step;
  ArrayRef<ModuleFns> fns;
  ArrayRef<int64_t> placement;
  OpBuilder b;
  Location loc;
  Operation *lastParam = nullptr;
  std::map<std::pair<std::string, std::string>, Value> params;
  std::map<std::pair<std::string, int64_t>, Value> batches;
  std::map<Key, SmallVector<Value>> fwdOperands, fwdResults, bwdResults;
  /// Boundary inputs of (module, mb) and gradients of module's outputs
  /// that came from another rank.
  std::map<Key, SmallVector<Value>> received, receivedGrads;
};

struct DistBuildSteps : ir::dist::impl::DistBuildStepsBase<DistBuildSteps> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<ScheduleOp> schedules(module.getOps<ScheduleOp>());
    int64_t training = llvm::count_if(
        schedules, [](ScheduleOp op) { return !op.getForwardOnly(); });
    if (training != 1 || schedules.size() > 2) {
      mlir::emitError(module.getLoc())
          << "dist-build-steps needs exactly one training dist.schedule (run "
             "dist-schedule, dist-insert-comm, dist-verify-schedule) and at "
             "most one forward_only one; found "
          << training << " and " << schedules.size() - training;
      return signalPassFailure();
    }
    for (ScheduleOp sched : schedules)
      if (failed(build(module, sched)))
        return signalPassFailure();
  }

  LogicalResult build(ModuleOp module, ScheduleOp sched) {
    FailureOr<schedule::Schedule> s = readSchedule(sched);
    if (failed(s))
      return failure();
    FailureOr<SmallVector<ModuleFns>> fns = moduleFunctions(module, *s);
    if (failed(fns) || failed(checkReplicas(sched, *s)))
      return failure();

    OpBuilder b(sched);
    const schedule::ScheduleConfig &c = s->config;
    SmallVector<int64_t> placement(s->placement.rankOf.begin(),
                                   s->placement.rankOf.end());
    auto program = ProgramOp::create(
        b, sched.getLoc(), sched.getKind(), c.numModules, c.pipelineRanks,
        c.dataParallel, c.microBatches, c.zeroLevel, placement, c.forwardOnly);
    b.setInsertionPointToEnd(&program.getBody().emplaceBlock());
    for (int p = 0; p < c.pipelineRanks; ++p) {
      auto step = StepOp::create(b, sched.getLoc(), p);
      step.getBody().emplaceBlock();
      StepBuilder steps(step, *fns, placement);
      for (auto [i, a] : llvm::enumerate(s->ranks[p]))
        if (std::string err = steps.add(a); !err.empty()) {
          Operation *at = findAction(sched, p, i);
          (at ? at : sched.getOperation())->emitError("dist-build-steps: ")
              << err;
          program.erase();
          return failure();
        }
    }
    sched.erase();
    return success();
  }

  /// fwd_k and bwd_k of every module of the schedule.
  FailureOr<SmallVector<ModuleFns>> moduleFunctions(ModuleOp module,
                                                    const schedule::Schedule &s) {
    SmallVector<ModuleFns> fns(s.config.numModules);
    for (auto f : module.getOps<func::FuncOp>()) {
      auto outlined =
          f->getAttrOfType<OutlinedAttr>(DistDialect::kOutlinedAttr);
      if (!outlined)
        continue;
      int64_t k = outlined.getModule();
      if (k < 0 || k >= int64_t(fns.size())) {
        f.emitError("dist-build-steps: @")
            << f.getName() << " is module " << k << " of a schedule of "
            << fns.size() << " modules";
        return failure();
      }
      ModuleFns &m = fns[k];
      bool backward = !argTypesOfKind(f, ir::graph::kKindCotangent).empty();
      (backward ? m.bwd : m.fwd) = f;
      m.numIn = outlined.getNumIn();
      m.numOut = outlined.getNumOut();
    }
    for (auto [k, m] : llvm::enumerate(fns))
      if (!m.fwd || !m.bwd) {
        mlir::emitError(module.getLoc(), "dist-build-steps: module ")
            << k << " has no outlined " << (m.fwd ? "backward" : "forward")
            << " function (run dist-outline-modules)";
        return failure();
      }
    return fns;
  }

  /// Replica d of pipeline rank p runs replica 0's list, peers shifted.
  LogicalResult checkReplicas(ScheduleOp sched, const schedule::Schedule &s) {
    const int pp = s.config.pipelineRanks;
    for (int d = 1; d < s.config.dataParallel; ++d)
      for (int p = 0; p < pp; ++p) {
        const std::vector<Action> &base = s.ranks[p], &list = s.ranks[d * pp + p];
        for (size_t i = 0; i < std::max(base.size(), list.size()); ++i) {
          Action expect = i < base.size() ? base[i] : Action::optimizerStep();
          if (expect.kind == ActionKind::Send || expect.kind == ActionKind::Recv)
            expect.peer += d * pp;
          if (i < base.size() && i < list.size() && list[i] == expect)
            continue;
          Operation *at = findAction(sched, d * pp + p, int64_t(i));
          (at ? at : sched.getOperation())->emitError("dist-build-steps: ")
              << "rank " << d * pp + p << " (replica " << d
              << ") does not run replica 0's list of pipeline rank " << p
              << " from action #" << i << "; a dist.step is one list for "
                 "every replica";
          return failure();
        }
      }
    return success();
  }
};
} // namespace
