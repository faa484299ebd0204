//===- VerifySteps.cpp - the step functions' waits cannot deadlock --------===//

#include "lamina/Dialect/Rt/Transforms/Passes.h"
#include "lamina/Dialect/Rt/Transforms/StepIR.h"

#include <map>

namespace lamina::ir::rt {
#define GEN_PASS_DEF_RTVERIFYSTEPS
#include "lamina/Dialect/Rt/Transforms/Passes.h.inc"
} // namespace lamina::ir::rt

using namespace mlir;
using namespace lamina::ir::rt;
namespace sch = lamina::schedule;

namespace {

struct RtVerifyStepsPass
    : public lamina::ir::rt::impl::RtVerifyStepsBase<RtVerifyStepsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    Callees callees = calleesOf(module);
    // Per program (training, evaluation): the steps by pipeline rank.
    std::map<bool, std::map<int64_t, func::FuncOp>> programs;
    for (auto f : module.getOps<func::FuncOp>()) {
      if (!isStepFunction(f))
        continue;
      int64_t p = f->getAttrOfType<IntegerAttr>(kStepPpAttr).getInt();
      if (!programs[f->hasAttr(kForwardOnlyAttr)].emplace(p, f).second) {
        f.emitError("rt-verify-steps: a second step function of pipeline "
                    "rank ")
            << p;
        return signalPassFailure();
      }
    }
    for (auto &[eval, steps] : programs) {
      std::vector<std::vector<sch::StepCall>> calls;
      for (auto &[p, f] : steps) {
        if (p != int64_t(calls.size())) {
          f.emitError("rt-verify-steps: pipeline rank ")
              << calls.size() << " has no " << (eval ? "evaluation " : "")
              << "step function";
          return signalPassFailure();
        }
        FailureOr<StepOps> step = readStep(f, &callees);
        if (failed(step))
          return signalPassFailure();
        calls.push_back(std::move(step->calls));
      }
      if (std::string stuck = sch::checkStepsComplete(calls); !stuck.empty()) {
        steps.begin()->second.emitError("rt-verify-steps: the ")
            << (eval ? "evaluation" : "training")
            << " step's waits would deadlock: " << stuck;
        return signalPassFailure();
      }
    }
  }
};

} // namespace
