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
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringMap.h"

namespace lamina::ir::graph {
#define GEN_PASS_DEF_GRAPHHOISTPARAMCASTS
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace lamina::ir::graph

using namespace mlir;
using namespace lamina::ir::graph;

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

/// `f`'s trainable f32 arguments.
SmallVector<std::pair<StringRef, BlockArgument>> trainableF32(func::FuncOp f) {
  SmallVector<std::pair<StringRef, BlockArgument>> args;
  for (BlockArgument arg : f.getArguments()) {
    auto kind = f.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kKindAttr);
    auto name = f.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kNameAttr);
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (kind && kind.getValue() == kKindTrainable && name && type &&
        type.getElementType().isF32())
      args.push_back({name.getValue(), arg});
  }
  return args;
}

/// The narrowing casts of `f`'s trainable f32 arguments, by key; with
/// `everyRead`, only the casts to it, and a key for every argument.
CastsByKey paramCasts(func::FuncOp f, Type everyRead) {
  CastsByKey casts;
  for (auto [name, arg] : trainableF32(f)) {
    auto type = cast<RankedTensorType>(arg.getType());
    if (everyRead)
      casts[{name, type.clone(everyRead)}];
    for (Operation *user : arg.getUsers())
      if (auto c = dyn_cast<CastOp>(user)) {
        Type to = c.getType().getElementType();
        if (everyRead ? to == everyRead : to.isBF16() || to.isF16())
          casts[{name, c.getType()}].push_back(c);
      }
  }
  return casts;
}

/// The reads of `weight` left after its casts to `copy`'s type became
/// `copy`: a gather's data gathers the copy and widens the rows, anything
/// else reads the copy widened once at the function's entry.
void readThroughCopy(Value weight, Value copy) {
  OpBuilder b(copy.getContext());
  Value wide;
  for (OpOperand &use : llvm::make_early_inc_range(weight.getUses())) {
    if (auto g = dyn_cast<GatherOp>(use.getOwner());
        g && use.get() == g.getData()) {
      b.setInsertionPoint(g);
      Value rows = GatherOp::create(b, g.getLoc(), copy, g.getIndices(),
                                    g.getAxisAttr(), g.getPaddingIdxAttr());
      Value wideRows = CastOp::create(b, g.getLoc(), g.getType(), rows);
      g.getResult().replaceAllUsesWith(wideRows);
      g.erase();
      continue;
    }
    if (!wide) {
      b.setInsertionPointToStart(copy.getParentBlock());
      wide = CastOp::create(b, weight.getLoc(), weight.getType(), copy);
    }
    use.set(wide);
  }
}
} // namespace

FailureOr<Type> lamina::ir::graph::everyReadType(Operation *op, StringRef pass,
                                                 StringRef name) {
  if (name.empty())
    return Type();
  if (name == "bf16")
    return Type(BFloat16Type::get(op->getContext()));
  if (name == "f16")
    return Type(Float16Type::get(op->getContext()));
  return op->emitError() << pass << ": every-read is '" << name
                         << "', not bf16 or f16";
}

bool lamina::ir::graph::readsNoTrainable(func::FuncOp f) {
  for (auto [name, arg] : trainableF32(f))
    if (!arg.use_empty())
      return false;
  return true;
}

LogicalResult lamina::ir::graph::hoistParamCasts(ArrayRef<func::FuncOp> funcs,
                                                 ArrayRef<unsigned> positions,
                                                 unsigned &hoisted,
                                                 Type everyRead) {
  hoisted = 0;
  // Each function's casts, and their union in a deterministic order.
  SmallVector<CastsByKey> casts;
  llvm::SetVector<CopyKey> keys;
  for (func::FuncOp f : funcs) {
    casts.push_back(paramCasts(f, everyRead));
    for (auto &entry : casts.back())
      keys.insert(entry.first);
  }
  if (keys.empty())
    return success();
  for (size_t i = 0; i < funcs.size(); ++i) {
    func::FuncOp f = funcs[i];
    Builder b(f.getContext());
    llvm::StringMap<BlockArgument> weights;
    for (auto [name, arg] : trainableF32(f))
      weights[name] = arg;
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
      if (everyRead && weights.count(key.first))
        readThroughCopy(weights[key.first], copy);
    }
  }
  return success();
}

namespace {
struct GraphHoistParamCasts
    : lamina::ir::graph::impl::GraphHoistParamCastsBase<GraphHoistParamCasts> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<func::FuncOp> funcs;
    for (func::FuncOp f : getOperation().getOps<func::FuncOp>())
      if (hasTrainable(f))
        funcs.push_back(f);
    FailureOr<Type> type =
        everyReadType(getOperation(), getArgument(), everyRead);
    if (failed(type))
      return signalPassFailure();
    unsigned hoisted = 0;
    if (failed(hoistParamCasts(funcs, {}, hoisted, *type)))
      return signalPassFailure();
    numHoisted += hoisted;
    if (hoisted)
      numFunctions += funcs.size();
  }
};
} // namespace
