//===- DescribeModel.h - graph IR -> the planner's ModelDesc ----*- C++ -*-===//
//
// Discovers the module chain of an imported model (dist-discover-modules)
// and sums each module's costs from the graph ops' CostOpInterface, giving
// the MLIR-free description the cost model plans with.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_DIALECT_DIST_TRANSFORMS_DESCRIBEMODEL_H
#define LAMINA_DIALECT_DIST_TRANSFORMS_DESCRIBEMODEL_H

#include "lamina/Plan/ModelDesc.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LLVM.h"

#include <string>

namespace lamina::ir::dist {

struct DescribeOptions {
  /// Overrides discovery: a regex whose first capture group, applied to
  /// parameter names (then node names), names the module ("" = automatic).
  std::string moduleRegex;
  /// The function to describe.
  std::string functionName = "forward";
};

/// Describes @functionName of `module`; on failure emits a diagnostic (naming
/// what could not be split) and returns failure. A chain already recorded
/// in the IR (`dist.chain`, docs/modules.md) is used as is unless
/// `moduleRegex` asks for another.
mlir::FailureOr<plan::ModelDesc> describeModel(mlir::ModuleOp module,
                                               const DescribeOptions &options);

} // namespace lamina::ir::dist

#endif // LAMINA_DIALECT_DIST_TRANSFORMS_DESCRIBEMODEL_H
