//===- GraphToRt.h - graph ops -> runtime kernel calls ----------*- C++ -*-===//
//
// The one place that says which host kernel each graph op runs and how its
// attributes become the kernel's arguments, by op family; convert-graph-to-rt
// lowers each family with one conversion pattern. The static memory plan that
// decides where buffers live is in MemoryPlan.h.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_CONVERSION_GRAPHTORT_GRAPHTORT_H
#define LAMINA_CONVERSION_GRAPHTORT_GRAPHTORT_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace lamina {

/// A call of a runtime kernel, in `rt.call`'s terms: `args` refers to buffer
/// i by `i : index`, where buffers are the op's operands in order followed by
/// its result.
struct KernelCall {
  std::string callee;
  llvm::SmallVector<mlir::Attribute> args;
};

/// One family of ops (elementwise, reductions and norms, movement, ...):
/// `call` gives the kernel call of an op of the family, nullopt for an op of
/// another family or one without a host kernel.
struct KernelFamily {
  llvm::StringLiteral name;
  std::optional<KernelCall> (*call)(mlir::Operation *op,
                                    mlir::Builder &builder);
};

/// Every family but the matmuls, whose flags depend on the memory plan
/// (getMatMulCall). No op is in two families.
llvm::ArrayRef<KernelFamily> getKernelFamilies();

/// The kernel call of a graph op (a matmul's operands untransposed); nullopt
/// when the op has no host kernel.
std::optional<KernelCall> getKernelCall(mlir::Operation *op,
                                        mlir::Builder &builder);

/// The call of a collective (or the group rank) that shard-partition left in
/// a tensor-parallel function (include/lamina/Runtime/TensorParallel.h);
/// nullopt for other ops. A rank's `tensor.from_elements` reads no buffer.
std::optional<KernelCall> getCollectiveCall(mlir::Operation *op,
                                            mlir::Builder &builder);

/// The scalar ops of the group rank (`shard.process_linear_index` and its
/// index casts) that only feed a `tensor.from_elements`: no buffer, no
/// call; the from_elements' call computes them.
bool isGroupRankScalar(mlir::Operation *op);

/// The matmul kernel call with BLAS transposition flags: an operand made by a
/// graph.transpose of its last two dims is passed untransposed.
KernelCall getMatMulCall(mlir::Operation *matmul, mlir::Builder &builder,
                         bool transposeLhs, bool transposeRhs);

/// Whether the op's kernel may write its result over operand `i` (same shape
/// and element size), which lets the memory plan reuse a dying operand.
bool kernelAllowsInPlace(mlir::Operation *op, unsigned operand);

/// "node 'Add_3' (graph.add)": the ONNX node behind an op, for messages.
std::string describeOrigin(mlir::Operation *op);

} // namespace lamina

#endif
