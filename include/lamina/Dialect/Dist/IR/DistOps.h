//===- DistOps.h - dist dialect schedule ops --------------------*- C++ -*-===//
#ifndef LAMINA_DIALECT_DIST_IR_DISTOPS_H
#define LAMINA_DIALECT_DIST_IR_DISTOPS_H

#include "lamina/Dialect/Dist/IR/DistDialect.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "lamina/Dialect/Dist/IR/DistOps.h.inc"

#endif
