//===- RtOps.h - rt dialect ops and types -----------------------*- C++ -*-===//
#ifndef LAMINA_DIALECT_RT_IR_RTOPS_H
#define LAMINA_DIALECT_RT_IR_RTOPS_H

#include "lamina/Dialect/Rt/IR/RtDialect.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_TYPEDEF_CLASSES
#include "lamina/Dialect/Rt/IR/RtTypes.h.inc"

#define GET_OP_CLASSES
#include "lamina/Dialect/Rt/IR/RtOps.h.inc"

#endif
