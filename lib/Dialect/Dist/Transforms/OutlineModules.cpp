//===- OutlineModules.cpp - dist-outline-modules ---------------------------===//
//
// Splits @forward along its module chain into @fwd_k / @bwd_k, the functions
// a pipeline rank calls for one micro-batch (include/lamina/Runtime/
// DistProgram.h states the calling contract, docs/distributed.md the
// design). Boundary values are the trainable-dependent values that cross a
// module edge; they are threaded through intermediate modules, so a value
// from module 1 read by module 3 also passes through module 2. Everything
// else a module reads from earlier modules depends only on inputs and
// constants, and is recomputed in place: those values are cheap (positions,
// masks) and sending them would couple more ranks.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Dist/IR/DistDialect.h"
#include "lamina/Dialect/Dist/Transforms/Discovery.h"
#include "lamina/Dialect/Dist/Transforms/Passes.h"
#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Autodiff.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

namespace lamina::ir::dist {
#define GEN_PASS_DEF_DISTOUTLINEMODULES
#include "lamina/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace lamina::ir::dist

using namespace mlir;
using namespace lamina;
using namespace lamina::ir::dist;

namespace {
using ir::graph::kKindBoundary, ir::graph::kKindResidual,
    ir::graph::kKindCotangent;

bool isFloatTensor(Value v) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  return type && isa<FloatType>(type.getElementType());
}

/// What one module's functions read and produce, in terms of @forward.
struct ModulePart {
  std::string name;
  SmallVector<Value> boundaryIn;  ///< ordered as B_{k-1}
  SmallVector<Value> boundaryOut; ///< B_k, or {loss} for the last module
  llvm::SetVector<Operation *> ops; ///< own ops and recomputed ones
  llvm::SetVector<BlockArgument> args; ///< inputs and parameters read
};

struct DistOutlineModules
    : ir::dist::impl::DistOutlineModulesBase<DistOutlineModules> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto forward = module.lookupSymbol<func::FuncOp>("forward");
    if (!forward || !forward.getBody().hasOneBlock()) {
      module.emitError("dist-outline-modules: no single-block func.func @forward");
      return signalPassFailure();
    }
    FailureOr<SmallVector<ModulePart>> parts = split(forward);
    if (failed(parts))
      return signalPassFailure();
    OpBuilder b(forward);
    int last = int(parts->size()) - 1;
    for (auto [k, part] : llvm::enumerate(*parts))
      if (failed(outline(b, forward, part, int(k), int(k) == last)))
        return signalPassFailure();
    module->setAttr(DistDialect::kNumModulesAttr, b.getI64IntegerAttr(parts->size()));
    numModules = parts->size();
    forward.erase();
  }

  FailureOr<SmallVector<ModulePart>> split(func::FuncOp forward);
  LogicalResult outline(OpBuilder &b, func::FuncOp forward, ModulePart &part,
                        int k, bool last);
};
} // namespace

/// The loss output: named `lossName`, else the only scalar.
static FailureOr<Value> findLoss(func::FuncOp forward, StringRef lossName) {
  auto ret = cast<func::ReturnOp>(forward.getBody().front().getTerminator());
  auto names = forward->getAttrOfType<ArrayAttr>(ir::graph::kOutputNamesAttr);
  std::optional<unsigned> found;
  unsigned scalars = 0;
  for (unsigned i = 0; i < ret.getNumOperands(); ++i) {
    if (names && i < names.size())
      if (auto s = dyn_cast<StringAttr>(names[i]); s && s.getValue() == lossName)
        return ret.getOperand(i);
    auto t = dyn_cast<RankedTensorType>(ret.getOperand(i).getType());
    if (t && t.hasStaticShape() && t.getNumElements() == 1)
      found = i, ++scalars;
  }
  if (scalars != 1)
    return forward.emitError("dist-outline-modules: @forward has no output "
                             "named '")
           << lossName << "' (run graph-add-loss, or name the loss)";
  return ret.getOperand(*found);
}

FailureOr<SmallVector<ModulePart>>
DistOutlineModules::split(func::FuncOp forward) {
  // graph-add-loss recorded which output the loss is.
  std::string lossName = this->loss;
  if (auto train = ir::graph::trainAttrOf(forward->getParentOp());
      train && lossName.empty())
    lossName = train.getOutput().str();
  FailureOr<Value> loss =
      findLoss(forward, lossName.empty() ? StringRef("loss") : lossName);
  if (failed(loss))
    return failure();
  FailureOr<ModuleChain> chain =
      forward->hasAttr(DistDialect::kChainAttr) && moduleRegex.empty()
          ? chainFromAttributes(forward)
          : discoverModules(forward, moduleRegex);
  if (failed(chain))
    return failure();

  // Chain modules -> schedule modules (layers), as the planner groups them
  // (lib/Plan/CostModel.cpp): a non-layer module joins the nearest preceding
  // layer, or the first layer when it precedes all of them.
  const int numChain = int(chain->modules.size());
  SmallVector<int> layers;
  for (int m = 0; m < numChain; ++m)
    if (chain->modules[m].role == plan::ModuleRole::Layer)
      layers.push_back(m);
  if (layers.empty())
    for (int m = 0; m < numChain; ++m)
      layers.push_back(m);
  SmallVector<int> stageOf(numChain, -1);
  for (auto [s, m] : llvm::enumerate(layers))
    stageOf[m] = int(s);
  for (int m = 0, prev = 0; m < numChain; ++m) {
    if (stageOf[m] < 0)
      stageOf[m] = m < layers.front() ? 0 : prev;
    prev = stageOf[m];
  }
  const int numParts = int(layers.size());
  SmallVector<ModulePart> parts(numParts);
  for (int m = 0; m < numChain; ++m) {
    std::string &name = parts[stageOf[m]].name;
    name += (name.empty() ? "" : "+") + chain->modules[m].name;
  }

  Block &body = forward.getBody().front();
  // Values that depend on a trainable parameter must travel; the rest can be
  // recomputed wherever they are read.
  llvm::DenseSet<Value> dependent;
  for (BlockArgument arg : body.getArguments())
    if (auto kind = forward.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                         ir::graph::kKindAttr);
        kind && kind.getValue() == ir::graph::kKindTrainable)
      dependent.insert(arg);
  llvm::DenseMap<Operation *, int> partOf;
  for (Operation &op : body.without_terminator()) {
    partOf[&op] = stageOf[chain->moduleOfOp(&op)];
    if (llvm::any_of(op.getOperands(),
                     [&](Value v) { return dependent.contains(v); }))
      for (Value r : op.getResults())
        dependent.insert(r);
  }
  if (!dependent.contains(*loss))
    return forward.emitError("dist-outline-modules: the loss does not depend "
                             "on any trainable parameter");

  // boundary[k]: values live across the edge k -> k+1, in definition order.
  std::vector<llvm::SetVector<Value>> boundary(numParts);
  auto cross = [&](Value v, int from, int to) {
    for (int k = from; k < to; ++k)
      boundary[k].insert(v);
  };
  // Adds `op` (and the parameter-free ops it reads from earlier parts) to
  // part k.
  std::function<LogicalResult(Operation *, int)> use =
      [&](Operation *op, int k) -> LogicalResult {
    if (!parts[k].ops.insert(op))
      return success();
    for (Value v : op->getOperands()) {
      if (auto arg = dyn_cast<BlockArgument>(v)) {
        parts[k].args.insert(arg);
        continue;
      }
      Operation *def = v.getDefiningOp();
      int from = partOf.lookup(def);
      if (from == k)
        continue;
      if (from > k)
        return op->emitError("dist-outline-modules: reads a value of a later "
                             "module (the chain is not in order)");
      if (!dependent.contains(v)) {
        if (failed(use(def, k)))
          return failure();
        ++numCloned;
        continue;
      }
      if (!isFloatTensor(v))
        return def->emitError("dist-outline-modules: a value crossing from "
                              "module ")
               << from << " to " << k
               << " is not a float tensor; only activations can be sent";
      cross(v, from, k);
    }
    return success();
  };
  for (Operation &op : body.without_terminator())
    if (failed(use(&op, partOf[&op])))
      return failure();
  // Ops cloned into a part were inserted out of order; restore body order.
  for (ModulePart &part : parts) {
    SmallVector<Operation *> ordered(part.ops.begin(), part.ops.end());
    llvm::sort(ordered, [](Operation *a, Operation *b) {
      return a->isBeforeInBlock(b);
    });
    part.ops.clear();
    part.ops.insert(ordered.begin(), ordered.end());
  }
  if (Operation *def = loss->getDefiningOp())
    cross(*loss, partOf[def], numParts - 1);
  for (int k = 0; k < numParts; ++k) {
    SmallVector<Value> ordered(boundary[k].begin(), boundary[k].end());
    if (k + 1 < numParts) {
      parts[k].boundaryOut = ordered;
      parts[k + 1].boundaryIn = ordered;
      numBoundary += ordered.size();
    }
  }
  parts.back().boundaryOut = {*loss};
  for (int k = 0; k + 1 < numParts; ++k)
    if (parts[k].boundaryOut.empty())
      return forward.emitError("dist-outline-modules: nothing trainable "
                               "flows from module ")
             << k << " ('" << parts[k].name << "') to module " << k + 1;
  return parts;
}

LogicalResult DistOutlineModules::outline(OpBuilder &b, func::FuncOp forward,
                                          ModulePart &part, int k, bool last) {
  MLIRContext *ctx = &getContext();
  Location loc = forward.getLoc();
  // Signature: boundary inputs, then the @forward arguments read, in order.
  SmallVector<BlockArgument> args(part.args.begin(), part.args.end());
  llvm::sort(args, [](BlockArgument a, BlockArgument b) {
    return a.getArgNumber() < b.getArgNumber();
  });
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  auto named = [&](StringRef kind, const std::string &name) {
    return DictionaryAttr::get(
        ctx, {b.getNamedAttr(ir::graph::kKindAttr, b.getStringAttr(kind)),
              b.getNamedAttr(ir::graph::kNameAttr, b.getStringAttr(name))});
  };
  for (auto [i, v] : llvm::enumerate(part.boundaryIn)) {
    argTypes.push_back(v.getType());
    argAttrs.push_back(named(kKindBoundary, "boundary:" + std::to_string(k - 1) +
                                            ":" + std::to_string(i)));
  }
  for (BlockArgument a : args) {
    argTypes.push_back(a.getType());
    argAttrs.push_back(forward.getArgAttrDict(a.getArgNumber()));
  }
  const unsigned numIn = part.boundaryIn.size();
  SmallVector<unsigned> trainable; // positions in the signature
  for (auto [i, a] : llvm::enumerate(args))
    if (auto kind = forward.getArgAttrOfType<StringAttr>(a.getArgNumber(),
                                                         ir::graph::kKindAttr);
        kind && kind.getValue() == ir::graph::kKindTrainable)
      trainable.push_back(numIn + i);

  // Clones the part's ops into a new function's entry block.
  auto makeFunction = [&](StringRef name, ArrayRef<Type> extraArgs,
                          IRMapping &map) {
    SmallVector<Type> types(argTypes);
    types.append(extraArgs.begin(), extraArgs.end());
    auto f = func::FuncOp::create(b, loc, name,
                                  FunctionType::get(ctx, types, {}));
    Block *entry = f.addEntryBlock();
    for (auto [i, v] : llvm::enumerate(part.boundaryIn))
      map.map(v, entry->getArgument(i));
    for (auto [i, a] : llvm::enumerate(args))
      map.map(Value(a), entry->getArgument(numIn + i));
    OpBuilder body = OpBuilder::atBlockEnd(entry);
    for (Operation *op : part.ops)
      body.clone(*op, map);
    return f;
  };
  auto setArgAttrs = [&](func::FuncOp f, ArrayRef<DictionaryAttr> extra) {
    SmallVector<DictionaryAttr> all(argAttrs);
    all.append(extra.begin(), extra.end());
    f.setAllArgAttrs(all);
  };
  auto finish = [&](func::FuncOp f, ArrayRef<Value> results,
                    ArrayRef<std::string> names) {
    Block &entry = f.getBody().front();
    OpBuilder rb = OpBuilder::atBlockEnd(&entry);
    func::ReturnOp::create(rb, loc, results);
    f.setFunctionType(FunctionType::get(ctx, f.getArgumentTypes(),
                                        TypeRange(ValueRange(results))));
    SmallVector<Attribute> attrs;
    for (const std::string &n : names)
      attrs.push_back(b.getStringAttr(n));
    f->setAttr(ir::graph::kOutputNamesAttr, b.getArrayAttr(attrs));
    ir::graph::eraseDeadOps(entry);
  };
  std::vector<std::string> outNames;
  for (unsigned i = 0; i < part.boundaryOut.size(); ++i)
    outNames.push_back(last ? "loss"
                            : "boundary:" + std::to_string(k) + ":" +
                                  std::to_string(i));

  // Backward first: without recompute, its reads of forward values decide
  // the residuals the forward must return.
  SmallVector<Type> cotTypes;
  SmallVector<DictionaryAttr> cotAttrs;
  for (auto [i, v] : llvm::enumerate(part.boundaryOut)) {
    cotTypes.push_back(v.getType());
    cotAttrs.push_back(named(kKindCotangent, "grad:" + outNames[i]));
  }
  IRMapping bmap;
  func::FuncOp bwd =
      makeFunction("bwd_" + std::to_string(k), cotTypes, bmap);
  Block &bentry = bwd.getBody().front();
  SmallVector<Operation *> forwardOps;
  for (Operation &op : bentry)
    forwardOps.push_back(&op);
  SmallVector<Value> outputs, seeds, wrt;
  for (Value v : part.boundaryOut)
    outputs.push_back(bmap.lookup(v));
  for (unsigned i = 0; i < cotTypes.size(); ++i)
    seeds.push_back(bentry.getArgument(argTypes.size() + i));
  for (unsigned i = 0; i < numIn; ++i)
    wrt.push_back(bentry.getArgument(i));
  for (unsigned i : trainable)
    wrt.push_back(bentry.getArgument(i));
  OpBuilder bb = OpBuilder::atBlockEnd(&bentry);
  FailureOr<SmallVector<Value>> grads =
      ir::graph::buildReverse(bb, forwardOps, outputs, seeds, wrt);
  if (failed(grads))
    return failure();
  std::vector<std::string> gradNames;
  for (unsigned i = 0; i < numIn; ++i)
    gradNames.push_back("grad:boundary:" + std::to_string(k - 1) + ":" +
                        std::to_string(i));
  for (unsigned i : trainable) {
    auto name = forward.getArgAttrOfType<StringAttr>(
        args[i - numIn].getArgNumber(), ir::graph::kNameAttr);
    gradNames.push_back("grad:" + (name ? name.str() : "arg" + std::to_string(i)));
  }

  // Residuals: forward values (other than constants, which the backward
  // keeps) that backward ops read.
  SmallVector<Value> residuals; // in bwd
  if (!recompute) {
    llvm::DenseSet<Operation *> isForward(forwardOps.begin(), forwardOps.end());
    llvm::SetVector<Value> read;
    for (Operation &op : bentry)
      if (!isForward.contains(&op))
        for (Value v : op.getOperands())
          if (Operation *def = v.getDefiningOp();
              def && isForward.contains(def) && def->getNumOperands() > 0)
            read.insert(v);
    // Results of a graph.view-like op could be re-derived, but keeping the
    // rule simple keeps the contract simple: every read value is a residual.
    residuals.assign(read.begin(), read.end());
    llvm::sort(residuals, [](Value a, Value b) {
      Operation *x = a.getDefiningOp(), *y = b.getDefiningOp();
      if (x != y)
        return x->isBeforeInBlock(y);
      return cast<OpResult>(a).getResultNumber() <
             cast<OpResult>(b).getResultNumber();
    });
  }
  // The original value of each residual, to return it from the forward.
  llvm::DenseMap<Value, Value> original;
  for (Operation *op : part.ops)
    for (Value r : op->getResults())
      original[bmap.lookup(r)] = r;
  SmallVector<Value> residualOrig;
  for (Value r : residuals)
    residualOrig.push_back(original.lookup(r));
  SmallVector<DictionaryAttr> resAttrs;
  for (auto [i, r] : llvm::enumerate(residuals)) {
    BlockArgument arg = bentry.insertArgument(argTypes.size() + i, r.getType(), loc);
    r.replaceAllUsesWith(arg);
    resAttrs.push_back(named(kKindResidual, "residual:" + std::to_string(i)));
  }
  SmallVector<DictionaryAttr> bwdExtra(resAttrs);
  bwdExtra.append(cotAttrs.begin(), cotAttrs.end());
  bwd.setFunctionType(FunctionType::get(ctx, bentry.getArgumentTypes(), {}));
  setArgAttrs(bwd, bwdExtra);
  finish(bwd, *grads, gradNames);
  auto outlined =
      OutlinedAttr::get(ctx, k, part.name, numIn, part.boundaryOut.size(),
                        residuals.size(), recompute, /*copiesOnly=*/false);
  bwd->setAttr(DistDialect::kOutlinedAttr, outlined);

  // Forward: boundary outputs, then residuals.
  b.setInsertionPoint(bwd);
  IRMapping fmap;
  func::FuncOp fwd = makeFunction("fwd_" + std::to_string(k), {}, fmap);
  setArgAttrs(fwd, {});
  SmallVector<Value> results;
  for (Value v : part.boundaryOut)
    results.push_back(fmap.lookup(v));
  std::vector<std::string> names(outNames);
  for (auto [i, r] : llvm::enumerate(residualOrig)) {
    results.push_back(fmap.lookup(r));
    names.push_back("residual:" + std::to_string(i));
  }
  finish(fwd, results, names);
  fwd->setAttr(DistDialect::kOutlinedAttr, outlined);
  b.setInsertionPointAfter(bwd);
  return success();
}
