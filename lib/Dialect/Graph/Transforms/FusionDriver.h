//===- FusionDriver.h - the graph fusions' greedy driver --------*- C++ -*-===//
//
// The fusion passes' rewrite patterns, run by the greedy driver as the walks
// they replace ran: over the candidates (anchors) a function has when the
// rewrite starts, in program order. The generated C++ is diffed, so the ops
// and their order must stay what the walks made; hence
//  * the driver's op-list entry point (applyOpPatternsGreedily), not
//    applyPatternsGreedily on the function: that one visits every op and
//    erases each it finds dead, which no option turns off, and so removed
//    ops the walks keep (GELU's scalar constants, whatever dead ops a pass's
//    input has). This one visits only the anchors, with ExistingOps
//    strictness (never a rewrite's new ops: a fused op is not fused again),
//    and neither CSEs constants nor simplifies regions. A pass that erased
//    dead ops after its walk still calls eraseDeadOps;
//  * no folding: an anchor changes only by a pattern;
//  * dead anchors are left out: the driver would erase them (a walk left
//    them, or rewrote them into ops as dead).
// Private to lib/Dialect/Graph/Transforms.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_DIALECT_GRAPH_TRANSFORMS_FUSIONDRIVER_H
#define LAMINA_LIB_DIALECT_GRAPH_TRANSFORMS_FUSIONDRIVER_H

#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Rewrite/FrozenRewritePatternSet.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/Statistic.h"

namespace lamina::ir::graph {

/// The live ops of types OpTs under `root`, in program order (a walk).
template <typename... OpTs>
llvm::SmallVector<mlir::Operation *> anchorsOf(mlir::Operation *root) {
  llvm::SmallVector<mlir::Operation *> anchors;
  root->walk([&](mlir::Operation *op) {
    if (mlir::isa<OpTs...>(op) && !mlir::isOpTriviallyDead(op))
      anchors.push_back(op);
  });
  return anchors;
}

/// A pattern whose rewrite says whether it changed anything, counted in
/// `count` when it did.
template <typename OpT> struct CountedPattern : mlir::OpRewritePattern<OpT> {
  CountedPattern(mlir::MLIRContext *ctx, llvm::Statistic &count)
      : mlir::OpRewritePattern<OpT>(ctx), count(count) {}

  mlir::LogicalResult
  matchAndRewrite(OpT op, mlir::PatternRewriter &rewriter) const final {
    if (!rewrite(op, rewriter))
      return mlir::failure();
    ++count;
    return mlir::success();
  }
  virtual bool rewrite(OpT op, mlir::PatternRewriter &rewriter) const = 0;

  llvm::Statistic &count;
};

/// A counted pattern that is one rewrite function.
template <typename OpT> struct FunctionPattern : CountedPattern<OpT> {
  using Rewrite = bool (*)(mlir::RewriterBase &, OpT);
  FunctionPattern(mlir::MLIRContext *ctx, Rewrite fn, llvm::Statistic &count)
      : CountedPattern<OpT>(ctx, count), fn(fn) {}
  bool rewrite(OpT op, mlir::PatternRewriter &rewriter) const override {
    return fn(rewriter, op);
  }

  Rewrite fn;
};

/// Applies `patterns` to `anchors` (in program order), each tried once
/// unless a rewrite changes it or what it reads. `changed`, when given,
/// says whether one applied.
inline mlir::LogicalResult
applyFusionPatterns(llvm::ArrayRef<mlir::Operation *> anchors,
                    const mlir::FrozenRewritePatternSet &patterns,
                    bool *changed = nullptr) {
  mlir::GreedyRewriteConfig config;
  config.enableFolding(false).setStrictness(
      mlir::GreedyRewriteStrictness::ExistingOps);
  // The worklist is popped from its back.
  llvm::SmallVector<mlir::Operation *> worklist(llvm::reverse(anchors));
  return mlir::applyOpPatternsGreedily(worklist, patterns, config, changed);
}

} // namespace lamina::ir::graph

#endif // LAMINA_LIB_DIALECT_GRAPH_TRANSFORMS_FUSIONDRIVER_H
