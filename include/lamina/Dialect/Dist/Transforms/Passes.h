//===- Passes.h - dist dialect passes ---------------------------*- C++ -*-===//
#ifndef LAMINA_DIALECT_DIST_TRANSFORMS_PASSES_H
#define LAMINA_DIALECT_DIST_TRANSFORMS_PASSES_H

#include "lamina/Dialect/Dist/IR/DistDialect.h"

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace lamina::ir::dist {
#define GEN_PASS_DECL
#include "lamina/Dialect/Dist/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "lamina/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace lamina::ir::dist

#endif
