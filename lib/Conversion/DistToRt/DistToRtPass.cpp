//===- DistToRtPass.cpp - dist.step to rt step functions ------------------===//
//
// Each pipeline rank's verified step becomes a function of rt.step_* ops in
// schedule order (lamina::schedule::directStep): every wait at its latest
// correct point, no receive posted ahead, no step buffer planned. The rt
// passes (rt-post-receives, rt-wait-sends, rt-retire-reductions,
// rt-verify-steps, rt-plan-step-buffers) make those decisions on the ops;
// convert-rt-to-emitc lowers them to the runtime's step library.
//
//===----------------------------------------------------------------------===//

#include "lamina/Conversion/Passes.h"
#include "lamina/Dialect/Dist/IR/DistOps.h"
#include "lamina/Dialect/Dist/Transforms/ScheduleIR.h"
#include "lamina/Dialect/Graph/IR/GraphDialect.h"
#include "lamina/Dialect/Rt/IR/RtOps.h"
#include "lamina/Dialect/Rt/Transforms/StepIR.h"
#include "lamina/Schedule/StepCalls.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include <map>

namespace lamina {
#define GEN_PASS_DEF_CONVERTDISTTORT
#include "lamina/Conversion/Passes.h.inc"
} // namespace lamina

using namespace mlir;
using namespace lamina;
namespace sch = lamina::schedule;

namespace {

struct ConvertDistToRtPass
    : public lamina::impl::ConvertDistToRtBase<ConvertDistToRtPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<ir::dist::ProgramOp> programs(
        module.getOps<ir::dist::ProgramOp>());
    if (programs.empty())
      return;
    int training = 0;
    for (ir::dist::ProgramOp p : programs)
      training += !p.getForwardOnly();
    if (training != 1 || programs.size() > 2) {
      mlir::emitError(module.getLoc())
          << "convert-dist-to-rt: needs exactly one training dist.program "
             "and at most one forward_only one, got "
          << programs.size() << " programs";
      return signalPassFailure();
    }
    // The tensor-parallel group's size (dist-tp-plan's grid; its
    // collectives are runtime calls by now, so the grid goes).
    int64_t tp = 1;
    if (auto grid = module.lookupSymbol<shard::GridOp>("tp")) {
      if (grid.getShape().size() != 1 || grid.getShape()[0] < 1 ||
          !SymbolTable::symbolKnownUseEmpty(grid, module)) {
        grid.emitError("convert-dist-to-rt: the tensor-parallel grid is not "
                       "one-dimensional or is still used");
        return signalPassFailure();
      }
      tp = grid.getShape()[0];
      grid.erase();
    }
    OpBuilder b(module.getContext());
    Type stepType = ir::rt::StepType::get(module.getContext());
    std::map<std::string, std::vector<int>> readerMap =
        ir::rt::readersOf(module);
    std::vector<std::pair<std::string, std::vector<int>>> readers(
        readerMap.begin(), readerMap.end());
    std::map<std::string, std::pair<int, int64_t>> experts =
        ir::rt::expertBlocksOf(module);
    for (ir::dist::ProgramOp program : programs) {
      FailureOr<sch::Schedule> sched = ir::dist::readSchedule(program);
      if (failed(sched))
        return signalPassFailure();
      const int pp = sched->config.pipelineRanks;
      // The callee of each (module, backward), from the steps' calls.
      std::map<std::pair<int64_t, bool>, FlatSymbolRefAttr> fns;
      program.walk([&](ir::dist::CallOp call) {
        fns[{call.getModule(), call.isBackward()}] = call.getCalleeAttr();
      });
      bool eval = program.getForwardOnly();
      const sch::ScheduleConfig &cfg = sched->config;
      // Replica 0's lists: their peers are pipeline ranks. One replica
      // runs every level as level 0 (the runtime does too).
      int zero = cfg.dataParallel > 1 ? cfg.zeroLevel : 0;
      // Each module's flat parameter layout, for rt.dist (the sizes of
      // ZeRO's buffers follow from it; the runtime checks its own).
      std::vector<int64_t> flat;
      if (failed(ir::rt::stepBufferSizes(module, cfg.numModules, zero,
                                         cfg.dataParallel, false, flat)))
        return signalPassFailure();
      b.setInsertionPoint(program);
      for (auto step : program.getBody().front().getOps<ir::dist::StepOp>()) {
        int64_t p = step.getPpRank();
        std::vector<sch::SharedParam> shared = sch::sharedParamsOf(
            int(p), cfg.dataParallel, zero, readers, sched->placement.rankOf);
        // Experts split over groups smaller than the replicas: each block's
        // holders (the replicas with the same block) sum its gradient as
        // the holders of a tied parameter do, ZeRO >= 1 over them.
        for (const auto &[name, where] : experts)
          if (sched->placement.rankOf[size_t(where.first)] == p &&
              cfg.dataParallel / where.second > 1)
            shared.push_back({name, zero >= 1});
        std::sort(shared.begin(), shared.end(),
                  [](const sch::SharedParam &a, const sch::SharedParam &b) {
                    return a.name < b.name;
                  });
        std::vector<sch::StepCall> calls =
            sch::directStep(sched->ranks[size_t(p)], zero, shared);
        std::string name =
            (eval ? "lamina_eval_step_" : "lamina_step_") + std::to_string(p);
        auto fn = func::FuncOp::create(b, step.getLoc(), name,
                                       b.getFunctionType({stepType}, {}));
        fn->setAttr(ir::rt::kStepPpAttr, b.getI64IntegerAttr(p));
        fn->setAttr(ir::rt::kStepZeroAttr, b.getI64IntegerAttr(zero));
        if (eval)
          fn->setAttr(ir::rt::kForwardOnlyAttr, b.getUnitAttr());
        OpBuilder body = OpBuilder::atBlockEnd(fn.addEntryBlock());
        for (const sch::StepCall &c : calls) {
          FlatSymbolRefAttr callee;
          if (c.kind == sch::CallKind::Forward ||
              c.kind == sch::CallKind::Backward) {
            auto it = fns.find({c.module, c.kind == sch::CallKind::Backward});
            if (it == fns.end()) {
              step.emitError("convert-dist-to-rt: no function for the ")
                  << sch::callKindName(c.kind) << " of module " << c.module;
              return signalPassFailure();
            }
            callee = it->second;
          }
          ir::rt::buildStepOp(body, step.getLoc(), fn.getArgument(0), c,
                              callee);
        }
        func::ReturnOp::create(body, step.getLoc());
      }
      if (!eval) {
        const sch::ScheduleConfig &c = sched->config;
        SmallVector<int64_t> placement(sched->placement.rankOf.begin(),
                                       sched->placement.rankOf.end());
        // Each module's flat layout: rt-plan-step-buffers sizes ZeRO's
        // buffers from it; the runtime checks its own.
        module->setAttr(ir::rt::kDistAttr,
                        ir::rt::DistAttr::get(
                            module.getContext(), program.getKind(),
                            c.numModules, pp, c.dataParallel, c.microBatches,
                            c.zeroLevel, b.getDenseI64ArrayAttr(placement),
                            b.getDenseI64ArrayAttr(flat), tp));
      }
    }
    for (ir::dist::ProgramOp program : programs)
      program.erase();
  }
};

} // namespace
