//===- HoistParamCasts.cpp - parameters' narrow copies as arguments -------===//
//
// See the pass description in Passes.td. Every function of the module gets
// the same new arguments (the train step and its evaluation entry must
// take one argument list: the driver hands both the same buffers), one
// per trainable argument and narrow type that any function casts it to.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/MapVector.h"

namespace lamina::graph {
#define GEN_PASS_DEF_GRAPHHOISTPARAMCASTS
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace lamina::graph

using namespace mlir;
using namespace lamina::graph;

namespace {
/// A trainable argument (by name) and the type of its narrow copy.
using CopyKey = std::pair<StringRef, Type>;

/// The narrowing casts of `f`'s trainable arguments, by key.
llvm::MapVector<CopyKey, SmallVector<CastOp>> paramCasts(func::FuncOp f) {
  llvm::MapVector<CopyKey, SmallVector<CastOp>> casts;
  for (BlockArgument arg : f.getArguments()) {
    auto kind = f.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kKindAttr);
    auto name = f.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kNameAttr);
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!kind || kind.getValue() != kKindTrainable || !name || !type ||
        !type.getElementType().isF32())
      continue;
    for (Operation *user : arg.getUsers())
      if (auto c = dyn_cast<CastOp>(user)) {
        Type to = c.getType().getElementType();
        if (to.isBF16() || to.isF16())
          casts[{name.getValue(), c.getType()}].push_back(c);
      }
  }
  return casts;
}

struct GraphHoistParamCasts
    : lamina::graph::impl::GraphHoistParamCastsBase<GraphHoistParamCasts> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> funcs(module.getOps<func::FuncOp>());
    // The union over the functions, in a deterministic order.
    llvm::MapVector<CopyKey, bool> keys;
    for (func::FuncOp f : funcs)
      for (auto &entry : paramCasts(f))
        keys.insert({entry.first, true});
    if (keys.empty())
      return;
    Builder b(module.getContext());
    for (func::FuncOp f : funcs) {
      auto casts = paramCasts(f);
      bool hasParams = llvm::any_of(f.getArguments(), [&](BlockArgument a) {
        auto kind = f.getArgAttrOfType<StringAttr>(a.getArgNumber(), kKindAttr);
        return kind && kind.getValue() == kKindTrainable;
      });
      if (!hasParams)
        continue;
      for (auto &[key, unused] : keys) {
        unsigned index = f.getNumArguments();
        DictionaryAttr attrs = b.getDictionaryAttr(
            {b.getNamedAttr(kNameAttr, b.getStringAttr(key.first)),
             b.getNamedAttr(kKindAttr, b.getStringAttr(kKindParamCopy))});
        if (failed(f.insertArgument(index, key.second, attrs, f.getLoc()))) {
          signalPassFailure();
          return;
        }
        Value copy = f.getArgument(index);
        auto it = casts.find(key);
        if (it == casts.end())
          continue;
        for (CastOp c : it->second) {
          c.getResult().replaceAllUsesWith(copy);
          c.erase();
          ++numHoisted;
        }
      }
      ++numFunctions;
    }
  }
};
} // namespace
