//===- FuseEpilogues.h - narrow residuals of module functions --*- C++ -*-===//
//
// The part of graph-fuse-epilogues a distributed program needs across two
// functions: dist-narrow-residuals calls it on each module's forward
// and backward.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_DIALECT_GRAPH_TRANSFORMS_FUSEEPILOGUES_H
#define LAMINA_DIALECT_GRAPH_TRANSFORMS_FUSEEPILOGUES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace lamina::ir::graph {

/// Values a forward keeps for its backward (a distributed module without
/// recomputation) stored narrow, as graph-fuse-epilogues stores them
/// within one function, so the module computes what one function (or a
/// backward recomputing the forward) computes. A product of f16/bf16
/// operands (no addend) that `fwd` returns as residual `residual:N`:
///  * activations: read otherwise only by elementwise steps, and in `bwd`
///    (its argument `residual:N`) likewise, no function result made of it
///    in either -> stored narrow, each read widened (narrowActivation);
///  * logits: read otherwise only by cross-entropy, and in `bwd` only as
///    the logits of cross-entropy gradients of the operands' type ->
///    stored narrow, read as they are (narrowLogits).
/// Run after graph-fuse-epilogues (which gives those gradients the type).
/// Returns how many products were narrowed.
unsigned narrowResiduals(mlir::func::FuncOp fwd, mlir::func::FuncOp bwd);

} // namespace lamina::ir::graph

#endif // LAMINA_DIALECT_GRAPH_TRANSFORMS_FUSEEPILOGUES_H
