//===- HoistParamCasts.h - narrow parameter copies as arguments -*- C++ -*-===//
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

namespace lamina::ir::graph {

/// Every f16/bf16 cast of a trainable f32 argument of `funcs` is replaced
/// by an argument of the cast's type, named after the parameter, of kind
/// param_copy. The functions get the same new arguments, one per
/// (parameter, type) any of them casts, in order of first appearance (so
/// the functions still take one argument list where they did), inserted
/// at `positions[i]` in funcs[i] (its end when `positions` is empty).
/// `hoisted` counts the casts replaced; no copies, no change.
///
/// With `everyRead` (f16 or bf16), every trainable f32 argument gets a
/// copy of that element type, cast or not, and every read of the weight
/// goes through it (as FSDP's MixedPrecision(param_dtype=bf16) and
/// Megatron's bf16 models read their weights): a cast to that type is the
/// copy, a gather's data the copy gathered then widened (the same values,
/// fewer bytes), any other read the copy widened to f32 once per
/// function. The f32 arguments are left unread, so a runtime may leave
/// them unbound (ZeRO 3 then gathers the copies instead).
mlir::LogicalResult hoistParamCasts(llvm::ArrayRef<mlir::func::FuncOp> funcs,
                                    llvm::ArrayRef<unsigned> positions,
                                    unsigned &hoisted,
                                    mlir::Type everyRead = {});

/// The option every-read of `pass` (run on `op`): "" (none: a null type),
/// "bf16" or "f16"; anything else is an error on `op`.
mlir::FailureOr<mlir::Type>
everyReadType(mlir::Operation *op, llvm::StringRef pass, llvm::StringRef name);

/// Whether `f` reads none of its trainable f32 arguments (after
/// hoistParamCasts with `everyRead`).
bool readsNoTrainable(mlir::func::FuncOp f);

} // namespace lamina::ir::graph

#endif // LAMINA_DIALECT_GRAPH_TRANSFORMS_HOISTPARAMCASTS_H
