//===- HoistParamCasts.cpp - module functions' parameter copies -----------===//
//
// See the pass description in Passes.td: ir::graph::hoistParamCasts over each
// module's forward and backward, the copies placed where the runtime's
// binding of the forward's arguments (lib/Runtime/Dist) finds them in
// both.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Graph/Transforms/HoistParamCasts.h"
#include "lamina/Dialect/Dist/IR/DistDialect.h"
#include "lamina/Dialect/Dist/Transforms/ModuleFunctions.h"
#include "lamina/Dialect/Dist/Transforms/Passes.h"
#include "lamina/Dialect/Graph/IR/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace lamina::ir::dist {
#define GEN_PASS_DEF_DISTHOISTPARAMCASTS
#include "lamina/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace lamina::ir::dist

using namespace mlir;
using namespace lamina;
using namespace lamina::ir::dist;

namespace {
struct DistHoistParamCasts
    : lamina::ir::dist::impl::DistHoistParamCastsBase<DistHoistParamCasts> {
  using Base::Base;

  void runOnOperation() override {
    auto pairs = moduleFunctions(getOperation());
    FailureOr<Type> type =
        ir::graph::everyReadType(getOperation(), getArgument(), everyRead);
    if (failed(type))
      return signalPassFailure();
    for (auto &[k, pair] : pairs) {
      auto [fwd, bwd] = pair;
      if (!fwd || !bwd || !startsWithForwardArgs(fwd, bwd)) {
        getOperation().emitError()
            << "dist-hoist-param-casts: module " << k << " lacks @fwd_" << k
            << " or @bwd_" << k
            << ", or the backward does not start with the forward's "
               "arguments";
        return signalPassFailure();
      }
      unsigned at = fwd.getNumArguments(), hoisted = 0;
      if (failed(
              ir::graph::hoistParamCasts({fwd, bwd}, {at, at}, hoisted, *type)))
        return signalPassFailure();
      // The runtime's licence to leave the f32 weights unbound.
      if (*type && ir::graph::readsNoTrainable(fwd) &&
          ir::graph::readsNoTrainable(bwd))
        for (func::FuncOp f : {fwd, bwd}) {
          auto o = f->getAttrOfType<OutlinedAttr>(DistDialect::kOutlinedAttr);
          f->setAttr(DistDialect::kOutlinedAttr,
                     OutlinedAttr::get(&getContext(), o.getModule(),
                                       o.getName(), o.getNumIn(), o.getNumOut(),
                                       o.getNumResiduals(), o.getRecompute(),
                                       /*copiesOnly=*/true));
        }
      numHoisted += hoisted;
      if (hoisted)
        ++numModules;
    }
  }

  /// The contract of DistProgram.h: @bwd_k's arguments begin with @fwd_k's
  /// (same types, kinds and names).
  static bool startsWithForwardArgs(func::FuncOp fwd, func::FuncOp bwd) {
    if (bwd.getNumArguments() < fwd.getNumArguments())
      return false;
    for (unsigned i = 0, e = fwd.getNumArguments(); i < e; ++i)
      if (fwd.getArgument(i).getType() != bwd.getArgument(i).getType() ||
          fwd.getArgAttrDict(i) != bwd.getArgAttrDict(i))
        return false;
    return true;
  }
};
} // namespace
