//===- ModuleFunctions.h - a module's forward and backward -----*- C++ -*-===//
//
// The outlined functions of a distributed program, paired by module, for
// the passes that rewrite a forward and its backward together.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_DIALECT_DIST_TRANSFORMS_MODULEFUNCTIONS_H
#define LAMINA_DIALECT_DIST_TRANSFORMS_MODULEFUNCTIONS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <map>
#include <utility>

namespace lamina::dist {

/// Module k's @fwd_k and @bwd_k by k, as dist-outline-modules records the
/// index on both (`dist.outlined`); a missing one is null.
std::map<int64_t, std::pair<mlir::func::FuncOp, mlir::func::FuncOp>>
moduleFunctions(mlir::ModuleOp module);

} // namespace lamina::dist

#endif // LAMINA_DIALECT_DIST_TRANSFORMS_MODULEFUNCTIONS_H
