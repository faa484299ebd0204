//===- HoistParamCasts.h - parameters' narrow copies as arguments -*- C++
//-*-===//
//
// The rewrite behind graph-hoist-param-casts (single-process training) and
// dist-hoist-param-casts (a distributed program's module functions): the
// f16/bf16 casts of trainable arguments become arguments of kind
// param_copy, which the training driver keeps current.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_DIALECT_GRAPH_TRANSFORMS_HOISTPARAMCASTS_H
#define LAMINA_DIALECT_GRAPH_TRANSFORMS_HOISTPARAMCASTS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace lamina::graph {

/// Every f16/bf16 cast of a trainable f32 argument of `funcs` is replaced
/// by an argument of the cast's type, named after the parameter, of kind
/// param_copy. The functions get the same new arguments, one per
/// (parameter, type) any of them casts, in order of first appearance (so
/// the functions still take one argument list where they did), inserted
/// at `positions[i]` in funcs[i] (its end when `positions` is empty).
/// `hoisted` counts the casts replaced; no copies, no change.
mlir::LogicalResult hoistParamCasts(llvm::ArrayRef<mlir::func::FuncOp> funcs,
                                    llvm::ArrayRef<unsigned> positions,
                                    unsigned &hoisted);

} // namespace lamina::graph

#endif // LAMINA_DIALECT_GRAPH_TRANSFORMS_HOISTPARAMCASTS_H
