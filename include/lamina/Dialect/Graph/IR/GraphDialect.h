//===- GraphDialect.h - graph dialect ---------------------------*- C++ -*-===//
#ifndef LAMINA_DIALECT_GRAPH_IR_GRAPHDIALECT_H
#define LAMINA_DIALECT_GRAPH_IR_GRAPHDIALECT_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/Operation.h"

namespace mlir::func {
class FuncOp;
} // namespace mlir::func

namespace lamina::ir::graph {
// The generated graph.entry helper (GraphBase.td) names it unqualified.
using ::mlir::UnitAttr;
} // namespace lamina::ir::graph

#include "lamina/Dialect/Graph/IR/GraphDialect.h.inc"
#include "lamina/Dialect/Graph/IR/GraphEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "lamina/Dialect/Graph/IR/GraphAttrs.h.inc"

namespace lamina::ir::graph {
/// Argument attributes on the functions the importer produces.
inline constexpr llvm::StringLiteral kNameAttr = "graph.name";
inline constexpr llvm::StringLiteral kKindAttr = "graph.kind";
/// Function attribute: the ONNX names of the results, in order.
inline constexpr llvm::StringLiteral kOutputNamesAttr = "graph.output_names";
/// Module attribute of a training module: its TrainAttr (graph-add-loss).
inline constexpr llvm::StringLiteral kTrainAttr = "graph.train";
/// Values of `graph.kind`.
inline constexpr llvm::StringLiteral kKindInput = "input";
inline constexpr llvm::StringLiteral kKindTrainable = "trainable";
inline constexpr llvm::StringLiteral kKindConstant = "constant";
/// Only on dist-outline-modules' functions (include/lamina/Runtime/
/// DistProgram.h): an activation from the previous module, a forward value
/// kept for the backward, the gradient of a forward output.
inline constexpr llvm::StringLiteral kKindBoundary = "boundary";
inline constexpr llvm::StringLiteral kKindResidual = "residual";
inline constexpr llvm::StringLiteral kKindCotangent = "cotangent";
/// Only on single-process train steps after graph-hoist-param-casts: the
/// f16/bf16 copy of the trainable argument of the same name, which the
/// driver keeps current.
inline constexpr llvm::StringLiteral kKindParamCopy = "param_copy";
/// Only on tensor-parallel module functions (dist-tp-plan): the dim of the
/// whole value that the argument's shard splits over the group (an i64);
/// absent for an argument every rank holds whole. The runtime loads a
/// split weight's block of that dim.
inline constexpr llvm::StringLiteral kTpSplitAttr = "graph.tp_split";
/// Set before autodiff by graph-tp-regroup-projections on a fused
/// projection's weight and bias: `[dim, parts]`, the dim holding `parts`
/// equal parts side by side (q, k and v), stored so that each rank's block
/// of it is its share of every part, the parts in order
/// (ArgSpec::splitParts). The ONNX initializer keeps the parts' own layout;
/// load and export convert. dist-tp-plan checks that it splits that dim.
inline constexpr llvm::StringLiteral kTpPartsAttr = "graph.tp_parts";
/// Set by graph-ep-split-experts on a layer's expert weights: the number of
/// ranks (an i64 >= 2) their dim 0 is split over, the stage's data-parallel
/// replicas in order; the argument is this rank's block
/// (ArgSpec::expertSplit). The runtime loads that block of the initializer.
inline constexpr llvm::StringLiteral kEpSplitAttr = "graph.ep_split";

/// The module's `graph.train`, or null before graph-add-loss.
TrainAttr trainAttrOf(mlir::Operation *module);

/// Whether `op` is the model's entry function, the forward pass that the
/// training-preparation passes act on: a func.func marked `graph.entry` (the
/// importer marks the function it creates) or, in a module where no function
/// is marked (IR written by hand), the one named `forward`. Only that
/// fallback reads the other functions, so the importer's output never does.
bool isEntryFunction(mlir::Operation *op);
/// The module's entry function (as isEntryFunction), or null.
mlir::func::FuncOp entryFunctionOf(mlir::Operation *module);
/// Marks `func` as the entry, or (`entry` false) removes the mark.
void setEntryFunction(mlir::Operation *func, bool entry = true);
} // namespace lamina::ir::graph

#endif
