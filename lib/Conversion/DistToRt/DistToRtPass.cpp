//===- DistToRtPass.cpp - dist.step to rt step functions ------------------===//
//
// Each pipeline rank's verified step becomes a function of rt.step_* ops in
// schedule order; lowerStep (lib/Schedule/StepCalls.cpp) decides where
// receives are posted and where ZeRO 3 waits for its gathers.
// convert-rt-to-emitc lowers the ops to the runtime's step library.
//
//===----------------------------------------------------------------------===//

#include "lamina/Conversion/Passes.h"
#include "lamina/Dialect/Dist/IR/DistOps.h"
#include "lamina/Dialect/Dist/Transforms/ScheduleIR.h"
#include "lamina/Dialect/Graph/IR/GraphDialect.h"
#include "lamina/Dialect/Rt/IR/RtOps.h"
#include "lamina/Schedule/StepCalls.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
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

/// Builds one step function from its calls.
class StepBuilder {
public:
  StepBuilder(OpBuilder &b, Location loc, Value state,
              const std::map<std::pair<int64_t, bool>, FlatSymbolRefAttr> &fns)
      : b(b), loc(loc), state(state), fns(fns) {}

  LogicalResult build(const sch::StepCall &c, Operation *where) {
    bool grad = c.payload == sch::Payload::ActivationGrad;
    switch (c.kind) {
    case sch::CallKind::Forward:
    case sch::CallKind::Backward: {
      auto it = fns.find({c.module, c.kind == sch::CallKind::Backward});
      if (it == fns.end())
        return where->emitError("convert-dist-to-rt: no function for the ")
               << sch::callKindName(c.kind) << " of module " << c.module;
      rt_ir::StepCallOp::create(b, loc, state, it->second, i64(c.microBatch));
      return success();
    }
    case sch::CallKind::Send:
      rt_ir::StepSendOp::create(b, loc, state, unit(grad), i64(c.module),
                                i64(c.microBatch), i64(c.peer));
      return success();
    case sch::CallKind::PostRecv:
      rt_ir::StepPostRecvOp::create(b, loc, state, unit(grad), i64(c.module),
                                    i64(c.microBatch), i64(c.peer));
      return success();
    case sch::CallKind::Recv:
      rt_ir::StepRecvOp::create(b, loc, state, unit(grad), i64(c.module),
                                i64(c.microBatch), i64(c.peer));
      return success();
    case sch::CallKind::AllGather:
      rt_ir::StepAllGatherOp::create(b, loc, state, i64(c.module));
      return success();
    case sch::CallKind::ReduceScatter:
      rt_ir::StepReduceScatterOp::create(b, loc, state, i64(c.module));
      return success();
    case sch::CallKind::AllReduce:
      rt_ir::StepAllReduceOp::create(b, loc, state, i64(c.module));
      return success();
    case sch::CallKind::WaitGradients:
      rt_ir::StepWaitGradientsOp::create(b, loc, state, i64(c.module));
      return success();
    case sch::CallKind::Accumulate:
      rt_ir::StepAccumulateOp::create(b, loc, state, i64(c.module));
      return success();
    case sch::CallKind::UseWeights:
      rt_ir::StepUseWeightsOp::create(b, loc, state, i64(c.module));
      return success();
    case sch::CallKind::OptimizerStep:
      rt_ir::StepOptimizerOp::create(b, loc, state);
      return success();
    case sch::CallKind::WaitWeights:
      rt_ir::StepWaitWeightsOp::create(b, loc, state, i64(c.module));
      return success();
    case sch::CallKind::SumShared:
      rt_ir::StepSumSharedOp::create(b, loc, state, c.name);
      return success();
    case sch::CallKind::WaitSharedSum:
      rt_ir::StepWaitSharedSumOp::create(b, loc, state, c.name);
      return success();
    case sch::CallKind::GatherShared:
      rt_ir::StepGatherSharedOp::create(b, loc, state, c.name);
      return success();
    case sch::CallKind::WaitSharedGather:
      rt_ir::StepWaitSharedGatherOp::create(b, loc, state, c.name);
      return success();
    }
    return failure();
  }

private:
  IntegerAttr i64(int64_t v) { return b.getI64IntegerAttr(v); }
  UnitAttr unit(bool on) { return on ? b.getUnitAttr() : UnitAttr(); }

  OpBuilder &b;
  Location loc;
  Value state;
  const std::map<std::pair<int64_t, bool>, FlatSymbolRefAttr> &fns;
};

struct ConvertDistToRtPass
    : public lamina::impl::ConvertDistToRtBase<ConvertDistToRtPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<dist::ProgramOp> programs(module.getOps<dist::ProgramOp>());
    if (programs.empty())
      return;
    int training = 0;
    for (dist::ProgramOp p : programs)
      training += !p.getForwardOnly();
    if (training != 1 || programs.size() > 2) {
      mlir::emitError(module.getLoc())
          << "convert-dist-to-rt: needs exactly one training dist.program "
             "and at most one forward_only one, got "
          << programs.size() << " programs";
      return signalPassFailure();
    }
    OpBuilder b(module.getContext());
    Type stepType = rt_ir::StepType::get(module.getContext());
    // The modules reading each trainable parameter (their forwards' args).
    std::map<std::string, std::vector<int>> readerMap;
    for (auto f : module.getOps<func::FuncOp>()) {
      auto outlined =
          f->getAttrOfType<DictionaryAttr>(dist::DistDialect::kOutlinedAttr);
      if (!outlined || !f.getName().starts_with("fwd_"))
        continue;
      int k = int(outlined.getAs<IntegerAttr>("module").getInt());
      for (unsigned i = 0; i < f.getNumArguments(); ++i) {
        auto kind = f.getArgAttrOfType<StringAttr>(i, graph::kKindAttr);
        auto name = f.getArgAttrOfType<StringAttr>(i, graph::kNameAttr);
        if (kind && name && kind.getValue() == graph::kKindTrainable)
          readerMap[name.str()].push_back(k);
      }
    }
    std::vector<std::pair<std::string, std::vector<int>>> readers(
        readerMap.begin(), readerMap.end());
    for (dist::ProgramOp program : programs) {
      FailureOr<sch::Schedule> sched = dist::readSchedule(program);
      if (failed(sched))
        return signalPassFailure();
      const int pp = sched->config.pipelineRanks;
      // The callee of each (module, backward), from the steps' calls.
      std::map<std::pair<int64_t, bool>, FlatSymbolRefAttr> fns;
      program.walk([&](dist::CallOp call) {
        fns[{call.getModule(), call.isBackward()}] = call.getCalleeAttr();
      });
      bool eval = program.getForwardOnly();
      b.setInsertionPoint(program);
      for (auto step : program.getBody().front().getOps<dist::StepOp>()) {
        int64_t p = step.getPpRank();
        std::string name =
            (eval ? "lamina_eval_step_" : "lamina_step_") + std::to_string(p);
        auto fn = func::FuncOp::create(b, step.getLoc(), name,
                                       b.getFunctionType({stepType}, {}));
        fn->setAttr("rt.step_pp", b.getI64IntegerAttr(p));
        if (eval)
          fn->setAttr("rt.forward_only", b.getUnitAttr());
        OpBuilder body = OpBuilder::atBlockEnd(fn.addEntryBlock());
        StepBuilder sb(body, step.getLoc(), fn.getArgument(0), fns);
        // Replica 0's list: its peers are pipeline ranks. One replica
        // runs every level as level 0 (the runtime does too).
        const sch::ScheduleConfig &cfg = sched->config;
        int zero = cfg.dataParallel > 1 ? cfg.zeroLevel : 0;
        std::vector<sch::SharedParam> shared =
            sch::sharedParamsOf(int(p), cfg.dataParallel, zero, readers,
                                sched->placement.rankOf);
        for (const sch::StepCall &c :
             sch::lowerStep(sched->ranks[size_t(p)], zero, shared))
          if (failed(sb.build(c, step)))
            return signalPassFailure();
        func::ReturnOp::create(body, step.getLoc());
      }
      if (!eval) {
        const sch::ScheduleConfig &c = sched->config;
        SmallVector<int64_t> placement(sched->placement.rankOf.begin(),
                                       sched->placement.rankOf.end());
        module->setAttr(
            "rt.dist",
            b.getDictionaryAttr({
                b.getNamedAttr("kind", program.getKindAttr()),
                b.getNamedAttr("modules", b.getI64IntegerAttr(c.numModules)),
                b.getNamedAttr("pp", b.getI64IntegerAttr(pp)),
                b.getNamedAttr("dp", b.getI64IntegerAttr(c.dataParallel)),
                b.getNamedAttr("micro_batches",
                               b.getI64IntegerAttr(c.microBatches)),
                b.getNamedAttr("zero", b.getI64IntegerAttr(c.zeroLevel)),
                b.getNamedAttr("placement", b.getDenseI64ArrayAttr(placement)),
            }));
      }
    }
    for (dist::ProgramOp program : programs)
      program.erase();
  }
};

} // namespace
