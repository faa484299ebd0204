//===- HoistParamCasts.cpp - parameters' narrow copies as arguments -------===//
//
// See the pass description in Passes.td. Every function of the module gets
// the same new arguments (the train step and its evaluation entry must
// take one argument list: the driver hands both the same buffers), one
// per trainable argument and narrow type that any function casts it to.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Graph/Transforms/HoistParamCasts.h"
#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

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

bool hasTrainable(func::FuncOp f) {
  for (unsigned i = 0, e = f.getNumArguments(); i < e; ++i)
    if (auto kind = f.getArgAttrOfType<StringAttr>(i, kKindAttr);
        kind && kind.getValue() == kKindTrainable)
      return true;
  return false;
}

/// The narrowing casts of `f`'s trainable f32 arguments, by key.
CastsByKey paramCasts(func::FuncOp f) {
  CastsByKey casts;
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
} // namespace

LogicalResult lamina::graph::hoistParamCasts(ArrayRef<func::FuncOp> funcs,
                                             ArrayRef<unsigned> positions,
                                             unsigned &hoisted) {
  hoisted = 0;
  // Each function's casts, and their union in a deterministic order.
  SmallVector<CastsByKey> casts;
  llvm::SetVector<CopyKey> keys;
  for (func::FuncOp f : funcs) {
    casts.push_back(paramCasts(f));
    for (auto &entry : casts.back())
      keys.insert(entry.first);
  }
  if (keys.empty())
    return success();
  for (size_t i = 0; i < funcs.size(); ++i) {
    func::FuncOp f = funcs[i];
    Builder b(f.getContext());
    unsigned index = positions.empty() ? f.getNumArguments() : positions[i];
    for (const CopyKey &key : keys) {
      DictionaryAttr attrs = b.getDictionaryAttr(
          {b.getNamedAttr(kNameAttr, b.getStringAttr(key.first)),
           b.getNamedAttr(kKindAttr, b.getStringAttr(kKindParamCopy))});
      if (failed(f.insertArgument(index, key.second, attrs, f.getLoc())))
        return failure();
      Value copy = f.getArgument(index++);
      for (CastOp c : casts[i].lookup(key)) {
        c.getResult().replaceAllUsesWith(copy);
        c.erase();
        ++hoisted;
      }
    }
  }
  return success();
}

namespace {
struct GraphHoistParamCasts
    : lamina::graph::impl::GraphHoistParamCastsBase<GraphHoistParamCasts> {
  void runOnOperation() override {
    SmallVector<func::FuncOp> funcs;
    for (func::FuncOp f : getOperation().getOps<func::FuncOp>())
      if (hasTrainable(f))
        funcs.push_back(f);
    unsigned hoisted = 0;
    if (failed(hoistParamCasts(funcs, {}, hoisted)))
      return signalPassFailure();
    numHoisted += hoisted;
    if (hoisted)
      numFunctions += funcs.size();
  }
};
} // namespace
