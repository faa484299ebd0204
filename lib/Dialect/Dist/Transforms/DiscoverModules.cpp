//===- DiscoverModules.cpp - dist-discover-modules ------------------------===//

#include "lamina/Dialect/Dist/Transforms/Discovery.h"
#include "lamina/Dialect/Dist/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

namespace lamina::ir::dist {
#define GEN_PASS_DEF_DISTDISCOVERMODULES
#include "lamina/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace lamina::ir::dist

using namespace mlir;
using namespace lamina;
using namespace lamina::ir::dist;

namespace {
ModuleKind kindOf(plan::ModuleRole role) {
  switch (role) {
  case plan::ModuleRole::Embedding:
    return ModuleKind::Embedding;
  case plan::ModuleRole::Layer:
    return ModuleKind::Layer;
  case plan::ModuleRole::Head:
    return ModuleKind::Head;
  }
  return ModuleKind::Layer;
}

struct DistDiscoverModules
    : ir::dist::impl::DistDiscoverModulesBase<DistDiscoverModules> {
  using Base::Base;
  void runOnOperation() override {
    auto func = getOperation().lookupSymbol<func::FuncOp>(functionName);
    if (!func) {
      mlir::emitError(getOperation().getLoc())
          << "dist-discover-modules: no function @" << functionName;
      return signalPassFailure();
    }
    FailureOr<ModuleChain> chain = discoverModules(func, moduleRegex);
    if (failed(chain))
      return signalPassFailure();
    MLIRContext *ctx = &getContext();
    Builder b(ctx);
    SmallVector<Attribute> modules;
    llvm::SmallDenseSet<int> bodies;
    for (const ChainModule &m : chain->modules) {
      modules.push_back(ModuleAttr::get(ctx, m.name, kindOf(m.role), m.body));
      if (m.body >= 0)
        bodies.insert(m.body);
    }
    func->setAttr(DistDialect::kChainAttr, b.getArrayAttr(modules));
    func->setAttr(DistDialect::kDiscoveryAttr,
                  b.getStringAttr(chain->discovery));
    for (Operation &op : func.getBody().front().without_terminator())
      op.setAttr(DistDialect::kModuleAttr,
                 b.getI64IntegerAttr(chain->moduleOfOp(&op)));
    numModules = chain->modules.size();
    numBodies = bodies.size();
  }
};
} // namespace
