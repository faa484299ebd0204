//===- Passes.h - graph dialect passes --------------------------*- C++ -*-===//
#ifndef LAMINA_DIALECT_GRAPH_TRANSFORMS_PASSES_H
#define LAMINA_DIALECT_GRAPH_TRANSFORMS_PASSES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace lamina::ir::graph {
#define GEN_PASS_DECL
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace lamina::ir::graph

#endif
