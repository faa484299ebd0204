//===- OpsTensor.cpp - data movement ONNX ops -----------------------------===//

#include "Importer.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CheckedArithmetic.h"

using namespace mlir;
using namespace lamina;
using namespace lamina::onnx;

namespace {
/// Axes given as an attribute before opset 13 and as an input from 13
/// (Squeeze, Unsqueeze).
std::optional<SmallVector<int64_t>> axesOperand(NodeContext &ctx) {
  if (ctx.opset >= 13)
    return ctx.has(1) ? ctx.constInts(1) : SmallVector<int64_t>();
  return ctx.attrInts("axes").value_or(SmallVector<int64_t>());
}

LogicalResult importReshape(NodeContext &ctx) {
  Value x = ctx.input(0);
  auto target = ctx.constInts(1);
  if (!x || !target)
    return failure();
  ArrayRef<int64_t> in = ctx.inputShape(0);
  bool allowZero = ctx.attrInt("allowzero", 0) != 0;
  SmallVector<int64_t> shape;
  int64_t known = 1, inferAt = -1;
  for (auto [i, d] : llvm::enumerate(*target)) {
    if (d == 0 && !allowZero) {
      if (i >= in.size())
        return ctx.error() << "shape copies dim " << i << " of a rank-"
                           << in.size() << " input";
      d = in[i];
    }
    if (d == -1) {
      if (inferAt >= 0)
        return ctx.error() << "shape has more than one -1";
      inferAt = i;
      shape.push_back(1);
      continue;
    }
    if (d < 0)
      return ctx.error() << "invalid target dim " << d;
    shape.push_back(d);
    if (d != 0 && known > kMaxElements / d)
      return ctx.error() << "target shape is too large";
    known *= d;
  }
  int64_t total = checkedNumElements(in);
  if (inferAt >= 0) {
    if (known == 0 || total % known)
      return ctx.error() << "cannot infer the -1 dim: " << total
                         << " elements do not divide by " << known;
    shape[inferAt] = total / known;
  } else if (known != total) {
    return ctx.error() << "target shape has " << known << " elements, the "
                       << "input " << total;
  }
  return ctx.result(ctx.reshape(x, shape));
}

LogicalResult importFlatten(NodeContext &ctx) {
  Value x = ctx.input(0);
  if (!x)
    return failure();
  ArrayRef<int64_t> in = ctx.inputShape(0);
  int64_t rank = in.size(), a = ctx.attrInt("axis", 1);
  if (a < 0)
    a += rank;
  if (a < 0 || a > rank)
    return ctx.error() << "axis out of range";
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d)
    (d < a ? outer : inner) *= in[d];
  return ctx.result(ctx.reshape(x, {outer, inner}));
}

LogicalResult importSqueeze(NodeContext &ctx) {
  Value x = ctx.input(0);
  auto axes = axesOperand(ctx);
  if (!x || !axes)
    return failure();
  ArrayRef<int64_t> in = ctx.inputShape(0);
  SmallVector<bool> drop(in.size(), false);
  for (int64_t a : *axes) {
    auto n = ctx.axis(a, in.size());
    if (!n)
      return failure();
    if (in[*n] != 1)
      return ctx.error() << "cannot squeeze dim " << *n << " of size " << in[*n];
    drop[*n] = true;
  }
  SmallVector<int64_t> shape;
  for (size_t d = 0; d < in.size(); ++d)
    if (!(axes->empty() ? in[d] == 1 : drop[d]))
      shape.push_back(in[d]);
  return ctx.result(ctx.reshape(x, shape));
}

LogicalResult importUnsqueeze(NodeContext &ctx) {
  Value x = ctx.input(0);
  auto axes = axesOperand(ctx);
  if (!x || !axes)
    return failure();
  ArrayRef<int64_t> in = ctx.inputShape(0);
  int64_t rank = in.size() + axes->size();
  SmallVector<bool> inserted(rank, false);
  for (int64_t a : *axes) {
    auto n = ctx.axis(a, rank);
    if (!n)
      return failure();
    if (inserted[*n])
      return ctx.error() << "repeated axis " << a;
    inserted[*n] = true;
  }
  SmallVector<int64_t> shape;
  size_t next = 0;
  for (int64_t d = 0; d < rank; ++d)
    shape.push_back(inserted[d] ? 1 : in[next++]);
  return ctx.result(ctx.reshape(x, shape));
}

LogicalResult importTranspose(NodeContext &ctx) {
  Value x = ctx.input(0);
  if (!x)
    return failure();
  int64_t rank = ctx.inputType(0).getRank();
  SmallVector<int64_t> perm;
  if (auto p = ctx.attrInts("perm"))
    perm = *p;
  else
    for (int64_t d = rank - 1; d >= 0; --d)
      perm.push_back(d);
  return ctx.result(ctx.build<ir::graph::TransposeOp>(Type(), x, perm));
}

LogicalResult importConcat(NodeContext &ctx) {
  SmallVector<Value> inputs;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    Value v = ctx.input(i);
    if (!v)
      return failure();
    inputs.push_back(v);
  }
  if (inputs.empty())
    return ctx.error() << "needs at least one input";
  auto axis = ctx.axis(ctx.attrInt("axis", 0), ctx.inputType(0).getRank());
  if (!axis)
    return failure();
  return ctx.result(ctx.build<ir::graph::ConcatOp>(Type(), inputs, *axis));
}

/// One slice along `axis` of `x`: [start, start + size).
Value sliceAxis(NodeContext &ctx, Value x, int64_t axis, int64_t start,
                int64_t size) {
  auto shape = cast<RankedTensorType>(x.getType()).getShape();
  SmallVector<int64_t> starts(shape.size(), 0), sizes(shape), steps(shape.size(), 1);
  starts[axis] = start;
  sizes[axis] = size;
  return ctx.build<ir::graph::SliceOp>(Type(), x, starts, sizes, steps);
}

LogicalResult importSplit(NodeContext &ctx) {
  Value x = ctx.input(0);
  if (!x)
    return failure();
  auto axis = ctx.axis(ctx.attrInt("axis", 0), ctx.inputType(0).getRank());
  if (!axis)
    return failure();
  int64_t dim = ctx.inputShape(0)[*axis];
  int64_t n = ctx.numOutputs();
  SmallVector<int64_t> sizes;
  if (ctx.opset >= 13 && ctx.has(1)) {
    auto s = ctx.constInts(1);
    if (!s)
      return failure();
    sizes = *s;
  } else if (auto s = ctx.attrInts("split"); s && ctx.opset < 13) {
    sizes = *s;
  } else {
    // Equal parts; from opset 18 `num_outputs` may leave a smaller last one.
    int64_t parts = ctx.attrInt("num_outputs", n);
    if (parts != n || parts <= 0)
      return ctx.error() << "num_outputs does not match the outputs";
    int64_t chunk = (dim + parts - 1) / parts;
    if (ctx.opset < 18 && dim % parts)
      return ctx.error() << "dim " << dim << " does not split evenly in " << parts;
    for (int64_t i = 0; i < parts; ++i)
      sizes.push_back(std::max<int64_t>(0, std::min(chunk, dim - i * chunk)));
  }
  if (static_cast<int64_t>(sizes.size()) != n)
    return ctx.error() << "split lists " << sizes.size() << " sizes for " << n
                       << " outputs";
  int64_t start = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (sizes[i] < 0 || start + sizes[i] > dim)
      return ctx.error() << "split sizes exceed dim " << dim;
    if (ctx.wantsOutput(i)) {
      Value part;
      if (sizes[i] == 0) {
        SmallVector<int64_t> shape(ctx.inputShape(0));
        shape[*axis] = 0;
        part = ctx.constantOf(DenseElementsAttr::get(
            ctx.inputType(0).clone(shape), ArrayRef<Attribute>()));
      } else {
        part = sliceAxis(ctx, x, *axis, start, sizes[i]);
      }
      if (!part)
        return failure();
      ctx.setOutput(i, part);
    }
    start += sizes[i];
  }
  return success();
}

/// Slice (opset >= 10 form: starts, ends, axes, steps as inputs) with ONNX's
/// clamping rules, lowered to a static graph.slice.
LogicalResult importSlice(NodeContext &ctx) {
  Value x = ctx.input(0);
  auto starts = ctx.constInts(1), ends = ctx.constInts(2);
  if (!x || !starts || !ends)
    return failure();
  ArrayRef<int64_t> in = ctx.inputShape(0);
  int64_t rank = in.size();
  SmallVector<int64_t> axes, steps;
  if (ctx.has(3)) {
    auto a = ctx.constInts(3);
    if (!a)
      return failure();
    axes = *a;
  } else {
    for (size_t i = 0; i < starts->size(); ++i)
      axes.push_back(i);
  }
  if (ctx.has(4)) {
    auto s = ctx.constInts(4);
    if (!s)
      return failure();
    steps = *s;
  } else {
    steps.assign(starts->size(), 1);
  }
  if (ends->size() != starts->size() || axes.size() != starts->size() ||
      steps.size() != starts->size())
    return ctx.error() << "starts, ends, axes and steps differ in length";
  SmallVector<int64_t> oStarts(rank, 0), oSizes(in), oSteps(rank, 1);
  SmallVector<bool> seen(rank, false);
  for (size_t i = 0; i < starts->size(); ++i) {
    auto axis = ctx.axis(axes[i], rank);
    if (!axis)
      return failure();
    if (seen[*axis])
      return ctx.error() << "axis " << *axis << " sliced twice";
    seen[*axis] = true;
    int64_t dim = in[*axis], step = steps[i];
    if (step == 0)
      return ctx.error() << "slice step is 0";
    auto clampIndex = [&](int64_t v, int64_t lo, int64_t hi) {
      if (v < 0)
        v += dim; // counts from the end; still negative means "before 0"
      return std::clamp(v, lo, hi);
    };
    int64_t start, end, size;
    if (step > 0) {
      start = clampIndex((*starts)[i], 0, dim);
      end = clampIndex((*ends)[i], 0, dim);
      size = end > start ? (end - start - 1) / step + 1 : 0;
    } else {
      start = clampIndex((*starts)[i], -1, dim - 1);
      end = clampIndex((*ends)[i], -1, dim - 1);
      // -(step + 1) avoids negating INT64_MIN.
      size = start > end ? (start - end - 1) / (uint64_t(-(step + 1)) + 1) + 1 : 0;
    }
    oStarts[*axis] = size ? start : 0;
    oSizes[*axis] = size;
    oSteps[*axis] = step;
  }
  if (llvm::is_contained(oSizes, 0)) {
    auto type = ctx.inputType(0).clone(oSizes);
    return ctx.result(ctx.constantOf(DenseElementsAttr::get(type, ArrayRef<Attribute>())));
  }
  return ctx.result(
      ctx.build<ir::graph::SliceOp>(Type(), x, oStarts, oSizes, oSteps));
}

/// Pad (opset 11 on: pads, constant_value and, from 18, axes as inputs),
/// `constant` mode: per padded axis a concat of constant blocks around the
/// input (negative pads crop it first: a slice), so the gradient is the
/// concat's and the slice's. `reflect`, `edge` and `wrap` are refused.
LogicalResult importPad(NodeContext &ctx) {
  Value x = ctx.input(0);
  auto pads = ctx.constInts(1);
  if (!x || !pads)
    return failure();
  std::string mode = ctx.attrString("mode", "constant");
  if (mode != "constant")
    return ctx.error() << "mode '" << mode
                       << "' is not supported (only 'constant')";
  RankedTensorType type = ctx.inputType(0);
  int64_t rank = type.getRank();
  SmallVector<int64_t> axes;
  if (ctx.opset >= 18 && ctx.has(3)) {
    auto a = ctx.constInts(3);
    if (!a)
      return failure();
    for (int64_t v : *a) {
      auto axis = ctx.axis(v, rank);
      if (!axis)
        return failure();
      if (llvm::is_contained(axes, *axis))
        return ctx.error() << "axis " << *axis << " listed twice";
      axes.push_back(*axis);
    }
  } else {
    for (int64_t d = 0; d < rank; ++d)
      axes.push_back(d);
  }
  size_t n = axes.size();
  if (pads->size() != 2 * n)
    return ctx.error() << "pads holds " << pads->size() << " values for "
                       << n << " axes (a begin and an end per axis)";
  Attribute fill = ctx.b.getZeroAttr(type.getElementType());
  if (ctx.has(2)) {
    DenseElementsAttr c = ctx.constant(2);
    if (!c)
      return ctx.error() << "constant_value must be a constant";
    if (c.getNumElements() != 1 ||
        c.getElementType() != type.getElementType())
      return ctx.error() << "constant_value must be one "
                         << type.getElementType() << ", got " << c.getType();
    fill = *c.getValues<Attribute>().begin();
  }
  if (!fill)
    return ctx.error() << "cannot pad " << type.getElementType();
  Value v = x;
  for (size_t k = 0; k < n; ++k) {
    int64_t axis = axes[k], before = (*pads)[k], after = (*pads)[k + n];
    SmallVector<int64_t> shape(cast<RankedTensorType>(v.getType()).getShape());
    if (before < 0 || after < 0) {
      int64_t start = before < 0 ? -before : 0;
      int64_t size = shape[axis] - start - (after < 0 ? -after : 0);
      if (size <= 0)
        return ctx.error() << "pads " << before << ", " << after
                           << " leave nothing of axis " << axis << " (size "
                           << shape[axis] << ")";
      v = sliceAxis(ctx, v, axis, start, size);
      if (!v)
        return failure();
      shape[axis] = size;
    }
    SmallVector<Value> parts;
    auto block = [&](int64_t size) {
      SmallVector<int64_t> s(shape);
      s[axis] = size;
      return ctx.constantOf(DenseElementsAttr::get(type.clone(s), fill));
    };
    if (before > 0)
      parts.push_back(block(before));
    parts.push_back(v);
    if (after > 0)
      parts.push_back(block(after));
    if (parts.size() > 1)
      v = ctx.build<ir::graph::ConcatOp>(Type(), parts, axis);
    if (!v)
      return failure();
  }
  return ctx.result(v);
}

LogicalResult importExpand(NodeContext &ctx) {
  Value x = ctx.input(0);
  auto shape = ctx.constInts(1);
  if (!x || !shape)
    return failure();
  auto merged = ir::graph::broadcastShapes(ctx.inputShape(0), *shape);
  if (!merged || checkedNumElements(*merged) < 0)
    return ctx.error() << "input does not broadcast to the requested shape";
  return ctx.result(
      ctx.build<ir::graph::BroadcastOp>(ctx.inputType(0).clone(*merged), x));
}

LogicalResult importTile(NodeContext &ctx) {
  Value x = ctx.input(0);
  auto repeats = ctx.constInts(1);
  if (!x || !repeats)
    return failure();
  if (repeats->size() != ctx.inputShape(0).size())
    return ctx.error() << "needs one repeat count per dim";
  SmallVector<int64_t> out;
  for (auto [d, r] : llvm::zip(ctx.inputShape(0), *repeats)) {
    auto n = llvm::checkedMul(d, r);
    if (r < 0 || !n)
      return ctx.error() << "invalid repeat count " << r;
    out.push_back(*n);
  }
  if (checkedNumElements(out) < 0)
    return ctx.error() << "the tiled result is too large";
  return ctx.result(ctx.build<ir::graph::TileOp>(Type(), x, *repeats));
}

LogicalResult importTrilu(NodeContext &ctx) {
  Value x = ctx.input(0);
  if (!x)
    return failure();
  if (ctx.inputType(0).getRank() < 2)
    return ctx.error() << "input must have rank >= 2, got " << ctx.inputType(0);
  int64_t k = 0;
  if (ctx.has(1)) {
    auto kv = ctx.constInts(1);
    if (!kv || kv->size() != 1)
      return kv ? ctx.error() << "k must hold one value" : failure();
    k = (*kv)[0];
  }
  return ctx.result(ctx.build<ir::graph::TriluOp>(
      x.getType(), x, k, ctx.attrInt("upper", 1) != 0));
}

LogicalResult importGather(NodeContext &ctx) {
  Value data = ctx.input(0), indices = ctx.input(1);
  if (!data || !indices)
    return failure();
  auto axis = ctx.axis(ctx.attrInt("axis", 0), ctx.inputType(0).getRank());
  if (!axis)
    return failure();
  return ctx.result(ctx.build<ir::graph::GatherOp>(Type(), data, indices, *axis,
                                                   /*padding_idx=*/nullptr));
}

LogicalResult importGatherND(NodeContext &ctx) {
  Value data = ctx.input(0), indices = ctx.input(1);
  if (!data || !indices)
    return failure();
  return ctx.result(ctx.build<ir::graph::GatherNDOp>(
      Type(), data, indices, ctx.attrInt("batch_dims", 0)));
}

/// ScatterND's and ScatterElements' `reduction` (the same set, with the
/// same rule for repeated positions), or an error naming it.
std::optional<std::string> scatterReduction(NodeContext &ctx) {
  std::string reduction = ctx.attrString("reduction", "none");
  if (ir::graph::ScatterNDOp::isReduction(reduction))
    return reduction;
  std::string shown;
  llvm::raw_string_ostream os(shown);
  llvm::printEscapedString(reduction, os);
  ctx.error() << "unsupported reduction '" << shown
              << "' (none, add, mul, max or min)";
  return std::nullopt;
}

LogicalResult importScatterND(NodeContext &ctx) {
  Value data = ctx.input(0), indices = ctx.input(1), updates = ctx.input(2);
  if (!data || !indices || !updates)
    return failure();
  std::optional<std::string> reduction = scatterReduction(ctx);
  if (!reduction)
    return failure();
  RankedTensorType want =
      ir::graph::ScatterNDOp::updatesType(ctx.inputType(0), ctx.inputType(1));
  if (!want)
    return ctx.error() << "indices " << ctx.inputType(1)
                       << " need a last dim of at most the data rank ("
                       << ctx.inputType(0) << ")";
  if (ctx.inputType(2) != want)
    return ctx.error() << "updates " << ctx.inputType(2) << " should be "
                       << want << " (indices' leading dims, then data's)";
  return ctx.result(ctx.build<ir::graph::ScatterNDOp>(
      data.getType(), data, indices, updates, *reduction));
}
/// GatherElements/ScatterElements: indices of data's rank whose dims fit
/// data's except along `axis` (onnxruntime's check); the normalised axis.
std::optional<int64_t> elementsAxis(NodeContext &ctx) {
  auto data = ctx.inputType(0), indices = ctx.inputType(1);
  if (data.getRank() < 1 || indices.getRank() != data.getRank()) {
    ctx.error() << "indices " << indices << " must have the rank of data "
                << data << " (at least 1)";
    return std::nullopt;
  }
  auto axis = ctx.axis(ctx.attrInt("axis", 0), data.getRank());
  if (!axis)
    return std::nullopt;
  for (int64_t d = 0; d < data.getRank(); ++d)
    if (d != *axis && indices.getDimSize(d) > data.getDimSize(d)) {
      ctx.error() << "indices " << indices << " exceed data " << data
                  << " in dim " << d;
      return std::nullopt;
    }
  return axis;
}

LogicalResult importGatherElements(NodeContext &ctx) {
  Value data = ctx.input(0), indices = ctx.input(1);
  if (!data || !indices)
    return failure();
  auto axis = elementsAxis(ctx);
  if (!axis)
    return failure();
  auto type = ctx.inputType(0).clone(ctx.inputShape(1));
  if (type.getNumElements() == 0)
    return ctx.result(ctx.constantOf(DenseElementsAttr::get(type, ArrayRef<Attribute>())));
  Value tuples = elementTuples(ctx, indices, *axis);
  return ctx.result(tuples ? ctx.build<ir::graph::GatherNDOp>(
                                 Type(), data, tuples, int64_t(0))
                           : Value());
}

LogicalResult importScatterElements(NodeContext &ctx) {
  Value data = ctx.input(0), indices = ctx.input(1), updates = ctx.input(2);
  if (!data || !indices || !updates)
    return failure();
  auto axis = elementsAxis(ctx);
  if (!axis)
    return failure();
  if (ctx.inputShape(2) != ctx.inputShape(1) ||
      ctx.inputType(2).getElementType() != ctx.inputType(0).getElementType())
    return ctx.error() << "updates " << ctx.inputType(2)
                       << " must have the indices' shape and data's type";
  // scatter_nd's reductions are ScatterElements' (opset 16: add, mul;
  // 18: max, min), with the same rule for repeated positions.
  std::optional<std::string> reduction = scatterReduction(ctx);
  if (!reduction)
    return failure();
  if (ctx.inputType(1).getNumElements() == 0)
    return ctx.result(data);
  Value tuples = elementTuples(ctx, indices, *axis);
  return ctx.result(tuples
                        ? ctx.build<ir::graph::ScatterNDOp>(
                              data.getType(), data, tuples, updates, *reduction)
                        : Value());
}
} // namespace

Value lamina::onnx::elementTuples(NodeContext &ctx, Value indices,
                                  int64_t axis) {
  auto type = cast<RankedTensorType>(indices.getType());
  ArrayRef<int64_t> shape = type.getShape();
  int64_t rank = type.getRank();
  Type et = type.getElementType();
  SmallVector<int64_t> column(shape);
  column.push_back(1);
  SmallVector<Value> parts;
  for (int64_t d = 0; d < rank; ++d) {
    Value part = indices;
    if (d != axis) {
      // 0 .. shape[d]-1 along dim d, broadcast over the others (a small
      // constant; the broadcast folds only while the result is small).
      SmallVector<int64_t> iotaShape(rank, 1);
      iotaShape[d] = shape[d];
      SmallVector<APInt> values;
      for (int64_t i = 0; i < shape[d]; ++i)
        values.push_back(APInt(et.getIntOrFloatBitWidth(), uint64_t(i)));
      auto iotaType = RankedTensorType::get(iotaShape, et);
      part = ctx.constantOf(DenseElementsAttr::get(iotaType, values));
      if (iotaType != type)
        part = ctx.build<ir::graph::BroadcastOp>(type, part);
    }
    part = part ? ctx.reshape(part, column) : Value();
    if (!part)
      return {};
    parts.push_back(part);
  }
  if (parts.size() == 1)
    return parts[0];
  return ctx.build<ir::graph::ConcatOp>(Type(), parts, rank);
}

void lamina::onnx::registerTensorOps(OpRegistry &r) {
  r.add("Reshape", importReshape);
  r.add("Flatten", importFlatten);
  r.add("Squeeze", importSqueeze);
  r.add("Unsqueeze", importUnsqueeze);
  r.add("Transpose", importTranspose);
  r.add("Concat", importConcat);
  r.add("Split", importSplit);
  r.add("Slice", importSlice);
  r.add("Expand", importExpand);
  r.add("Tile", importTile);
  r.add("Pad", importPad);
  r.add("Trilu", importTrilu);
  r.add("Gather", importGather);
  r.add("GatherND", importGatherND);
  r.add("ScatterND", importScatterND);
  r.add("GatherElements", importGatherElements);
  r.add("ScatterElements", importScatterElements);
}
