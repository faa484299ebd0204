//===- FoldMatMulCasts.cpp - graph-fold-matmul-casts ----------------------===//
//
// cast(matmul(a, b) : f16/bf16) : f32 -> matmul(a, b) : f32 when the narrow
// product has no other use. A plain walk rather than a greedy rewrite: the
// pattern never creates another instance of itself.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace lamina::graph {
#define GEN_PASS_DEF_GRAPHFOLDMATMULCASTS
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace lamina::graph

using namespace mlir;
using namespace lamina::graph;

namespace {
struct GraphFoldMatMulCasts
    : lamina::graph::impl::GraphFoldMatMulCastsBase<GraphFoldMatMulCasts> {
  void runOnOperation() override {
    SmallVector<CastOp> casts;
    getOperation().walk([&](CastOp c) { casts.push_back(c); });
    for (CastOp c : casts) {
      auto matmul = c.getInput().getDefiningOp<MatMulOp>();
      auto to = cast<RankedTensorType>(c.getType());
      Type from = cast<RankedTensorType>(c.getInput().getType()).getElementType();
      if (!matmul || !matmul->hasOneUse() || !to.getElementType().isF32() ||
          !(from.isF16() || from.isBF16()))
        continue;
      OpBuilder b(matmul);
      // The matmul's location: plans and diagnostics keep naming its node.
      auto wide = MatMulOp::create(b, matmul.getLoc(), to, matmul.getLhs(),
                                   matmul.getRhs());
      c.getResult().replaceAllUsesWith(wide.getResult());
      c.erase();
      matmul.erase();
      ++numFolded;
    }
  }
};
} // namespace
