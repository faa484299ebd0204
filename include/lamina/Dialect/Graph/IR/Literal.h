//===- Literal.h - host copies of constant tensors for folding --*- C++ -*-===//
//
// Folding runs on small host copies of constants: integers as int64 (sign or
// zero extended by the element type), floats as double, rounded back to the
// element type when the result becomes an attribute. Splats stay one value,
// so folds over huge splat tensors stay cheap. graph-fuse-attention reads
// mask constants the same way.
//
//===----------------------------------------------------------------------===//
#ifndef LAMINA_DIALECT_GRAPH_IR_LITERAL_H
#define LAMINA_DIALECT_GRAPH_IR_LITERAL_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"

#include <functional>

namespace lamina::ir::graph {

/// Largest non-splat tensor a fold produces or reads, in elements: shape
/// arithmetic is tiny; folding e.g. a large mask would bloat the IR instead.
inline constexpr int64_t kMaxFoldElements = 1 << 16;

struct Literal {
  mlir::RankedTensorType type;
  bool splat = false;
  llvm::SmallVector<double> f;  // float element types
  llvm::SmallVector<int64_t> i; // integer element types

  bool isFloat() const { return mlir::isa<mlir::FloatType>(type.getElementType()); }
  int64_t size() const { return isFloat() ? f.size() : i.size(); }

  /// Reads a dense attribute; nullopt for other attributes or when the
  /// tensor (not a splat) has more than `maxElements` elements.
  static std::optional<Literal> read(mlir::Attribute attr,
                                     int64_t maxElements = kMaxFoldElements);
  /// Writes the values as a dense attribute of `type` (this literal's type by
  /// default).
  mlir::DenseElementsAttr write(mlir::RankedTensorType type = {}) const;

  /// The literal of `newType` whose element k is this literal's element
  /// `source[k]` (a gather of elements, for data movement folds).
  Literal gather(mlir::RankedTensorType newType,
                 llvm::ArrayRef<int64_t> source) const;
  /// Expands a splat to its full element list.
  Literal expanded() const;
};

/// Row-major strides of `shape`.
llvm::SmallVector<int64_t> stridesOf(llvm::ArrayRef<int64_t> shape);

/// Calls `fn(index, linear)` for every multi-index of `shape` in row-major
/// order.
void forEachIndex(llvm::ArrayRef<int64_t> shape,
                  llvm::function_ref<void(llvm::ArrayRef<int64_t>, int64_t)> fn);

} // namespace lamina::ir::graph

#endif
