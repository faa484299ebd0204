//===- Passes.h - Lamina conversion passes ----------------------*- C++ -*-===//
#ifndef LAMINA_CONVERSION_PASSES_H
#define LAMINA_CONVERSION_PASSES_H

#include "lamina/Dialect/Rt/IR/RtDialect.h"

#include "mlir/Dialect/EmitC/IR/EmitC.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Pass/Pass.h"

namespace lamina {
#define GEN_PASS_DECL
#include "lamina/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "lamina/Conversion/Passes.h.inc"
} // namespace lamina

#endif
