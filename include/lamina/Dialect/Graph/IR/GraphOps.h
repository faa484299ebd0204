//===- GraphOps.h - graph dialect ops ---------------------------*- C++ -*-===//
#ifndef LAMINA_DIALECT_GRAPH_IR_GRAPHOPS_H
#define LAMINA_DIALECT_GRAPH_IR_GRAPHOPS_H

#include "lamina/Dialect/Graph/IR/GraphDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace lamina::ir::graph {
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

/// The spatial result dims of a window over `input` ([N, C, S...], one to
/// three spatial dims): graph.conv's (`kernel` the weight's spatial dims)
/// and the pools'. Fails with a message at `loc` when an attribute has the
/// wrong length or range, or a window does not fit.
llvm::LogicalResult inferWindow(std::optional<mlir::Location> loc,
                                mlir::RankedTensorType input,
                                llvm::ArrayRef<int64_t> kernel,
                                llvm::ArrayRef<int64_t> strides,
                                llvm::ArrayRef<int64_t> dilations,
                                llvm::ArrayRef<int64_t> pads, bool ceilMode,
                                llvm::SmallVectorImpl<int64_t> &spatial);
/// graph.conv's result type for `input` and `weight`, appended to `types`.
llvm::LogicalResult inferConv(std::optional<mlir::Location> loc,
                              mlir::RankedTensorType input,
                              mlir::RankedTensorType weight,
                              llvm::ArrayRef<int64_t> strides,
                              llvm::ArrayRef<int64_t> dilations,
                              llvm::ArrayRef<int64_t> pads, int64_t group,
                              llvm::SmallVectorImpl<mlir::Type> &types);
} // namespace lamina::ir::graph

namespace lamina::ir::graph::detail {
/// Bytes of all operands and results (the default memory traffic).
int64_t operandAndResultBytes(mlir::Operation *op);
} // namespace lamina::ir::graph::detail

#include "lamina/Dialect/Graph/IR/GraphInterfaces.h.inc"

#define GET_OP_CLASSES
#include "lamina/Dialect/Graph/IR/GraphOps.h.inc"

#endif
