//===- Autodiff.h - reverse-mode differentiation of graph ops ---*- C++ -*-===//
//
// The core of graph-autodiff, shared with dist-outline-modules (which builds
// one backward function per pipeline module): given forward ops, seeds for
// some of their values and the values to differentiate with respect to, it
// appends the reverse pass through GradientOpInterface.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_DIALECT_GRAPH_TRANSFORMS_AUTODIFF_H
#define LAMINA_DIALECT_GRAPH_TRANSFORMS_AUTODIFF_H

#include "mlir/IR/Builders.h"

namespace lamina::ir::graph {

/// Appends at `b`'s insertion point the reverse pass of `forwardOps` (in
/// program order). `outputs[i]` receives the cotangent `seeds[i]` (same
/// type); gradients reach only float values that depend on a value of
/// `wrt` ("active" values). Returns one gradient per `wrt` value, a zero
/// constant where none flows. Errors (an op without a rule between `wrt`
/// and an output) are emitted on the op.
mlir::FailureOr<llvm::SmallVector<mlir::Value>>
buildReverse(mlir::OpBuilder &b, llvm::ArrayRef<mlir::Operation *> forwardOps,
             mlir::ValueRange outputs, mlir::ValueRange seeds,
             mlir::ValueRange wrt);

/// A constant tensor of `type` (ranked float) filled with `value`.
mlir::Value splatConstant(mlir::OpBuilder &b, mlir::Location loc,
                          mlir::Type type, double value);

/// Erases the ops of `block` whose results nobody reads, last to first (a
/// dead graph op would still run once lowered). Shared by the passes that
/// rewrite chains and leave their old pieces behind.
void eraseDeadOps(mlir::Block &block);

} // namespace lamina::ir::graph

#endif // LAMINA_DIALECT_GRAPH_TRANSFORMS_AUTODIFF_H
