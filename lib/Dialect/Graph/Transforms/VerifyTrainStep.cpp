//===- VerifyTrainStep.cpp - phase contract 2 -----------------------------===//

#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace lamina::ir::graph {
#define GEN_PASS_DEF_GRAPHVERIFYTRAINSTEP
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace lamina::ir::graph

using namespace mlir;
using namespace lamina::ir::graph;

namespace {
struct GraphVerifyTrainStep
    : lamina::ir::graph::impl::GraphVerifyTrainStepBase<GraphVerifyTrainStep> {
  void runOnOperation() override {
    auto step = getOperation().lookupSymbol<func::FuncOp>("train_step");
    if (!step) {
      getOperation().emitError("no func.func @train_step (run graph-autodiff)");
      return signalPassFailure();
    }
    if (failed(verifyResults(step)) || failed(verifyBody(step)))
      signalPassFailure();
  }

  LogicalResult verifyResults(func::FuncOp step) {
    auto names = step->getAttrOfType<ArrayAttr>(kOutputNamesAttr);
    if (!names)
      return step.emitError() << "@train_step lacks '" << kOutputNamesAttr << "'";
    auto nameAt = [&](unsigned i) {
      return i < names.size() ? cast<StringAttr>(names[i]).getValue() : "";
    };
    ArrayRef<Type> results = step.getFunctionType().getResults();
    auto loss = results.empty() ? RankedTensorType()
                                : dyn_cast<RankedTensorType>(results[0]);
    if (!loss || !loss.hasStaticShape() || loss.getNumElements() != 1 ||
        !(loss.getElementType().isF32() || loss.getElementType().isF64()) ||
        nameAt(0) != "loss")
      return step.emitError("the first result of @train_step must be the "
                            "scalar f32/f64 'loss'");
    unsigned next = 1;
    for (BlockArgument arg : step.getArguments()) {
      auto kind = step.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kKindAttr);
      if (!kind || kind.getValue() != kKindTrainable)
        continue;
      auto name = step.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kNameAttr);
      std::string expected = "grad:" + (name ? name.getValue().str() : "");
      if (next >= results.size() || nameAt(next) != expected ||
          results[next] != arg.getType())
        return step.emitError()
               << "result " << next << " of @train_step must be '" << expected
               << "' of type " << arg.getType();
      ++next;
    }
    // graph-autodiff keep-outputs: the model's other outputs, "output:NAME".
    while (next < results.size() && nameAt(next).starts_with("output:"))
      ++next;
    if (next != results.size())
      return step.emitError() << "@train_step has " << results.size() - next
                              << " results beyond the loss, the gradients and "
                                 "kept outputs";
    return success();
  }

  LogicalResult verifyBody(func::FuncOp step) {
    Dialect *graph = getContext().getLoadedDialect<GraphDialect>();
    auto walk = step.walk([&](Operation *op) -> WalkResult {
      if (op == step.getOperation() || isa<func::ReturnOp>(op))
        return WalkResult::advance();
      if (op->getDialect() != graph)
        return op->emitError("op outside the graph dialect in @train_step"),
               WalkResult::interrupt();
      return WalkResult::advance();
    });
    return failure(walk.wasInterrupted());
  }
};
} // namespace
