//===- GraphOps.cpp - graph op type inference and verifiers ---------------===//

#include "lamina/Dialect/Graph/IR/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/CheckedArithmetic.h"

using namespace mlir;
using namespace lamina::ir::graph;

namespace {
/// Emits an inference error at `loc` when there is one, and fails.
LogicalResult inferError(std::optional<Location> loc, const Twine &message) {
  if (loc)
    emitError(*loc) << message;
  return failure();
}

RankedTensorType tensorType(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// Checks `axis` lies in [0, rank).
LogicalResult verifyAxis(Operation *op, int64_t axis, int64_t rank) {
  if (axis < 0 || axis >= rank)
    return op->emitOpError() << "axis " << axis << " out of range for rank "
                             << rank;
  return success();
}
} // namespace

std::optional<SmallVector<int64_t>>
lamina::ir::graph::broadcastShapes(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  SmallVector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

LogicalResult
lamina::ir::graph::inferBroadcastResult(std::optional<Location> loc,
                                        ValueRange operands, bool predicate,
                                        SmallVectorImpl<Type> &types) {
  // The first operand of a select is its condition; its element type is i1.
  Type elementType;
  SmallVector<int64_t> shape;
  for (auto [i, v] : llvm::enumerate(operands)) {
    auto type = tensorType(v);
    bool isCondition = operands.size() == 3 && i == 0;
    if (!isCondition) {
      if (!elementType)
        elementType = type.getElementType();
      else if (elementType != type.getElementType())
        return inferError(loc, "operands have different element types");
    }
    auto merged = broadcastShapes(shape, type.getShape());
    if (!merged)
      return inferError(loc, "operand shapes do not broadcast");
    shape = *merged;
  }
  if (predicate)
    elementType = IntegerType::get(operands[0].getContext(), 1);
  types.push_back(RankedTensorType::get(shape, elementType));
  return success();
}

LogicalResult
lamina::ir::graph::inferReduceResult(std::optional<Location> loc, Value input,
                                     ArrayRef<int64_t> axes, bool keepdims,
                                     SmallVectorImpl<Type> &types) {
  auto type = tensorType(input);
  int64_t rank = type.getRank();
  for (auto [i, axis] : llvm::enumerate(axes)) {
    if (axis < 0 || axis >= rank)
      return inferError(loc, "reduction axis out of range");
    if (i > 0 && axes[i - 1] >= axis)
      return inferError(loc, "reduction axes must be strictly increasing");
  }
  SmallVector<int64_t> shape;
  for (int64_t d = 0; d < rank; ++d) {
    bool reduced = llvm::is_contained(axes, d);
    if (!reduced)
      shape.push_back(type.getDimSize(d));
    else if (keepdims)
      shape.push_back(1);
  }
  types.push_back(RankedTensorType::get(shape, type.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Inference
//===----------------------------------------------------------------------===//

LogicalResult SelectOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  return inferBroadcastResult(loc, adaptor.getOperands(), false, types);
}

/// The product type of `lhs x rhs` (graph.matmul's rule), appended to
/// `types`.
static LogicalResult inferMatMul(std::optional<Location> loc,
                                 RankedTensorType lhs, RankedTensorType rhs,
                                 SmallVectorImpl<Type> &types) {
  if (lhs.getRank() < 2 || rhs.getRank() < 2)
    return inferError(loc, "matmul operands need rank >= 2");
  if (lhs.getElementType() != rhs.getElementType())
    return inferError(loc, "matmul operands have different element types");
  int64_t k = lhs.getShape().back();
  if (k != rhs.getShape()[rhs.getRank() - 2])
    return inferError(loc, "matmul contraction sizes differ: " + Twine(k) +
                               " vs " + Twine(rhs.getShape()[rhs.getRank() - 2]));
  auto batch = broadcastShapes(lhs.getShape().drop_back(2),
                               rhs.getShape().drop_back(2));
  if (!batch)
    return inferError(loc, "matmul batch dimensions do not broadcast");
  batch->push_back(lhs.getShape()[lhs.getRank() - 2]);
  batch->push_back(rhs.getShape().back());
  types.push_back(RankedTensorType::get(*batch, lhs.getElementType()));
  return success();
}

LogicalResult MatMulOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  return inferMatMul(loc, tensorType(adaptor.getLhs()),
                     tensorType(adaptor.getRhs()), types);
}

bool lamina::ir::graph::narrowOrSameResult(TypeRange inferred,
                                           TypeRange actual) {
  if (inferred.size() != 1 || actual.size() != 1)
    return false;
  if (inferred.front() == actual.front())
    return true;
  auto want = dyn_cast<RankedTensorType>(inferred.front());
  auto got = dyn_cast<RankedTensorType>(actual.front());
  return want && got && want.getShape() == got.getShape() &&
         (want.getElementType().isF16() || want.getElementType().isBF16()) &&
         got.getElementType().isF32();
}

// The inferred type, or the same shape in f32 for f16/bf16 operands.
bool MatMulOp::isCompatibleReturnTypes(TypeRange inferred, TypeRange actual) {
  return narrowOrSameResult(inferred, actual);
}

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto type = tensorType(adaptor.getInput());
  ArrayRef<int64_t> perm = adaptor.getPerm();
  if (static_cast<int64_t>(perm.size()) != type.getRank())
    return inferError(loc, "permutation size differs from the rank");
  llvm::SmallBitVector seen(perm.size());
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= type.getRank() || seen.test(p))
      return inferError(loc, "perm is not a permutation");
    seen.set(p);
    shape.push_back(type.getDimSize(p));
  }
  types.push_back(RankedTensorType::get(shape, type.getElementType()));
  return success();
}

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  ValueRange inputs = adaptor.getInputs();
  if (inputs.empty())
    return inferError(loc, "concat needs at least one input");
  auto first = tensorType(inputs[0]);
  int64_t axis = adaptor.getAxis();
  if (axis < 0 || axis >= first.getRank())
    return inferError(loc, "concat axis out of range");
  SmallVector<int64_t> shape(first.getShape());
  shape[axis] = 0;
  for (Value v : inputs) {
    auto type = tensorType(v);
    if (type.getRank() != first.getRank() ||
        type.getElementType() != first.getElementType())
      return inferError(loc, "concat inputs differ in rank or element type");
    for (int64_t d = 0; d < type.getRank(); ++d)
      if (d != axis && type.getDimSize(d) != first.getDimSize(d))
        return inferError(loc, "concat inputs differ outside the axis");
    shape[axis] += type.getDimSize(axis);
  }
  types.push_back(RankedTensorType::get(shape, first.getElementType()));
  return success();
}

LogicalResult SliceOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  auto type = tensorType(adaptor.getInput());
  ArrayRef<int64_t> starts = adaptor.getStarts(), sizes = adaptor.getSizes(),
                    steps = adaptor.getSteps();
  int64_t rank = type.getRank();
  if (static_cast<int64_t>(starts.size()) != rank ||
      static_cast<int64_t>(sizes.size()) != rank ||
      static_cast<int64_t>(steps.size()) != rank)
    return inferError(loc, "slice needs one start, size and step per dim");
  for (int64_t d = 0; d < rank; ++d) {
    int64_t dim = type.getDimSize(d);
    if (steps[d] == 0 || sizes[d] < 0)
      return inferError(loc, "slice step must be non-zero, size >= 0");
    if (sizes[d] == 0)
      continue;
    auto span = llvm::checkedMul(sizes[d] - 1, steps[d]);
    auto last = span ? llvm::checkedAdd(starts[d], *span) : std::nullopt;
    if (starts[d] < 0 || starts[d] >= dim || !last || *last < 0 || *last >= dim)
      return inferError(loc, "slice of dim " + Twine(d) + " out of bounds");
  }
  types.push_back(RankedTensorType::get(sizes, type.getElementType()));
  return success();
}

LogicalResult TileOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  auto type = tensorType(adaptor.getInput());
  ArrayRef<int64_t> repeats = adaptor.getRepeats();
  if (static_cast<int64_t>(repeats.size()) != type.getRank())
    return inferError(loc, "tile needs one repeat count per dim");
  SmallVector<int64_t> shape;
  for (auto [dim, r] : llvm::zip(type.getShape(), repeats)) {
    auto n = llvm::checkedMul(dim, r);
    if (r < 0 || !n)
      return inferError(loc, "tile repeats must be non-negative and small enough");
    shape.push_back(*n);
  }
  types.push_back(RankedTensorType::get(shape, type.getElementType()));
  return success();
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  auto data = tensorType(adaptor.getData());
  auto indices = tensorType(adaptor.getIndices());
  int64_t axis = adaptor.getAxis();
  if (axis < 0 || axis >= data.getRank())
    return inferError(loc, "gather axis out of range");
  SmallVector<int64_t> shape(data.getShape().take_front(axis));
  llvm::append_range(shape, indices.getShape());
  llvm::append_range(shape, data.getShape().drop_front(axis + 1));
  types.push_back(RankedTensorType::get(shape, data.getElementType()));
  return success();
}

LogicalResult GatherNDOp::inferReturnTypes(MLIRContext *,
                                           std::optional<Location> loc,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &types) {
  auto data = tensorType(adaptor.getData());
  auto indices = tensorType(adaptor.getIndices());
  int64_t b = adaptor.getBatchDims();
  int64_t r = data.getRank(), q = indices.getRank();
  if (q < 1 || b < 0 || b >= std::min(r, q))
    return inferError(loc, "gather_nd batch_dims out of range");
  int64_t k = indices.getShape().back();
  if (k < 1 || b + k > r)
    return inferError(loc, "gather_nd index tuples longer than data rank");
  for (int64_t d = 0; d < b; ++d)
    if (data.getDimSize(d) != indices.getDimSize(d))
      return inferError(loc, "gather_nd batch dimensions differ");
  SmallVector<int64_t> shape(indices.getShape().drop_back());
  llvm::append_range(shape, data.getShape().drop_front(b + k));
  types.push_back(RankedTensorType::get(shape, data.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Vision
//===----------------------------------------------------------------------===//

LogicalResult lamina::ir::graph::inferWindow(
    std::optional<Location> loc, RankedTensorType input,
    ArrayRef<int64_t> kernel, ArrayRef<int64_t> strides,
    ArrayRef<int64_t> dilations, ArrayRef<int64_t> pads, bool ceilMode,
    SmallVectorImpl<int64_t> &spatial) {
  int64_t rank = input.getRank();
  if (rank < 3 || rank > 5)
    return inferError(loc, "window ops take [N, C, S...] with 1 to 3 "
                           "spatial dims, got rank " + Twine(rank));
  size_t s = size_t(rank - 2);
  if (kernel.size() != s || strides.size() != s || dilations.size() != s ||
      pads.size() != 2 * s)
    return inferError(loc, "window attributes need one kernel size, stride "
                           "and dilation per spatial dim and two pads");
  for (size_t i = 0; i < s; ++i) {
    if (kernel[i] < 1 || strides[i] < 1 || dilations[i] < 1 || pads[i] < 0 ||
        pads[i + s] < 0)
      return inferError(loc, "window kernel, strides and dilations must be "
                             ">= 1 and pads >= 0");
    int64_t in = input.getDimSize(int64_t(i) + 2);
    int64_t span = dilations[i] * (kernel[i] - 1) + 1;
    int64_t room = in + pads[i] + pads[i + s] - span;
    if (room < 0)
      return inferError(loc, "window of " + Twine(span) +
                                 " does not fit spatial dim " + Twine(i) +
                                 " of " + Twine(in) + " with its pads");
    int64_t out = (ceilMode ? (room + strides[i] - 1) / strides[i]
                            : room / strides[i]) + 1;
    // A ceil_mode window must start inside the input or its begin pad.
    if (ceilMode && (out - 1) * strides[i] >= in + pads[i])
      --out;
    spatial.push_back(out);
  }
  return success();
}

LogicalResult lamina::ir::graph::inferConv(
    std::optional<Location> loc, RankedTensorType input,
    RankedTensorType weight, ArrayRef<int64_t> strides,
    ArrayRef<int64_t> dilations, ArrayRef<int64_t> pads, int64_t group,
    SmallVectorImpl<Type> &types) {
  if (weight.getRank() != input.getRank())
    return inferError(loc, "conv weight must have the input's rank");
  if (weight.getElementType() != input.getElementType())
    return inferError(loc, "conv operands have different element types");
  int64_t c = input.getDimSize(1), m = weight.getDimSize(0);
  if (group < 1 || c % group || m % group || weight.getDimSize(1) * group != c)
    return inferError(loc, "conv of " + Twine(c) + " input channels in " +
                               Twine(group) + " groups needs a weight of [M, " +
                               Twine(group > 0 ? c / group : 0) +
                               ", ...] with M a multiple of the groups");
  SmallVector<int64_t> spatial;
  if (failed(inferWindow(loc, input, weight.getShape().drop_front(2), strides,
                         dilations, pads, false, spatial)))
    return failure();
  SmallVector<int64_t> shape = {input.getDimSize(0), m};
  shape.append(spatial);
  types.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

LogicalResult ConvOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  auto weight = tensorType(adaptor.getWeight());
  if (Value bias = adaptor.getBias()) {
    auto bt = tensorType(bias);
    if (bt.getRank() != 1 || weight.getRank() < 1 ||
        bt.getDimSize(0) != weight.getDimSize(0) ||
        bt.getElementType() != weight.getElementType())
      return inferError(loc, "conv bias must be [M] of the weight's type");
  }
  return inferConv(loc, tensorType(adaptor.getInput()), weight,
                   adaptor.getStrides(), adaptor.getDilations(),
                   adaptor.getPads(), adaptor.getGroup(), types);
}

/// A gradient op's verifier: the forward op's result type, inferred from
/// the types the gradient op names, must be grad_result's.
static LogicalResult verifyForwardType(Operation *op, LogicalResult inferred,
                                       ArrayRef<Type> types, Type gradResult) {
  if (failed(inferred))
    return failure();
  if (types.front() != gradResult)
    return op->emitOpError("grad_result ")
           << gradResult << " is not the forward result " << types.front();
  return success();
}

LogicalResult ConvGradInputOp::verify() {
  SmallVector<Type> types;
  return verifyForwardType(
      *this,
      inferConv(getLoc(), getGradInput().getType(), getWeight().getType(),
                getStrides(), getDilations(), getPads(), getGroup(), types),
      types, getGradResult().getType());
}

LogicalResult ConvGradWeightOp::verify() {
  SmallVector<Type> types;
  return verifyForwardType(
      *this,
      inferConv(getLoc(), getInput().getType(), getGradWeight().getType(),
                getStrides(), getDilations(), getPads(), getGroup(), types),
      types, getGradResult().getType());
}

/// A pool's result type over `input`.
static LogicalResult inferPool(std::optional<Location> loc,
                               RankedTensorType input, ArrayRef<int64_t> kernel,
                               ArrayRef<int64_t> strides,
                               ArrayRef<int64_t> dilations,
                               ArrayRef<int64_t> pads, bool ceilMode,
                               SmallVectorImpl<Type> &types) {
  SmallVector<int64_t> shape;
  if (input.getRank() >= 2)
    shape.append({input.getDimSize(0), input.getDimSize(1)});
  if (failed(inferWindow(loc, input, kernel, strides, dilations, pads, ceilMode,
                         shape)))
    return failure();
  types.push_back(RankedTensorType::get(shape, input.getElementType()));
  return success();
}

LogicalResult MaxPoolOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  return inferPool(loc, tensorType(adaptor.getInput()),
                   adaptor.getKernelShape(), adaptor.getStrides(),
                   adaptor.getDilations(), adaptor.getPads(),
                   adaptor.getCeilMode(), types);
}

LogicalResult AvgPoolOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  return inferPool(loc, tensorType(adaptor.getInput()),
                   adaptor.getKernelShape(), adaptor.getStrides(),
                   adaptor.getDilations(), adaptor.getPads(),
                   adaptor.getCeilMode(), types);
}

LogicalResult MaxPoolIndicesOp::verify() {
  SmallVector<Type> types;
  if (failed(inferPool(getLoc(), getInput().getType(), getKernelShape(),
                       getStrides(), getDilations(), getPads(), getCeilMode(),
                       types)))
    return failure();
  auto pooled = cast<RankedTensorType>(types.front());
  if (getIndices().getType() !=
      pooled.clone(IntegerType::get(getContext(), 64)))
    return emitOpError("indices must be i64 shaped as the pooled result ")
           << pooled;
  return success();
}

LogicalResult MaxPoolGradOp::verify() {
  SmallVector<Type> types;
  return verifyForwardType(
      *this,
      inferPool(getLoc(), getInput().getType(), getKernelShape(), getStrides(),
                getDilations(), getPads(), getCeilMode(), types),
      types, getGradResult().getType());
}

LogicalResult AvgPoolGradOp::verify() {
  SmallVector<Type> types;
  return verifyForwardType(
      *this,
      inferPool(getLoc(), getGradInput().getType(), getKernelShape(),
                getStrides(), getDilations(), getPads(), getCeilMode(), types),
      types, getGradResult().getType());
}

//===----------------------------------------------------------------------===//
// Verifiers
//===----------------------------------------------------------------------===//

template <typename Op> static LogicalResult verifySoftmax(Op op) {
  return verifyAxis(op, op.getAxis(), op.getInput().getType().getRank());
}
LogicalResult SoftmaxOp::verify() { return verifySoftmax(*this); }
LogicalResult LogSoftmaxOp::verify() { return verifySoftmax(*this); }
LogicalResult SoftmaxGradOp::verify() {
  return verifyAxis(*this, getAxis(), getResult().getType().getRank());
}
LogicalResult LogSoftmaxGradOp::verify() {
  return verifyAxis(*this, getAxis(), getResult().getType().getRank());
}

/// Scale and bias of a normalisation cover the dims from `axis` on.
static LogicalResult verifyNormParam(Operation *op, RankedTensorType input,
                                     int64_t axis, Value param,
                                     StringRef name) {
  if (failed(verifyAxis(op, axis, input.getRank())))
    return failure();
  if (!param)
    return success();
  auto type = tensorType(param);
  if (type.getShape() != input.getShape().drop_front(axis) ||
      type.getElementType() != input.getElementType())
    return op->emitOpError() << name << " type " << type
                             << " does not match the normalised dims of "
                             << input;
  return success();
}

/// A norm's result: the input's type, or its shape in f16/bf16 for an f32
/// input.
static LogicalResult verifyNormResult(Operation *op, RankedTensorType input,
                                      RankedTensorType result) {
  Type in = input.getElementType(), out = result.getElementType();
  if (result.getShape() != input.getShape() ||
      (out != in && !(in.isF32() && (out.isF16() || out.isBF16()))))
    return op->emitOpError() << "result " << result << " is not the input's "
                             << input << " (or f16/bf16 of an f32 input)";
  return success();
}

LogicalResult LayerNormOp::verify() {
  auto input = getInput().getType();
  if (failed(verifyNormResult(*this, input, getResult().getType())) ||
      failed(verifyNormParam(*this, input, getAxis(), getScale(), "scale")))
    return failure();
  return verifyNormParam(*this, input, getAxis(), getBias(), "bias");
}

LogicalResult RMSNormOp::verify() {
  if (failed(verifyNormResult(*this, getInput().getType(),
                              getResult().getType())))
    return failure();
  return verifyNormParam(*this, getInput().getType(), getAxis(), getScale(),
                         "scale");
}

/// The backward of a norm: the forward op's checks on input and scale, the
/// result's gradient typed like the input (or f16/bf16 of an f32 input's
/// shape: a narrow-stored product, widened on load), and each parameter
/// gradient typed like the scale.
static LogicalResult verifyNormGrad(Operation *op, RankedTensorType input,
                                    int64_t axis, Value scale, Value gradResult,
                                    ArrayRef<Value> paramGrads) {
  if (failed(verifyNormParam(op, input, axis, scale, "scale")))
    return failure();
  auto dy = cast<RankedTensorType>(gradResult.getType());
  Type element = dy.getElementType();
  bool narrow =
      input.getElementType().isF32() && (element.isF16() || element.isBF16());
  if (dy.getShape() != input.getShape() ||
      (element != input.getElementType() && !narrow))
    return op->emitOpError() << "gradient " << dy << " must be " << input
                             << " (or f16/bf16 for an f32 input)";
  for (Value g : paramGrads)
    if (g && failed(verifyNormParam(op, input, axis, g, "parameter gradient")))
      return failure();
  return success();
}

LogicalResult LayerNormGradOp::verify() {
  return verifyNormGrad(*this, getInput().getType(), getAxis(), getScale(),
                        getGradResult(), {getGradScale(), getGradBias()});
}

LogicalResult RMSNormGradOp::verify() {
  return verifyNormGrad(*this, getInput().getType(), getAxis(), getScale(),
                        getGradResult(), {getGradScale()});
}

/// Labels and the per-row value (the loss or its gradient) of softmax
/// cross-entropy: shaped like the logits without their last dim, the
/// per-row value in the logits' element type, or f32 for f16/bf16 logits.
static LogicalResult verifyCrossEntropy(Operation *op, RankedTensorType logits,
                                        RankedTensorType labels,
                                        RankedTensorType rowValue,
                                        StringRef rowName) {
  if (logits.getRank() < 1)
    return op->emitOpError("logits must have rank >= 1");
  ArrayRef<int64_t> rows = logits.getShape().drop_back();
  if (labels.getShape() != rows)
    return op->emitOpError() << "labels " << labels
                             << " must be shaped like the logits " << logits
                             << " without their last dim";
  Type element = logits.getElementType();
  bool wide = (element.isF16() || element.isBF16()) &&
              rowValue.getElementType().isF32();
  if (rowValue.getShape() != rows ||
      (rowValue.getElementType() != element && !wide))
    return op->emitOpError() << rowName << " " << rowValue << " must be "
                             << RankedTensorType::get(rows, element)
                             << " (or f32 for f16/bf16 logits)";
  return success();
}

LogicalResult SoftmaxCrossEntropyOp::verify() {
  return verifyCrossEntropy(*this, getLogits().getType(),
                            getLabels().getType(), getLoss().getType(),
                            "loss");
}

LogicalResult SoftmaxCrossEntropyGradOp::verify() {
  RankedTensorType logits = getLogits().getType(),
                   grad = getGradLogits().getType();
  Type from = logits.getElementType(), to = grad.getElementType();
  if (grad.getShape() != logits.getShape() ||
      (to != from && !(from.isF32() && (to.isF16() || to.isBF16()))))
    return emitOpError() << "grad_logits " << grad
                         << " must have the logits' shape and type "
                         << logits << " (or f16/bf16 for f32 logits)";
  return verifyCrossEntropy(*this, logits, getLabels().getType(),
                            getGradLoss().getType(), "grad_loss");
}

/// attention's operand and result types (graph.attention's description).
/// A [B, H, S, D] shape from the op's layout (seq_major: [B, S, H, D]).
static SmallVector<int64_t> headMajorShape(RankedTensorType t, bool seqMajor) {
  SmallVector<int64_t> s(t.getShape());
  if (seqMajor)
    std::swap(s[1], s[2]);
  return s;
}

static LogicalResult verifyAttention(Operation *op, RankedTensorType q,
                                     RankedTensorType k, RankedTensorType v,
                                     Value bias, RankedTensorType out,
                                     RankedTensorType lse, bool seqMajor) {
  StringRef layout = seqMajor ? "[B, S, H, D]" : "[B, H, S, D]";
  if (q.getRank() != 4 || k.getRank() != 4 || v.getRank() != 4)
    return op->emitOpError() << "q, k and v must have rank 4 (" << layout
                             << ")";
  Type element = q.getElementType();
  if (k.getElementType() != element || v.getElementType() != element)
    return op->emitOpError("q, k and v must have one element type");
  SmallVector<int64_t> qs = headMajorShape(q, seqMajor),
                       ks = headMajorShape(k, seqMajor),
                       vs = headMajorShape(v, seqMajor);
  if (ks[0] != qs[0] || ks[3] != qs[3] || vs[0] != qs[0] || vs[1] != ks[1] ||
      vs[2] != ks[2])
    return op->emitOpError()
           << "q " << q << " needs k "
           << (seqMajor ? "[B, Sk, Hk, D] and v [B, Sk, Hk, Dv]"
                        : "[B, Hk, Sk, D] and v [B, Hk, Sk, Dv]")
           << ", got " << k << " and " << v;
  if (ks[1] < 1 || qs[1] % ks[1] != 0)
    return op->emitOpError() << qs[1] << " query heads cannot share " << ks[1]
                             << " kv heads";
  if (bias) {
    auto bt = cast<RankedTensorType>(bias.getType());
    SmallVector<int64_t> full = {qs[0], qs[1], qs[2], ks[2]};
    auto joint = broadcastShapes(bt.getShape(), full);
    if (bt.getRank() > 4 || !joint || *joint != full)
      return op->emitOpError() << "bias " << bt << " must broadcast to "
                               << RankedTensorType::get(full, bt.getElementType());
  }
  Type lseElement = element.isF64() ? element : Float32Type::get(op->getContext());
  SmallVector<int64_t> outShape = {qs[0], qs[1], qs[2], vs[3]};
  if (seqMajor)
    std::swap(outShape[1], outShape[2]);
  auto wantOut = RankedTensorType::get(outShape, element);
  auto wantLse = RankedTensorType::get({qs[0], qs[1], qs[2]}, lseElement);
  if (out != wantOut)
    return op->emitOpError() << "out must be " << wantOut << ", got " << out;
  if (lse != wantLse)
    return op->emitOpError() << "lse must be " << wantLse << ", got " << lse;
  return success();
}

LogicalResult AttentionOp::verify() {
  return verifyAttention(*this, getQ().getType(), getK().getType(),
                         getV().getType(), getBias(), getOut().getType(),
                         getLse().getType(), getSeqMajor());
}

LogicalResult AttentionGradOp::verify() {
  return verifyAttention(*this, getQ().getType(), getK().getType(),
                         getV().getType(), getBias(), getOut().getType(),
                         getLse().getType(), getSeqMajor());
}

/// packed_attention's qkv [B, S, (H + 2 Hk) D], out [B, S, H, D] of its type
/// and lse [B, H, S] f32 (f64 for f64).
static LogicalResult verifyPackedAttention(Operation *op, RankedTensorType qkv,
                                           RankedTensorType out,
                                           RankedTensorType lse, int64_t h,
                                           int64_t hk) {
  if (qkv.getRank() != 3 || h < 1 || hk < 1 || h % hk != 0 ||
      qkv.getShape()[2] % (h + 2 * hk) != 0)
    return op->emitOpError() << "qkv " << qkv << " is not [B, S, (" << h
                             << " + 2 x " << hk
                             << ") D] (heads a multiple of kv_heads)";
  int64_t b = qkv.getShape()[0], s = qkv.getShape()[1],
          d = qkv.getShape()[2] / (h + 2 * hk);
  Type element = qkv.getElementType();
  Type stat = element.isF64() ? element : Float32Type::get(op->getContext());
  auto wantOut = RankedTensorType::get({b, s, h, d}, element);
  auto wantLse = RankedTensorType::get({b, h, s}, stat);
  if (out != wantOut || lse != wantLse)
    return op->emitOpError() << "out and lse must be " << wantOut << " and "
                             << wantLse << ", got " << out << " and " << lse;
  return success();
}

LogicalResult PackedAttentionOp::verify() {
  return verifyPackedAttention(*this, getQkv().getType(), getOut().getType(),
                               getLse().getType(), getHeads(), getKvHeads());
}

LogicalResult PackedAttentionGradOp::verify() {
  return verifyPackedAttention(*this, getQkv().getType(), getOut().getType(),
                               getLse().getType(), getHeads(), getKvHeads());
}

LogicalResult CumSumOp::verify() {
  return verifyAxis(*this, getAxis(), getInput().getType().getRank());
}

LogicalResult ReshapeOp::verify() {
  auto in = getInput().getType(), out = getResult().getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError("reshape must keep the element type");
  if (in.getNumElements() != out.getNumElements())
    return emitOpError() << "reshape from " << in << " to " << out
                         << " changes the number of elements";
  return success();
}

LogicalResult BroadcastOp::verify() {
  auto in = getInput().getType(), out = getResult().getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError("broadcast must keep the element type");
  auto merged = broadcastShapes(in.getShape(), out.getShape());
  if (!merged || ArrayRef<int64_t>(*merged) != out.getShape())
    return emitOpError() << in << " does not broadcast to " << out;
  return success();
}

LogicalResult TriluOp::verify() {
  if (getInput().getType().getRank() < 2)
    return emitOpError("trilu needs rank >= 2");
  return success();
}

bool ScatterNDOp::isReduction(StringRef r) {
  return llvm::is_contained({"none", "add", "mul", "max", "min"}, r);
}

RankedTensorType ScatterNDOp::updatesType(RankedTensorType data,
                                          RankedTensorType indices) {
  if (indices.getRank() < 1 || indices.getShape().back() > data.getRank())
    return {};
  int64_t k = indices.getShape().back();
  SmallVector<int64_t> shape(indices.getShape().drop_back());
  llvm::append_range(shape, data.getShape().drop_front(k));
  return data.clone(shape);
}

LogicalResult ScatterNDOp::verify() {
  if (!isReduction(getReduction()))
    return emitOpError() << "unknown reduction '" << getReduction() << "'";
  RankedTensorType want =
      updatesType(getData().getType(), getIndices().getType());
  if (!want)
    return emitOpError("index tuples longer than the data rank");
  if (getUpdates().getType() != want)
    return emitOpError() << "updates type " << getUpdates().getType()
                         << " does not match indices and data";
  return success();
}

LogicalResult FusedMatMulOp::verify() {
  SmallVector<Type, 1> inferred;
  if (failed(inferMatMul(getLoc(), getLhs().getType(), getRhs().getType(),
                         inferred)))
    return failure();
  RankedTensorType result = getResult().getType();
  if (!MatMulOp::isCompatibleReturnTypes(inferred, TypeRange(result)))
    return emitOpError() << "result " << result << " is not the product type "
                         << inferred.front() << " (or f32 for f16/bf16)";
  Type elt = result.getElementType();
  if (Value bias = getBias()) {
    auto type = cast<RankedTensorType>(bias.getType());
    ArrayRef<int64_t> shape = type.getShape();
    bool rowVector = !shape.empty() && shape.back() == result.getShape().back() &&
                     type.getRank() <= result.getRank() &&
                     llvm::all_of(shape.drop_back(),
                                  [](int64_t d) { return d == 1; });
    if (!rowVector || type.getElementType() != elt)
      return emitOpError() << "bias " << type << " is not a [1, ..., 1, "
                           << result.getShape().back() << "] row of "
                           << elt;
  }
  if (Value addend = getAddend(); addend && addend.getType() != result)
    return emitOpError() << "addend " << addend.getType()
                         << " is not of the result type " << result;
  return success();
}

StringRef FusedElementwiseOp::stepOf(Operation *op) {
  return llvm::TypeSwitch<Operation *, StringRef>(op)
      .Case([](NegOp) { return "neg"; })
      .Case([](AbsOp) { return "abs"; })
      .Case([](ReluOp) { return "relu"; })
      .Case([](ExpOp) { return "exp"; })
      .Case([](LogOp) { return "log"; })
      .Case([](SqrtOp) { return "sqrt"; })
      .Case([](ReciprocalOp) { return "reciprocal"; })
      .Case([](TanhOp) { return "tanh"; })
      .Case([](ErfOp) { return "erf"; })
      .Case([](SigmoidOp) { return "sigmoid"; })
      .Case([](GeluOp o) { return o.getTanh() ? "gelu_tanh" : "gelu"; })
      .Case([](GeluDerivativeOp o) {
        return o.getTanh() ? "gelu_tanh_derivative" : "gelu_derivative";
      })
      .Case([](CosOp) { return "cos"; })
      .Case([](SinOp) { return "sin"; })
      .Case([](AddOp) { return "add"; })
      .Case([](SubOp) { return "sub"; })
      .Case([](MulOp) { return "mul"; })
      .Case([](DivOp) { return "div"; })
      .Case([](PowOp) { return "pow"; })
      .Case([](MinOp) { return "min"; })
      .Case([](MaxOp) { return "max"; })
      .Default([](Operation *) { return ""; });
}

bool FusedElementwiseOp::isStepOp(StringRef name, bool &binary) {
  static constexpr StringLiteral kUnary[] = {
      "neg", "abs",     "relu", "exp",       "log", "sqrt", "reciprocal",
      "tanh", "erf", "sigmoid", "gelu", "gelu_tanh", "cos", "sin",
      "gelu_derivative", "gelu_tanh_derivative"};
  static constexpr StringLiteral kBinary[] = {"add", "sub", "mul", "div",
                                              "pow", "min", "max"};
  binary = llvm::is_contained(kBinary, name);
  return binary || llvm::is_contained(kUnary, name);
}

LogicalResult FusedElementwiseOp::verify() {
  int64_t n = int64_t(getInputs().size());
  int64_t steps = int64_t(getOps().size());
  if (n < 1 || n > kMaxInputs)
    return emitOpError() << "needs 1 to " << kMaxInputs << " inputs, got " << n;
  // No steps: the identity on one input, only worth a kernel with a sum.
  bool identity = steps == 0 && getSum() && n == 1;
  if ((steps < 1 && !identity) || steps > kMaxSteps)
    return emitOpError() << "needs 1 to " << kMaxSteps
                         << " steps (0 with a sum and one input), got "
                         << steps;
  if (int64_t(getLhs().size()) != steps || int64_t(getRhs().size()) != steps)
    return emitOpError("needs one lhs and one rhs register per step");
  auto isKernelFloat = [](Type t) {
    return t.isF32() || t.isF16() || t.isBF16();
  };
  auto result = getResult().getType();
  Type elt = result.getElementType();
  if (!isKernelFloat(elt))
    return emitOpError() << "computes f32, f16 or bf16, not " << elt;
  for (Value in : getInputs()) {
    // Each input its own float type, widened to f32 on load.
    auto type = cast<RankedTensorType>(in.getType());
    if (!isKernelFloat(type.getElementType()))
      return emitOpError() << "input " << type
                           << " is not f32, f16 or bf16";
    auto merged = broadcastShapes(type.getShape(), result.getShape());
    if (!merged || ArrayRef<int64_t>(*merged) != result.getShape())
      return emitOpError() << "input " << type << " does not broadcast to "
                           << result;
  }
  if (Value sum = getSum()) {
    // The sum over the leading dims: f32, the result's trailing dims.
    auto type = cast<RankedTensorType>(sum.getType());
    ArrayRef<int64_t> shape = result.getShape();
    if (!type.getElementType().isF32() || type.getRank() < 1 ||
        type.getRank() >= result.getRank() ||
        type.getShape() != shape.take_back(type.getRank()))
      return emitOpError() << "sum " << type
                           << " is not f32 of the trailing dims of "
                           << result;
  }
  for (int64_t i = 0; i < steps; ++i) {
    StringRef name = cast<StringAttr>(getOps()[i]).getValue();
    bool binary = false;
    if (!isStepOp(name, binary))
      return emitOpError() << "step " << i << ": unknown op '" << name << "'";
    int64_t defined = n + i, lhs = getLhs()[i], rhs = getRhs()[i];
    if (lhs < 0 || lhs >= defined || (binary && (rhs < 0 || rhs >= defined)))
      return emitOpError() << "step " << i
                           << " reads a register not yet defined";
    if (!binary && rhs != -1)
      return emitOpError() << "step " << i << ": unary '" << name
                           << "' needs rhs -1";
  }
  return success();
}

// `-> type` after a norm's operand types only when its result type is not
// the input's (a narrowed result).
static ParseResult parseNormResult(OpAsmParser &parser, Type &result,
                                   Type input) {
  if (succeeded(parser.parseOptionalArrow()))
    return parser.parseType(result);
  result = input;
  return success();
}
static void printNormResult(OpAsmPrinter &printer, Operation *, Type result,
                            Type input) {
  if (result != input)
    printer << " -> " << result;
}

// `, dy type` after a norm gradient's operand types only when the result's
// gradient is not typed like the input (a narrow-stored product).
static ParseResult parseNormGradResult(OpAsmParser &parser, Type &gradResult,
                                       Type input) {
  if (succeeded(parser.parseOptionalComma()))
    return failure(parser.parseKeyword("dy") || parser.parseType(gradResult));
  gradResult = input;
  return success();
}
static void printNormGradResult(OpAsmPrinter &printer, Operation *,
                                Type gradResult, Type input) {
  if (gradResult != input)
    printer << ", dy " << gradResult;
}

#define GET_OP_CLASSES
#include "lamina/Dialect/Graph/IR/GraphOps.cpp.inc"
