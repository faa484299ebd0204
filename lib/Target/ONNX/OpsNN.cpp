//===- OpsNN.cpp - contraction, normalisation and reduction ONNX ops ------===//

#include "Importer.h"

#include "llvm/ADT/StringExtras.h"

#include <limits>

using namespace mlir;
using namespace lamina;
using namespace lamina::onnx;

namespace {
/// MatMul with numpy semantics: rank-1 operands gain a unit dim that the
/// result drops again.
LogicalResult importMatMul(NodeContext &ctx) {
  Value a = ctx.input(0), b = ctx.input(1);
  if (!a || !b)
    return failure();
  auto at = ctx.inputType(0), bt = ctx.inputType(1);
  if (at.getRank() == 0 || bt.getRank() == 0)
    return ctx.error() << "MatMul operands must have rank >= 1";
  if (!isa<FloatType>(at.getElementType()))
    return ctx.error() << "integer MatMul is not supported";
  bool vecA = at.getRank() == 1, vecB = bt.getRank() == 1;
  if (vecA)
    a = ctx.reshape(a, {1, at.getDimSize(0)});
  if (vecB)
    b = ctx.reshape(b, {bt.getDimSize(0), 1});
  Value r = a && b ? ctx.build<ir::graph::MatMulOp>(Type(), a, b) : Value();
  if (!r)
    return failure();
  if (vecA || vecB) {
    SmallVector<int64_t> shape(cast<RankedTensorType>(r.getType()).getShape());
    if (vecB)
      shape.pop_back();
    if (vecA)
      shape.erase(shape.end() - (vecB ? 1 : 2));
    r = ctx.reshape(r, shape);
  }
  ctx.setOutput(0, r);
  return success();
}

Value transpose2d(NodeContext &ctx, Value v) {
  return ctx.build<ir::graph::TransposeOp>(Type(), v, ArrayRef<int64_t>{1, 0});
}

/// Gemm: alpha * op(A) op(B) + beta * C, as matmul, mul and add.
LogicalResult importGemm(NodeContext &ctx) {
  Value a = ctx.input(0), b = ctx.input(1);
  if (!a || !b)
    return failure();
  if (ctx.inputType(0).getRank() != 2 || ctx.inputType(1).getRank() != 2)
    return ctx.error() << "Gemm operands must be matrices";
  if (ctx.attrInt("transA", 0))
    a = transpose2d(ctx, a);
  if (ctx.attrInt("transB", 0))
    b = transpose2d(ctx, b);
  Value r = a && b ? ctx.build<ir::graph::MatMulOp>(Type(), a, b) : Value();
  if (!r)
    return failure();
  Type et = ctx.inputType(0).getElementType();
  float alpha = ctx.attrFloat("alpha", 1.0f), beta = ctx.attrFloat("beta", 1.0f);
  if (alpha != 1.0f)
    r = ctx.build<ir::graph::MulOp>(Type(), r, ctx.scalar(alpha, et));
  if (r && ctx.has(2) && beta != 0.0f) {
    Value c = ctx.input(2);
    if (c && beta != 1.0f)
      c = ctx.build<ir::graph::MulOp>(Type(), c, ctx.scalar(beta, et));
    r = c ? ctx.build<ir::graph::AddOp>(Type(), r, c) : Value();
  }
  return ctx.result(r);
}

/// Softmax and LogSoftmax. Before opset 13 the input is coerced to 2-D at
/// `axis` (default 1) and normalised over the flattened trailing dims.
/// The node's input 0 is a float tensor (softmax's and the norms' math).
LogicalResult requireFloatInput(NodeContext &ctx) {
  if (!isa<FloatType>(ctx.inputType(0).getElementType()))
    return ctx.error() << "input must be a float tensor, got "
                       << ctx.inputType(0);
  return success();
}

template <typename Op> LogicalResult importSoftmax(NodeContext &ctx) {
  Value x = ctx.input(0);
  if (!x)
    return failure();
  auto type = ctx.inputType(0);
  int64_t rank = type.getRank();
  if (rank == 0)
    return ctx.error() << "input must have rank >= 1";
  if (failed(requireFloatInput(ctx)))
    return failure();
  auto axis = ctx.axis(ctx.attrInt("axis", ctx.opset < 13 ? 1 : -1), rank);
  if (!axis)
    return failure();
  Value r;
  if (ctx.opset >= 13 || *axis == rank - 1) {
    r = ctx.build<Op>(x.getType(), x, *axis);
  } else {
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < rank; ++d)
      (d < *axis ? outer : inner) *= type.getDimSize(d);
    Value flat = ctx.reshape(x, {outer, inner});
    Value s = flat ? ctx.build<Op>(flat.getType(), flat, int64_t(1)) : Value();
    r = s ? ctx.reshape(s, type.getShape()) : Value();
  }
  return ctx.result(r);
}

/// Scale and bias broadcast to the normalised dims (input dims from `axis`)
/// in ONNX; graph ops take them at exactly that shape. `what` names the
/// parameter in the error when it does not broadcast.
Value fitNormParam(NodeContext &ctx, Value v, int64_t axis, StringRef what) {
  auto normShape = ctx.inputShape(0).drop_front(axis);
  auto t = cast<RankedTensorType>(v.getType());
  if (t.getShape() == normShape)
    return v;
  ArrayRef<int64_t> shape = t.getShape();
  bool fits = shape.size() <= normShape.size();
  for (size_t i = 1; fits && i <= shape.size(); ++i)
    fits = shape[shape.size() - i] == 1 ||
           shape[shape.size() - i] == normShape[normShape.size() - i];
  if (!fits) {
    ctx.error() << what << " " << t
                << " does not broadcast to the normalised dims [" << normShape
                << "] (axis " << axis << ")";
    return {};
  }
  return ctx.build<ir::graph::BroadcastOp>(t.clone(normShape), v);
}

/// LayerNormalization's optional Mean and InvStdDev outputs, in
/// `stash_type` precision, with the normalised dims kept as size 1.
LogicalResult layerNormStatistics(NodeContext &ctx, Value x, int64_t axis,
                                  float epsilon) {
  int64_t rank = ctx.inputType(0).getRank();
  Type stash = elementTypeOf(ctx.b.getContext(),
                             static_cast<int32_t>(ctx.attrInt("stash_type", 1)));
  if (!stash || !isa<FloatType>(stash))
    return ctx.error() << "unsupported stash_type";
  SmallVector<int64_t> axes;
  for (int64_t d = axis; d < rank; ++d)
    axes.push_back(d);
  Value xs = ctx.cast(x, stash);
  Value mean =
      xs ? ctx.build<ir::graph::ReduceMeanOp>(Type(), xs, axes, true) : Value();
  Value diff = mean ? ctx.build<ir::graph::SubOp>(Type(), xs, mean) : Value();
  Value sq = diff ? ctx.build<ir::graph::MulOp>(Type(), diff, diff) : Value();
  Value var =
      sq ? ctx.build<ir::graph::ReduceMeanOp>(Type(), sq, axes, true) : Value();
  Value shifted =
      var ? ctx.build<ir::graph::AddOp>(Type(), var, ctx.scalar(epsilon, stash))
          : Value();
  Value root = shifted
                   ? ctx.build<ir::graph::SqrtOp>(shifted.getType(), shifted)
                   : Value();
  Value inv =
      root ? ctx.build<ir::graph::ReciprocalOp>(root.getType(), root) : Value();
  if (!inv)
    return failure();
  ctx.setOutput(1, mean);
  ctx.setOutput(2, inv);
  return success();
}

LogicalResult importLayerNorm(NodeContext &ctx) {
  Value x = ctx.input(0), scale = ctx.input(1);
  if (!x || !scale)
    return failure();
  if (failed(requireFloatInput(ctx)))
    return failure();
  auto axis = ctx.axis(ctx.attrInt("axis", -1), ctx.inputType(0).getRank());
  if (!axis)
    return failure();
  float epsilon = ctx.attrFloat("epsilon", 1e-5f);
  if ((ctx.wantsOutput(1) || ctx.wantsOutput(2)) &&
      failed(layerNormStatistics(ctx, x, *axis, epsilon)))
    return failure();
  Value bias = ctx.has(2) ? ctx.input(2) : Value();
  scale = fitNormParam(ctx, scale, *axis, "scale");
  if (bias && scale)
    bias = fitNormParam(ctx, bias, *axis, "bias");
  if (!scale || (ctx.has(2) && !bias))
    return failure();
  Value r = ctx.build<ir::graph::LayerNormOp>(x.getType(), x, scale, bias,
                                              ctx.b.getI64IntegerAttr(*axis),
                                              ctx.b.getF64FloatAttr(epsilon));
  return ctx.result(r);
}

LogicalResult importRMSNorm(NodeContext &ctx) {
  Value x = ctx.input(0), scale = ctx.input(1);
  if (!x || !scale)
    return failure();
  if (failed(requireFloatInput(ctx)))
    return failure();
  auto axis = ctx.axis(ctx.attrInt("axis", -1), ctx.inputType(0).getRank());
  if (!axis)
    return failure();
  scale = fitNormParam(ctx, scale, *axis, "scale");
  Value r = scale ? ctx.build<ir::graph::RMSNormOp>(
                        x.getType(), x, scale, ctx.b.getI64IntegerAttr(*axis),
                        ctx.b.getF64FloatAttr(ctx.attrFloat("epsilon", 1e-5f)))
                  : Value();
  return ctx.result(r);
}

/// The axes of a reduction: an attribute up to `inputSince - 1` and an
/// optional input from `inputSince` (13 for ReduceSum, 18 for the others),
/// normalised; empty means all axes. `noop` is set when empty axes with
/// noop_with_empty_axes make the reduction an identity.
std::optional<SmallVector<int64_t>> reductionAxes(NodeContext &ctx,
                                                  int inputSince, bool &noop) {
  SmallVector<int64_t> axes;
  if (ctx.opset >= inputSince) {
    if (ctx.has(1)) {
      auto values = ctx.constInts(1);
      if (!values)
        return std::nullopt;
      axes = *values;
    }
  } else if (auto values = ctx.attrInts("axes")) {
    axes = *values;
  }
  noop = axes.empty() && ctx.attrInt("noop_with_empty_axes", 0);
  return normaliseAxes(ctx, axes, ctx.inputType(0).getRank());
}

/// A reduction `combine(x, axes, keepdims)` built from graph ops.
using ReduceBuilder = function_ref<Value(NodeContext &, Value,
                                         ArrayRef<int64_t>, bool)>;

LogicalResult importReduction(NodeContext &ctx, int inputSince,
                              ReduceBuilder combine) {
  Value x = ctx.input(0);
  if (!x)
    return failure();
  bool noop = false;
  auto axes = reductionAxes(ctx, inputSince, noop);
  if (!axes)
    return failure();
  if (noop)
    return ctx.result(x);
  return ctx.result(combine(ctx, x, *axes, ctx.attrInt("keepdims", 1) != 0));
}

template <typename Op, int inputSince>
LogicalResult importReduce(NodeContext &ctx) {
  return importReduction(ctx, inputSince,
                         [](NodeContext &c, Value x, ArrayRef<int64_t> axes,
                            bool keep) -> Value {
                           return c.build<Op>(Type(), x, axes, keep);
                         });
}

/// Reductions ONNX defines as compositions: an elementwise map, a sum or
/// max, and a final map.
template <typename Unary> Value map(NodeContext &ctx, Value v) {
  return v ? ctx.build<Unary>(v.getType(), v) : Value();
}

Value sumSquares(NodeContext &ctx, Value x, ArrayRef<int64_t> axes, bool keep) {
  Value sq = ctx.build<ir::graph::MulOp>(Type(), x, x);
  return sq ? ctx.build<ir::graph::ReduceSumOp>(Type(), sq, axes, keep)
            : Value();
}

LogicalResult importReduceMin(NodeContext &ctx) {
  return importReduction(
      ctx, 18, [](NodeContext &c, Value x, ArrayRef<int64_t> axes, bool keep) {
        Value neg = map<ir::graph::NegOp>(c, x);
        Value m = neg ? c.build<ir::graph::ReduceMaxOp>(Type(), neg, axes, keep)
                      : Value();
        return map<ir::graph::NegOp>(c, m);
      });
}

LogicalResult importReduceSumSquare(NodeContext &ctx) {
  return importReduction(ctx, 18, sumSquares);
}

LogicalResult importReduceL2(NodeContext &ctx) {
  return importReduction(
      ctx, 18, [](NodeContext &c, Value x, ArrayRef<int64_t> axes, bool keep) {
        return map<ir::graph::SqrtOp>(c, sumSquares(c, x, axes, keep));
      });
}

LogicalResult importReduceL1(NodeContext &ctx) {
  return importReduction(
      ctx, 18, [](NodeContext &c, Value x, ArrayRef<int64_t> axes, bool keep) {
        Value a = map<ir::graph::AbsOp>(c, x);
        return a ? c.build<ir::graph::ReduceSumOp>(Type(), a, axes, keep)
                 : Value();
      });
}

LogicalResult importReduceLogSum(NodeContext &ctx) {
  return importReduction(
      ctx, 18, [](NodeContext &c, Value x, ArrayRef<int64_t> axes, bool keep) {
        Value s = c.build<ir::graph::ReduceSumOp>(Type(), x, axes, keep);
        return map<ir::graph::LogOp>(c, s);
      });
}

/// log(sum(exp(x))) computed as m + log(sum(exp(x - m))), m the maximum, so
/// large inputs do not overflow.
LogicalResult importReduceLogSumExp(NodeContext &ctx) {
  return importReduction(
      ctx, 18, [](NodeContext &c, Value x, ArrayRef<int64_t> axes, bool keep) {
        Value m = c.build<ir::graph::ReduceMaxOp>(Type(), x, axes, true);
        Value shifted = m ? c.build<ir::graph::SubOp>(Type(), x, m) : Value();
        Value s = map<ir::graph::ExpOp>(c, shifted);
        Value sum = s ? c.build<ir::graph::ReduceSumOp>(Type(), s, axes, true)
                      : Value();
        Value r = map<ir::graph::LogOp>(c, sum);
        r = r ? c.build<ir::graph::AddOp>(Type(), r, m) : Value();
        if (!r || keep)
          return r;
        SmallVector<int64_t> shape;
        for (auto [d, size] : llvm::enumerate(c.inputShape(0)))
          if (!llvm::is_contained(axes, static_cast<int64_t>(d)))
            shape.push_back(size);
        return c.reshape(r, shape);
      });
}

LogicalResult importCumSum(NodeContext &ctx) {
  Value x = ctx.input(0);
  auto axisValues = ctx.constInts(1);
  if (!x || !axisValues)
    return failure();
  if (axisValues->size() != 1)
    return ctx.error() << "axis must hold one value";
  auto axis = ctx.axis((*axisValues)[0], ctx.inputType(0).getRank());
  if (!axis)
    return failure();
  Value r = ctx.build<ir::graph::CumSumOp>(x.getType(), x, *axis,
                                           ctx.attrInt("exclusive", 0) != 0,
                                           ctx.attrInt("reverse", 0) != 0);
  return ctx.result(r);
}
/// SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss (opset 12, 13):
/// scores [N, C, d...], labels [N, d...], optional class weights [C]. The
/// per-position loss is graph.softmax_cross_entropy over the classes moved
/// last (its gradient is one fused op) or, for NLL, the negated pick of the
/// label's entry (gather_nd); then weights, the ignored positions and the
/// reduction as graph ops. "mean" divides by the summed weights of the
/// positions not ignored (their count without weights), as ONNX and
/// onnxruntime do: all ignored gives 0/0 = NaN there too.
LogicalResult importClassLoss(NodeContext &ctx, bool softmax) {
  Value scores = ctx.input(0), labels = ctx.input(1);
  if (!scores || !labels)
    return failure();
  auto st = ctx.inputType(0), lt = ctx.inputType(1);
  int64_t rank = st.getRank();
  Type et = st.getElementType();
  if (rank < 2 || !isa<FloatType>(et))
    return ctx.error() << "scores must be a float tensor [N, C, d...], got "
                       << st;
  SmallVector<int64_t> lossShape(st.getShape());
  lossShape.erase(lossShape.begin() + 1);
  if (lt.getShape() != ArrayRef<int64_t>(lossShape) ||
      !lt.getElementType().isSignlessInteger() ||
      (lt.getElementType().getIntOrFloatBitWidth() != 32 &&
       lt.getElementType().getIntOrFloatBitWidth() != 64))
    return ctx.error() << "labels " << lt << " must be i32 or i64 shaped ["
                       << lossShape << "] (scores without the class dim)";
  std::string reduction = ctx.attrString("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean") {
    std::string shown;
    llvm::raw_string_ostream os(shown);
    llvm::printEscapedString(reduction, os);
    return ctx.error() << "unsupported reduction '" << shown
                       << "' (none, sum or mean)";
  }
  int64_t classes = st.getDimSize(1);
  Value weights = ctx.has(2) ? ctx.input(2) : Value();
  if (ctx.has(2) && (!weights || ctx.inputType(2) != st.clone({classes})))
    return weights ? ctx.error() << "weights " << ctx.inputType(2)
                                 << " must be " << st.clone({classes})
                   : failure();
  // Class weights are data, as in PyTorch: a float initializer would
  // otherwise be trained.
  if (weights)
    keepConstant(ctx.importer, weights);
  // Without ignore_index no label is ignored: onnxruntime reads whatever a
  // label outside [0, C) addresses; here that stays a run-time error.
  bool hasIgnore = ctx.attr("ignore_index") != nullptr;
  int64_t ignoreIndex = hasIgnore ? ctx.attrInt("ignore_index", 0)
                                  : std::numeric_limits<int64_t>::min() + 1;
  // The ignored mask and the labels with class 0 in the ignored places
  // (wherever they index something), built only where needed.
  bool needMask = hasIgnore && (!softmax || weights || reduction == "mean");
  Value ignored, safeLabels = labels;
  if (needMask) {
    ignored = ctx.build<ir::graph::EqualOp>(
        Type(), labels, ctx.scalar(double(ignoreIndex), lt.getElementType()));
    if (!ignored)
      return failure();
  }
  if (needMask && (!softmax || weights)) {
    safeLabels = ctx.build<ir::graph::SelectOp>(
        Type(), ignored, ctx.scalar(0, lt.getElementType()), labels);
    if (!safeLabels)
      return failure();
  }

  Value loss;
  if (softmax) {
    Value logits = scores;
    if (rank > 2) {
      SmallVector<int64_t> perm{0};
      for (int64_t d = 2; d < rank; ++d)
        perm.push_back(d);
      perm.push_back(1);
      logits = ctx.build<ir::graph::TransposeOp>(Type(), scores, perm);
    }
    Type lossElem = et.isF16() || et.isBF16() ? Float32Type::get(et.getContext())
                                              : et;
    loss = logits ? ctx.build<ir::graph::SoftmaxCrossEntropyOp>(
                        RankedTensorType::get(lossShape, lossElem), logits,
                        labels, ignoreIndex)
                  : Value();
    if (loss && ctx.wantsOutput(1))
      ctx.setOutput(1,
                    ctx.build<ir::graph::LogSoftmaxOp>(st, scores, int64_t(1)));
  } else {
    SmallVector<int64_t> column(lossShape);
    column.insert(column.begin() + 1, 1);
    Value at = ctx.reshape(safeLabels, column);
    Value tuples = at ? elementTuples(ctx, at, 1) : Value();
    Value picked = tuples ? ctx.build<ir::graph::GatherNDOp>(Type(), scores,
                                                             tuples, int64_t(0))
                          : Value();
    picked = picked ? ctx.reshape(picked, lossShape) : Value();
    loss = map<ir::graph::NegOp>(ctx, picked);
    if (loss && hasIgnore)
      loss = ctx.build<ir::graph::SelectOp>(Type(), ignored, ctx.scalar(0, et),
                                            loss);
  }
  if (!loss)
    return failure();
  Type lossElem = cast<RankedTensorType>(loss.getType()).getElementType();

  // Per-position weights: weights[label], 0 where ignored.
  Value w;
  if (weights) {
    w = ctx.build<ir::graph::GatherOp>(Type(), ctx.cast(weights, lossElem),
                                       safeLabels, int64_t(0), nullptr);
    if (w && hasIgnore)
      w = ctx.build<ir::graph::SelectOp>(Type(), ignored,
                                         ctx.scalar(0, lossElem), w);
    loss = w ? ctx.build<ir::graph::MulOp>(Type(), loss, w) : Value();
  }
  SmallVector<int64_t> all;
  for (int64_t d = 0; d < int64_t(lossShape.size()); ++d)
    all.push_back(d);
  if (loss && reduction != "none") {
    Value sum = ctx.build<ir::graph::ReduceSumOp>(Type(), loss, all, false);
    Value denom;
    if (reduction == "mean" && weights) {
      denom = ctx.build<ir::graph::ReduceSumOp>(Type(), w, all, false);
    } else if (reduction == "mean" && hasIgnore) {
      Value kept = ctx.build<ir::graph::NotOp>(ignored.getType(), ignored);
      kept = kept ? ctx.cast(kept, lossElem) : Value();
      denom = kept ? ctx.build<ir::graph::ReduceSumOp>(Type(), kept, all, false)
                   : Value();
    } else if (reduction == "mean") {
      denom = ctx.scalar(double(lt.getNumElements()), lossElem);
    }
    loss = sum && (reduction == "sum" || denom)
               ? (denom ? ctx.build<ir::graph::DivOp>(Type(), sum, denom) : sum)
               : Value();
  }
  return ctx.result(loss ? ctx.cast(loss, et) : Value());
}

LogicalResult importSoftmaxCrossEntropyLoss(NodeContext &ctx) {
  return importClassLoss(ctx, /*softmax=*/true);
}
LogicalResult importNegativeLogLikelihoodLoss(NodeContext &ctx) {
  return importClassLoss(ctx, /*softmax=*/false);
}
} // namespace

void lamina::onnx::registerNNOps(OpRegistry &r) {
  r.add("MatMul", importMatMul);
  r.add("Gemm", importGemm);
  r.add("Softmax", importSoftmax<ir::graph::SoftmaxOp>);
  r.add("LogSoftmax", importSoftmax<ir::graph::LogSoftmaxOp>);
  r.add("LayerNormalization", importLayerNorm);
  r.add("RMSNormalization", importRMSNorm);
  r.add("ReduceSum", importReduce<ir::graph::ReduceSumOp, 13>);
  r.add("ReduceMean", importReduce<ir::graph::ReduceMeanOp, 18>);
  r.add("ReduceMax", importReduce<ir::graph::ReduceMaxOp, 18>);
  r.add("ReduceProd", importReduce<ir::graph::ReduceProdOp, 18>);
  r.add("ReduceMin", importReduceMin);
  r.add("ReduceSumSquare", importReduceSumSquare);
  r.add("ReduceL1", importReduceL1);
  r.add("ReduceL2", importReduceL2);
  r.add("ReduceLogSum", importReduceLogSum);
  r.add("ReduceLogSumExp", importReduceLogSumExp);
  r.add("CumSum", importCumSum);
  r.add("SoftmaxCrossEntropyLoss", importSoftmaxCrossEntropyLoss);
  r.add("NegativeLogLikelihoodLoss", importNegativeLogLikelihoodLoss);
}
