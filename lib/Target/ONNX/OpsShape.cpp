//===- OpsShape.cpp - shape arithmetic, constants and sequences -----------===//
//
// With every dim bound these ops are compile-time constants; they fold here
// and never reach the graph as computations.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

using namespace mlir;
using namespace lamina;
using namespace lamina::onnx;

namespace {
/// Largest tensor Range or ConstantOfShape may materialise element by element.
constexpr int64_t kMaxRangeElements = int64_t(1) << 24;

DenseElementsAttr i64Tensor(NodeContext &ctx, ArrayRef<int64_t> values,
                            ArrayRef<int64_t> shape) {
  auto type = RankedTensorType::get(shape, ctx.b.getI64Type());
  return DenseElementsAttr::get(type, values);
}

LogicalResult importShape(NodeContext &ctx) {
  if (!ctx.input(0))
    return failure();
  ArrayRef<int64_t> shape = ctx.inputShape(0);
  int64_t rank = shape.size();
  // Opset 15 added start/end (clamped, negative counts from the end).
  auto clampDim = [&](int64_t v) {
    if (v < 0)
      v += rank;
    return std::clamp<int64_t>(v, 0, rank);
  };
  int64_t start = clampDim(ctx.attrInt("start", 0));
  int64_t end = ctx.attr("end") ? clampDim(ctx.attrInt("end", rank)) : rank;
  SmallVector<int64_t> dims;
  for (int64_t d = start; d < end; ++d)
    dims.push_back(shape[d]);
  ctx.setOutput(0, ctx.constantOf(i64Tensor(ctx, dims, {(int64_t)dims.size()})));
  return success();
}

LogicalResult importSize(NodeContext &ctx) {
  if (!ctx.input(0))
    return failure();
  int64_t n = ctx.inputType(0).getNumElements();
  ctx.setOutput(0, ctx.constantOf(i64Tensor(ctx, {n}, {})));
  return success();
}

/// The value of a Constant node, from whichever attribute holds it.
LogicalResult importConstant(NodeContext &ctx) {
  Builder &b = ctx.b;
  DenseElementsAttr value;
  if (const auto *a = ctx.attr("value")) {
    RankedTensorType type;
    if (std::string err = tensorReaderOf(ctx.importer).validate(b.getContext(), a->t(), type);
        !err.empty())
      return ctx.error() << err;
    if (std::string err = tensorReaderOf(ctx.importer).read(a->t(), type, value);
        !err.empty())
      return ctx.error() << err;
  } else if (const auto *a = ctx.attr("value_float")) {
    value = DenseElementsAttr::get(RankedTensorType::get({}, b.getF32Type()),
                                   a->f());
  } else if (const auto *a = ctx.attr("value_floats")) {
    SmallVector<float> v(a->floats().begin(), a->floats().end());
    value = DenseElementsAttr::get(
        RankedTensorType::get({(int64_t)v.size()}, b.getF32Type()),
        ArrayRef<float>(v));
  } else if (const auto *a = ctx.attr("value_int")) {
    value = i64Tensor(ctx, {a->i()}, {});
  } else if (const auto *a = ctx.attr("value_ints")) {
    SmallVector<int64_t> v(a->ints().begin(), a->ints().end());
    value = i64Tensor(ctx, v, {(int64_t)v.size()});
  } else {
    return ctx.error() << "only tensor, float and int constants are supported";
  }
  ctx.setOutput(0, ctx.constantOf(value));
  return success();
}

LogicalResult importConstantOfShape(NodeContext &ctx) {
  auto shape = ctx.constInts(0);
  if (!shape)
    return failure();
  if (checkedNumElements(*shape) < 0)
    return ctx.error() << "invalid shape";
  Attribute element;
  Type elementType = ctx.b.getF32Type();
  if (const auto *a = ctx.attr("value")) {
    RankedTensorType type;
    DenseElementsAttr v;
    auto &reader = tensorReaderOf(ctx.importer);
    if (std::string err = reader.validate(ctx.b.getContext(), a->t(), type);
        !err.empty())
      return ctx.error() << err;
    if (type.getNumElements() != 1)
      return ctx.error() << "value must hold one element";
    if (std::string err = reader.read(a->t(), type, v); !err.empty())
      return ctx.error() << err;
    element = *v.value_begin<Attribute>();
    elementType = type.getElementType();
  } else {
    element = ctx.b.getF32FloatAttr(0.0f);
  }
  // A splat: cheap at any size.
  auto type = RankedTensorType::get(*shape, elementType);
  ctx.setOutput(0, ctx.constantOf(DenseElementsAttr::get(type, element)));
  return success();
}

LogicalResult importRange(NodeContext &ctx) {
  DenseElementsAttr start = ctx.constant(0), limit = ctx.constant(1),
                    delta = ctx.constant(2);
  if (!start || !limit || !delta || start.getNumElements() != 1 ||
      limit.getNumElements() != 1 || delta.getNumElements() != 1)
    return ctx.error() << "start, limit and delta must be scalars known at "
                          "compile time (bind symbolic dims with --dim)";
  Type et = start.getElementType();
  auto asDouble = [](DenseElementsAttr a) -> double {
    if (isa<FloatType>(a.getElementType()))
      return (*a.value_begin<APFloat>()).convertToDouble();
    return static_cast<double>((*a.value_begin<APInt>()).getSExtValue());
  };
  double s = asDouble(start), l = asDouble(limit), d = asDouble(delta);
  if (d == 0)
    return ctx.error() << "delta is 0";
  // The element count: exact for integers (a double loses the low digits of
  // large int64 bounds), and checked before it becomes an integer.
  double count = std::ceil((l - s) / d);
  if (isa<IntegerType>(et)) {
    auto wide = [](DenseElementsAttr a) -> __int128 {
      return (*a.value_begin<APInt>()).getSExtValue();
    };
    __int128 span = wide(limit) - wide(start), step = wide(delta);
    __int128 c = step > 0 ? (span > 0 ? (span + step - 1) / step : 0)
                          : (span < 0 ? (span + step + 1) / step : 0);
    count = static_cast<double>(c);
  }
  if (!(count <= kMaxRangeElements))
    return ctx.error() << "range of " << count << " elements is too large";
  int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  auto type = RankedTensorType::get({n}, et);
  if (auto ft = dyn_cast<FloatType>(et)) {
    // Opset 27 admits float16/bfloat16 and computes their values in
    // `stash_type` (FLOAT by default, or DOUBLE), then rounds to T once.
    // Before 27 those types are not Range's; they keep the double path.
    bool inSingle = false;
    if (ft.getWidth() == 16 && ctx.opset >= 27) {
      int64_t stash = ctx.attrInt("stash_type", ::onnx::TensorProto::FLOAT);
      if (stash == ::onnx::TensorProto::FLOAT)
        inSingle = true;
      else if (stash != ::onnx::TensorProto::DOUBLE)
        return ctx.error() << "Range at opset " << ctx.opset << ": stash_type "
                           << stash << " (" << dataTypeName(stash)
                           << ") is not supported (FLOAT or DOUBLE)";
    }
    SmallVector<APFloat> values;
    bool lost;
    APFloat s32(static_cast<float>(s)), d32(static_cast<float>(d));
    for (int64_t i = 0; i < n; ++i) {
      APFloat v(s + i * d);
      if (inSingle) { // start + i * delta, each step rounded to float
        v = APFloat(static_cast<float>(i));
        v.multiply(d32, APFloat::rmNearestTiesToEven);
        v.add(s32, APFloat::rmNearestTiesToEven);
      }
      v.convert(ft.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
      values.push_back(v);
    }
    ctx.setOutput(0, ctx.constantOf(DenseElementsAttr::get(type, values)));
    return success();
  }
  // Integer ranges in exact integer arithmetic.
  int64_t is = (*start.value_begin<APInt>()).getSExtValue();
  int64_t id = (*delta.value_begin<APInt>()).getSExtValue();
  SmallVector<APInt> values;
  unsigned width = et.getIntOrFloatBitWidth();
  for (int64_t i = 0; i < n; ++i)
    values.push_back(APInt(width, static_cast<uint64_t>(is) +
                                      static_cast<uint64_t>(i) * static_cast<uint64_t>(id),
                           true, true)); // wraps like the integer type would
  ctx.setOutput(0, ctx.constantOf(DenseElementsAttr::get(type, values)));
  return success();
}

LogicalResult importSequenceConstruct(NodeContext &ctx) {
  SmallVector<Value> values;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    Value v = ctx.input(i);
    if (!v)
      return failure();
    values.push_back(v);
  }
  ctx.setSequenceOutput(0, std::move(values));
  return success();
}

LogicalResult importConcatFromSequence(NodeContext &ctx) {
  const Slot *seq = ctx.slot(0);
  if (!seq || !seq->isSequence)
    return ctx.error() << "input 0 must be a sequence";
  if (seq->sequence.empty())
    return ctx.error() << "cannot concatenate an empty sequence";
  auto first = cast<RankedTensorType>(seq->sequence[0].getType());
  bool newAxis = ctx.attrInt("new_axis", 0) != 0;
  int64_t rank = first.getRank() + (newAxis ? 1 : 0);
  auto axis = ctx.axis(ctx.attrInt("axis", 0), rank);
  if (!axis)
    return failure();
  SmallVector<Value> parts;
  for (Value v : seq->sequence) {
    if (newAxis) {
      SmallVector<int64_t> shape(cast<RankedTensorType>(v.getType()).getShape());
      shape.insert(shape.begin() + *axis, 1);
      v = ctx.reshape(v, shape);
      if (!v)
        return failure();
    }
    parts.push_back(v);
  }
  Value r = ctx.build<ir::graph::ConcatOp>(Type(), parts, *axis);
  return ctx.result(r);
}
} // namespace

void lamina::onnx::registerShapeOps(OpRegistry &r) {
  r.add("Shape", importShape);
  r.add("Size", importSize);
  r.add("Constant", importConstant);
  r.add("ConstantOfShape", importConstantOfShape);
  r.add("Range", importRange);
  r.add("SequenceConstruct", importSequenceConstruct);
  r.add("ConcatFromSequence", importConcatFromSequence);
}

const OpRegistry &OpRegistry::get() {
  static const OpRegistry registry = [] {
    OpRegistry r;
    registerElementwiseOps(r);
    registerNNOps(r);
    registerTensorOps(r);
    registerShapeOps(r);
    registerVisionOps(r);
    registerMoEOps(r);
    return r;
  }();
  return registry;
}
