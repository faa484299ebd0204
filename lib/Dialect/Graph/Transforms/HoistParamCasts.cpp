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
#include "llvm/ADT/SetVector.h"

#include <optional>

namespace lamina::graph {
#define GEN_PASS_DEF_GRAPHHOISTPARAMCASTS
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace lamina::graph

using namespace mlir;
using namespace lamina::graph;

namespace {
/// A trainable argument (by name) and the type of its narrow copy.
using CopyKey = std::pair<StringRef, Type>;

using CastsByKey = llvm::MapVector<CopyKey, SmallVector<CastOp>>;

/// The narrowing casts of `f`'s trainable arguments, by key; nullopt when
/// `f` has no trainable argument (it gets no copies).
std::optional<CastsByKey> paramCasts(func::FuncOp f) {
  std::optional<CastsByKey> casts;
  for (BlockArgument arg : f.getArguments()) {
    auto kind = f.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kKindAttr);
    if (!kind || kind.getValue() != kKindTrainable)
      continue;
    if (!casts)
      casts.emplace();
    auto name = f.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kNameAttr);
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!name || !type || !type.getElementType().isF32())
      continue;
    for (Operation *user : arg.getUsers())
      if (auto c = dyn_cast<CastOp>(user)) {
        Type to = c.getType().getElementType();
        if (to.isBF16() || to.isF16())
          (*casts)[{name.getValue(), c.getType()}].push_back(c);
      }
  }
  return casts;
}

struct GraphHoistParamCasts
    : lamina::graph::impl::GraphHoistParamCastsBase<GraphHoistParamCasts> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    // Each function's casts, and their union in a deterministic order.
    SmallVector<std::pair<func::FuncOp, CastsByKey>> funcs;
    llvm::SetVector<CopyKey> keys;
    for (func::FuncOp f : module.getOps<func::FuncOp>())
      if (std::optional<CastsByKey> casts = paramCasts(f)) {
        for (auto &entry : *casts)
          keys.insert(entry.first);
        funcs.emplace_back(f, std::move(*casts));
      }
    if (keys.empty())
      return;
    Builder b(module.getContext());
    for (auto &[f, casts] : funcs) {
      for (const CopyKey &key : keys) {
        unsigned index = f.getNumArguments();
        DictionaryAttr attrs = b.getDictionaryAttr(
            {b.getNamedAttr(kNameAttr, b.getStringAttr(key.first)),
             b.getNamedAttr(kKindAttr, b.getStringAttr(kKindParamCopy))});
        if (failed(f.insertArgument(index, key.second, attrs, f.getLoc()))) {
          signalPassFailure();
          return;
        }
        Value copy = f.getArgument(index);
        for (CastOp c : casts.lookup(key)) {
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
