//===- RtDialect.h - rt dialect ---------------------------------*- C++ -*-===//
#ifndef LAMINA_DIALECT_RT_IR_RTDIALECT_H
#define LAMINA_DIALECT_RT_IR_RTDIALECT_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"

#include "lamina/Dialect/Rt/IR/RtDialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "lamina/Dialect/Rt/IR/RtAttrs.h.inc"

namespace lamina::ir::rt {
/// The module attribute of a distributed program (a DistAttr, written by
/// convert-dist-to-rt).
inline constexpr llvm::StringLiteral kDistAttr = "rt.dist";
/// Function attributes set by the memory plan (convert-graph-to-rt).
inline constexpr llvm::StringLiteral kArenaBytesAttr = "rt.arena_bytes";
inline constexpr llvm::StringLiteral kTensorBytesAttr = "rt.tensor_bytes";
/// Alignment of every arena offset (a cache line; also what vector loads and
/// CUDA want).
inline constexpr int64_t kArenaAlignment = 64;
} // namespace lamina::ir::rt

#endif
