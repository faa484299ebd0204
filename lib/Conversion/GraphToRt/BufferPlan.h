//===- BufferPlan.h - where one graph function's values live ----*- C++ -*-===//
//
// The analysis half of convert-graph-to-rt: lifetimes of the op results,
// storage classes (values that share bytes on purpose) and their arena
// offsets (MemoryPlan.h). The conversion patterns only read it.
//
//===----------------------------------------------------------------------===//

#ifndef LIB_CONVERSION_GRAPHTORT_BUFFERPLAN_H
#define LIB_CONVERSION_GRAPHTORT_BUFFERPLAN_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <optional>

namespace lamina {

class BufferPlan {
public:
  /// Plans the body of a single-block function of static tensors; an op that
  /// is not a graph op with results is an error on it.
  static std::optional<BufferPlan> build(mlir::func::FuncOp func);

  /// The ops that get a buffer or a call, in order: the body without its
  /// terminator and the group rank's scalars.
  llvm::ArrayRef<mlir::Operation *> getOps() const { return ops; }

  /// The arena offset of an op result (not a constant's, not a folded
  /// transpose's).
  int64_t getOffset(mlir::Value result) const;
  /// The offset of the copy of returned value `i` when it is an argument or
  /// a constant, which has no arena offset of its own.
  std::optional<int64_t> getCopyOffset(unsigned i) const;

  /// A transpose of the last two dims that only feeds matmuls: never
  /// computed; the matmuls read its input with a BLAS transposition flag.
  bool isFoldedTranspose(mlir::Operation *op) const {
    return foldedTransposes.contains(op);
  }
  /// A reshape that is a view of its input's bytes: no kernel call.
  bool isViewReshape(mlir::Operation *op) const {
    return viewReshapes.contains(op);
  }
  /// A scalar op of the group rank (isGroupRankScalar): no buffer.
  bool isGroupRankScalar(mlir::Operation *op) const {
    return groupRankScalars.contains(op);
  }
  /// The value whose buffer `v` reads: `v`, or the input of the folded
  /// transposes that make it; and whether their number is odd (a matmul reads
  /// the buffer transposed).
  std::pair<mlir::Value, bool> getStoredValue(mlir::Value v) const;

  /// The plan's peak and every value on its own (what no reuse would need).
  int64_t getArenaBytes() const { return arenaBytes; }
  int64_t getTensorBytes() const { return tensorBytes; }
  /// Values stored over another (view reshapes, in-place results).
  int64_t getNumAliased() const { return numAliased; }

private:
  BufferPlan() = default;
  mlir::LogicalResult assign(mlir::func::FuncOp func);

  llvm::SmallVector<mlir::Operation *> ops;
  llvm::DenseMap<mlir::Value, int64_t> offsets;
  llvm::SmallVector<std::optional<int64_t>> copyOffsets; // per returned value
  llvm::SmallPtrSet<mlir::Operation *, 8> foldedTransposes;
  llvm::SmallPtrSet<mlir::Operation *, 8> viewReshapes;
  llvm::SmallPtrSet<mlir::Operation *, 4> groupRankScalars;
  int64_t arenaBytes = 0;
  int64_t tensorBytes = 0;
  int64_t numAliased = 0;
};

} // namespace lamina

#endif
