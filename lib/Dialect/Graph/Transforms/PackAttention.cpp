//===- PackAttention.cpp - attention reading a fused q/k/v in place -------===//
//
// See the pass description in Passes.td. The forward and its gradient are
// rewritten together or not at all: the packed gradient needs the packed
// forward's operands, and a gradient left unpacked would need the slices
// the rewrite removes.
//
//===----------------------------------------------------------------------===//

#include "FusionDriver.h"

#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace lamina::ir::graph {
#define GEN_PASS_DEF_GRAPHPACKATTENTION
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace lamina::ir::graph

using namespace mlir;
using namespace lamina::ir::graph;

namespace {
RankedTensorType typeOf(Value v) {
  return cast<RankedTensorType>(v.getType());
}

/// `v` [B, S, heads, D] as reshape(slice(x)) of columns [start, start +
/// heads * D) of a rank-3 x [B, S, W]: x, or null.
Value sliceOf(Value v, int64_t start) {
  auto reshape = v.getDefiningOp<ReshapeOp>();
  if (!reshape)
    return Value();
  auto slice = reshape.getInput().getDefiningOp<SliceOp>();
  if (!slice)
    return Value();
  Value x = slice.getInput();
  RankedTensorType xt = typeOf(x), vt = typeOf(v);
  if (xt.getRank() != 3 || vt.getRank() != 4)
    return Value();
  int64_t b = xt.getShape()[0], s = xt.getShape()[1];
  int64_t width = vt.getShape()[2] * vt.getShape()[3];
  bool ok = vt.getShape()[0] == b && vt.getShape()[1] == s &&
            slice.getStarts() == ArrayRef<int64_t>{0, 0, start} &&
            slice.getSizes() == ArrayRef<int64_t>{b, s, width} &&
            slice.getSteps() == ArrayRef<int64_t>{1, 1, 1};
  return ok ? x : Value();
}

/// The value `g` [B, S, heads, D] is only reshaped to [B, S, heads * D] and
/// fed to `concat` as operand `index`.
bool feedsConcat(Value g, ConcatOp concat, unsigned index) {
  if (!g.hasOneUse())
    return false;
  auto reshape = dyn_cast<ReshapeOp>(*g.getUsers().begin());
  return reshape && reshape->hasOneUse() &&
         concat->getOperand(index) == reshape.getResult();
}

/// A seq_major attention on three slices of one fused projection (and its
/// gradient, if any) -> graph.packed_attention (graph.packed_attention_grad).
struct PackAttention : OpRewritePattern<AttentionOp> {
  PackAttention(MLIRContext *ctx, llvm::Statistic &packed,
                llvm::Statistic &packedGrads)
      : OpRewritePattern(ctx), numPacked(packed), numPackedGrads(packedGrads) {}

  LogicalResult matchAndRewrite(AttentionOp a,
                                PatternRewriter &rewriter) const override {
    if (!a.getSeqMajor() || a.getBias())
      return failure();
    RankedTensorType qt = typeOf(a.getQ()), kt = typeOf(a.getK()),
                     vt = typeOf(a.getV());
    int64_t h = qt.getShape()[2], hk = kt.getShape()[2], d = qt.getShape()[3];
    if (vt.getShape()[3] != d || vt.getShape()[2] != hk)
      return failure();
    Value x = sliceOf(a.getQ(), 0);
    if (!x || sliceOf(a.getK(), h * d) != x ||
        sliceOf(a.getV(), (h + hk) * d) != x ||
        typeOf(x).getShape()[2] != (h + 2 * hk) * d)
      return failure();
    // The gradient, if any, must read this op's q, k, v, out and lse, and
    // nothing else may read q, k, v.
    AttentionGradOp grad;
    for (Value in : {a.getQ(), a.getK(), a.getV()})
      for (Operation *user : in.getUsers()) {
        if (user == a)
          continue;
        auto g = dyn_cast<AttentionGradOp>(user);
        if (!g || (grad && g != grad))
          return failure();
        grad = g;
      }
    ConcatOp concat;
    if (grad) {
      if (grad.getQ() != a.getQ() || grad.getK() != a.getK() ||
          grad.getV() != a.getV() || grad.getOut() != a.getOut() ||
          grad.getLse() != a.getLse() || grad.getBias() ||
          !grad.getSeqMajor() || grad.getScale() != a.getScale() ||
          grad.getCausal() != a.getCausal() || !grad.getGradQ().hasOneUse())
        return failure();
      auto reshape = dyn_cast<ReshapeOp>(*grad.getGradQ().getUsers().begin());
      if (!reshape || !reshape->hasOneUse())
        return failure();
      concat = dyn_cast<ConcatOp>(*reshape->getUsers().begin());
      if (!concat || concat->getNumOperands() != 3 || concat.getAxis() != 2 ||
          concat.getType() != typeOf(x) ||
          !feedsConcat(grad.getGradQ(), concat, 0) ||
          !feedsConcat(grad.getGradK(), concat, 1) ||
          !feedsConcat(grad.getGradV(), concat, 2))
        return failure();
    }
    rewriter.setInsertionPoint(a);
    auto packed = PackedAttentionOp::create(
        rewriter, a.getLoc(), a.getOut().getType(), a.getLse().getType(), x,
        rewriter.getI64IntegerAttr(h), rewriter.getI64IntegerAttr(hk),
        a.getScaleAttr(), a.getCausalAttr());
    rewriter.replaceAllUsesWith(a.getOut(), packed.getOut());
    rewriter.replaceAllUsesWith(a.getLse(), packed.getLse());
    ++numPacked;
    if (grad) {
      rewriter.setInsertionPoint(concat);
      auto g = PackedAttentionGradOp::create(
          rewriter, grad.getLoc(), concat.getType(), x, packed.getOut(),
          packed.getLse(), grad.getGradOut(), rewriter.getI64IntegerAttr(h),
          rewriter.getI64IntegerAttr(hk), grad.getScaleAttr(),
          grad.getCausalAttr());
      rewriter.replaceAllUsesWith(concat.getResult(), g.getGradQkv());
      SmallVector<Operation *> reshapes(concat->getOperands().size());
      for (auto [i, v] : llvm::enumerate(concat->getOperands()))
        reshapes[i] = v.getDefiningOp();
      rewriter.eraseOp(concat);
      for (Operation *r : reshapes)
        rewriter.eraseOp(r);
      rewriter.eraseOp(grad);
      ++numPackedGrads;
    }
    SmallVector<Value> views{a.getQ(), a.getK(), a.getV()};
    rewriter.eraseOp(a);
    // The reshapes and slices q, k and v came from, now unread.
    for (Value view : views) {
      Operation *reshape = view.getDefiningOp();
      if (!reshape->use_empty())
        continue;
      Operation *slice = reshape->getOperand(0).getDefiningOp();
      rewriter.eraseOp(reshape);
      if (slice->use_empty())
        rewriter.eraseOp(slice);
    }
    return success();
  }

  llvm::Statistic &numPacked, &numPackedGrads;
};

struct GraphPackAttention
    : lamina::ir::graph::impl::GraphPackAttentionBase<GraphPackAttention> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<PackAttention>(&getContext(), numPacked, numPackedGrads);
    if (failed(applyFusionPatterns(anchorsOf<AttentionOp>(getOperation()),
                                   std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
