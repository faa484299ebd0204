//===- StepWaits.cpp - where a step posts receives and waits --------------===//
//
// rt-post-receives, rt-wait-sends and rt-retire-reductions: each reads a
// step function's ops as calls, asks the schedule library for its edits
// (the functions `lamina plan` composes in lowerStep) and applies them to
// the ops. docs/distributed.md, "The compiled step".
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Rt/Transforms/Passes.h"
#include "lamina/Dialect/Rt/Transforms/StepIR.h"

namespace lamina::ir::rt {
#define GEN_PASS_DEF_RTPOSTRECEIVES
#define GEN_PASS_DEF_RTWAITSENDS
#define GEN_PASS_DEF_RTRETIREREDUCTIONS
#include "lamina/Dialect/Rt/Transforms/Passes.h.inc"
} // namespace lamina::ir::rt

using namespace mlir;
using namespace lamina::ir::rt;
namespace sch = lamina::schedule;

namespace {

/// Applies `decide`'s edits to a step function; other functions stay.
template <typename Decide>
LogicalResult editStep(func::FuncOp f, Decide decide) {
  if (!isStepFunction(f))
    return success();
  FailureOr<StepOps> step = readStep(f);
  if (failed(step))
    return failure();
  applyEdits(f, *step, decide(*step));
  return success();
}

struct RtPostReceivesPass
    : public lamina::ir::rt::impl::RtPostReceivesBase<RtPostReceivesPass> {
  void runOnOperation() override {
    if (failed(editStep(getOperation(), [](const StepOps &s) {
          return sch::postReceives(s.calls);
        })))
      signalPassFailure();
  }
};

struct RtWaitSendsPass
    : public lamina::ir::rt::impl::RtWaitSendsBase<RtWaitSendsPass> {
  void runOnOperation() override {
    if (failed(editStep(getOperation(), [](const StepOps &s) {
          return sch::waitSends(s.calls);
        })))
      signalPassFailure();
  }
};

struct RtRetireReductionsPass
    : public lamina::ir::rt::impl::RtRetireReductionsBase<
          RtRetireReductionsPass> {
  void runOnOperation() override {
    func::FuncOp f = getOperation();
    auto zero = f->getAttrOfType<IntegerAttr>(kStepZeroAttr);
    if (isStepFunction(f) && !zero) {
      f.emitError("rt-retire-reductions: the step function has no ")
          << kStepZeroAttr;
      return signalPassFailure();
    }
    if (failed(editStep(f, [&](const StepOps &s) {
          return sch::retireReductions(s.calls, int(zero.getInt()));
        })))
      signalPassFailure();
  }
};

} // namespace
