//===- OpsElementwise.cpp - elementwise ONNX ops --------------------------===//

#include "Importer.h"

using namespace mlir;
using namespace lamina;
using namespace lamina::onnx;

namespace {
template <typename Op> LogicalResult unary(NodeContext &ctx) {
  Value x = ctx.input(0);
  if (!x)
    return failure();
  Value r = ctx.build<Op>(x.getType(), x);
  return ctx.result(r);
}

template <typename Op> LogicalResult binary(NodeContext &ctx) {
  Value a = ctx.input(0), b = ctx.input(1);
  if (!a || !b)
    return failure();
  Value r = ctx.build<Op>(Type(), a, b);
  return ctx.result(r);
}

/// Sum, Min, Max: a left fold of the binary op over all inputs.
template <typename Op> LogicalResult variadic(NodeContext &ctx) {
  Value acc = ctx.input(0);
  for (size_t i = 1; acc && i < ctx.numInputs(); ++i) {
    Value next = ctx.input(i);
    acc = next ? ctx.build<Op>(Type(), acc, next) : Value();
  }
  return ctx.result(acc);
}

LogicalResult importPow(NodeContext &ctx) {
  Value a = ctx.input(0), b = ctx.input(1);
  if (!a || !b)
    return failure();
  // ONNX lets the exponent have its own type; graph ops share one.
  Value exponent = ctx.cast(b, ctx.inputType(0).getElementType());
  Value r =
      exponent ? ctx.build<ir::graph::PowOp>(Type(), a, exponent) : Value();
  return ctx.result(r);
}

LogicalResult importWhere(NodeContext &ctx) {
  Value c = ctx.input(0), a = ctx.input(1), b = ctx.input(2);
  if (!c || !a || !b)
    return failure();
  if (!ctx.inputType(0).getElementType().isInteger(1))
    return ctx.error() << "condition must be a bool tensor, got "
                       << ctx.inputType(0);
  if (ctx.inputType(1).getElementType() != ctx.inputType(2).getElementType())
    return ctx.error() << "X " << ctx.inputType(1) << " and Y "
                       << ctx.inputType(2) << " must have one element type";
  Value r = ctx.build<ir::graph::SelectOp>(Type(), c, a, b);
  return ctx.result(r);
}

LogicalResult importCast(NodeContext &ctx) {
  Value x = ctx.input(0);
  if (!x)
    return failure();
  int64_t to = ctx.attrInt("to", 0);
  Type elementType = elementTypeOf(ctx.b.getContext(), static_cast<int32_t>(to));
  if (!elementType)
    return ctx.error() << "cast to unsupported type " << dataTypeName(to);
  Value r = ctx.cast(x, elementType);
  return ctx.result(r);
}

LogicalResult importCastLike(NodeContext &ctx) {
  Value x = ctx.input(0), like = ctx.input(1);
  if (!x || !like)
    return failure();
  Value r = ctx.cast(x, ctx.inputType(1).getElementType());
  return ctx.result(r);
}

LogicalResult importIdentity(NodeContext &ctx) {
  const Slot *s = ctx.slot(0);
  if (!s)
    return ctx.error() << "missing input 0";
  ctx.outputs[0] = *s;
  ctx.produced[0] = true;
  return success();
}

/// Dropout imports as identity: the forward of an exported model is the
/// inference graph. A requested mask output is all true. Training mode with
/// a non-zero ratio would drop values, which identity does not compute, so
/// it is refused rather than imported wrongly.
LogicalResult importDropout(NodeContext &ctx) {
  Value x = ctx.input(0);
  if (!x)
    return failure();
  if (ctx.has(2)) {
    DenseElementsAttr training = ctx.constant(2);
    if (!training || training.getNumElements() != 1)
      return ctx.error() << "training_mode must be a compile-time constant";
    bool on = (*training.value_begin<APInt>()).getBoolValue();
    double ratio = 0.5;
    if (ctx.has(1)) {
      DenseElementsAttr r = ctx.constant(1);
      if (!r || r.getNumElements() != 1 || !isa<FloatType>(r.getElementType()))
        return ctx.error() << "ratio must be a compile-time constant";
      ratio = (*r.value_begin<APFloat>()).convertToDouble();
    }
    if (on && ratio != 0.0)
      return ctx.error() << "Dropout in training mode (ratio " << ratio
                         << ") is not supported; export the model in "
                            "inference mode";
  }
  ctx.setOutput(0, x);
  if (ctx.wantsOutput(1)) {
    auto type = RankedTensorType::get(ctx.inputShape(0), ctx.b.getI1Type());
    ctx.setOutput(1, ctx.constantOf(DenseElementsAttr::get(type, true)));
  }
  return success();
}

/// Clip (opset 11+: bounds as optional scalar inputs) as max then min.
LogicalResult importClip(NodeContext &ctx) {
  Value r = ctx.input(0);
  if (r && ctx.has(1))
    r = ctx.input(1) ? ctx.build<ir::graph::MaxOp>(Type(), r, ctx.input(1))
                     : Value();
  if (r && ctx.has(2))
    r = ctx.input(2) ? ctx.build<ir::graph::MinOp>(Type(), r, ctx.input(2))
                     : Value();
  return ctx.result(r);
}

/// Mean of the inputs: their sum over the count.
LogicalResult importMean(NodeContext &ctx) {
  if (failed(variadic<ir::graph::AddOp>(ctx)))
    return failure();
  Value sum = ctx.outputs[0].tensor;
  auto type = cast<RankedTensorType>(sum.getType());
  if (!isa<FloatType>(type.getElementType()))
    return ctx.error() << "Mean needs floating-point inputs";
  Value n = ctx.scalar(static_cast<double>(ctx.numInputs()), type.getElementType());
  return ctx.result(ctx.build<ir::graph::DivOp>(Type(), sum, n));
}

/// LeakyRelu and PRelu: relu(x) + slope * min(x, 0).
Value leaky(NodeContext &ctx, Value x, Value slope) {
  Type et = cast<RankedTensorType>(x.getType()).getElementType();
  Value pos = ctx.build<ir::graph::ReluOp>(x.getType(), x);
  Value neg = ctx.build<ir::graph::MinOp>(Type(), x, ctx.scalar(0.0, et));
  Value scaled =
      neg ? ctx.build<ir::graph::MulOp>(Type(), neg, slope) : Value();
  return pos && scaled ? ctx.build<ir::graph::AddOp>(Type(), pos, scaled)
                       : Value();
}

LogicalResult importLeakyRelu(NodeContext &ctx) {
  Value x = ctx.input(0);
  if (!x)
    return failure();
  Type et = ctx.inputType(0).getElementType();
  return ctx.result(leaky(ctx, x, ctx.scalar(ctx.attrFloat("alpha", 0.01f), et)));
}

LogicalResult importPRelu(NodeContext &ctx) {
  Value x = ctx.input(0), slope = ctx.input(1);
  if (!x || !slope)
    return failure();
  return ctx.result(leaky(ctx, x, slope));
}

/// HardSigmoid: min(max(alpha * x + beta, 0), 1).
LogicalResult importHardSigmoid(NodeContext &ctx) {
  Value x = ctx.input(0);
  if (!x)
    return failure();
  Type et = ctx.inputType(0).getElementType();
  Value r = ctx.build<ir::graph::MulOp>(
      Type(), x, ctx.scalar(ctx.attrFloat("alpha", 0.2f), et));
  r = r ? ctx.build<ir::graph::AddOp>(
              Type(), r, ctx.scalar(ctx.attrFloat("beta", 0.5f), et))
        : Value();
  r = r ? ctx.build<ir::graph::MaxOp>(Type(), r, ctx.scalar(0.0, et)) : Value();
  r = r ? ctx.build<ir::graph::MinOp>(Type(), r, ctx.scalar(1.0, et)) : Value();
  return ctx.result(r);
}

LogicalResult importGelu(NodeContext &ctx) {
  Value x = ctx.input(0);
  if (!x)
    return failure();
  std::string approx = ctx.attrString("approximate", "none");
  if (approx != "none" && approx != "tanh")
    return ctx.error() << "unknown approximate='" << approx << "'";
  Value r = ctx.build<ir::graph::GeluOp>(x.getType(), x, approx == "tanh");
  return ctx.result(r);
}
} // namespace

void lamina::onnx::registerElementwiseOps(OpRegistry &r) {
  r.add("Neg", unary<ir::graph::NegOp>);
  r.add("Abs", unary<ir::graph::AbsOp>);
  r.add("Exp", unary<ir::graph::ExpOp>);
  r.add("Log", unary<ir::graph::LogOp>);
  r.add("Sqrt", unary<ir::graph::SqrtOp>);
  r.add("Reciprocal", unary<ir::graph::ReciprocalOp>);
  r.add("Tanh", unary<ir::graph::TanhOp>);
  r.add("Erf", unary<ir::graph::ErfOp>);
  r.add("Sigmoid", unary<ir::graph::SigmoidOp>);
  r.add("Relu", unary<ir::graph::ReluOp>);
  r.add("Cos", unary<ir::graph::CosOp>);
  r.add("Sin", unary<ir::graph::SinOp>);
  r.add("Not", unary<ir::graph::NotOp>);
  r.add("Gelu", importGelu);
  r.add("Add", binary<ir::graph::AddOp>);
  r.add("Sub", binary<ir::graph::SubOp>);
  r.add("Mul", binary<ir::graph::MulOp>);
  r.add("Div", binary<ir::graph::DivOp>);
  r.add("Pow", importPow);
  r.add("And", binary<ir::graph::AndOp>);
  r.add("Or", binary<ir::graph::OrOp>);
  r.add("Equal", binary<ir::graph::EqualOp>);
  r.add("Greater", binary<ir::graph::GreaterOp>);
  r.add("GreaterOrEqual", binary<ir::graph::GreaterEqualOp>);
  r.add("Less", binary<ir::graph::LessOp>);
  r.add("LessOrEqual", binary<ir::graph::LessEqualOp>);
  r.add("Sum", variadic<ir::graph::AddOp>);
  r.add("Min", variadic<ir::graph::MinOp>);
  r.add("Max", variadic<ir::graph::MaxOp>);
  r.add("Mean", importMean);
  r.add("Clip", importClip);
  r.add("LeakyRelu", importLeakyRelu);
  r.add("PRelu", importPRelu);
  r.add("HardSigmoid", importHardSigmoid);
  r.add("Where", importWhere);
  r.add("Cast", importCast);
  r.add("CastLike", importCastLike);
  r.add("Identity", importIdentity);
  r.add("Dropout", importDropout);
}
