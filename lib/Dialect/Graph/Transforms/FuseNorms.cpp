//===- FuseNorms.cpp - written-out norms -> graph.layer_norm / rms_norm ---===//
//
// A pattern anchored at each reduce_mean over the last dim (keepdims): the
// exporters' spellings of LayerNorm (opsets without LayerNormalization) and
// of RMSNorm (every LLaMA-style export) are walked outwards from it.
//
//===----------------------------------------------------------------------===//

#include "ChainMatch.h"
#include "FusionDriver.h"

#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace lamina::ir::graph {
#define GEN_PASS_DEF_GRAPHFUSENORMS
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace lamina::ir::graph

using namespace mlir;
using namespace lamina::ir::graph;
using namespace lamina::ir::graph::chain;

namespace {

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// A reduce_mean over the last dim only, keeping it.
bool isRowMean(ReduceMeanOp mean) {
  int64_t rank = typeOf(mean.getInput()).getRank();
  ArrayRef<int64_t> axes = mean.getAxes();
  return mean.getKeepdims() && axes.size() == 1 &&
         (axes[0] == rank - 1 || axes[0] == -1);
}

/// x^2 as pow(x, 2) or x * x; x, or null.
Value squared(Value v) {
  if (auto pow = v.getDefiningOp<PowOp>(); pow && isScalar(pow.getRhs(), 2))
    return pow.getLhs();
  if (auto mul = v.getDefiningOp<MulOp>(); mul && mul.getLhs() == mul.getRhs())
    return mul.getLhs();
  return {};
}

struct Norm {
  Value x, scale, bias;
  double epsilon = 0;
  bool rms = false;
  Operation *root = nullptr;
  SmallVector<Operation *> ops; // everything the norm replaces
};

/// From `variance` (a [.., 1] row statistic) to the normalised value:
/// `numer / sqrt(variance + eps)` or `numer * (1 / sqrt(variance + eps))`
/// (reciprocal or a division of 1). The op producing it, or null.
Operation *matchNormalise(Value variance, Value numer, Norm &n) {
  Operation *add = soleUser(variance);
  Value v = otherThan<AddOp>(add, variance);
  std::optional<double> eps = scalar(v);
  if (!eps || *eps < 0)
    return nullptr;
  n.epsilon = *eps;
  auto sqrt = dyn_cast_or_null<SqrtOp>(soleUser(add->getResult(0)));
  if (!sqrt)
    return nullptr;
  n.ops.append({add, sqrt});
  Value s = sqrt.getResult();
  Operation *user = soleUser(s);
  if (auto div = dyn_cast_or_null<DivOp>(user)) {
    if (div.getRhs() == s && div.getLhs() == numer)
      return div; // numer / s
    if (div.getRhs() == s && isScalar(div.getLhs(), 1.0)) {
      n.ops.push_back(div);
      Operation *mul = soleUser(div.getResult());
      return otherThan<MulOp>(mul, div.getResult()) == numer ? mul : nullptr;
    }
    return nullptr;
  }
  if (auto rec = dyn_cast_or_null<ReciprocalOp>(user)) {
    n.ops.push_back(rec);
    Operation *mul = soleUser(rec.getResult());
    return otherThan<MulOp>(mul, rec.getResult()) == numer ? mul : nullptr;
  }
  return nullptr;
}

/// `y * scale (+ bias)`, scale and bias [D] (D the last dim).
bool matchAffine(Operation *normalised, Norm &n, bool withBias) {
  Value y = normalised->getResult(0);
  int64_t d = typeOf(n.x).getShape().back();
  auto isRow = [&](Value v) {
    auto t = dyn_cast<RankedTensorType>(v.getType());
    return t && t.getRank() == 1 && t.getShape()[0] == d &&
           t.getElementType() == typeOf(n.x).getElementType();
  };
  Operation *mul = soleUser(y);
  n.scale = otherThan<MulOp>(mul, y);
  if (!n.scale || !isRow(n.scale) ||
      mul->getResult(0).getType() != n.x.getType())
    return false;
  n.ops.push_back(normalised);
  n.root = mul;
  if (!withBias)
    return true;
  Operation *add = soleUser(mul->getResult(0));
  Value bias = otherThan<AddOp>(add, mul->getResult(0));
  if (bias && isRow(bias) && add->getResult(0).getType() == n.x.getType()) {
    n.ops.push_back(mul);
    n.root = add;
    n.bias = bias;
  }
  return true;
}

/// LayerNorm: mean = E[x]; d = x - mean; y = d / sqrt(E[d^2] + eps).
std::optional<Norm> matchLayerNorm(ReduceMeanOp mean) {
  Norm n;
  n.x = mean.getInput();
  auto sub = dyn_cast_or_null<SubOp>(soleUser(mean.getResult()));
  if (!sub || sub.getLhs() != n.x || sub.getRhs() != mean.getResult() ||
      sub.getType() != n.x.getType())
    return std::nullopt;
  Value d = sub.getResult();
  // d has two users: its square (pow, or a mul reading it twice) and the
  // numerator.
  llvm::SmallPtrSet<Operation *, 4> users(d.getUsers().begin(),
                                          d.getUsers().end());
  if (users.size() != 2)
    return std::nullopt;
  Operation *square = nullptr;
  for (Operation *user : d.getUsers())
    if (squared(user->getResult(0)) == d)
      square = user;
  if (!square || !square->getResult(0).hasOneUse())
    return std::nullopt;
  auto var = dyn_cast<ReduceMeanOp>(*square->getResult(0).getUsers().begin());
  if (!var || !isRowMean(var))
    return std::nullopt;
  n.ops.append({mean, sub, square, var});
  Operation *normalised = matchNormalise(var.getResult(), d, n);
  if (!normalised || !matchAffine(normalised, n, /*withBias=*/true))
    return std::nullopt;
  return n;
}

/// RMSNorm: y = x / sqrt(E[x^2] + eps), the mean anchored on x^2.
std::optional<Norm> matchRMSNorm(ReduceMeanOp mean) {
  Norm n;
  n.rms = true;
  n.x = squared(mean.getInput());
  if (!n.x || !mean.getInput().hasOneUse() ||
      typeOf(n.x) != typeOf(mean.getInput()))
    return std::nullopt;
  n.ops.append({def(mean.getInput()), mean});
  Operation *normalised = matchNormalise(mean.getResult(), n.x, n);
  if (!normalised || !matchAffine(normalised, n, /*withBias=*/false))
    return std::nullopt;
  return n;
}

/// The LayerNorm or RMSNorm anchored at a row mean -> one graph.layer_norm
/// or graph.rms_norm at its last op. A LayerNorm's second mean is an anchor
/// too: it fails the match, or is erased with its chain first.
struct FuseNormChain : OpRewritePattern<ReduceMeanOp> {
  FuseNormChain(MLIRContext *ctx, llvm::Statistic &layer, llvm::Statistic &rms)
      : OpRewritePattern(ctx), layer(layer), rms(rms) {}

  LogicalResult matchAndRewrite(ReduceMeanOp mean,
                                PatternRewriter &rewriter) const override {
    if (!isRowMean(mean) ||
        !isa<FloatType>(typeOf(mean.getInput()).getElementType()))
      return failure();
    std::optional<Norm> n = matchLayerNorm(mean);
    if (!n)
      n = matchRMSNorm(mean);
    if (!n)
      return failure();
    rewriter.setInsertionPoint(n->root);
    Location loc = n->root->getLoc();
    int64_t axis = typeOf(n->x).getRank() - 1;
    IntegerAttr axisAttr = rewriter.getI64IntegerAttr(axis);
    FloatAttr epsilon = rewriter.getF64FloatAttr(n->epsilon);
    Value fused =
        n->rms ? RMSNormOp::create(rewriter, loc, n->x.getType(), n->x,
                                   n->scale, axisAttr, epsilon)
                     .getResult()
               : LayerNormOp::create(rewriter, loc, n->x.getType(), n->x,
                                     n->scale, n->bias, axisAttr, epsilon)
                     .getResult();
    // The chain's scalar constants (2, eps, 1) go too unless read elsewhere.
    n->ops.push_back(n->root);
    for (size_t k = 0, e = n->ops.size(); k < e; ++k)
      for (Value operand : n->ops[k]->getOperands())
        if (auto c = operand.getDefiningOp<ConstantOp>();
            c && !llvm::is_contained(n->ops, c.getOperation()))
          n->ops.push_back(c);
    rewriter.replaceAllUsesWith(n->root->getResult(0), fused);
    eraseDead(rewriter, n->ops);
    ++(n->rms ? rms : layer);
    return success();
  }

  llvm::Statistic &layer, &rms;
};

struct GraphFuseNorms
    : lamina::ir::graph::impl::GraphFuseNormsBase<GraphFuseNorms> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseNormChain>(&getContext(), numLayer, numRMS);
    if (failed(applyFusionPatterns(anchorsOf<ReduceMeanOp>(getOperation()),
                                   std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
