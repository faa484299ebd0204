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
#include <vector>

namespace lamina::ir::dist {

/// Module k's @fwd_k and @bwd_k by k, as dist-outline-modules records the
/// index on both (`dist.outlined`); a missing one is null.
std::map<int64_t, std::pair<mlir::func::FuncOp, mlir::func::FuncOp>>
moduleFunctions(mlir::ModuleOp module);

/// What `lamina plan --tp` takes from the compiled modules, per module k
/// (the index): the bytes its forward's and its backward's tensor-parallel
/// collectives move on one micro-batch (ring volumes of the whole tensor S
/// over the grid's t ranks, as the runtime counts them: all-reduce
/// 2(t-1)/t S, all-gather and reduce-scatter (t-1)/t S; zero without
/// dist-tp-plan's grid) and their ring steps (all-reduce 2(t-1), the others
/// t-1: each a link latency); the trainable elements one rank holds (a
/// parameter several modules read counted in the first); the bytes of its
/// boundary outputs (one rank's, as it sends them).
struct CompiledModules {
  std::vector<double> forwardTpBytes, backwardTpBytes, forwardTpSteps,
      backwardTpSteps, params, boundaryBytes;
};
CompiledModules describeCompiledModules(mlir::ModuleOp module);

} // namespace lamina::ir::dist

#endif // LAMINA_DIALECT_DIST_TRANSFORMS_MODULEFUNCTIONS_H
