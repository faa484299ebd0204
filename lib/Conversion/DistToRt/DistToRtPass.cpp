//===- DistToRtPass.cpp - dist.step to rt step functions ------------------===//
//
// Each pipeline rank's verified step becomes a function of rt.step_* ops in
// schedule order; lowerStep (lib/Schedule/StepCalls.cpp) decides where
// receives are posted and where the step waits for its sends, its gathers
// and its gradient reductions, checkStepsComplete that those waits cannot
// deadlock, and planStepBuffers (lib/Schedule/StepBuffers.cpp) where what
// the step holds between its calls lies in the rank's step buffer.
// convert-rt-to-emitc lowers the ops to the runtime's step library.
//
//===----------------------------------------------------------------------===//

#include "lamina/Conversion/Passes.h"
#include "lamina/Dialect/Dist/IR/DistOps.h"
#include "lamina/Dialect/Dist/Transforms/ScheduleIR.h"
#include "lamina/Dialect/Graph/IR/GraphDialect.h"
#include "lamina/Dialect/Rt/IR/RtOps.h"
#include "lamina/Schedule/StepBuffers.h"
#include "lamina/Schedule/StepCalls.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include <map>
#include <set>

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
              const std::map<std::pair<int64_t, bool>, FlatSymbolRefAttr> &fns,
              const sch::StepBuffers &buffers)
      : b(b), loc(loc), state(state), fns(fns), buffers(buffers) {}

  LogicalResult build(const sch::StepCall &c, size_t index, Operation *where) {
    const sch::CallOffsets &o = buffers.calls[index];
    // An offset as an optional attribute (none: -1).
    auto at = [&](int64_t offset) -> IntegerAttr {
      return offset < 0 ? IntegerAttr() : i64(offset);
    };
    bool grad = c.payload == sch::Payload::ActivationGrad;
    int k = c.module, j = c.microBatch;
    switch (c.kind) {
    case sch::CallKind::Forward:
    case sch::CallKind::Backward: {
      auto it = fns.find({k, c.kind == sch::CallKind::Backward});
      if (it == fns.end())
        return where->emitError("convert-dist-to-rt: no function for the ")
               << sch::callKindName(c.kind) << " of module " << k;
      rt_ir::StepCallOp::create(b, loc, state, it->second, i64(j), at(o.in),
                                at(o.res), at(o.cot), at(o.out));
      return success();
    }
    case sch::CallKind::Send:
    case sch::CallKind::PostRecv:
    case sch::CallKind::Recv: {
      if (o.at < 0)
        return where->emitError("convert-dist-to-rt: the step buffer has no ")
               << (grad ? "gradient" : "activations") << " of boundary " << k
               << ", micro-batch " << j;
      IntegerAttr offset = i64(o.at);
      if (c.kind == sch::CallKind::Send)
        rt_ir::StepSendOp::create(b, loc, state, unit(grad), i64(k), i64(j),
                                  i64(c.peer), offset);
      else if (c.kind == sch::CallKind::PostRecv)
        rt_ir::StepPostRecvOp::create(b, loc, state, unit(grad), i64(k), i64(j),
                                      i64(c.peer), offset);
      else
        rt_ir::StepRecvOp::create(b, loc, state, unit(grad), i64(k), i64(j),
                                  i64(c.peer), offset);
      return success();
    }
    case sch::CallKind::WaitSend:
      rt_ir::StepWaitSendOp::create(b, loc, state, unit(grad), i64(k), i64(j),
                                    i64(c.peer));
      return success();
    case sch::CallKind::AllGather:
      rt_ir::StepAllGatherOp::create(b, loc, state, i64(k), at(o.at));
      return success();
    case sch::CallKind::ReduceScatter:
      rt_ir::StepReduceScatterOp::create(b, loc, state, i64(k), at(o.at),
                                         at(o.part));
      return success();
    case sch::CallKind::AllReduce:
      rt_ir::StepAllReduceOp::create(b, loc, state, i64(c.module));
      return success();
    case sch::CallKind::WaitGradients:
      rt_ir::StepWaitGradientsOp::create(b, loc, state, i64(c.module));
      return success();
    case sch::CallKind::Accumulate:
      rt_ir::StepAccumulateOp::create(b, loc, state, i64(k), at(o.at));
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
  const sch::StepBuffers &buffers;
};

/// Bytes of a tensor or memref type (its element type's bytes, rounded up).
int64_t bytesOf(Type t) {
  auto shaped = dyn_cast<ShapedType>(t);
  if (!shaped || !shaped.hasStaticShape())
    return -1;
  return shaped.getNumElements() *
         int64_t((shaped.getElementTypeBitWidth() + 7) / 8);
}

/// The packed sizes of what the steps hold, from the module functions: the
/// forward's boundary outputs and residuals, the backward's cotangents, and
/// at ZeRO >= 2 the modules' gathered weights and gradients as the
/// runtime lays them out: the trainable parameters only that module reads
/// (`readers`), flat, cut over `dp` replicas by `target`'s collectives.
/// `flat` gets each module's flat layout's elements.
FailureOr<sch::StepBufferSizes>
bufferSizes(ModuleOp module, int numModules, int zero, int dp, bool padded,
            const std::map<std::string, std::vector<int>> &readers,
            std::vector<int64_t> &flat) {
  sch::StepBufferSizes sizes;
  sizes.activation.assign(size_t(numModules), 0);
  sizes.gradient.assign(size_t(numModules), 0);
  sizes.residual.assign(size_t(numModules), 0);
  // Per module: its flat parameters' elements, and the copies' bytes per
  // element when its functions read copies.
  flat.assign(size_t(numModules), 0);
  std::vector<int64_t> copyWidth(size_t(numModules), 0);
  std::set<std::pair<int64_t, std::string>> counted; // once per module
  for (auto f : module.getOps<func::FuncOp>()) {
    auto outlined =
        f->getAttrOfType<DictionaryAttr>(dist::DistDialect::kOutlinedAttr);
    if (!outlined)
      continue;
    int64_t k = outlined.getAs<IntegerAttr>("module").getInt();
    int64_t numOut = outlined.getAs<IntegerAttr>("num_out").getInt();
    bool bwd = f.getName().starts_with("bwd_");
    if (k < 0 || k >= numModules || (!bwd && !f.getName().starts_with("fwd_")))
      return f.emitError("convert-dist-to-rt: @")
             << f.getName() << " is no module function of the " << numModules
             << "-module chain";
    TypeRange types = bwd ? f.getFunctionType().getInputs()
                          : f.getFunctionType().getResults();
    if (int64_t(types.size()) < numOut)
      return f.emitError("convert-dist-to-rt: @")
             << f.getName() << " has fewer " << (bwd ? "arguments" : "results")
             << " than its " << numOut << " boundary values";
    // Forward: [boundary outputs, residuals]; backward: [..., cotangents].
    std::vector<int64_t> first, rest;
    TypeRange boundary = bwd ? types.take_back(size_t(numOut))
                             : types.take_front(size_t(numOut));
    for (Type t : boundary)
      first.push_back(bytesOf(t));
    if (!bwd)
      for (Type t : types.drop_front(size_t(numOut)))
        rest.push_back(bytesOf(t));
    if (llvm::is_contained(first, -1) || llvm::is_contained(rest, -1))
      return f.emitError("convert-dist-to-rt: @")
             << f.getName()
             << "'s boundary or residual values have no static size";
    if (k < numModules - 1)
      (bwd ? sizes.gradient : sizes.activation)[size_t(k)] =
          sch::packedBytes(first);
    if (!bwd)
      sizes.residual[size_t(k)] = sch::packedBytes(rest);
    for (unsigned i = 0; i < f.getNumArguments(); ++i) {
      auto kind = f.getArgAttrOfType<StringAttr>(i, graph::kKindAttr);
      auto name = f.getArgAttrOfType<StringAttr>(i, graph::kNameAttr);
      auto type = dyn_cast<ShapedType>(f.getArgument(i).getType());
      if (!kind || !name || !type)
        continue;
      auto it = readers.find(name.str());
      std::set<int> distinct;
      if (it != readers.end())
        distinct.insert(it->second.begin(), it->second.end());
      if (distinct.size() > 1) // shared: kept whole, outside the layout
        continue;
      if (kind.getValue() == graph::kKindTrainable && !bwd &&
          counted.insert({k, name.str()}).second)
        flat[size_t(k)] += type.getNumElements();
      else if (kind.getValue() == graph::kKindParamCopy)
        copyWidth[size_t(k)] = (type.getElementTypeBitWidth() + 7) / 8;
    }
  }
  if (zero >= 2) {
    sizes.fullGradient.assign(size_t(numModules), 0);
    sizes.gradientPart.assign(size_t(numModules), 0);
    sizes.gathered.assign(size_t(numModules), 0);
    for (int k = 0; k < numModules; ++k) {
      sch::ShardCapacity cap = sch::shardCapacity(flat[size_t(k)], dp, padded);
      sizes.fullGradient[size_t(k)] = cap.full * 4;
      sizes.gradientPart[size_t(k)] = cap.shard * 4;
      if (zero == 3)
        sizes.gathered[size_t(k)] =
            cap.full * (copyWidth[size_t(k)] ? copyWidth[size_t(k)] : 4);
    }
  }
  return sizes;
}

struct ConvertDistToRtPass
    : public lamina::impl::ConvertDistToRtBase<ConvertDistToRtPass> {
  using Base::Base;
  void runOnOperation() override {
    if (target != "host" && target != "cuda") {
      mlir::emitError(getOperation().getLoc(),
                      "convert-dist-to-rt: target must be host or cuda, got '")
          << target << "'";
      return signalPassFailure();
    }
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
      const sch::ScheduleConfig &cfg = sched->config;
      // Replica 0's lists: their peers are pipeline ranks. One replica
      // runs every level as level 0 (the runtime does too).
      int zero = cfg.dataParallel > 1 ? cfg.zeroLevel : 0;
      std::vector<int64_t> flat;
      FailureOr<sch::StepBufferSizes> sizes =
          bufferSizes(module, cfg.numModules, zero, cfg.dataParallel,
                      target == "cuda", readerMap, flat);
      if (failed(sizes))
        return signalPassFailure();
      std::vector<std::vector<sch::StepCall>> calls(static_cast<size_t>(pp));
      for (int p = 0; p < pp; ++p)
        calls[size_t(p)] = sch::lowerStep(
            sched->ranks[size_t(p)], zero,
            sch::sharedParamsOf(p, cfg.dataParallel, zero, readers,
                                sched->placement.rankOf));
      if (std::string stuck = sch::checkStepsComplete(calls); !stuck.empty()) {
        program.emitError("convert-dist-to-rt: the ")
            << (eval ? "evaluation" : "training")
            << " step's waits would deadlock: " << stuck;
        return signalPassFailure();
      }
      b.setInsertionPoint(program);
      for (auto step : program.getBody().front().getOps<dist::StepOp>()) {
        int64_t p = step.getPpRank();
        sch::StepBuffers buffers;
        if (std::string err = sch::planStepBuffers(
                calls[size_t(p)], cfg.numModules, *sizes, zero, eval, buffers);
            !err.empty()) {
          step.emitError("convert-dist-to-rt: the step buffer of pipeline "
                         "rank ")
              << p << ": " << err;
          return signalPassFailure();
        }
        std::string name =
            (eval ? "lamina_eval_step_" : "lamina_step_") + std::to_string(p);
        auto fn = func::FuncOp::create(b, step.getLoc(), name,
                                       b.getFunctionType({stepType}, {}));
        fn->setAttr("rt.step_pp", b.getI64IntegerAttr(p));
        fn->setAttr("rt.step_buffer_bytes", b.getI64IntegerAttr(buffers.bytes));
        if (eval)
          fn->setAttr("rt.forward_only", b.getUnitAttr());
        OpBuilder body = OpBuilder::atBlockEnd(fn.addEntryBlock());
        StepBuilder sb(body, step.getLoc(), fn.getArgument(0), fns, buffers);
        for (size_t n = 0; n < calls[size_t(p)].size(); ++n)
          if (failed(sb.build(calls[size_t(p)][n], n, step)))
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
                // Each module's flat layout (the ZeRO buffers' sizes were
                // planned from it; the runtime checks its own against it).
                b.getNamedAttr("flat_params", b.getDenseI64ArrayAttr(flat)),
            }));
      }
    }
    for (dist::ProgramOp program : programs)
      program.erase();
  }
};

} // namespace
