//===- OpsVision.cpp - convolution, pooling and batch norm ONNX ops -------===//
//
// Conv, MaxPool and AveragePool become graph.conv / graph.max_pool /
// graph.avg_pool with explicit pads (auto_pad resolved here, from the
// static input shape); the global pools are reductions over the spatial
// dims, and BatchNormalization is a composition of elementwise ops and
// reductions, so its gradient needs no rule of its own.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include <functional>

using namespace mlir;
using namespace lamina;
using namespace lamina::onnx;

namespace {
/// A window op's geometry per spatial dim, read from the node's attributes.
struct Window {
  SmallVector<int64_t> kernel, strides, dilations, pads;
  bool ceilMode = false;
};

/// Reads kernel (from the attribute, or `weightKernel` when given and the
/// attribute is absent), strides, dilations, pads and auto_pad for an input
/// of `spatial` dims, and resolves auto_pad into pads. Errors name the
/// node.
std::optional<Window> readWindow(NodeContext &ctx, ArrayRef<int64_t> inShape,
                                 std::optional<ArrayRef<int64_t>> weightKernel,
                                 bool hasDilations, bool hasCeilMode) {
  size_t s = inShape.size() - 2;
  Window w;
  auto list = [&](StringRef name, int64_t dflt,
                  size_t n) -> std::optional<SmallVector<int64_t>> {
    auto v = ctx.attrInts(name);
    if (!v)
      return SmallVector<int64_t>(n, dflt);
    if (v->size() != n) {
      ctx.error() << name << " has " << v->size() << " values, the input "
                  << (n == s ? "" : "needs twice ") << "its " << s
                  << " spatial dims";
      return std::nullopt;
    }
    return v;
  };
  if (auto k = ctx.attrInts("kernel_shape")) {
    if (k->size() != s) {
      ctx.error() << "kernel_shape has " << k->size() << " values for " << s
                  << " spatial dims";
      return std::nullopt;
    }
    if (weightKernel && ArrayRef<int64_t>(*k) != *weightKernel) {
      ctx.error() << "kernel_shape [" << *k << "] differs from the weight's ["
                  << *weightKernel << "]";
      return std::nullopt;
    }
    w.kernel = *k;
  } else if (weightKernel) {
    w.kernel.assign(weightKernel->begin(), weightKernel->end());
  } else {
    ctx.error() << "kernel_shape is required";
    return std::nullopt;
  }
  auto strides = list("strides", 1, s);
  auto dilations = hasDilations ? list("dilations", 1, s)
                                : std::optional(SmallVector<int64_t>(s, 1));
  auto pads = list("pads", 0, 2 * s);
  if (!strides || !dilations || !pads)
    return std::nullopt;
  w.strides = *strides;
  w.dilations = *dilations;
  w.pads = *pads;
  w.ceilMode = hasCeilMode && ctx.attrInt("ceil_mode", 0) != 0;
  for (size_t i = 0; i < s; ++i)
    if (w.kernel[i] < 1 || w.strides[i] < 1 || w.dilations[i] < 1 ||
        w.pads[i] < 0 || w.pads[i + s] < 0) {
      ctx.error() << "kernel_shape, strides and dilations must be >= 1 and "
                     "pads >= 0";
      return std::nullopt;
    }
  std::string autoPad = ctx.attrString("auto_pad", "NOTSET");
  if (autoPad == "NOTSET")
    return w;
  if (ctx.attr("pads")) {
    ctx.error() << "auto_pad " << autoPad << " and pads are both given";
    return std::nullopt;
  }
  if (autoPad == "VALID")
    return w;
  if (autoPad != "SAME_UPPER" && autoPad != "SAME_LOWER") {
    ctx.error() << "unknown auto_pad '" << autoPad << "'";
    return std::nullopt;
  }
  // SAME: ceil(in / stride) outputs; the odd pad goes last (UPPER) or
  // first (LOWER).
  for (size_t i = 0; i < s; ++i) {
    int64_t in = inShape[i + 2];
    int64_t out = (in + w.strides[i] - 1) / w.strides[i];
    int64_t span = w.dilations[i] * (w.kernel[i] - 1) + 1;
    int64_t total = std::max<int64_t>(0, (out - 1) * w.strides[i] + span - in);
    int64_t small = total / 2, large = total - small;
    w.pads[i] = autoPad == "SAME_UPPER" ? small : large;
    w.pads[i + s] = autoPad == "SAME_UPPER" ? large : small;
  }
  return w;
}

/// Checks the data input of a window op: float, [N, C, S...] with 1 to 3
/// spatial dims.
LogicalResult checkSpatialInput(NodeContext &ctx, StringRef what,
                                bool bytes = false) {
  auto type = ctx.inputType(0);
  // MaxPool takes int8 and uint8 too (opset 12).
  bool byte = bytes && type.getElementType().isInteger(8);
  if (!isa<FloatType>(type.getElementType()) && !byte)
    return ctx.error() << what << " of " << type << " is not supported ("
                       << (bytes ? "float, int8 or uint8" : "float")
                       << " inputs only)";
  if (type.getRank() < 3 || type.getRank() > 5)
    return ctx.error() << what << " needs [N, C, S...] with 1 to 3 spatial "
                       << "dims, got " << type;
  return success();
}

LogicalResult importConv(NodeContext &ctx) {
  Value x = ctx.input(0), w = ctx.input(1);
  if (!x || !w || failed(checkSpatialInput(ctx, "Conv")))
    return failure();
  auto wt = ctx.inputType(1);
  if (wt.getRank() != ctx.inputType(0).getRank())
    return ctx.error() << "weight " << wt << " must have the input's rank";
  auto window = readWindow(ctx, ctx.inputShape(0), wt.getShape().drop_front(2),
                           /*hasDilations=*/true, /*hasCeilMode=*/false);
  if (!window)
    return failure();
  Value bias = ctx.has(2) ? ctx.input(2) : Value();
  if (ctx.has(2) && !bias)
    return failure();
  return ctx.result(ctx.build<ir::graph::ConvOp>(
      Type(), x, w, bias, window->strides, window->dilations, window->pads,
      ctx.attrInt("group", 1)));
}

LogicalResult importMaxPool(NodeContext &ctx) {
  Value x = ctx.input(0);
  if (!x || failed(checkSpatialInput(ctx, "MaxPool", /*bytes=*/true)))
    return failure();
  auto window = readWindow(ctx, ctx.inputShape(0), std::nullopt,
                           /*hasDilations=*/true, /*hasCeilMode=*/true);
  if (!window)
    return failure();
  Value y = ctx.build<ir::graph::MaxPoolOp>(Type(), x, window->kernel,
                                            window->strides, window->dilations,
                                            window->pads, window->ceilMode);
  if (!y)
    return failure();
  ctx.setOutput(0, y);
  if (!ctx.wantsOutput(1))
    return success();
  int64_t order = ctx.attrInt("storage_order", 0);
  if (order != 0 && order != 1)
    return ctx.error() << "storage_order must be 0 or 1, got " << order;
  auto type = cast<RankedTensorType>(y.getType());
  Value indices = ctx.build<ir::graph::MaxPoolIndicesOp>(
      type.clone(ctx.b.getI64Type()), x, window->kernel, window->strides,
      window->dilations, window->pads, window->ceilMode, order == 1);
  if (!indices)
    return failure();
  ctx.setOutput(1, indices);
  return success();
}

LogicalResult importAveragePool(NodeContext &ctx) {
  Value x = ctx.input(0);
  if (!x || failed(checkSpatialInput(ctx, "AveragePool")))
    return failure();
  // dilations from opset 19.
  auto window = readWindow(ctx, ctx.inputShape(0), std::nullopt,
                           /*hasDilations=*/ctx.opset >= 19,
                           /*hasCeilMode=*/true);
  if (!window)
    return failure();
  return ctx.result(ctx.build<ir::graph::AvgPoolOp>(
      Type(), x, window->kernel, window->strides, window->dilations,
      window->pads, window->ceilMode,
      ctx.attrInt("count_include_pad", 0) != 0));
}

/// GlobalAveragePool / GlobalMaxPool: a reduction over every dim after the
/// channels, kept as size 1.
template <typename Reduce> LogicalResult importGlobalPool(NodeContext &ctx) {
  Value x = ctx.input(0);
  if (!x)
    return failure();
  auto type = ctx.inputType(0);
  if (!isa<FloatType>(type.getElementType()) || type.getRank() < 2)
    return ctx.error() << "needs a float [N, C, ...] input, got " << type;
  SmallVector<int64_t> axes;
  for (int64_t d = 2; d < type.getRank(); ++d)
    axes.push_back(d);
  if (axes.empty())
    return ctx.result(x);
  return ctx.result(ctx.build<Reduce>(Type(), x, axes, true));
}

/// BatchNormalization. Inference: (x - mean) / sqrt(var + epsilon) * scale
/// + bias with the given statistics. Training (training_mode from opset 14;
/// before, a node with more than one output): the batch's mean and
/// (biased) variance over every dim but the channels; the running
/// statistics outputs are `input * momentum + batch * (1 - momentum)`, and
/// opset 9's saved mean and variance the batch's, as ONNX defines them.
/// The statistics inputs are never trained.
LogicalResult importBatchNorm(NodeContext &ctx) {
  Value x = ctx.input(0), scale = ctx.input(1), bias = ctx.input(2),
        mean = ctx.input(3), var = ctx.input(4);
  if (!x || !scale || !bias || !mean || !var)
    return failure();
  auto type = ctx.inputType(0);
  Type element = type.getElementType();
  if (!isa<FloatType>(element) || type.getRank() < 2)
    return ctx.error() << "needs a float [N, C, ...] input, got " << type;
  int64_t rank = type.getRank(), channels = type.getDimSize(1);
  for (size_t i = 1; i <= 4; ++i) {
    auto t = ctx.inputType(i);
    if (t.getRank() != 1 || t.getDimSize(0) != channels)
      return ctx.error() << "input " << i << " is " << t << ", not ["
                         << channels << "] (one value per channel)";
  }
  keepConstant(ctx.importer, mean);
  keepConstant(ctx.importer, var);
  bool training = ctx.opset >= 14 ? ctx.attrInt("training_mode", 0) != 0
                                  : ctx.numOutputs() > 1;
  if (ctx.opset >= 14 && !training &&
      (ctx.wantsOutput(1) || ctx.wantsOutput(2)))
    return ctx.error() << "running statistics outputs need training_mode 1";
  // What a training run changes from PyTorch's: the statistics it would
  // update stay as they are (the compile's summary prints remarks).
  if (training)
    emitRemark(ctx.loc) << "batch norm '" << ctx.name
                        << "' normalises with each batch's statistics; "
                           "training does not update its running mean and "
                           "variance ('"
                        << ctx.node.input(3) << "', '" << ctx.node.input(4)
                        << "'): a trained model exports the initial ones";
  double epsilon = ctx.attrFloat("epsilon", 1e-5f);
  double momentum = ctx.attrFloat("momentum", 0.9f);
  // Per-channel values as [1, C, 1, ...] so they broadcast over x, in x's
  // element type (opset 15 allows other float types for them).
  SmallVector<int64_t> chanShape(rank, 1);
  chanShape[1] = channels;
  auto perChannel = [&](Value v) {
    Value c = ctx.cast(v, element);
    return c ? ctx.reshape(c, chanShape) : Value();
  };
  Value m, v, centred;
  Value batchMean, batchVar;
  SmallVector<int64_t> axes = {0};
  for (int64_t d = 2; d < rank; ++d)
    axes.push_back(d);
  if (training) {
    batchMean = ctx.build<ir::graph::ReduceMeanOp>(Type(), x, axes, true);
    centred =
        batchMean ? ctx.build<ir::graph::SubOp>(Type(), x, batchMean) : Value();
    Value sq = centred ? ctx.build<ir::graph::MulOp>(Type(), centred, centred)
                       : Value();
    batchVar = sq ? ctx.build<ir::graph::ReduceMeanOp>(Type(), sq, axes, true)
                  : Value();
    m = batchMean;
    v = batchVar;
  } else {
    m = perChannel(mean);
    v = perChannel(var);
    centred = m ? ctx.build<ir::graph::SubOp>(Type(), x, m) : Value();
  }
  if (!m || !v || !centred)
    return failure();
  // y = (x - m) * (scale / sqrt(v + eps)) + bias.
  Value shifted =
      ctx.build<ir::graph::AddOp>(Type(), v, ctx.scalar(epsilon, element));
  Value root = shifted
                   ? ctx.build<ir::graph::SqrtOp>(shifted.getType(), shifted)
                   : Value();
  Value s = perChannel(scale), b = perChannel(bias);
  Value factor =
      root && s ? ctx.build<ir::graph::DivOp>(Type(), s, root) : Value();
  Value scaled =
      factor ? ctx.build<ir::graph::MulOp>(Type(), centred, factor) : Value();
  Value y =
      scaled && b ? ctx.build<ir::graph::AddOp>(Type(), scaled, b) : Value();
  if (!y)
    return failure();
  ctx.setOutput(0, y);
  if (!training)
    return success();
  // The statistics outputs, [C] in the statistics' element type.
  auto flat = [&](Value stat) -> Value {
    Value r = ctx.reshape(stat, {channels});
    return r ? ctx.cast(r, ctx.inputType(3).getElementType()) : Value();
  };
  auto running = [&](Value input, Value batch) -> Value {
    Value b = flat(batch);
    Type t = ctx.inputType(3).getElementType();
    Value kept =
        b ? ctx.build<ir::graph::MulOp>(Type(), input, ctx.scalar(momentum, t))
          : Value();
    Value added = kept ? ctx.build<ir::graph::MulOp>(
                             Type(), b, ctx.scalar(1.0 - momentum, t))
                       : Value();
    return added ? ctx.build<ir::graph::AddOp>(Type(), kept, added) : Value();
  };
  std::pair<size_t, std::function<Value()>> outputs[] = {
      {1, [&] { return running(mean, batchMean); }},
      {2, [&] { return running(var, batchVar); }},
      {3, [&] { return flat(batchMean); }},
      {4, [&] { return flat(batchVar); }}};
  for (auto &[i, make] : outputs) {
    if (!ctx.wantsOutput(i))
      continue;
    Value r = make();
    if (!r)
      return failure();
    ctx.setOutput(i, r);
  }
  return success();
}
} // namespace

void lamina::onnx::registerVisionOps(OpRegistry &r) {
  r.add("Conv", importConv);
  r.add("MaxPool", importMaxPool);
  r.add("AveragePool", importAveragePool);
  r.add("GlobalAveragePool", importGlobalPool<ir::graph::ReduceMeanOp>);
  r.add("GlobalMaxPool", importGlobalPool<ir::graph::ReduceMaxOp>);
  r.add("BatchNormalization", importBatchNorm);
}
