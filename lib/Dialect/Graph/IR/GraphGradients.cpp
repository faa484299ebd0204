//===- GraphGradients.cpp - reverse-mode gradient rules -------------------===//
//
// GradientOpInterface for every differentiable graph op. Each rule reads the
// gradient of its single result (never null: graph-autodiff only calls a
// rule when the result has a gradient) and builds graph ops
// for the operand gradients, so gradients are costed and lowered like any
// forward op. Gradient ops take the forward op's location, so diagnostics
// and plans name the ONNX node they come from.
//
// Broadcasting ops reduce each operand's gradient back to its shape
// (`sumTo`). Integer and boolean operands, indices and conditions get null.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Graph/IR/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/DenseSet.h"

#include <cmath>

using namespace mlir;
using namespace lamina::ir::graph;

namespace {
RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

bool isFloatTensor(Value v) {
  return isa<FloatType>(typeOf(v).getElementType());
}

/// Builds the graph ops a rule needs, at the forward op's location.
struct GradBuilder {
  ImplicitLocOpBuilder b;
  GradBuilder(Operation *op, OpBuilder &builder) : b(op->getLoc(), builder) {}

  /// A splat constant of `type`.
  Value splat(RankedTensorType type, double value) {
    Attribute element =
        isa<FloatType>(type.getElementType())
            ? Attribute(b.getFloatAttr(type.getElementType(), value))
            : Attribute(b.getIntegerAttr(type.getElementType(), int64_t(value)));
    return ConstantOp::create(
        b, cast<ElementsAttr>(DenseElementsAttr::get(type, element)));
  }
  /// A rank-0 constant with the element type of `like` (broadcasts anywhere).
  Value scalar(Value like, double value) {
    return splat(RankedTensorType::get({}, typeOf(like).getElementType()), value);
  }
  Value zerosLike(Value v) { return splat(typeOf(v), 0.0); }
  Value zeros(ArrayRef<int64_t> shape, Type element) {
    return splat(RankedTensorType::get(shape, element), 0.0);
  }

  Value add(Value x, Value y) { return AddOp::create(b, x, y); }
  Value sub(Value x, Value y) { return SubOp::create(b, x, y); }
  Value mul(Value x, Value y) { return MulOp::create(b, x, y); }
  Value div(Value x, Value y) { return DivOp::create(b, x, y); }
  Value neg(Value x) { return NegOp::create(b, x); }
  Value mulScalar(Value x, double c) { return mul(x, scalar(x, c)); }
  Value select(Value c, Value x, Value y) { return SelectOp::create(b, c, x, y); }

  Value reshape(Value v, ArrayRef<int64_t> shape) {
    auto type = RankedTensorType::get(shape, typeOf(v).getElementType());
    if (type == v.getType())
      return v;
    return ReshapeOp::create(b, type, v);
  }
  Value broadcastTo(Value v, Type type) {
    if (v.getType() == type)
      return v;
    return BroadcastOp::create(b, type, v);
  }
  Value reduceSum(Value v, ArrayRef<int64_t> axes, bool keepdims) {
    if (axes.empty())
      return v;
    return ReduceSumOp::create(b, v, b.getDenseI64ArrayAttr(axes),
                               b.getBoolAttr(keepdims));
  }
  Value transpose(Value v, ArrayRef<int64_t> perm) {
    return TransposeOp::create(b, v, b.getDenseI64ArrayAttr(perm));
  }
  Value concat(ValueRange parts, int64_t axis) {
    if (parts.size() == 1)
      return parts.front();
    return ConcatOp::create(b, parts, b.getI64IntegerAttr(axis));
  }
  /// Elements [start, start + size) of dimension `d`, the others whole.
  Value sliceDim(Value v, int64_t d, int64_t start, int64_t size,
                 int64_t step = 1) {
    auto type = typeOf(v);
    SmallVector<int64_t> starts(type.getRank(), 0), steps(type.getRank(), 1);
    SmallVector<int64_t> sizes(type.getShape());
    starts[d] = start;
    sizes[d] = size;
    steps[d] = step;
    return SliceOp::create(b, v, b.getDenseI64ArrayAttr(starts),
                           b.getDenseI64ArrayAttr(sizes),
                           b.getDenseI64ArrayAttr(steps));
  }

  /// Sums a broadcast gradient back to `target`'s shape: over the leading
  /// dims `target` lacks and over the dims where it has size 1.
  Value sumTo(Value grad, Type target) {
    if (grad.getType() == target)
      return grad;
    auto from = typeOf(grad);
    auto to = cast<RankedTensorType>(target);
    int64_t lead = from.getRank() - to.getRank();
    SmallVector<int64_t> axes;
    for (int64_t d = 0; d < from.getRank(); ++d)
      if (d < lead || (to.getDimSize(d - lead) == 1 && from.getDimSize(d) != 1))
        axes.push_back(d);
    return reshape(reduceSum(grad, axes, /*keepdims=*/false), to.getShape());
  }

  /// `grad` of a reduction's result, reshaped and broadcast back over
  /// the input's shape.
  Value unreduce(Value grad, RankedTensorType input, ArrayRef<int64_t> axes,
                 bool keepdims) {
    SmallVector<int64_t> kept(input.getShape());
    for (int64_t a : axes)
      kept[a] = 1;
    if (!keepdims)
      grad = reshape(grad, kept);
    return broadcastTo(grad, input);
  }

  /// Scatters a slice's gradient back along dimension `d`: the gradient's
  /// element j lands at `start + j * step` of a zero tensor of size `full`.
  /// Built from slice/reshape/concat of splat zeros, so no index tensor is
  /// materialised.
  Value padDim(Value g, int64_t d, int64_t start, int64_t step, int64_t full) {
    auto type = typeOf(g);
    Type element = type.getElementType();
    int64_t n = type.getDimSize(d);
    SmallVector<int64_t> shape(type.getShape());
    if (n == 0) {
      shape[d] = full;
      return zeros(shape, element);
    }
    if (step < 0) {
      // Reverse, then it is a positive-step slice from the lowest index.
      g = sliceDim(g, d, n - 1, n, -1);
      start += (n - 1) * step;
      step = -step;
    }
    if (step > 1 && n > 1) {
      // Interleave step-1 zeros after each element: [n, 1] ++ [n, step-1].
      SmallVector<int64_t> unit(shape), gap(shape), wide(shape);
      unit.insert(unit.begin() + d + 1, 1);
      gap.insert(gap.begin() + d + 1, step - 1);
      Value spread = concat({reshape(g, unit), zeros(gap, element)}, d + 1);
      wide[d] = n * step;
      g = sliceDim(reshape(spread, wide), d, 0, (n - 1) * step + 1);
    }
    int64_t len = typeOf(g).getDimSize(d);
    SmallVector<Value> parts;
    if (start > 0) {
      shape[d] = start;
      parts.push_back(zeros(shape, element));
    }
    parts.push_back(g);
    if (int64_t after = full - start - len; after > 0) {
      shape[d] = after;
      parts.push_back(zeros(shape, element));
    }
    return concat(parts, d);
  }

  /// Swaps the last two dimensions.
  Value transposeLast2(Value v) {
    return transpose(v, TransposeOp::lastTwoDimsSwap(typeOf(v).getRank()));
  }
};
} // namespace

//===----------------------------------------------------------------------===//
// Elementwise unary: dx = g * f'(x), written with the result y where cheaper.
//===----------------------------------------------------------------------===//

#define UNARY_RULE(OP, BODY)                                                   \
  LogicalResult OP::buildGradients(OpBuilder &builder, ValueRange gradients,   \
                                   SmallVectorImpl<Value> &out) {              \
    GradBuilder gb(*this, builder);                                            \
    Value g = gradients[0], x = getInput(), y = getResult();                   \
    (void)x;                                                                   \
    (void)y;                                                                   \
    out.push_back(BODY);                                                       \
    return success();                                                          \
  }

UNARY_RULE(NegOp, gb.neg(g))
UNARY_RULE(AbsOp, gb.select(LessOp::create(gb.b, x, gb.scalar(x, 0)),
                            gb.neg(g), g))
UNARY_RULE(ExpOp, gb.mul(g, y))
UNARY_RULE(LogOp, gb.div(g, x))
UNARY_RULE(SqrtOp, gb.div(g, gb.mulScalar(y, 2)))
UNARY_RULE(ReciprocalOp, gb.neg(gb.mul(g, gb.mul(y, y))))
UNARY_RULE(TanhOp, gb.mul(g, gb.sub(gb.scalar(y, 1), gb.mul(y, y))))
// erf'(x) = 2/sqrt(pi) exp(-x^2)
UNARY_RULE(ErfOp, gb.mul(g, gb.mulScalar(ExpOp::create(gb.b, gb.neg(gb.mul(x, x))),
                                         2 / std::sqrt(M_PI))))
UNARY_RULE(SigmoidOp, gb.mul(g, gb.mul(y, gb.sub(gb.scalar(y, 1), y))))
UNARY_RULE(ReluOp, gb.select(GreaterOp::create(gb.b, x, gb.scalar(x, 0)), g,
                             gb.scalar(g, 0)))
UNARY_RULE(CosOp, gb.neg(gb.mul(g, SinOp::create(gb.b, x))))
UNARY_RULE(SinOp, gb.mul(g, CosOp::create(gb.b, x)))
#undef UNARY_RULE

// g * gelu'(x): one elementwise op for the derivative (graph.gelu_derivative,
// Math.h's geluDerivative / geluTanhDerivative), fused with the product.
LogicalResult GeluOp::buildGradients(OpBuilder &builder, ValueRange gradients,
                                     SmallVectorImpl<Value> &out) {
  GradBuilder gb(*this, builder);
  Value dydx = GeluDerivativeOp::create(gb.b, getInput(), getTanhAttr());
  out.push_back(gb.mul(gradients[0], dydx));
  return success();
}

//===----------------------------------------------------------------------===//
// Elementwise binary with numpy broadcasting
//===----------------------------------------------------------------------===//

#define BINARY_RULE(OP, LHS, RHS)                                              \
  LogicalResult OP::buildGradients(OpBuilder &builder, ValueRange gradients,   \
                                   SmallVectorImpl<Value> &out) {              \
    GradBuilder gb(*this, builder);                                            \
    Value g = gradients[0], a = getLhs(), b = getRhs(), y = getResult();       \
    (void)y;                                                                   \
    out.push_back(gb.sumTo(LHS, a.getType()));                                 \
    out.push_back(gb.sumTo(RHS, b.getType()));                                 \
    return success();                                                          \
  }

BINARY_RULE(AddOp, g, g)
BINARY_RULE(SubOp, g, gb.neg(g))
BINARY_RULE(MulOp, gb.mul(g, b), gb.mul(g, a))
BINARY_RULE(DivOp, gb.div(g, b), gb.neg(gb.div(gb.mul(g, y), b)))
// d/da a^b = b a^(b-1); d/db a^b = a^b ln a (defined for a > 0; the pass
// drops it when the exponent is not trainable, the usual case).
BINARY_RULE(PowOp,
            gb.mul(g, gb.mul(b, PowOp::create(gb.b, a, gb.sub(b, gb.scalar(b, 1))))),
            gb.mul(g, gb.mul(y, LogOp::create(gb.b, a))))
// Ties go to the lhs, so the two masks partition the elements.
BINARY_RULE(MinOp,
            gb.select(LessEqualOp::create(gb.b, a, b), g, gb.scalar(g, 0)),
            gb.select(LessEqualOp::create(gb.b, a, b), gb.scalar(g, 0), g))
BINARY_RULE(MaxOp,
            gb.select(GreaterEqualOp::create(gb.b, a, b), g, gb.scalar(g, 0)),
            gb.select(GreaterEqualOp::create(gb.b, a, b), gb.scalar(g, 0), g))
#undef BINARY_RULE

LogicalResult SelectOp::buildGradients(OpBuilder &builder, ValueRange gradients,
                                       SmallVectorImpl<Value> &out) {
  GradBuilder gb(*this, builder);
  Value g = gradients[0], c = getCondition(), zero = gb.scalar(g, 0);
  out.push_back(nullptr);
  out.push_back(gb.sumTo(gb.select(c, g, zero), getLhs().getType()));
  out.push_back(gb.sumTo(gb.select(c, zero, g), getRhs().getType()));
  return success();
}

LogicalResult CastOp::buildGradients(OpBuilder &builder, ValueRange gradients,
                                     SmallVectorImpl<Value> &out) {
  // Only float-to-float casts carry a gradient (back in the input's type).
  if (!isFloatTensor(getInput()) || !isFloatTensor(getResult())) {
    out.push_back(nullptr);
    return success();
  }
  GradBuilder gb(*this, builder);
  out.push_back(CastOp::create(gb.b, getInput().getType(), gradients[0]));
  return success();
}

//===----------------------------------------------------------------------===//
// Contraction and normalisation
//===----------------------------------------------------------------------===//

// dA = G B^T, dB = A^T G, each summed over the batch dims it was broadcast in.
// A wider (f32) result's gradient is first rounded to the operands' type, as
// the gradient of the cast it replaces would be.
LogicalResult MatMulOp::buildGradients(OpBuilder &builder, ValueRange gradients,
                                       SmallVectorImpl<Value> &out) {
  GradBuilder gb(*this, builder);
  Value g = gradients[0], a = getLhs(), b = getRhs();
  Type operandElement = typeOf(a).getElementType();
  if (typeOf(g).getElementType() != operandElement)
    g = CastOp::create(gb.b, typeOf(g).clone(operandElement), g);
  out.push_back(gb.sumTo(
      MatMulOp::create(gb.b, g, gb.transposeLast2(b)), a.getType()));
  auto at = typeOf(a), bt = typeOf(b);
  if (bt.getRank() == 2 && at.getRank() > 2) {
    // A weight shared by every batch (x W): dW = x^T g with the batch dims
    // folded into the contraction, one GEMM instead of a batched GEMM
    // whose per-batch products are then summed.
    int64_t k = at.getShape().back(), n = bt.getShape().back();
    int64_t rows = at.getNumElements() / std::max<int64_t>(k, 1);
    Value a2 = gb.reshape(a, {rows, k}), g2 = gb.reshape(g, {rows, n});
    out.push_back(MatMulOp::create(gb.b, gb.transposeLast2(a2), g2));
    return success();
  }
  out.push_back(gb.sumTo(
      MatMulOp::create(gb.b, gb.transposeLast2(a), g), b.getType()));
  return success();
}

// dx = y (g - sum(g y)) along the axis, one fused op (graph.softmax_grad).
LogicalResult SoftmaxOp::buildGradients(OpBuilder &builder, ValueRange gradients,
                                        SmallVectorImpl<Value> &out) {
  GradBuilder gb(*this, builder);
  out.push_back(SoftmaxGradOp::create(gb.b, getResult(), gradients[0],
                                      getAxisAttr()));
  return success();
}

// dx = g - softmax(x) sum(g), with softmax(x) = exp(y): graph.log_softmax_grad.
LogicalResult LogSoftmaxOp::buildGradients(OpBuilder &builder,
                                           ValueRange gradients,
                                           SmallVectorImpl<Value> &out) {
  GradBuilder gb(*this, builder);
  out.push_back(LogSoftmaxGradOp::create(gb.b, getResult(), gradients[0],
                                         getAxisAttr()));
  return success();
}

// One fused op (graph.layer_norm_grad) for all three gradients: it
// recomputes the statistics from x rather than having the forward save them.
LogicalResult LayerNormOp::buildGradients(OpBuilder &builder,
                                          ValueRange gradients,
                                          SmallVectorImpl<Value> &out) {
  // A narrowed result is made after autodiff only.
  if (getResult().getType() != getInput().getType())
    return failure();
  GradBuilder gb(*this, builder);
  SmallVector<Type> types = {getInput().getType(), getScale().getType()};
  if (getBias())
    types.push_back(getBias().getType());
  auto grad = LayerNormGradOp::create(gb.b, types, getInput(), getScale(),
                                      gradients[0], /*addend=*/Value(),
                                      getAxisAttr(), getEpsilonAttr());
  out.push_back(grad.getGradInput());
  out.push_back(grad.getGradScale());
  if (getBias())
    out.push_back(grad.getGradBias());
  return success();
}

LogicalResult RMSNormOp::buildGradients(OpBuilder &builder, ValueRange gradients,
                                        SmallVectorImpl<Value> &out) {
  if (getResult().getType() != getInput().getType())
    return failure();
  GradBuilder gb(*this, builder);
  auto grad = RMSNormGradOp::create(
      gb.b, getInput().getType(), getScale().getType(), getInput(), getScale(),
      gradients[0], /*addend=*/Value(), getAxisAttr(), getEpsilonAttr());
  out.push_back(grad.getGradInput());
  out.push_back(grad.getGradScale());
  return success();
}

// d logits = (softmax(logits) - onehot(label)) * g per row; labels get none.
LogicalResult SoftmaxCrossEntropyOp::buildGradients(
    OpBuilder &builder, ValueRange gradients, SmallVectorImpl<Value> &out) {
  GradBuilder gb(*this, builder);
  out.push_back(SoftmaxCrossEntropyGradOp::create(
      gb.b, getLogits().getType(), getLogits(), getLabels(), gradients[0],
      getIgnoreIndexAttr()));
  out.push_back(Value());
  return success();
}

// Convolution: the input's gradient is the transposed convolution of the
// result's with the weight, the weight's the correlation of the input with
// it, the bias's its sum over the batch and spatial dims.
LogicalResult ConvOp::buildGradients(OpBuilder &builder, ValueRange gradients,
                                     SmallVectorImpl<Value> &out) {
  GradBuilder gb(*this, builder);
  Value g = gradients[0];
  out.push_back(ConvGradInputOp::create(
      gb.b, getInput().getType(), getWeight(), g, getStridesAttr(),
      getDilationsAttr(), getPadsAttr(), getGroupAttr()));
  out.push_back(ConvGradWeightOp::create(
      gb.b, getWeight().getType(), getInput(), g, getStridesAttr(),
      getDilationsAttr(), getPadsAttr(), getGroupAttr()));
  if (getBias()) {
    SmallVector<int64_t> axes = {0};
    for (int64_t d = 2; d < typeOf(g).getRank(); ++d)
      axes.push_back(d);
    out.push_back(gb.reduceSum(g, axes, /*keepdims=*/false));
  }
  return success();
}

LogicalResult MaxPoolOp::buildGradients(OpBuilder &builder,
                                        ValueRange gradients,
                                        SmallVectorImpl<Value> &out) {
  GradBuilder gb(*this, builder);
  out.push_back(MaxPoolGradOp::create(
      gb.b, getInput().getType(), getInput(), gradients[0], getKernelShapeAttr(),
      getStridesAttr(), getDilationsAttr(), getPadsAttr(), getCeilModeAttr()));
  return success();
}

LogicalResult AvgPoolOp::buildGradients(OpBuilder &builder,
                                        ValueRange gradients,
                                        SmallVectorImpl<Value> &out) {
  GradBuilder gb(*this, builder);
  out.push_back(AvgPoolGradOp::create(
      gb.b, getInput().getType(), gradients[0], getKernelShapeAttr(),
      getStridesAttr(), getDilationsAttr(), getPadsAttr(), getCeilModeAttr(),
      getCountIncludePadAttr()));
  return success();
}

bool lamina::ir::graph::dependsOnTrainable(Value v) {
  SmallVector<Value> work = {v};
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value x = work.pop_back_val();
    if (!seen.insert(x).second)
      continue;
    if (auto arg = dyn_cast<BlockArgument>(x)) {
      auto fn = dyn_cast<FunctionOpInterface>(arg.getOwner()->getParentOp());
      auto kind = fn ? fn.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                       kKindAttr)
                     : StringAttr();
      if (kind && kind.getValue() == kKindTrainable)
        return true;
      continue;
    }
    llvm::append_range(work, x.getDefiningOp()->getOperands());
  }
  return false;
}

// Flash attention's backward: one fused op recomputing the probabilities
// from the saved log-sum-exp. The bias is a mask: no gradient.
LogicalResult AttentionOp::buildGradients(OpBuilder &builder,
                                          ValueRange gradients,
                                          SmallVectorImpl<Value> &out) {
  // lse is the backward's input, not a result to differentiate.
  if (!gradients[0] || gradients[1] ||
      (getBias() && dependsOnTrainable(getBias())))
    return failure();
  GradBuilder gb(*this, builder);
  auto grad = AttentionGradOp::create(
      gb.b, getQ().getType(), getK().getType(), getV().getType(), getQ(),
      getK(), getV(), getOut(), getLse(), gradients[0], getBias(),
      getScaleAttr(), getCausalAttr(), getSeqMajorAttr());
  out.append({grad.getGradQ(), grad.getGradK(), grad.getGradV()});
  if (getBias())
    out.push_back(Value());
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

LogicalResult ReduceSumOp::buildGradients(OpBuilder &builder,
                                          ValueRange gradients,
                                          SmallVectorImpl<Value> &out) {
  GradBuilder gb(*this, builder);
  out.push_back(gb.unreduce(gradients[0], getInput().getType(), getAxes(),
                            getKeepdims()));
  return success();
}

LogicalResult ReduceMeanOp::buildGradients(OpBuilder &builder,
                                           ValueRange gradients,
                                           SmallVectorImpl<Value> &out) {
  GradBuilder gb(*this, builder);
  auto input = getInput().getType();
  int64_t count = 1;
  for (int64_t a : getAxes())
    count *= input.getDimSize(a);
  Value g = gb.unreduce(gradients[0], input, getAxes(), getKeepdims());
  out.push_back(gb.mulScalar(g, 1.0 / double(std::max<int64_t>(count, 1))));
  return success();
}

// The gradient goes to the maximal elements, split evenly among ties.
LogicalResult ReduceMaxOp::buildGradients(OpBuilder &builder,
                                          ValueRange gradients,
                                          SmallVectorImpl<Value> &out) {
  GradBuilder gb(*this, builder);
  auto input = getInput().getType();
  Value max = gb.unreduce(getResult(), input, getAxes(), getKeepdims());
  Value mask = CastOp::create(gb.b, input, EqualOp::create(gb.b, getInput(), max));
  Value count = gb.reduceSum(mask, getAxes(), true);
  Value g = gb.unreduce(gradients[0], input, getAxes(), getKeepdims());
  out.push_back(gb.div(gb.mul(g, mask), count));
  return success();
}

// d prod / d x_i is the product of the other elements. Dividing the product
// by x_i fails at zeros, so count them: with no zero it is prod / x_i; with
// exactly one, only the zero gets the product of the nonzero others; with
// more, everything is 0.
LogicalResult ReduceProdOp::buildGradients(OpBuilder &builder,
                                           ValueRange gradients,
                                           SmallVectorImpl<Value> &out) {
  GradBuilder gb(*this, builder);
  auto input = getInput().getType();
  if (!isa<FloatType>(input.getElementType()))
    return failure();
  Value x = getInput();
  Value isZero = EqualOp::create(gb.b, x, gb.scalar(x, 0.0));
  Value nonzero = gb.select(isZero, gb.scalar(x, 1.0), x);
  Value prodNonzero = ReduceProdOp::create(gb.b, nonzero, getAxes(), true);
  Value zeros = gb.reduceSum(CastOp::create(gb.b, input, isZero), getAxes(), true);
  Value none = EqualOp::create(gb.b, zeros, gb.scalar(zeros, 0.0));
  Value one = EqualOp::create(gb.b, zeros, gb.scalar(zeros, 1.0));
  Value others = gb.select(
      isZero, gb.select(one, prodNonzero, gb.scalar(prodNonzero, 0.0)),
      gb.select(none, gb.div(prodNonzero, nonzero), gb.scalar(x, 0.0)));
  Value g = gb.unreduce(gradients[0], input, getAxes(), getKeepdims());
  out.push_back(gb.mul(g, others));
  return success();
}

// The adjoint of a cumulative sum is the cumulative sum the other way.
LogicalResult CumSumOp::buildGradients(OpBuilder &builder, ValueRange gradients,
                                       SmallVectorImpl<Value> &out) {
  GradBuilder gb(*this, builder);
  out.push_back(CumSumOp::create(gb.b, gradients[0], getAxisAttr(),
                                 getExclusiveAttr(),
                                 getReverse() ? UnitAttr() : gb.b.getUnitAttr()));
  return success();
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::buildGradients(OpBuilder &builder, ValueRange gradients,
                                        SmallVectorImpl<Value> &out) {
  GradBuilder gb(*this, builder);
  out.push_back(gb.reshape(gradients[0], getInput().getType().getShape()));
  return success();
}

LogicalResult TransposeOp::buildGradients(OpBuilder &builder,
                                          ValueRange gradients,
                                          SmallVectorImpl<Value> &out) {
  GradBuilder gb(*this, builder);
  ArrayRef<int64_t> perm = getPerm();
  SmallVector<int64_t> inverse(perm.size());
  for (auto [i, p] : llvm::enumerate(perm))
    inverse[p] = int64_t(i);
  out.push_back(gb.transpose(gradients[0], inverse));
  return success();
}

LogicalResult ConcatOp::buildGradients(OpBuilder &builder, ValueRange gradients,
                                       SmallVectorImpl<Value> &out) {
  GradBuilder gb(*this, builder);
  int64_t axis = getAxis(), offset = 0;
  for (Value input : getInputs()) {
    int64_t size = typeOf(input).getDimSize(axis);
    out.push_back(gb.sliceDim(gradients[0], axis, offset, size));
    offset += size;
  }
  return success();
}

LogicalResult SliceOp::buildGradients(OpBuilder &builder, ValueRange gradients,
                                      SmallVectorImpl<Value> &out) {
  GradBuilder gb(*this, builder);
  auto input = getInput().getType();
  Value g = gradients[0];
  for (int64_t d = 0; d < input.getRank(); ++d) {
    int64_t start = getStarts()[d], size = getSizes()[d], step = getSteps()[d];
    if (start == 0 && step == 1 && size == input.getDimSize(d))
      continue;
    g = gb.padDim(g, d, start, step, input.getDimSize(d));
  }
  out.push_back(g);
  return success();
}

LogicalResult BroadcastOp::buildGradients(OpBuilder &builder,
                                          ValueRange gradients,
                                          SmallVectorImpl<Value> &out) {
  GradBuilder gb(*this, builder);
  out.push_back(gb.sumTo(gradients[0], getInput().getType()));
  return success();
}

// Result dim i is repeats[i] copies of input dim i: view the gradient as
// [r0, d0, r1, d1, ...] and sum the copies.
LogicalResult TileOp::buildGradients(OpBuilder &builder, ValueRange gradients,
                                     SmallVectorImpl<Value> &out) {
  GradBuilder gb(*this, builder);
  auto input = getInput().getType();
  SmallVector<int64_t> split, axes;
  for (auto [d, r] : llvm::enumerate(getRepeats())) {
    if (r != 1) {
      axes.push_back(int64_t(split.size()));
      split.push_back(r);
    }
    split.push_back(input.getDimSize(d));
  }
  Value g = gb.reduceSum(gb.reshape(gradients[0], split), axes, false);
  out.push_back(gb.reshape(g, input.getShape()));
  return success();
}

// The mask is linear: the gradient keeps the same triangle.
LogicalResult TriluOp::buildGradients(OpBuilder &builder, ValueRange gradients,
                                      SmallVectorImpl<Value> &out) {
  GradBuilder gb(*this, builder);
  out.push_back(TriluOp::create(gb.b, gradients[0], getKAttr(), getUpperAttr()));
  return success();
}

// Embedding lookups: the gradient scatter-adds the result rows into zeros
// (repeated indices accumulate). The gathered axis is moved to the front so
// scatter_nd indexes it with 1-tuples, then moved back.
LogicalResult GatherOp::buildGradients(OpBuilder &builder, ValueRange gradients,
                                       SmallVectorImpl<Value> &out) {
  GradBuilder gb(*this, builder);
  auto data = getData().getType();
  auto indices = getIndices().getType();
  int64_t axis = getAxis(), q = indices.getRank(), rank = data.getRank();
  Value g = gradients[0];
  // g: data[:axis] + indices + data[axis+1:] -> indices + data[:axis] + rest.
  SmallVector<int64_t> perm;
  for (int64_t i = 0; i < q; ++i)
    perm.push_back(axis + i);
  for (int64_t i = 0; i < axis; ++i)
    perm.push_back(i);
  for (int64_t i = axis + q; i < typeOf(g).getRank(); ++i)
    perm.push_back(i);
  if (axis > 0)
    g = gb.transpose(g, perm);
  if (std::optional<int64_t> pad = getPaddingIdx(); pad && axis == 0) {
    // PyTorch's padding_idx: those lookups add nothing to the row.
    SmallVector<int64_t> maskShape(indices.getShape());
    maskShape.append(size_t(typeOf(g).getRank() - q), 1);
    Value ids = gb.reshape(getIndices(), maskShape);
    Value isPad = EqualOp::create(
        gb.b, ids,
        gb.splat(RankedTensorType::get({}, indices.getElementType()),
                 double(*pad)));
    g = gb.select(isPad, gb.scalar(g, 0), g);
  }
  SmallVector<int64_t> moved{data.getDimSize(axis)};
  llvm::append_range(moved, data.getShape().take_front(axis));
  llvm::append_range(moved, data.getShape().drop_front(axis + 1));
  SmallVector<int64_t> tupleShape(indices.getShape());
  tupleShape.push_back(1);
  Value tuples = gb.reshape(getIndices(), tupleShape);
  Value grad = ScatterNDOp::create(gb.b, gb.zeros(moved, data.getElementType()),
                                   tuples, g, gb.b.getStringAttr("add"));
  if (axis > 0) {
    // Dim 0 of `moved` goes back to position `axis`.
    SmallVector<int64_t> back;
    for (int64_t i = 0; i < rank; ++i)
      back.push_back(i < axis ? i + 1 : i == axis ? 0 : i);
    grad = gb.transpose(grad, back);
  }
  out.push_back(grad);
  out.push_back(nullptr);
  return success();
}

// With t_i the tuple of update i and S(p) = {i : t_i = p}, the result is
// y[p] = data[p] (op) updates[i] for i in S(p); duplicate tuples are exact
// for every reduction (all but `none` are order-independent).
//
// `add`: data passes the gradient through and each update reads it at its
// tuple. `none`: the overwritten positions of data get nothing (ONNX leaves
// duplicate tuples undefined, so each is taken as unique).
//
// `mul`: y[p] = data[p] prod_{S(p)} u_i. The data gradient is g times the
// product of the updates scattered onto ones (exact with duplicates and
// zeros). An update's gradient is g data prod_{S(p) - i} u_j, built like
// reduce_prod's without dividing by zero: with P[p] = data[p] times the
// nonzero updates and Z[p] the number of zero updates at p, a nonzero
// update gets P / u_i when Z = 0 (else 0), a zero one P when Z = 1 (else 0).
//
// `max`/`min`: the gradient goes to the candidates equal to the result
// (data[p] and every u_i of S(p)), split evenly among ties, as PyTorch's
// scatter_reduce "amax"/"amin" (include_self) and reduce_max here do.
LogicalResult ScatterNDOp::buildGradients(OpBuilder &builder,
                                          ValueRange gradients,
                                          SmallVectorImpl<Value> &out) {
  GradBuilder gb(*this, builder);
  StringRef reduction = getReduction();
  Value g = gradients[0], data = getData(), indices = getIndices(),
        updates = getUpdates();
  auto updatesType = typeOf(updates);
  if (!isFloatTensor(data))
    return failure();
  auto scatter = [&](Value into, Value values, StringRef kind) -> Value {
    return ScatterNDOp::create(gb.b, into, indices, values,
                               gb.b.getStringAttr(kind));
  };
  auto gatherAt = [&](Value v) -> Value {
    return GatherNDOp::create(gb.b, updatesType, v, indices,
                              gb.b.getI64IntegerAttr(0));
  };
  auto asFloat = [&](Value mask, RankedTensorType like) -> Value {
    return CastOp::create(gb.b, like, mask);
  };

  if (reduction == "add" || reduction == "none") {
    Value dataGrad = g;
    if (reduction == "none")
      dataGrad = scatter(g, gb.zerosLike(updates), "none");
    out.push_back(dataGrad);
    out.push_back(nullptr);
    out.push_back(gatherAt(g));
    return success();
  }

  if (reduction == "mul") {
    // Data: g * prod of the updates at each position (1 where none lands).
    out.push_back(gb.mul(g, scatter(gb.splat(typeOf(data), 1.0), updates, "mul")));
    out.push_back(nullptr);
    Value isZero = EqualOp::create(gb.b, updates, gb.scalar(updates, 0.0));
    Value nonzero = gb.select(isZero, gb.scalar(updates, 1.0), updates);
    Value prodNonzero = gatherAt(scatter(data, nonzero, "mul"));
    Value zeros = gatherAt(
        scatter(gb.zerosLike(data), asFloat(isZero, updatesType), "add"));
    Value none = EqualOp::create(gb.b, zeros, gb.scalar(zeros, 0.0));
    Value one = EqualOp::create(gb.b, zeros, gb.scalar(zeros, 1.0));
    Value others = gb.select(
        isZero, gb.select(one, prodNonzero, gb.scalar(updates, 0.0)),
        gb.select(none, gb.div(prodNonzero, nonzero), gb.scalar(updates, 0.0)));
    out.push_back(gb.mul(gatherAt(g), others));
    return success();
  }

  if (reduction == "max" || reduction == "min") {
    Value y = getResult();
    Value dataWins = asFloat(EqualOp::create(gb.b, data, y), typeOf(data));
    Value updateWins = asFloat(EqualOp::create(gb.b, updates, gatherAt(y)),
                               updatesType);
    // How many candidates share each position's result (>= 1).
    Value ties = scatter(dataWins, updateWins, "add");
    Value share = gb.div(g, ties);
    out.push_back(gb.mul(share, dataWins));
    out.push_back(nullptr);
    out.push_back(gb.mul(gatherAt(share), updateWins));
    return success();
  }
  return failure();
}

// Scatter-add into zeros with the same index tuples; with batch dims each
// tuple is prefixed by its batch coordinates (a constant the size of the
// index tuples) so scatter_nd, which has no batch dims, addresses them.
LogicalResult GatherNDOp::buildGradients(OpBuilder &builder,
                                         ValueRange gradients,
                                         SmallVectorImpl<Value> &out) {
  GradBuilder gb(*this, builder);
  auto indices = getIndices().getType();
  int64_t batch = getBatchDims();
  Value tuples = getIndices();
  if (batch > 0) {
    ArrayRef<int64_t> outer = indices.getShape().drop_back();
    int64_t count = 1;
    for (int64_t d : outer)
      count *= d;
    SmallVector<int64_t> coords(outer.size());
    SmallVector<APInt> values;
    unsigned width = indices.getElementTypeBitWidth();
    for (int64_t t = 0; t < count; ++t) {
      for (int64_t d = int64_t(outer.size()) - 1, rest = t; d >= 0; --d) {
        coords[d] = rest % outer[d];
        rest /= outer[d];
      }
      for (int64_t d = 0; d < batch; ++d)
        values.push_back(APInt(width, uint64_t(coords[d]), /*isSigned=*/true));
    }
    SmallVector<int64_t> prefixShape(outer);
    prefixShape.push_back(batch);
    auto prefixType = RankedTensorType::get(prefixShape, indices.getElementType());
    Value prefix = ConstantOp::create(
        gb.b, cast<ElementsAttr>(DenseElementsAttr::get(prefixType, values)));
    tuples = gb.concat({prefix, tuples}, int64_t(outer.size()));
  }
  out.push_back(ScatterNDOp::create(gb.b, gb.zerosLike(getData()), tuples,
                                    gradients[0], gb.b.getStringAttr("add")));
  out.push_back(nullptr);
  return success();
}
