//===- GraphOps.h - graph dialect ops ---------------------------*- C++ -*-===//
#ifndef LAMINA_DIALECT_GRAPH_IR_GRAPHOPS_H
#define LAMINA_DIALECT_GRAPH_IR_GRAPHOPS_H

#include "lamina/Dialect/Graph/IR/GraphDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace lamina::graph {
/// Numpy broadcast of two static shapes; nullopt when they are incompatible.
std::optional<llvm::SmallVector<int64_t>>
broadcastShapes(llvm::ArrayRef<int64_t> a, llvm::ArrayRef<int64_t> b);

/// Result type of a broadcasting elementwise op: the broadcast shape of all
/// operands with the element type of the first (or i1 for predicates).
llvm::LogicalResult
inferBroadcastResult(std::optional<mlir::Location> loc, mlir::ValueRange operands,
                     bool predicate, llvm::SmallVectorImpl<mlir::Type> &types);

/// Result type of a reduction over `axes`.
llvm::LogicalResult inferReduceResult(std::optional<mlir::Location> loc,
                                      mlir::Value input,
                                      llvm::ArrayRef<int64_t> axes,
                                      bool keepdims,
                                      llvm::SmallVectorImpl<mlir::Type> &types);
/// Whether `actual` is the one `inferred` type, or its shape in f32 where
/// the inferred element type is f16/bf16 (the ops that accumulate in f32
/// and may store the accumulator unrounded: matmul, reductions).
bool narrowOrSameResult(mlir::TypeRange inferred, mlir::TypeRange actual);
/// Whether `v` is computed from a function argument marked trainable
/// (graph.kind): a value that needs a gradient.
bool dependsOnTrainable(mlir::Value v);
} // namespace lamina::graph

namespace lamina::graph::detail {
/// Bytes of all operands and results (the default memory traffic).
int64_t operandAndResultBytes(mlir::Operation *op);
} // namespace lamina::graph::detail

#include "lamina/Dialect/Graph/IR/GraphInterfaces.h.inc"

#define GET_OP_CLASSES
#include "lamina/Dialect/Graph/IR/GraphOps.h.inc"

#endif
