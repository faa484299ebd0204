//===- SchedulePasses.cpp - dist-schedule, -insert-comm, -verify-schedule -===//
//
// The schedule library's two generation steps and its verifier as passes
// over dist.schedule ops (docs/schedules.md, "As IR"). All three delegate to
// lib/Schedule, so the IR and the planner can never disagree on a schedule.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Dist/Transforms/Passes.h"
#include "lamina/Dialect/Dist/Transforms/ScheduleIR.h"
#include "lamina/Schedule/Simulate.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <climits>

namespace lamina::ir::dist {
#define GEN_PASS_DEF_DISTSCHEDULE
#define GEN_PASS_DEF_DISTINSERTCOMM
#define GEN_PASS_DEF_DISTPREFETCHGATHERS
#define GEN_PASS_DEF_DISTVERIFYSCHEDULE
#include "lamina/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace lamina::ir::dist

using namespace mlir;
using namespace lamina;
using namespace lamina::ir::dist;

namespace {
SmallVector<ScheduleOp> schedulesIn(ModuleOp module) {
  SmallVector<ScheduleOp> ops;
  module.walk([&](ScheduleOp op) { ops.push_back(op); });
  return ops;
}

struct DistSchedule : ir::dist::impl::DistScheduleBase<DistSchedule> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::optional<schedule::ScheduleKind> kind =
        schedule::parseScheduleKind(scheduleKind);
    if (!kind) {
      module.emitError() << "dist-schedule: unknown schedule='" << scheduleKind
                         << "'; expected gpipe, 1f1b, interleaved-1f1b, "
                            "breadth-first or layered";
      return signalPassFailure();
    }
    if (!schedulesIn(module).empty()) {
      module.emitError() << "dist-schedule: the module already holds a "
                            "dist.schedule";
      return signalPassFailure();
    }
    int64_t numModules = modules;
    // After dist-outline-modules: the modules it outlined.
    if (auto outlined = module->getAttrOfType<IntegerAttr>(
            DistDialect::kNumModulesAttr);
        numModules == 0 && outlined)
      numModules = outlined.getInt();
    if (numModules == 0) {
      FailureOr<int64_t> layers = chainLayers(module);
      if (failed(layers))
        return signalPassFailure();
      numModules = *layers;
    }
    // The library takes ints; out-of-int values are refused here, the rest
    // by the generator.
    for (auto [name, value] :
         {std::pair<StringRef, int64_t>{"pp", pp}, {"dp", dp},
          {"micro-batches", microBatches}, {"zero", zero},
          {"modules", numModules}})
      if (value < INT_MIN || value > INT_MAX) {
        module.emitError() << "dist-schedule: " << name << "=" << value
                           << " is out of range";
        return signalPassFailure();
      }
    schedule::ScheduleConfig config;
    config.kind = *kind;
    config.numModules = static_cast<int>(numModules);
    config.pipelineRanks = static_cast<int>(pp);
    config.dataParallel = static_cast<int>(dp);
    config.microBatches = static_cast<int>(microBatches);
    config.zeroLevel = static_cast<int>(zero);
    // The program's placement, decided by dist-partition: the schedule
    // orders the modules where it put them (and refuses one it cannot).
    if (auto placed =
            module->getAttrOfType<PlacementAttr>(DistDialect::kPlacementAttr)) {
      if (placed.getPp() != pp) {
        module.emitError() << "dist-schedule: the module's dist.placement is "
                              "for pp="
                           << placed.getPp() << ", not pp=" << int64_t(pp);
        return signalPassFailure();
      }
      schedule::Placement given;
      given.numRanks = static_cast<int>(pp);
      for (int64_t r : placed.getRanks())
        given.rankOf.push_back(static_cast<int>(r));
      config.placement = std::move(given);
    }
    OpBuilder builder = OpBuilder::atBlockEnd(module.getBody());
    schedule::Expected<ScheduleOp> op =
        buildComputeSchedule(builder, module.getLoc(), config);
    if (!op) {
      // Name every option: the generator's text says L, p, m, d.
      module.emitError() << "dist-schedule: invalid options schedule="
                         << scheduleKind << " pp=" << int64_t(pp)
                         << " dp=" << int64_t(dp)
                         << " micro-batches=" << int64_t(microBatches)
                         << " zero=" << int64_t(zero)
                         << " modules=" << numModules << ": " << op.error();
      return signalPassFailure();
    }
    // The evaluation step over the same placement, complete with its
    // transfers (no compute-only form: nothing to lower).
    if (eval) {
      config.placement = readSchedule(*op)->placement;
      schedule::Expected<schedule::Schedule> forward =
          schedule::generateEvalSchedule(config);
      if (!forward) {
        module.emitError() << "dist-schedule: " << forward.error();
        return signalPassFailure();
      }
      buildSchedule(builder, module.getLoc(), *forward);
    }
  }

  /// L from @function's dist.chain: its layers (every module when the chain
  /// names none), as dist-partition counts them.
  FailureOr<int64_t> chainLayers(ModuleOp module) {
    auto func = module.lookupSymbol<func::FuncOp>(functionName);
    auto chain = func ? func->getAttrOfType<ArrayAttr>(DistDialect::kChainAttr)
                      : ArrayAttr();
    if (!chain) {
      module.emitError() << "dist-schedule: modules=0 takes L from the "
                            "dist.chain of @"
                         << functionName
                         << ", which is missing; run dist-discover-modules "
                            "or give modules=L";
      return failure();
    }
    int64_t layers = llvm::count_if(chain, [](Attribute a) {
      auto m = dyn_cast<ModuleAttr>(a);
      return m && m.getKind() == ModuleKind::Layer;
    });
    return layers ? layers : static_cast<int64_t>(chain.size());
  }
};

struct DistInsertComm : ir::dist::impl::DistInsertCommBase<DistInsertComm> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<ScheduleOp> ops = schedulesIn(getOperation());
    if (ops.empty()) {
      getOperation().emitError()
          << "dist-insert-comm: no dist.schedule; run dist-schedule first";
      return signalPassFailure();
    }
    for (ScheduleOp op : ops) {
      // dist-schedule writes the evaluation step complete.
      if (op.getForwardOnly())
        continue;
      FailureOr<schedule::Schedule> compute = readSchedule(op);
      if (failed(compute))
        return signalPassFailure();
      schedule::Expected<schedule::Schedule> lowered =
          schedule::lowerComputeOrder(*compute);
      if (!lowered) {
        emitScheduleError(op, "dist-insert-comm: " + lowered.error());
        return signalPassFailure();
      }
      OpBuilder builder(op);
      buildSchedule(builder, op.getLoc(), *lowered);
      op.erase();
    }
  }
};

struct DistPrefetchGathers
    : ir::dist::impl::DistPrefetchGathersBase<DistPrefetchGathers> {
  void runOnOperation() override {
    for (ScheduleOp op : schedulesIn(getOperation())) {
      if (op.getForwardOnly())
        continue;
      FailureOr<schedule::Schedule> s = readSchedule(op);
      if (failed(s))
        return signalPassFailure();
      if (s->config.zeroLevel != 3 || s->config.dataParallel < 2)
        continue;
      // readSchedule's lists are the rank ops' actions, op for op.
      size_t g = 0;
      for (auto rank : op.getBody().front().getOps<RankOp>()) {
        SmallVector<Operation *> actions;
        for (Operation &action : rank.getBody().front())
          actions.push_back(&action);
        for (const schedule::ActionMove &m :
             schedule::prefetchGathers(s->ranks[g++]))
          actions[m.from]->moveBefore(actions[m.before]);
      }
    }
  }
};

struct DistVerifySchedule
    : ir::dist::impl::DistVerifyScheduleBase<DistVerifySchedule> {
  using Base::Base;

  void runOnOperation() override {
    markAllAnalysesPreserved();
    bool ok = true;
    for (ScheduleOp op : schedulesIn(getOperation()))
      ok &= check(op);
    // The steps dist-build-steps made of one: the same simulation.
    SmallVector<ProgramOp> programs;
    getOperation().walk([&](ProgramOp op) { programs.push_back(op); });
    for (ProgramOp op : programs)
      ok &= check(op);
    if (!ok)
      signalPassFailure();
  }

  template <typename OpTy> bool check(OpTy op) {
    FailureOr<schedule::Schedule> s = readSchedule(op);
    if (failed(s))
      return false;
    if (schedule::Status st = schedule::verifySchedule(*s); !st) {
      emitScheduleError(op, st.message());
      return false;
    }
    return true;
  }
};
} // namespace
