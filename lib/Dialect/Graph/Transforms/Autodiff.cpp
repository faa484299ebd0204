//===- Autodiff.cpp - graph-autodiff: reverse-mode gradients --------------===//
//
// Clones @forward into @train_step and appends the backward pass: ops are
// visited in reverse, each asked for its operand gradients through
// GradientOpInterface, and gradients of values used more than once are
// summed. Only float values that depend on a trainable argument ("active"
// values) receive gradients; whatever a rule builds for other operands is
// dead and removed at the end, together with forward ops the loss and
// gradients do not need.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Autodiff.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseSet.h"

namespace lamina::ir::graph {
#define GEN_PASS_DEF_GRAPHAUTODIFF
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace lamina::ir::graph

using namespace mlir;
using namespace lamina::ir::graph;

namespace {
bool isFloatTensor(Value v) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  return type && isa<FloatType>(type.getElementType());
}

/// " (ONNX node 'name')" when the location names a node, else "".
std::string nodeSuffix(Location loc) {
  while (true) {
    if (auto name = dyn_cast<NameLoc>(loc))
      return (" (ONNX node '" + name.getName().getValue() + "')").str();
    if (auto callsite = dyn_cast<CallSiteLoc>(loc))
      loc = callsite.getCallee();
    else if (auto fused = dyn_cast<FusedLoc>(loc);
             fused && !fused.getLocations().empty())
      loc = fused.getLocations().front();
    else
      return "";
  }
}

/// Whether `v` is a splat constant of zeros.
bool isZeroSplat(Value v) {
  auto c = v.getDefiningOp<ConstantOp>();
  auto attr = c ? dyn_cast<DenseElementsAttr>(c.getValue()) : nullptr;
  if (!attr || !attr.isSplat() || !isa<FloatType>(attr.getElementType()))
    return false;
  return (*attr.getValues<APFloat>().begin()).isZero();
}

/// A concat's pieces along its axis: [start, start + size) and the value.
struct Piece {
  int64_t start, size;
  Value value;
  bool zero;
};

SmallVector<Piece> piecesOf(ConcatOp c) {
  SmallVector<Piece> pieces;
  int64_t at = 0, axis = int64_t(c.getAxis());
  for (Value v : c.getInputs()) {
    int64_t size = cast<RankedTensorType>(v.getType()).getDimSize(axis);
    pieces.push_back({at, size, v, isZeroSplat(v)});
    at += size;
  }
  return pieces;
}

/// a + b for two gradients that are zero-padded concats along one axis
/// whose non-zero pieces do not overlap (the slices of one tensor: q, k and
/// v from a fused projection): one concat of the pieces, instead of
/// full-size padded copies and their sum. Null when they are not.
Value mergePaddedConcats(OpBuilder &b, Location loc, Value x, Value y) {
  auto cx = x.getDefiningOp<ConcatOp>(), cy = y.getDefiningOp<ConcatOp>();
  if (!cx || !cy || cx.getAxis() != cy.getAxis() || x.getType() != y.getType())
    return {};
  SmallVector<Piece> live;
  SmallVector<Piece> px = piecesOf(cx), py = piecesOf(cy);
  for (auto [mine, other] : {std::pair(&px, &py), std::pair(&py, &px)})
    for (const Piece &p : *mine) {
      if (p.zero || p.size == 0)
        continue;
      for (const Piece &q : *other)
        if (!q.zero && q.start < p.start + p.size && p.start < q.start + q.size)
          return {}; // both non-zero somewhere: a real sum
      live.push_back(p);
    }
  llvm::sort(live, [](const Piece &l, const Piece &r) { return l.start < r.start; });
  auto type = cast<RankedTensorType>(x.getType());
  int64_t axis = int64_t(cx.getAxis()), at = 0;
  SmallVector<Value> inputs;
  auto zeros = [&](int64_t size) {
    SmallVector<int64_t> shape(type.getShape());
    shape[axis] = size;
    inputs.push_back(splatConstant(b, loc, type.clone(shape), 0.0));
  };
  for (const Piece &p : live) {
    if (p.start > at)
      zeros(p.start - at);
    inputs.push_back(p.value);
    at = p.start + p.size;
  }
  if (at < type.getDimSize(axis))
    zeros(type.getDimSize(axis) - at);
  if (inputs.size() == 1)
    return inputs.front();
  return ConcatOp::create(b, loc, inputs, cx.getAxisAttr());
}

/// The sum of two gradient contributions to one value.
Value accumulate(OpBuilder &b, Location loc, Value x, Value y) {
  if (Value merged = mergePaddedConcats(b, loc, x, y))
    return merged;
  return AddOp::create(b, loc, x, y);
}

} // namespace

void lamina::ir::graph::eraseDeadOps(Block &block) {
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(block)))
    if (isOpTriviallyDead(&op))
      op.erase();
}

Value lamina::ir::graph::splatConstant(OpBuilder &b, Location loc, Type type,
                                       double value) {
  auto ranked = cast<RankedTensorType>(type);
  auto attr = DenseElementsAttr::get(
      ranked, b.getFloatAttr(ranked.getElementType(), value));
  return ConstantOp::create(b, loc, cast<ElementsAttr>(attr));
}

FailureOr<SmallVector<Value>>
lamina::ir::graph::buildReverse(OpBuilder &b, ArrayRef<Operation *> forwardOps,
                                ValueRange outputs, ValueRange seeds,
                                ValueRange wrt) {
  llvm::DenseSet<Value> active;
  for (Value v : wrt)
    if (isFloatTensor(v))
      active.insert(v);
  for (Operation *op : forwardOps)
    if (llvm::any_of(op->getOperands(),
                     [&](Value v) { return active.contains(v); }))
      for (Value r : op->getResults())
        if (isFloatTensor(r))
          active.insert(r);

  llvm::DenseMap<Value, Value> grads;
  for (auto [out, seed] : llvm::zip(outputs, seeds)) {
    if (!active.contains(out))
      continue;
    Value &slot = grads[out];
    slot = slot ? Value(AddOp::create(b, seed.getLoc(), slot, seed)) : seed;
  }
  for (Operation *op : llvm::reverse(forwardOps)) {
    SmallVector<Value> resultGrads;
    bool any = false;
    for (Value r : op->getResults()) {
      resultGrads.push_back(grads.lookup(r));
      any |= bool(resultGrads.back());
    }
    if (!any)
      continue;
    auto rule = dyn_cast<GradientOpInterface>(op);
    if (!rule)
      return op->emitError() << "graph-autodiff: no gradient rule for '"
                             << op->getName() << "'"
                             << nodeSuffix(op->getLoc())
                             << ", which lies between a trainable parameter "
                                "and the loss";
    SmallVector<Value> operandGrads;
    if (failed(rule.buildGradients(b, resultGrads, operandGrads)))
      // The op has rules, but not for these attributes or types
      // (for example an integer product).
      return op->emitError() << "graph-autodiff: no gradient rule for '"
                             << op->getName() << "' in this form"
                             << nodeSuffix(op->getLoc())
                             << ", which lies between a trainable parameter "
                                "and the loss";
    if (operandGrads.size() != op->getNumOperands())
      return op->emitError() << "graph-autodiff: gradient rule of '"
                             << op->getName() << "' gave "
                             << operandGrads.size() << " gradients for "
                             << op->getNumOperands() << " operands";
    for (auto [operand, grad] : llvm::zip(op->getOperands(), operandGrads)) {
      if (!grad || !active.contains(operand))
        continue;
      if (grad.getType() != operand.getType())
        return op->emitError() << "graph-autodiff: gradient rule of '"
                               << op->getName() << "' built " << grad.getType()
                               << " for an operand of type " << operand.getType();
      Value &slot = grads[operand];
      slot = slot ? accumulate(b, op->getLoc(), slot, grad) : grad;
    }
  }
  SmallVector<Value> result;
  for (Value v : wrt) {
    Value g = grads.lookup(v);
    result.push_back(g ? g : splatConstant(b, v.getLoc(), v.getType(), 0.0));
  }
  return result;
}

namespace {
struct GraphAutodiff
    : lamina::ir::graph::impl::GraphAutodiffBase<GraphAutodiff> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    func::FuncOp forward = entryFunctionOf(module);
    if (!forward) {
      module.emitError("graph-autodiff: no entry function (graph.entry, or "
                       "@forward)");
      return signalPassFailure();
    }
    if (module.lookupSymbol("train_step")) {
      module.emitError("graph-autodiff: @train_step already exists");
      return signalPassFailure();
    }
    if (!forward.getBody().hasOneBlock()) {
      forward.emitError("graph-autodiff: @forward must have one block");
      return signalPassFailure();
    }
    std::optional<unsigned> lossIndex = findLoss(forward);
    if (!lossIndex)
      return signalPassFailure();

    OpBuilder builder(forward);
    builder.setInsertionPointAfter(forward);
    auto step = cast<func::FuncOp>(builder.clone(*forward));
    step.setSymName("train_step");
    setEntryFunction(step, false);
    if (failed(differentiate(step, *lossIndex))) {
      step.erase();
      return signalPassFailure();
    }
  }

  /// The index of the loss output: `loss` by name, else the only scalar.
  std::optional<unsigned> findLoss(func::FuncOp forward) {
    auto names = forward->getAttrOfType<ArrayAttr>(kOutputNamesAttr);
    auto nameOf = [&](unsigned i) -> std::string {
      if (names && i < names.size())
        if (auto s = dyn_cast<StringAttr>(names[i]))
          return s.getValue().str();
      return "output_" + std::to_string(i);
    };
    ArrayRef<Type> results = forward.getFunctionType().getResults();
    std::optional<unsigned> found;
    // graph-add-loss recorded which output the loss is.
    std::string loss = this->loss;
    if (TrainAttr train = trainAttrOf(getOperation()); train && loss.empty())
      loss = train.getOutput().str();
    if (!loss.empty()) {
      for (unsigned i = 0; i < results.size(); ++i)
        if (nameOf(i) == loss)
          found = i;
      if (!found) {
        auto diag = forward.emitError()
                    << "graph-autodiff: no output named '" << loss
                    << "'; outputs:";
        for (unsigned i = 0; i < results.size(); ++i)
          diag << " '" << nameOf(i) << "'";
        return std::nullopt;
      }
    } else {
      unsigned scalars = 0;
      for (unsigned i = 0; i < results.size(); ++i)
        if (auto t = dyn_cast<RankedTensorType>(results[i]);
            t && t.hasStaticShape() && t.getNumElements() == 1)
          found = i, ++scalars;
      if (scalars != 1) {
        forward.emitError()
            << "graph-autodiff: @forward has " << scalars
            << " scalar outputs; name the loss with the 'loss' option";
        return std::nullopt;
      }
    }
    auto type = dyn_cast<RankedTensorType>(results[*found]);
    if (!type || !type.hasStaticShape() || type.getNumElements() != 1 ||
        !(type.getElementType().isF32() || type.getElementType().isF64())) {
      forward.emitError() << "graph-autodiff: loss '" << nameOf(*found)
                          << "' must be a scalar f32 or f64 tensor, not "
                          << results[*found];
      return std::nullopt;
    }
    return found;
  }

  LogicalResult differentiate(func::FuncOp step, unsigned lossIndex) {
    Block &body = step.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    Value lossValue = ret.getOperand(lossIndex);

    SmallVector<BlockArgument> params;
    for (BlockArgument arg : body.getArguments()) {
      auto kind = step.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kKindAttr);
      if (!kind || kind.getValue() != kKindTrainable)
        continue;
      if (!isFloatTensor(arg))
        return step.emitError() << "graph-autodiff: trainable argument #"
                                << arg.getArgNumber() << " is not a float tensor";
      params.push_back(arg);
    }
    SmallVector<Operation *> forwardOps;
    for (Operation &op : body.without_terminator())
      forwardOps.push_back(&op);

    OpBuilder b(ret);
    Value seed = splatConstant(b, ret.getLoc(), lossValue.getType(), 1.0);
    FailureOr<SmallVector<Value>> paramGrads = buildReverse(
        b, forwardOps, ValueRange{lossValue}, ValueRange{seed},
        ValueRange(ArrayRef<BlockArgument>(params)));
    if (failed(paramGrads))
      return failure();

    SmallVector<Value> results{lossValue};
    SmallVector<Attribute> names{b.getStringAttr("loss")};
    for (auto [p, g] : llvm::zip(params, *paramGrads)) {
      results.push_back(g);
      auto name = step.getArgAttrOfType<StringAttr>(p.getArgNumber(), kNameAttr);
      names.push_back(b.getStringAttr(
          "grad:" + (name ? name.getValue().str()
                          : "arg" + std::to_string(p.getArgNumber()))));
    }
    if (keepOutputs) {
      auto forwardNames = step->getAttrOfType<ArrayAttr>(kOutputNamesAttr);
      for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
        if (i == lossIndex)
          continue;
        std::string name = "output_" + std::to_string(i);
        if (forwardNames && i < forwardNames.size())
          if (auto s = dyn_cast<StringAttr>(forwardNames[i]))
            name = s.str();
        results.push_back(v);
        names.push_back(b.getStringAttr("output:" + name));
      }
    }
    ret->setOperands(results);
    step.setFunctionType(FunctionType::get(
        &getContext(), step.getArgumentTypes(), TypeRange(ValueRange(results))));
    step.removeResAttrsAttr();
    step->setAttr(kOutputNamesAttr, b.getArrayAttr(names));

    // Drop what neither the loss nor a gradient needs (unused operand
    // gradients, forward-only outputs).
    llvm::DenseSet<Operation *> forwardSet(forwardOps.begin(), forwardOps.end());
    SmallVector<Operation *> all;
    for (Operation &op : body.without_terminator())
      all.push_back(&op);
    for (Operation *op : llvm::reverse(all))
      if (isOpTriviallyDead(op)) {
        forwardSet.erase(op);
        op->erase();
      }
    for (Operation &op : body.without_terminator())
      if (!forwardSet.contains(&op))
        ++numGradientOps;
    return success();
  }
};
} // namespace
