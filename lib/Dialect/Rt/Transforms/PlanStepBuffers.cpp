//===- PlanStepBuffers.cpp - one step buffer per rank's step --------------===//
//
// rt-plan-step-buffers: the values each step function holds between its
// calls, placed by lamina::schedule::planStepBuffers (the planner `lamina
// plan` runs too) at offsets the calls then carry.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Rt/IR/RtOps.h"
#include "lamina/Dialect/Rt/Transforms/Passes.h"
#include "lamina/Dialect/Rt/Transforms/StepIR.h"

namespace lamina::ir::rt {
#define GEN_PASS_DEF_RTPLANSTEPBUFFERS
#include "lamina/Dialect/Rt/Transforms/Passes.h.inc"
} // namespace lamina::ir::rt

using namespace mlir;
using namespace lamina::ir::rt;
namespace sch = lamina::schedule;

namespace {

/// Sets (offset >= 0) or removes the offset attribute `name` of `op`.
void setOffset(Operation *op, StringRef name, int64_t offset) {
  if (offset < 0)
    op->removeAttr(name);
  else
    op->setAttr(
        name, IntegerAttr::get(IntegerType::get(op->getContext(), 64), offset));
}

struct RtPlanStepBuffersPass
    : public lamina::ir::rt::impl::RtPlanStepBuffersBase<
          RtPlanStepBuffersPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (target != "host" && target != "cuda") {
      mlir::emitError(module.getLoc(),
                      "rt-plan-step-buffers: target must be host or cuda, "
                      "got '")
          << target << "'";
      return signalPassFailure();
    }
    SmallVector<func::FuncOp> steps;
    for (auto f : module.getOps<func::FuncOp>())
      if (isStepFunction(f))
        steps.push_back(f);
    if (steps.empty())
      return;
    auto dist = module->getAttrOfType<DistAttr>(kDistAttr);
    if (!dist) {
      mlir::emitError(module.getLoc(),
                      "rt-plan-step-buffers: step functions need the "
                      "module's rt.dist (modules, dp, zero)");
      return signalPassFailure();
    }
    int64_t numModules = dist.getModules(), dp = dist.getDp(),
            zero = dist.getZero();
    // One replica runs every level as level 0.
    int effective = dp > 1 ? int(zero) : 0;
    std::vector<int64_t> flat;
    FailureOr<sch::StepBufferSizes> sizes = stepBufferSizes(
        module, int(numModules), effective, int(dp), target == "cuda", flat);
    if (failed(sizes))
      return signalPassFailure();
    if (ArrayRef<int64_t>(flat) != dist.getFlatParams().asArrayRef()) {
      mlir::emitError(module.getLoc(),
                      "rt-plan-step-buffers: rt.dist's flat_params differ "
                      "from the module functions' parameters");
      return signalPassFailure();
    }
    Callees callees = calleesOf(module);
    for (func::FuncOp f : steps) {
      FailureOr<StepOps> step = readStep(f, &callees);
      if (failed(step))
        return signalPassFailure();
      sch::StepBuffers buffers;
      int64_t p = f->getAttrOfType<IntegerAttr>(kStepPpAttr).getInt();
      if (std::string err = sch::planStepBuffers(
              step->calls, int(numModules), *sizes, effective,
              f->hasAttr(kForwardOnlyAttr), buffers);
          !err.empty()) {
        f.emitError("rt-plan-step-buffers: the step buffer of pipeline rank ")
            << p << ": " << err;
        return signalPassFailure();
      }
      for (size_t n = 0; n < step->ops.size(); ++n) {
        Operation *op = step->ops[n];
        const sch::CallOffsets &o = buffers.calls[n];
        if (isa<StepCallOp>(op)) {
          setOffset(op, "input", o.in);
          setOffset(op, "residuals", o.res);
          setOffset(op, "cotangent", o.cot);
          setOffset(op, "output", o.out);
        } else if (isa<StepSendOp, StepPostRecvOp, StepRecvOp>(op)) {
          if (o.at < 0) {
            const sch::StepCall &c = step->calls[n];
            op->emitError("rt-plan-step-buffers: the step buffer has no ")
                << (c.payload == sch::Payload::ActivationGrad ? "gradient"
                                                              : "activations")
                << " of boundary " << c.module << ", micro-batch "
                << c.microBatch;
            return signalPassFailure();
          }
          setOffset(op, "offset", o.at);
        } else if (isa<StepAllGatherOp, StepAccumulateOp>(op)) {
          setOffset(op, "offset", o.at);
        } else if (isa<StepReduceScatterOp>(op)) {
          setOffset(op, "full", o.at);
          setOffset(op, "part", o.part);
        }
      }
      f->setAttr(kStepBufferBytesAttr,
                 IntegerAttr::get(IntegerType::get(f.getContext(), 64),
                                  buffers.bytes));
    }
  }
};

} // namespace
