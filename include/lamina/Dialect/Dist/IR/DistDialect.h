//===- DistDialect.h - dist dialect -----------------------------*- C++ -*-===//
#ifndef LAMINA_DIALECT_DIST_IR_DISTDIALECT_H
#define LAMINA_DIALECT_DIST_IR_DISTDIALECT_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"

#include "lamina/Dialect/Dist/IR/DistDialect.h.inc"
#include "lamina/Dialect/Dist/IR/DistEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "lamina/Dialect/Dist/IR/DistAttrs.h.inc"

#endif
