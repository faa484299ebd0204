//===- Passes.h - rt dialect passes -----------------------------*- C++ -*-===//
#ifndef LAMINA_DIALECT_RT_TRANSFORMS_PASSES_H
#define LAMINA_DIALECT_RT_TRANSFORMS_PASSES_H

#include "lamina/Dialect/Rt/IR/RtDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace lamina::ir::rt {
#define GEN_PASS_DECL
#include "lamina/Dialect/Rt/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "lamina/Dialect/Rt/Transforms/Passes.h.inc"
} // namespace lamina::ir::rt

#endif
