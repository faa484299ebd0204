//===- AddLoss.cpp - graph-add-loss: softmax cross-entropy ----------------===//
//
// Builds the loss from graph ops that have gradient rules
// (softmax_cross_entropy per position, reductions), so graph-autodiff needs
// nothing special for it. Every new op is located at
// NameLoc("loss") so diagnostics and plans attribute it.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Graph/IR/GraphDialect.h"
#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <numeric>

namespace lamina::ir::graph {
#define GEN_PASS_DEF_GRAPHADDLOSS
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace lamina::ir::graph

using namespace mlir;
using namespace lamina::ir::graph;

namespace {
RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

Value splat(ImplicitLocOpBuilder &b, RankedTensorType type, double value) {
  Type element = type.getElementType();
  Attribute attr = isa<FloatType>(element)
                       ? Attribute(b.getFloatAttr(element, value))
                       : Attribute(b.getIntegerAttr(element, int64_t(value)));
  return ConstantOp::create(
      b, cast<ElementsAttr>(DenseElementsAttr::get(type, attr)));
}

/// `v` without its first (`dropFront`) or last element along dim `d`.
Value dropOne(ImplicitLocOpBuilder &b, Value v, int64_t d, bool dropFront) {
  auto type = typeOf(v);
  SmallVector<int64_t> starts(type.getRank(), 0), steps(type.getRank(), 1);
  SmallVector<int64_t> sizes(type.getShape());
  starts[d] = dropFront ? 1 : 0;
  sizes[d] -= 1;
  return SliceOp::create(b, v, b.getDenseI64ArrayAttr(starts),
                         b.getDenseI64ArrayAttr(sizes),
                         b.getDenseI64ArrayAttr(steps));
}

struct GraphAddLoss : lamina::ir::graph::impl::GraphAddLossBase<GraphAddLoss> {
  using Base::Base;

  void runOnOperation() override {
    // On the module: the loss is recorded there (graph.train), for the
    // later passes and the code generator.
    func::FuncOp forward = entryFunctionOf(getOperation());
    if (!forward || !forward.getBody().hasOneBlock()) {
      getOperation().emitError("graph-add-loss: no single-block entry "
                               "function (graph.entry, or @forward)");
      return signalPassFailure();
    }
    if (kind == "output") {
      if (failed(recordOutputLoss(forward)))
        signalPassFailure();
      return;
    }
    if (failed(addLoss(forward)))
      signalPassFailure();
  }

  /// kind=output: the model computes its loss; check it and record it.
  LogicalResult recordOutputLoss(func::FuncOp f) {
    if (output.empty())
      return f.emitError("graph-add-loss: kind=output needs the 'output' "
                         "option naming the model's loss output");
    if (!logits.empty() || !labels.empty())
      return f.emitError("graph-add-loss: kind=output takes no 'logits' or "
                         "'labels'; the model computes its own loss");
    for (unsigned i = 0; i < f.getNumResults(); ++i) {
      if (outputName(f, i) != output)
        continue;
      auto type = dyn_cast<RankedTensorType>(f.getResultTypes()[i]);
      if (!type || type.getRank() != 0 ||
          !(type.getElementType().isF32() || type.getElementType().isF64()))
        return f.emitError() << "graph-add-loss: the loss output '" << output
                             << "' must be a scalar f32 or f64, not "
                             << f.getResultTypes()[i];
      getOperation()->setAttr(
          kTrainAttr, TrainAttr::get(&getContext(), LossKind::Output, output,
                                     "", 0, ignoreIndex));
      return success();
    }
    return f.emitError() << "graph-add-loss: no output named '" << output
                         << "' (the loss output)";
  }

  StringRef outputName(func::FuncOp f, unsigned i) {
    auto names = f->getAttrOfType<ArrayAttr>(kOutputNamesAttr);
    if (names && i < names.size())
      if (auto s = dyn_cast<StringAttr>(names[i]))
        return s.getValue();
    return "";
  }

  /// The logits output: by name, else the only float output of rank >= 2.
  FailureOr<unsigned> findLogits(func::FuncOp f) {
    std::optional<unsigned> found;
    unsigned candidates = 0;
    for (unsigned i = 0; i < f.getNumResults(); ++i) {
      auto type = dyn_cast<RankedTensorType>(f.getResultTypes()[i]);
      bool fits = type && type.getRank() >= 2 &&
                  isa<FloatType>(type.getElementType());
      if (!logits.empty() ? outputName(f, i) == logits : fits)
        found = i, ++candidates;
    }
    if (!logits.empty() && !found)
      return f.emitError() << "graph-add-loss: no output named '" << logits
                           << "'";
    if (logits.empty() && candidates != 1)
      return f.emitError() << "graph-add-loss: " << candidates
                           << " outputs could be the logits; name one with "
                              "the 'logits' option";
    auto type = dyn_cast<RankedTensorType>(f.getResultTypes()[*found]);
    if (!type || type.getRank() < 2 ||
        !(type.getElementType().isF32() || type.getElementType().isF64()))
      return f.emitError() << "graph-add-loss: logits '" << outputName(f, *found)
                           << "' must be an f32 or f64 tensor of rank >= 2, not "
                           << f.getResultTypes()[*found];
    return *found;
  }

  /// The labels (or, for causal-lm, token) argument.
  FailureOr<BlockArgument> findLabels(func::FuncOp f, RankedTensorType logitsType) {
    bool causal = kind == "causal-lm";
    if (!causal && kind != "cross-entropy")
      return f.emitError() << "graph-add-loss: unknown kind '" << kind
                           << "' (causal-lm, cross-entropy or output)";
    if (!causal && labels.empty())
      return f.emitError("graph-add-loss: cross-entropy needs the 'labels' "
                         "option naming an input");
    std::optional<BlockArgument> found;
    unsigned candidates = 0;
    for (BlockArgument arg : f.getArguments()) {
      auto name = f.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kNameAttr);
      auto kindAttr = f.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kKindAttr);
      bool isInt = isa<IntegerType>(typeOf(arg).getElementType());
      bool isInput = kindAttr && kindAttr.getValue() == kKindInput;
      if (!labels.empty() ? (name && name.getValue() == labels) : (isInt && isInput))
        found = arg, ++candidates;
    }
    if (!found || candidates != 1)
      return f.emitError() << "graph-add-loss: "
                           << (labels.empty()
                                   ? "no single integer input to take the "
                                     "tokens from; name it with 'labels'"
                                   : "no input named '" + labels + "'");
    auto type = typeOf(*found);
    if (!isa<IntegerType>(type.getElementType()) ||
        type.getShape() != logitsType.getShape().drop_back())
      return f.emitError() << "graph-add-loss: labels must be integers shaped "
                              "like the logits without their last dim ("
                           << logitsType << "), not " << type;
    if (causal && type.getShape().back() < 2)
      return f.emitError("graph-add-loss: causal-lm needs a sequence of at "
                         "least 2 tokens");
    return *found;
  }

  LogicalResult addLoss(func::FuncOp f) {
    for (unsigned i = 0; i < f.getNumResults(); ++i)
      if (outputName(f, i) == "loss")
        return f.emitError("graph-add-loss: @forward already has an output "
                           "named 'loss'");
    FailureOr<unsigned> logitsIndex = findLogits(f);
    if (failed(logitsIndex))
      return failure();
    auto ret = cast<func::ReturnOp>(f.getBody().front().getTerminator());
    Value logitsValue = ret.getOperand(*logitsIndex);
    FailureOr<BlockArgument> labelArg = findLabels(f, typeOf(logitsValue));
    if (failed(labelArg))
      return failure();

    ImplicitLocOpBuilder b(NameLoc::get(StringAttr::get(&getContext(), "loss")),
                           ret);
    Value x = logitsValue, y = *labelArg;
    auto labelType = typeOf(y);
    Type labelElement = labelType.getElementType();
    if (!labelElement.isInteger(32) && !labelElement.isInteger(64)) {
      labelElement = b.getI64Type();
      labelType = RankedTensorType::get(labelType.getShape(), labelElement);
      y = CastOp::create(b, labelType, y);
    }
    Value ignore =
        splat(b, RankedTensorType::get({}, labelElement), double(ignoreIndex));
    if (kind == "causal-lm") {
      // Position t predicts token t+1: the labels move one step left and
      // the last position gets the ignore index, so the loss reads the
      // logits in place (no [.., seq-1, vocab] copy, no zero-padded
      // gradient for it).
      int64_t d = labelType.getRank() - 1;
      SmallVector<int64_t> padShape(labelType.getShape());
      padShape[d] = 1;
      Value pad = BroadcastOp::create(
          b, RankedTensorType::get(padShape, labelElement), ignore);
      y = ConcatOp::create(b, ValueRange{dropOne(b, y, d, /*dropFront=*/true), pad},
                           b.getI64IntegerAttr(d));
    }
    Type floatType = typeOf(x).getElementType();
    // -log p(label) per position, 0 where the label is ignored: one fused
    // op (and one fused gradient) instead of log_softmax + gather_nd.
    Value rows = SoftmaxCrossEntropyOp::create(
        b, RankedTensorType::get(labelType.getShape(), floatType), x, y,
        b.getI64IntegerAttr(ignoreIndex));
    Value valid = NotOp::create(b, EqualOp::create(b, y, ignore));
    Value mask = CastOp::create(
        b, RankedTensorType::get(labelType.getShape(), floatType), valid);
    SmallVector<int64_t> all(labelType.getRank());
    std::iota(all.begin(), all.end(), 0);
    auto sum = [&](Value v) {
      return ReduceSumOp::create(b, v, b.getDenseI64ArrayAttr(all),
                                 b.getBoolAttr(false));
    };
    auto scalarType = RankedTensorType::get({}, floatType);
    Value count = MaxOp::create(b, sum(mask), splat(b, scalarType, 1.0));
    Value loss = DivOp::create(b, sum(rows), count);

    SmallVector<Value> results(ret.getOperands());
    results.push_back(loss);
    SmallVector<Attribute> names;
    for (unsigned i = 0; i < f.getNumResults(); ++i)
      names.push_back(b.getStringAttr(outputName(f, i)));
    names.push_back(b.getStringAttr("loss"));
    ret->setOperands(results);
    f.setFunctionType(FunctionType::get(&getContext(), f.getArgumentTypes(),
                                        TypeRange(ValueRange(results))));
    f.removeResAttrsAttr();
    f->setAttr(kOutputNamesAttr, b.getArrayAttr(names));
    // What the training program's driver needs: the labels' source, the
    // vocabulary token ids are checked against, the ignored label.
    auto logitsType = typeOf(logitsValue);
    getOperation()->setAttr(
        kTrainAttr,
        TrainAttr::get(&getContext(),
                       kind == "causal-lm" ? LossKind::CausalLM
                                           : LossKind::CrossEntropy,
                       "loss", kind == "causal-lm" ? StringRef() : StringRef(labels),
                       logitsType.getShape().back(), ignoreIndex));
    return success();
  }
};
} // namespace
