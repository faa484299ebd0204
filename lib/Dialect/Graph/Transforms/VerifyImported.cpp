//===- VerifyImported.cpp - phase contract 1 ------------------------------===//

#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Matchers.h"

namespace lamina::ir::graph {
#define GEN_PASS_DEF_GRAPHVERIFYIMPORTED
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace lamina::ir::graph

using namespace mlir;
using namespace lamina::ir::graph;

namespace {
struct GraphVerifyImported
    : lamina::ir::graph::impl::GraphVerifyImportedBase<GraphVerifyImported> {
  void runOnOperation() override {
    if (failed(verifyFunc(getOperation())))
      signalPassFailure();
  }

  LogicalResult verifyFunc(func::FuncOp func) {
    for (auto [i, arg] : llvm::enumerate(func.getArguments())) {
      if (!func.getArgAttr(i, kNameAttr) || !func.getArgAttr(i, kKindAttr))
        return func.emitError() << "argument " << i << " lacks '" << kNameAttr
                                << "' or '" << kKindAttr << "'";
    }
    auto walk = func.walk([&](Operation *op) -> WalkResult {
      if (op == func.getOperation())
        return WalkResult::advance();
      ++numOps;
      for (Type t :
           llvm::concat<Type>(op->getOperandTypes(), op->getResultTypes())) {
        auto ranked = dyn_cast<RankedTensorType>(t);
        if (!ranked || !ranked.hasStaticShape())
          return op->emitError() << "value of type " << t
                                 << " is not a static ranked tensor",
                 WalkResult::interrupt();
      }
      if (isa<func::ReturnOp>(op))
        return WalkResult::advance();
      if (op->getDialect() != getContext().getLoadedDialect<GraphDialect>())
        return op->emitError() << "op outside the graph dialect after import",
               WalkResult::interrupt();
      if (op->hasTrait<OpTrait::ConstantLike>() || op->getNumOperands() == 0)
        return WalkResult::advance();
      // An op over constants that its own folder would turn into a constant
      // is shape arithmetic the importer failed to fold.
      SmallVector<Attribute> constants;
      for (Value v : op->getOperands()) {
        Attribute attr;
        if (!matchPattern(v, m_Constant(&attr)))
          return WalkResult::advance();
        constants.push_back(attr);
      }
      SmallVector<OpFoldResult> folded;
      if (succeeded(op->fold(constants, folded)) && !folded.empty())
        return op->emitError() << "unfolded constant computation survives "
                                  "import",
               WalkResult::interrupt();
      return WalkResult::advance();
    });
    return failure(walk.wasInterrupted());
  }
};
} // namespace
