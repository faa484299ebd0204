//===- ChainMatch.h - helpers for matching exporters' op chains -*- C++ -*-===//
//
// What graph-fuse-gelu, -norms and -attention share: scalar constants,
// commuted binary operands, sole users, and erasing a replaced chain.
// Private to lib/Dialect/Graph/Transforms.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_DIALECT_GRAPH_TRANSFORMS_CHAINMATCH_H
#define LAMINA_LIB_DIALECT_GRAPH_TRANSFORMS_CHAINMATCH_H

#include "lamina/Dialect/Graph/IR/GraphOps.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"

#include <cmath>
#include <optional>

namespace lamina::ir::graph::chain {

/// The value every element of a splat constant has (float, integer or
/// i1), as a double.
inline std::optional<double> splatValue(mlir::DenseElementsAttr attr) {
  if (!attr || !attr.isSplat())
    return std::nullopt;
  if (mlir::isa<mlir::FloatType>(attr.getElementType()))
    return attr.getSplatValue<llvm::APFloat>().convertToDouble();
  llvm::APInt x = attr.getSplatValue<llvm::APInt>();
  return attr.getElementType().isInteger(1) ? double(!x.isZero())
                                            : double(x.getSExtValue());
}

/// A one-element float constant's value.
inline std::optional<double> scalar(mlir::Value v) {
  mlir::DenseElementsAttr attr;
  if (!v || !mlir::matchPattern(v, mlir::m_Constant(&attr)) ||
      attr.getNumElements() != 1 ||
      !mlir::isa<mlir::FloatType>(attr.getElementType()))
    return std::nullopt;
  return splatValue(attr);
}

/// True when `v` is a one-element float constant equal to `want` (to float
/// precision).
inline bool isScalar(mlir::Value v, double want) {
  std::optional<double> got = scalar(v);
  return got && std::fabs(*got - want) <= 1e-6 * std::fabs(want);
}

/// The op using `v`, when it is the only use.
inline mlir::Operation *soleUser(mlir::Value v) {
  return v && v.hasOneUse() ? *v.getUsers().begin() : nullptr;
}

inline mlir::Operation *def(mlir::Value v) {
  return v ? v.getDefiningOp() : nullptr;
}

/// For a binary op of type OpT, the operand that is not the scalar `c`.
template <typename OpT> mlir::Value otherThanScalar(mlir::Operation *op, double c) {
  auto bin = mlir::dyn_cast_or_null<OpT>(op);
  if (!bin)
    return {};
  if (isScalar(bin.getRhs(), c))
    return bin.getLhs();
  if (isScalar(bin.getLhs(), c))
    return bin.getRhs();
  return {};
}

/// For a binary op of type OpT, the operand that is not `v`.
template <typename OpT> mlir::Value otherThan(mlir::Operation *op, mlir::Value v) {
  auto bin = mlir::dyn_cast_or_null<OpT>(op);
  if (!bin)
    return {};
  if (bin.getLhs() == v)
    return bin.getRhs();
  if (bin.getRhs() == v)
    return bin.getLhs();
  return {};
}

/// Erases what of `ops` became dead, users before producers, in as many
/// rounds as the chain's order needs.
inline void eraseDead(mlir::RewriterBase &rewriter,
                      llvm::SmallVectorImpl<mlir::Operation *> &ops) {
  for (bool changed = true; changed;) {
    changed = false;
    for (mlir::Operation *&op : ops)
      if (op && op->use_empty()) {
        rewriter.eraseOp(op);
        op = nullptr;
        changed = true;
      }
  }
}

} // namespace lamina::ir::graph::chain

#endif // LAMINA_LIB_DIALECT_GRAPH_TRANSFORMS_CHAINMATCH_H
