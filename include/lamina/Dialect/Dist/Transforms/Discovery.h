//===- Discovery.h - the module chain of an imported model -----*- C++ -*-===//
//
// Splits a function over the graph dialect into the chain of modules the
// pipeline planner places on ranks: an embedding, N layers and a head. The
// rules (parameter-name prefixes, node-name scopes, a structural fallback
// along the residual stream, --module-regex) are documented in
// docs/modules.md. Both `dist-discover-modules` and describeModel use it.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_DIALECT_DIST_TRANSFORMS_DISCOVERY_H
#define LAMINA_DIALECT_DIST_TRANSFORMS_DISCOVERY_H

#include "lamina/Plan/ModelDesc.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"

#include <string>
#include <vector>

namespace lamina::ir::dist {

struct ChainModule {
  std::string name; ///< "embedding", "layer.3", "head"
  plan::ModuleRole role = plan::ModuleRole::Layer;
  /// Shared body index (isomorphic layers share one); -1 for embedding/head.
  int body = -1;
};

struct ModuleChain {
  std::vector<ChainModule> modules; ///< chain order, none empty
  /// Module index of every op of the function body except the terminator.
  /// Along every def-use edge the index never decreases.
  llvm::DenseMap<mlir::Operation *, int> moduleOf;
  /// "names", "metadata" (node metadata scopes, no parameter names),
  /// "structure", "regex" or "none" (the whole body is one layer);
  /// "annotated" for a chain read from IR that does not say.
  std::string discovery;
  /// Values read by two or more layers but not part of the chain (masks,
  /// rotary tables, position ids): function arguments or op results.
  llvm::SmallVector<mlir::Value> sharedValues;

  /// The module an op belongs to; the terminator belongs to the last.
  int moduleOfOp(mlir::Operation *op) const {
    auto it = moduleOf.find(op);
    return it == moduleOf.end() ? static_cast<int>(modules.size()) - 1
                                : it->second;
  }
};

/// Discovers the chain of `func`. `moduleRegex` overrides the automatic
/// rules (its first capture group names the layer). Emits a diagnostic and
/// fails only for a bad regex, a regex that matches nothing, or an empty
/// function.
mlir::FailureOr<ModuleChain> discoverModules(mlir::func::FuncOp func,
                                             llvm::StringRef moduleRegex);

/// The chain recorded in the IR by dist-discover-modules (or by hand):
/// `dist.chain` on the function, `dist.module` on its ops.
mlir::FailureOr<ModuleChain> chainFromAttributes(mlir::func::FuncOp func);

/// A printable name for a value: an argument's `graph.name`, else the name
/// of the defining op's location (its ONNX node).
std::string valueName(mlir::Value value);

} // namespace lamina::ir::dist

#endif // LAMINA_DIALECT_DIST_TRANSFORMS_DISCOVERY_H
