//===- FoldMatMulCasts.cpp - graph-fold-matmul-casts ----------------------===//
//
// cast(matmul(a, b) : f16/bf16) : f32 -> matmul(a, b) : f32 when the narrow
// product has no other use. Before that, three exact rewrites of the casts
// autodiff leaves around gradients (the gradient of a cast is the cast
// back): a concat of widened narrow values becomes the widened narrow
// concat (half the bytes moved, one cast instead of one per piece), a
// narrow cast of a widened narrow value is that value, and a sum or mean of
// a widened narrow value reads the narrow value (a bias gradient); and a
// norm whose f32 result is only narrowed stores the narrow result itself.
// Each rewrite is a pattern, run by the greedy driver in that order.
//
//===----------------------------------------------------------------------===//

#include "FusionDriver.h"

#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Autodiff.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace lamina::ir::graph {
#define GEN_PASS_DEF_GRAPHFOLDMATMULCASTS
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace lamina::ir::graph

using namespace mlir;
using namespace lamina::ir::graph;

namespace {
bool isNarrowFloat(Type t) { return t.isF16() || t.isBF16(); }
Type elementOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType();
}

/// The f16/bf16 element type `v` is an f32 widening of, seen through
/// reshapes; null when it is not one.
Type widenedFrom(Value v) {
  if (auto c = v.getDefiningOp<CastOp>())
    return elementOf(v).isF32() && isNarrowFloat(elementOf(c.getInput()))
               ? elementOf(c.getInput())
               : Type();
  if (auto r = v.getDefiningOp<ReshapeOp>())
    return widenedFrom(r.getInput());
  return {};
}

/// The narrow value `v` widens (widenedFrom(v) non-null), its reshapes
/// rebuilt in the narrow type at `b`.
Value narrowSource(OpBuilder &b, Value v) {
  if (auto c = v.getDefiningOp<CastOp>())
    return c.getInput();
  auto r = v.getDefiningOp<ReshapeOp>();
  Value in = narrowSource(b, r.getInput());
  return ReshapeOp::create(
      b, r.getLoc(), cast<RankedTensorType>(v.getType()).clone(elementOf(in)),
      in);
}

/// concat(widen(x_i)...) -> widen(concat(x_i...)), every x_i of one narrow
/// type.
struct FoldConcatCasts : CountedPattern<ConcatOp> {
  using CountedPattern<ConcatOp>::CountedPattern;

  bool rewrite(ConcatOp c, PatternRewriter &rewriter) const override {
    Type narrow =
        c.getInputs().empty() ? Type() : widenedFrom(c.getInputs()[0]);
    if (!narrow || !llvm::all_of(c.getInputs(), [&](Value in) {
          return widenedFrom(in) == narrow;
        }))
      return false;
    rewriter.setInsertionPoint(c);
    SmallVector<Value> inputs;
    for (Value in : c.getInputs())
      inputs.push_back(narrowSource(rewriter, in));
    auto joined =
        ConcatOp::create(rewriter, c.getLoc(), inputs, c.getAxisAttr());
    auto wide = CastOp::create(rewriter, c.getLoc(), c.getType(), joined);
    rewriter.replaceOp(c, wide.getResult());
    return true;
  }
};

/// cast(cast(x : T) : f32) : T -> x for an f16/bf16 T (exact).
struct FoldRoundTrip : CountedPattern<CastOp> {
  using CountedPattern<CastOp>::CountedPattern;

  bool rewrite(CastOp c, PatternRewriter &rewriter) const override {
    auto inner = c.getInput().getDefiningOp<CastOp>();
    if (!inner || !elementOf(c.getInput()).isF32() ||
        !isNarrowFloat(elementOf(c.getResult())) ||
        inner.getInput().getType() != c.getType())
      return false;
    rewriter.replaceOp(c, inner.getInput());
    return true;
  }
};

/// reduce_sum / reduce_mean of cast(x : T) : f32 -> the reduction of x
/// with an f32 result, for an f16/bf16 T (exact: the kernels accumulate the
/// widened elements in f32 either way).
template <typename ReduceOpT>
struct FoldReduceCast : CountedPattern<ReduceOpT> {
  using CountedPattern<ReduceOpT>::CountedPattern;

  bool rewrite(ReduceOpT r, PatternRewriter &rewriter) const override {
    auto c = r.getInput().template getDefiningOp<CastOp>();
    if (!c || !elementOf(r.getResult()).isF32() || !widenedFrom(c.getResult()))
      return false;
    rewriter.replaceOpWithNewOp<ReduceOpT>(
        r, r.getType(), c.getInput(), r.getAxesAttr(), r.getKeepdimsAttr());
    return true;
  }
};

/// cast(norm(x) : f32) : T -> norm(x) : T for an f16/bf16 T when the f32
/// result has no other use: the kernel rounds its f32 value once, as the
/// cast does (the normalised activations a bf16 matmul reads).
struct FoldNormCast : CountedPattern<CastOp> {
  using CountedPattern<CastOp>::CountedPattern;

  bool rewrite(CastOp c, PatternRewriter &rewriter) const override {
    Operation *norm = c.getInput().getDefiningOp();
    if (!norm || !isa<LayerNormOp, RMSNormOp>(norm) ||
        !c.getInput().hasOneUse() || !elementOf(c.getInput()).isF32() ||
        !isNarrowFloat(elementOf(c.getResult())))
      return false;
    rewriter.setInsertionPoint(norm);
    OperationState state(norm->getLoc(), norm->getName(), norm->getOperands(),
                         TypeRange{c.getType()}, norm->getAttrs());
    Operation *narrow = rewriter.create(state);
    rewriter.replaceOp(c, narrow->getResult(0));
    rewriter.eraseOp(norm);
    return true;
  }
};

/// cast(matmul(a, b) : f16/bf16) : f32 -> matmul(a, b) : f32 when the
/// narrow product has no other use.
struct FoldMatMulCast : CountedPattern<CastOp> {
  using CountedPattern<CastOp>::CountedPattern;

  bool rewrite(CastOp c, PatternRewriter &rewriter) const override {
    auto matmul = c.getInput().getDefiningOp<MatMulOp>();
    auto to = cast<RankedTensorType>(c.getType());
    Type from = elementOf(c.getInput());
    if (!matmul || !matmul->hasOneUse() || !to.getElementType().isF32() ||
        !isNarrowFloat(from))
      return false;
    rewriter.setInsertionPoint(matmul);
    // The matmul's location: plans and diagnostics keep naming its node.
    auto wide = MatMulOp::create(rewriter, matmul.getLoc(), to, matmul.getLhs(),
                                 matmul.getRhs());
    rewriter.replaceOp(c, wide.getResult());
    rewriter.eraseOp(matmul);
    return true;
  }
};

struct GraphFoldMatMulCasts
    : lamina::ir::graph::impl::GraphFoldMatMulCastsBase<GraphFoldMatMulCasts> {
  void runOnOperation() override {
    // One rewrite at a time, in this order, each over the ops there are
    // when it starts: it sees what the ones before made (a concat's new
    // widening cast, a round trip removed).
    if (failed(run<ConcatOp, FoldConcatCasts>(numConcats)) ||
        failed(run<CastOp, FoldRoundTrip>(numRoundTrips)) ||
        failed(run<ReduceSumOp, FoldReduceCast<ReduceSumOp>>(numReductions)) ||
        failed(
            run<ReduceMeanOp, FoldReduceCast<ReduceMeanOp>>(numReductions)) ||
        failed(run<CastOp, FoldNormCast>(numNorms)) ||
        failed(run<CastOp, FoldMatMulCast>(numFolded)))
      return signalPassFailure();
    // What the rewrites left unused (a dead op would still run).
    for (Block &block : getOperation().getBody())
      eraseDeadOps(block);
  }

  template <typename AnchorOp, typename Pattern>
  LogicalResult run(llvm::Statistic &count) {
    RewritePatternSet patterns(&getContext());
    patterns.add<Pattern>(&getContext(), count);
    return applyFusionPatterns(anchorsOf<AnchorOp>(getOperation()),
                               std::move(patterns));
  }
};
} // namespace
