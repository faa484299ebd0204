//===- NarrowResiduals.cpp - a module's kept products in bf16 -------------===//
//
// See the pass description in Passes.td: ir::graph::narrowResiduals over
// each module's forward and backward; and moduleFunctions, the pairing it
// shares with dist-hoist-param-casts.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Dist/IR/DistDialect.h"
#include "lamina/Dialect/Dist/Transforms/ModuleFunctions.h"
#include "lamina/Dialect/Dist/Transforms/Passes.h"
#include "lamina/Dialect/Graph/Transforms/FuseEpilogues.h"

namespace lamina::ir::dist {
#define GEN_PASS_DEF_DISTNARROWRESIDUALS
#include "lamina/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace lamina::ir::dist

using namespace mlir;
using namespace lamina;

std::map<int64_t, std::pair<func::FuncOp, func::FuncOp>>
ir::dist::moduleFunctions(ModuleOp module) {
  std::map<int64_t, std::pair<func::FuncOp, func::FuncOp>> pairs;
  for (func::FuncOp f : module.getOps<func::FuncOp>()) {
    auto outlined = f->getAttrOfType<OutlinedAttr>(DistDialect::kOutlinedAttr);
    if (!outlined)
      continue;
    auto &[fwd, bwd] = pairs[outlined.getModule()];
    (f.getSymName().starts_with("bwd_") ? bwd : fwd) = f;
  }
  return pairs;
}

namespace {
struct DistNarrowResiduals
    : ir::dist::impl::DistNarrowResidualsBase<DistNarrowResiduals> {
  void runOnOperation() override {
    for (auto &[k, pair] : ir::dist::moduleFunctions(getOperation()))
      if (pair.first && pair.second)
        numNarrowed += ir::graph::narrowResiduals(pair.first, pair.second);
  }
};
} // namespace
