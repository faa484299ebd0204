//===- FoldMatMulCasts.cpp - graph-fold-matmul-casts ----------------------===//
//
// cast(matmul(a, b) : f16/bf16) : f32 -> matmul(a, b) : f32 when the narrow
// product has no other use. Before that, three exact rewrites of the casts
// autodiff leaves around gradients (the gradient of a cast is the cast
// back): a concat of widened narrow values becomes the widened narrow
// concat (half the bytes moved, one cast instead of one per piece), a
// narrow cast of a widened narrow value is that value, and a sum or mean of
// a widened narrow value reads the narrow value (a bias gradient); and a
// norm whose f32 result is only narrowed stores the narrow result itself. Plain
// walks rather than a greedy rewrite: no pattern creates another instance of
// itself.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Autodiff.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace lamina::graph {
#define GEN_PASS_DEF_GRAPHFOLDMATMULCASTS
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace lamina::graph

using namespace mlir;
using namespace lamina::graph;

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
void foldConcatCasts(Operation *root, llvm::Statistic &count) {
  SmallVector<ConcatOp> concats;
  root->walk([&](ConcatOp c) { concats.push_back(c); });
  for (ConcatOp c : concats) {
    Type narrow =
        c.getInputs().empty() ? Type() : widenedFrom(c.getInputs()[0]);
    if (!narrow || !llvm::all_of(c.getInputs(), [&](Value in) {
          return widenedFrom(in) == narrow;
        }))
      continue;
    OpBuilder b(c);
    SmallVector<Value> inputs;
    for (Value in : c.getInputs())
      inputs.push_back(narrowSource(b, in));
    auto joined = ConcatOp::create(b, c.getLoc(), inputs, c.getAxisAttr());
    auto wide = CastOp::create(b, c.getLoc(), c.getType(), joined);
    c.getResult().replaceAllUsesWith(wide.getResult());
    c.erase();
    ++count;
  }
}

/// cast(cast(x : T) : f32) : T -> x for an f16/bf16 T (exact).
void foldRoundTrips(Operation *root, llvm::Statistic &count) {
  root->walk([&](CastOp c) {
    auto inner = c.getInput().getDefiningOp<CastOp>();
    if (inner && elementOf(c.getInput()).isF32() &&
        isNarrowFloat(elementOf(c.getResult())) &&
        inner.getInput().getType() == c.getType()) {
      c.getResult().replaceAllUsesWith(inner.getInput());
      ++count;
    }
  });
}

/// reduce_sum / reduce_mean of cast(x : T) : f32 -> the reduction of x
/// with an f32 result, for an f16/bf16 T (exact: the kernels accumulate the
/// widened elements in f32 either way).
template <typename ReduceOpT>
void foldReduceCasts(Operation *root, llvm::Statistic &count) {
  SmallVector<ReduceOpT> reductions;
  root->walk([&](ReduceOpT r) { reductions.push_back(r); });
  for (ReduceOpT r : reductions) {
    auto c = r.getInput().template getDefiningOp<CastOp>();
    if (!c || !elementOf(r.getResult()).isF32() || !widenedFrom(c.getResult()))
      continue;
    OpBuilder b(r);
    auto narrow = ReduceOpT::create(b, r.getLoc(), r.getType(), c.getInput(),
                                    r.getAxesAttr(), r.getKeepdimsAttr());
    r.getResult().replaceAllUsesWith(narrow.getResult());
    r.erase();
    ++count;
  }
}

/// cast(norm(x) : f32) : T -> norm(x) : T for an f16/bf16 T when the f32
/// result has no other use: the kernel rounds its f32 value once, as the
/// cast does (the normalised activations a bf16 matmul reads).
void foldNormCasts(Operation *root, llvm::Statistic &count) {
  SmallVector<CastOp> casts;
  root->walk([&](CastOp c) { casts.push_back(c); });
  for (CastOp c : casts) {
    Operation *norm = c.getInput().getDefiningOp();
    if (!norm || !isa<LayerNormOp, RMSNormOp>(norm) ||
        !c.getInput().hasOneUse() || !elementOf(c.getInput()).isF32() ||
        !isNarrowFloat(elementOf(c.getResult())))
      continue;
    OpBuilder b(norm);
    OperationState state(norm->getLoc(), norm->getName(), norm->getOperands(),
                         TypeRange{c.getType()}, norm->getAttrs());
    Operation *narrow = b.create(state);
    c.getResult().replaceAllUsesWith(narrow->getResult(0));
    c.erase();
    norm->erase();
    ++count;
  }
}

struct GraphFoldMatMulCasts
    : lamina::graph::impl::GraphFoldMatMulCastsBase<GraphFoldMatMulCasts> {
  void runOnOperation() override {
    foldConcatCasts(getOperation(), numConcats);
    foldRoundTrips(getOperation(), numRoundTrips);
    foldReduceCasts<ReduceSumOp>(getOperation(), numReductions);
    foldReduceCasts<ReduceMeanOp>(getOperation(), numReductions);
    foldNormCasts(getOperation(), numNorms);
    SmallVector<CastOp> casts;
    getOperation().walk([&](CastOp c) { casts.push_back(c); });
    for (CastOp c : casts) {
      auto matmul = c.getInput().getDefiningOp<MatMulOp>();
      auto to = cast<RankedTensorType>(c.getType());
      Type from =
          cast<RankedTensorType>(c.getInput().getType()).getElementType();
      if (!matmul || !matmul->hasOneUse() || !to.getElementType().isF32() ||
          !(from.isF16() || from.isBF16()))
        continue;
      OpBuilder b(matmul);
      // The matmul's location: plans and diagnostics keep naming its node.
      auto wide = MatMulOp::create(b, matmul.getLoc(), to, matmul.getLhs(),
                                   matmul.getRhs());
      c.getResult().replaceAllUsesWith(wide.getResult());
      c.erase();
      matmul.erase();
      ++numFolded;
    }
    // What the rewrites left unused (a dead op would still run).
    for (Block &block : getOperation().getBody())
      eraseDeadOps(block);
  }
};
} // namespace
