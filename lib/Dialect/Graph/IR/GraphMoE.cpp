//===- GraphMoE.cpp - the mixture-of-experts ops --------------------------===//
//
// graph.topk, graph.moe and graph.moe_grad, and the expert-parallel
// pieces (dispatch, exchange, row experts, combine): verifiers, gradient
// rules and costs (GraphMoEOps.td, docs/moe-design.md).
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Graph/IR/GraphOps.h"

#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <algorithm>

using namespace mlir;
using namespace lamina::ir::graph;

namespace {
RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }
int64_t elements(Value v) { return typeOf(v).getNumElements(); }

/// The experts' sizes, from graph.moe's or graph.moe_grad's operands.
struct MoEShape {
  int64_t tokens, hidden, k, experts, inner;
};

LogicalResult verifyMoE(Operation *op, Value input, Value indices,
                        Value weights, Value gateUp, Value down, MoEShape &s) {
  auto x = typeOf(input), idx = typeOf(indices), w = typeOf(weights),
       gu = typeOf(gateUp), dn = typeOf(down);
  if (x.getRank() != 2 || idx.getRank() != 2 || w.getRank() != 2 ||
      gu.getRank() != 3 || dn.getRank() != 3)
    return op->emitOpError("expects input [T, H], indices and weights "
                           "[T, k], gate_up [E, 2I, H] and down [E, H, I]");
  s = {x.getDimSize(0), x.getDimSize(1), idx.getDimSize(1), gu.getDimSize(0),
       dn.getDimSize(2)};
  if (idx.getDimSize(0) != s.tokens || w.getShape() != idx.getShape())
    return op->emitOpError("indices and weights must be [")
           << s.tokens << ", k] alike, got " << idx << " and " << w;
  if (gu.getShape() != ArrayRef<int64_t>{s.experts, 2 * s.inner, s.hidden} ||
      dn.getShape() != ArrayRef<int64_t>{s.experts, s.hidden, s.inner})
    return op->emitOpError("gate_up ")
           << gu << " and down " << dn << " must be [E, 2I, " << s.hidden
           << "] and [E, " << s.hidden << ", I]";
  if (s.k < 1 || s.k > s.experts)
    return op->emitOpError("each token's ")
           << s.k << " experts must be between 1 and the " << s.experts
           << " experts";
  for (Type t : {Type(w), Type(gu), Type(dn)})
    if (cast<RankedTensorType>(t).getElementType() != x.getElementType())
      return op->emitOpError("input, weights, gate_up and down must share "
                             "an element type");
  return success();
}

/// graph.moe_dispatch's and graph.moe_combine's layout: `rows` [R C, H]
/// for `indices` [T, k] over `experts` split `ranks` ways.
LogicalResult verifyRowLayout(Operation *op, Value rows, Value indices,
                              int64_t experts, int64_t ranks) {
  auto r = typeOf(rows), idx = typeOf(indices);
  if (r.getRank() != 2 || idx.getRank() != 2)
    return op->emitOpError("expects rows [R C, H] and indices [T, k]");
  if (ranks < 1 || experts < 1 || experts % ranks != 0)
    return op->emitOpError("the ")
           << experts << " experts must split evenly over " << ranks
           << " ranks";
  int64_t k = idx.getDimSize(1), local = experts / ranks;
  if (k > experts)
    return op->emitOpError("each token's ")
           << k << " experts exceed the " << experts << " experts";
  int64_t need = idx.getDimSize(0) * std::min(k, local);
  if (r.getDimSize(0) % ranks != 0 || r.getDimSize(0) / ranks < need)
    return op->emitOpError("rows ")
           << r << " must be " << ranks << " blocks of at least " << need
           << " rows (T min(k, E/R))";
  return success();
}

/// [R, n] i64 counts.
LogicalResult verifyCounts(Operation *op, Value counts, StringRef what) {
  auto c = typeOf(counts);
  if (c.getRank() != 2 || !c.getElementType().isInteger(64))
    return op->emitOpError() << what << " must be i64 [R, n], got " << c;
  return success();
}

Value onesLike(ImplicitLocOpBuilder &b, Type type) {
  auto t = cast<RankedTensorType>(type);
  return ConstantOp::create(b,
                            cast<ElementsAttr>(DenseElementsAttr::get(
                                t, b.getFloatAttr(t.getElementType(), 1.0))));
}
} // namespace

LogicalResult TopKOp::verify() {
  RankedTensorType in = getInput().getType();
  int64_t k = getK();
  if (in.getRank() < 1 || k < 1 || k > in.getDimSize(in.getRank() - 1))
    return emitOpError("k = ")
           << k << " must be in [1, " << in.getShape().back()
           << "] (the last dim of " << in << ")";
  SmallVector<int64_t> shape(in.getShape());
  shape.back() = k;
  if (getValues().getType() !=
      RankedTensorType::get(shape, in.getElementType()))
    return emitOpError("values must be ")
           << RankedTensorType::get(shape, in.getElementType());
  auto indices = getIndices().getType();
  if (indices.getShape() != ArrayRef<int64_t>(shape) ||
      !indices.getElementType().isInteger(64))
    return emitOpError("indices must be i64 shaped like the values");
  return success();
}

LogicalResult MoEOp::verify() {
  MoEShape s;
  if (failed(verifyMoE(*this, getInput(), getIndices(), getWeights(),
                       getGateUp(), getDown(), s)))
    return failure();
  if (getResult().getType() != getInput().getType())
    return emitOpError("the result must have the input's type");
  return success();
}

LogicalResult MoEDispatchOp::verify() {
  if (failed(verifyRowLayout(*this, getRows(), getIndices(), getExperts(),
                             getRanks())) ||
      failed(verifyCounts(*this, getCounts(), "counts")))
    return failure();
  auto x = typeOf(getInput()), rows = typeOf(getRows());
  if (x.getRank() != 2 ||
      x.getDimSize(0) != typeOf(getIndices()).getDimSize(0) ||
      rows.getDimSize(1) != x.getDimSize(1) ||
      rows.getElementType() != x.getElementType())
    return emitOpError("input [T, H] must match the indices' T and the "
                       "rows' H and element type");
  if (typeOf(getCounts()).getShape() !=
      ArrayRef<int64_t>{int64_t(getRanks()),
                        int64_t(getExperts() / getRanks())})
    return emitOpError("counts must be [")
           << getRanks() << ", " << getExperts() / getRanks() << "]";
  return success();
}

LogicalResult MoEExchangeOp::verify() {
  if (failed(verifyCounts(*this, getCounts(), "counts")))
    return failure();
  auto rows = typeOf(getRows());
  int64_t ranks = typeOf(getCounts()).getDimSize(0);
  if (rows.getRank() < 1 || ranks < 1 || rows.getDimSize(0) % ranks != 0)
    return emitOpError("rows ") << rows << " must be " << ranks << " blocks";
  if (getResult().getType() != getRows().getType() ||
      getReceived().getType() != getCounts().getType())
    return emitOpError("the results must have the operands' types");
  return success();
}

LogicalResult MoERowExpertsOp::verify() {
  if (failed(verifyCounts(*this, getCounts(), "counts")))
    return failure();
  auto r = typeOf(getResult());
  int64_t ranks = typeOf(getCounts()).getDimSize(0);
  if (r.getRank() != 2 || r.getDimSize(1) != 1 ||
      r.getDimSize(0) % ranks != 0 || !r.getElementType().isInteger(64))
    return emitOpError("the result must be i64 [R C, 1], got ") << r;
  return success();
}

LogicalResult MoECombineOp::verify() {
  if (failed(verifyRowLayout(*this, getRows(), getIndices(), getExperts(),
                             getRanks())))
    return failure();
  auto rows = typeOf(getRows()), res = typeOf(getResult());
  if (getWeights().getType().getShape() != typeOf(getIndices()).getShape() ||
      getWeights().getType().getElementType() != rows.getElementType())
    return emitOpError("weights must be shaped like the indices, typed like "
                       "the rows");
  if (res.getShape() != ArrayRef<int64_t>{typeOf(getIndices()).getDimSize(0),
                                          rows.getDimSize(1)} ||
      res.getElementType() != rows.getElementType())
    return emitOpError("the result must be [T, H] of the rows' type");
  return success();
}

/// The gradient of the values put back where they came from: sum over the
/// k picks of (indices == iota) * grad, [..., k, N] -> [..., N].
LogicalResult TopKOp::buildGradients(OpBuilder &builder, ValueRange gradients,
                                     SmallVectorImpl<Value> &out) {
  ImplicitLocOpBuilder b(getLoc(), builder);
  RankedTensorType in = getInput().getType();
  Value g = gradients[0];
  if (!g) {
    out.push_back(ConstantOp::create(
        b, cast<ElementsAttr>(DenseElementsAttr::get(
               in, b.getFloatAttr(in.getElementType(), 0.0)))));
    return success();
  }
  int64_t n = in.getShape().back(), rank = in.getRank();
  SmallVector<int64_t> picks(typeOf(g).getShape());
  picks.push_back(1);
  auto i64 = b.getI64Type();
  Value idx =
      ReshapeOp::create(b, RankedTensorType::get(picks, i64), getIndices());
  Value grad = ReshapeOp::create(
      b, RankedTensorType::get(picks, in.getElementType()), g);
  SmallVector<int64_t> iota(n);
  for (int64_t i = 0; i < n; ++i)
    iota[i] = i;
  Value positions = ConstantOp::create(
      b, cast<ElementsAttr>(DenseElementsAttr::get(
             RankedTensorType::get({n}, i64), ArrayRef<int64_t>(iota))));
  Value hit = EqualOp::create(b, idx, positions);
  Value zero =
      ConstantOp::create(b, cast<ElementsAttr>(DenseElementsAttr::get(
                                RankedTensorType::get({}, in.getElementType()),
                                b.getFloatAttr(in.getElementType(), 0.0))));
  Value placed = SelectOp::create(b, hit, grad, zero);
  out.push_back(ReduceSumOp::create(b, placed, b.getDenseI64ArrayAttr(rank - 1),
                                    b.getBoolAttr(false)));
  return success();
}

LogicalResult MoEOp::buildGradients(OpBuilder &builder, ValueRange gradients,
                                    SmallVectorImpl<Value> &out) {
  auto grad =
      MoEGradOp::create(builder, getLoc(),
                        TypeRange{getInput().getType(), getWeights().getType(),
                                  getGateUp().getType(), getDown().getType()},
                        getInput(), getIndices(), getWeights(), getGateUp(),
                        getDown(), gradients[0]);
  out.append({grad.getGradInput(), Value(), grad.getGradWeights(),
              grad.getGradGateUp(), grad.getGradDown()});
  return success();
}

LogicalResult MoEDispatchOp::buildGradients(OpBuilder &builder,
                                            ValueRange gradients,
                                            SmallVectorImpl<Value> &out) {
  ImplicitLocOpBuilder b(getLoc(), builder);
  Value g = gradients[0];
  if (!g) {
    out.append({Value(), Value()});
    return success();
  }
  Value ones =
      onesLike(b, RankedTensorType::get(typeOf(getIndices()).getShape(),
                                        typeOf(getInput()).getElementType()));
  out.push_back(MoECombineOp::create(b, getInput().getType(), g, getIndices(),
                                     ones, getExperts(), getRanks()));
  out.push_back(Value());
  return success();
}

LogicalResult MoEExchangeOp::buildGradients(OpBuilder &builder,
                                            ValueRange gradients,
                                            SmallVectorImpl<Value> &out) {
  Value g = gradients[0];
  if (!g) {
    out.append({Value(), Value()});
    return success();
  }
  auto back = MoEExchangeOp::create(builder, getLoc(), getRows().getType(),
                                    getCounts().getType(), g, getReceived());
  out.append({back.getResult(), Value()});
  return success();
}

LogicalResult MoECombineOp::buildGradients(OpBuilder &builder,
                                           ValueRange gradients,
                                           SmallVectorImpl<Value> &out) {
  Value g = gradients[0];
  if (!g) {
    out.append({Value(), Value(), Value()});
    return success();
  }
  auto grad = MoECombineGradOp::create(
      builder, getLoc(), getRows().getType(), getWeights().getType(), getRows(),
      getIndices(), getWeights(), g, getExperts(), getRanks());
  out.append({grad.getGradRows(), Value(), grad.getGradWeights()});
  return success();
}

// Costs: each token through k experts' three GEMMs (gate, up, down: 6 H I
// FLOPs per token and expert) and the SiLU gating; the backward recomputes
// the gate and up products and runs six more.
int64_t TopKOp::getFlops() { return elements(getInput()); }
int64_t MoEOp::getFlops() {
  int64_t tokens = typeOf(getInput()).getDimSize(0),
          hidden = typeOf(getInput()).getDimSize(1),
          k = typeOf(getIndices()).getDimSize(1),
          inner = typeOf(getDown()).getDimSize(2);
  return tokens * k * (6 * hidden * inner + 6 * inner + 2 * hidden);
}
int64_t MoEGradOp::getFlops() {
  int64_t tokens = typeOf(getInput()).getDimSize(0),
          hidden = typeOf(getInput()).getDimSize(1),
          k = typeOf(getIndices()).getDimSize(1),
          inner = typeOf(getDown()).getDimSize(2);
  return tokens * k * (16 * hidden * inner + 12 * inner + 4 * hidden);
}

// The expert-parallel pieces move rows: one read and one write of each
// (token, pick) pair's H values (the combines also multiply and add).
int64_t MoEDispatchOp::getFlops() { return elements(getRows()); }
int64_t MoEExchangeOp::getFlops() { return 0; }
int64_t MoERowExpertsOp::getFlops() { return 0; }
int64_t MoECombineOp::getFlops() { return 2 * elements(getRows()); }
int64_t MoECombineGradOp::getFlops() { return 4 * elements(getRows()); }
