//===- FuseEpilogues.cpp - graph-fuse-epilogues ---------------------------===//
//
// Moves the adds right after a matmul (the linear layers' bias, the
// residual connection after an output projection) into the matmul as
// graph.fused_matmul, and a narrowing cast of its f32 result into its
// result type, so the BLAS call's epilogue does them; and the add that
// accumulates a norm's input gradient with the residual's into the norm's
// gradient kernel. One walk in program order: the inner add of
// add(add(matmul, b), r) is fused first, so the outer one finds a
// fused_matmul with a free addend.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Autodiff.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace lamina::graph {
#define GEN_PASS_DEF_GRAPHFUSEEPILOGUES
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace lamina::graph

using namespace mlir;
using namespace lamina::graph;

namespace {
RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// A matmul or fused_matmul as the parts of the fused op it becomes.
struct Product {
  Operation *op = nullptr;
  Value lhs, rhs, bias, addend;
};

/// `v` as a product only this use reads, defined in `block`.
std::optional<Product> soleProduct(Value v, Block *block) {
  Operation *def = v.getDefiningOp();
  if (!def || def->getBlock() != block || !v.hasOneUse())
    return std::nullopt;
  if (auto m = dyn_cast<MatMulOp>(def))
    return Product{def, m.getLhs(), m.getRhs(), {}, {}};
  if (auto f = dyn_cast<FusedMatMulOp>(def))
    return Product{def, f.getLhs(), f.getRhs(), f.getBias(), f.getAddend()};
  return std::nullopt;
}

/// Whether `v` is a row added to every row of a `result`-typed value: shape
/// [n] or [1, ..., 1, n] of the result's element type.
bool isRowOf(Value v, RankedTensorType result) {
  RankedTensorType type = typeOf(v);
  ArrayRef<int64_t> shape = type.getShape();
  return type.getElementType() == result.getElementType() && !shape.empty() &&
         type.getRank() <= result.getRank() &&
         shape.back() == result.getShape().back() &&
         llvm::all_of(shape.drop_back(), [](int64_t d) { return d == 1; });
}

/// Replaces `old` and the product it reads with one fused_matmul (a matmul
/// when there is no epilogue) of `type` at `old`, after every operand,
/// named after the product's node.
void replaceWithFused(Operation *old, const Product &p, RankedTensorType type) {
  OpBuilder b(old);
  Value fused =
      p.bias || p.addend
          ? FusedMatMulOp::create(b, p.op->getLoc(), type, p.lhs, p.rhs,
                                  p.bias, p.addend)
                .getResult()
          : MatMulOp::create(b, p.op->getLoc(), type, p.lhs, p.rhs)
                .getResult(); // a plain product narrowed
  old->getResult(0).replaceAllUsesWith(fused);
  old->erase();
  p.op->erase();
}

/// add(product, row) -> bias; add(product, value of its type) -> addend.
bool fuseAdd(AddOp add) {
  RankedTensorType type = add.getType();
  Block *block = add->getBlock();
  for (auto [mine, other] : {std::pair(add.getLhs(), add.getRhs()),
                             std::pair(add.getRhs(), add.getLhs())}) {
    std::optional<Product> p = soleProduct(mine, block);
    if (!p || typeOf(mine) != type)
      continue;
    if (!p->bias && isRowOf(other, type))
      p->bias = other;
    else if (!p->addend && typeOf(other) == type)
      p->addend = other;
    else
      continue;
    replaceWithFused(add, *p, type);
    return true;
  }
  return false;
}

/// The f16/bf16 value `v` (an f32 value) is exactly: the input of a
/// widening cast; null otherwise.
Value narrowOrigin(Value v, Type narrow) {
  auto c = v.getDefiningOp<CastOp>();
  return c && typeOf(c.getInput()).getElementType() == narrow ? c.getInput()
                                                              : Value();
}

/// cast(product : f32) : T of T operands -> the product stored as T: its
/// accumulator rounded once, as the cast would. The bias is rounded to T
/// first (cuBLASLt reads it in the output's type); an addend only moves
/// when it is itself a widened T value (exact).
bool narrowResult(CastOp c) {
  RankedTensorType to = c.getType();
  Type narrow = to.getElementType();
  // The LM head's gradient: the cross-entropy gradient kernel stores it
  // narrow (rounded once, as the cast rounds).
  if (auto grad = c.getInput().getDefiningOp<SoftmaxCrossEntropyGradOp>();
      grad && grad->hasOneUse() && (narrow.isF16() || narrow.isBF16()) &&
      typeOf(c.getInput()).getElementType().isF32()) {
    OpBuilder b(c);
    auto narrowed = SoftmaxCrossEntropyGradOp::create(
        b, grad.getLoc(), to, grad.getLogits(), grad.getLabels(),
        grad.getGradLoss(), grad.getIgnoreIndexAttr());
    c.getResult().replaceAllUsesWith(narrowed.getResult());
    c.erase();
    grad.erase();
    return true;
  }
  std::optional<Product> p = soleProduct(c.getInput(), c->getBlock());
  if (!p || !(narrow.isF16() || narrow.isBF16()) ||
      !typeOf(c.getInput()).getElementType().isF32() ||
      typeOf(p->lhs).getElementType() != narrow)
    return false;
  if (p->addend) {
    p->addend = narrowOrigin(p->addend, narrow);
    if (!p->addend)
      return false;
  }
  if (p->bias) {
    Value origin = narrowOrigin(p->bias, narrow);
    OpBuilder b(c);
    p->bias = origin ? origin
                     : CastOp::create(b, p->bias.getLoc(),
                                      typeOf(p->bias).clone(narrow), p->bias)
                           .getResult();
  }
  replaceWithFused(c, *p, to);
  return true;
}

/// The same norm-gradient op with `addend` added to its input gradient,
/// built at `b` (after every operand).
Operation *withAddend(OpBuilder &b, Operation *norm, Value addend) {
  if (auto ln = dyn_cast<LayerNormGradOp>(norm))
    return LayerNormGradOp::create(b, ln.getLoc(), ln->getResultTypes(),
                                   ln.getInput(), ln.getScale(),
                                   ln.getGradResult(), addend,
                                   ln.getAxisAttr(), ln.getEpsilonAttr());
  auto rms = cast<RMSNormGradOp>(norm);
  return RMSNormGradOp::create(b, rms.getLoc(), rms->getResultTypes(),
                               rms.getInput(), rms.getScale(),
                               rms.getGradResult(), addend, rms.getAxisAttr(),
                               rms.getEpsilonAttr());
}

/// add(norm_grad.grad_input, other of its type) -> the norm's gradient
/// kernel adds `other` itself. The new op goes where the old one was when
/// `other` is defined before it, else at the add when the parameter
/// gradients are read only after the add.
bool fuseNormGradAdd(AddOp add) {
  RankedTensorType type = add.getType();
  for (auto [mine, other] : {std::pair(add.getLhs(), add.getRhs()),
                             std::pair(add.getRhs(), add.getLhs())}) {
    Operation *norm = mine.getDefiningOp();
    if (!norm || !isa<LayerNormGradOp, RMSNormGradOp>(norm) ||
        norm->getBlock() != add->getBlock() || mine != norm->getResult(0) ||
        !mine.hasOneUse() || typeOf(mine) != type ||
        typeOf(other) != type || norm->getNumOperands() != 3)
      continue;
    Operation *def = other.getDefiningOp();
    bool otherFirst = !def || def->getBlock() != norm->getBlock() ||
                      def->isBeforeInBlock(norm);
    bool paramsAfter = llvm::all_of(norm->getResults().drop_front(), [&](Value r) {
      return llvm::all_of(r.getUsers(), [&](Operation *user) {
        return user->getBlock() == add->getBlock() &&
               add->isBeforeInBlock(user);
      });
    });
    if (!otherFirst && !paramsAfter)
      continue;
    OpBuilder b(otherFirst ? norm : add.getOperation());
    Operation *fused = withAddend(b, norm, other);
    add.getResult().replaceAllUsesWith(fused->getResult(0));
    for (auto [from, to] : llvm::zip_equal(norm->getResults().drop_front(),
                                           fused->getResults().drop_front()))
      from.replaceAllUsesWith(to);
    add.erase();
    norm->erase();
    return true;
  }
  return false;
}

/// transpose(matmul(a, b)) over the last two dims, the product read by
/// nothing else -> matmul(b^T, a^T): the same sums, produced in the layout
/// wanted (the tied LM head's weight gradient). The operands' transposes
/// fold into the GEMM's flags (convert-graph-to-rt), so no kernel moves the
/// result.
bool swapTransposedProduct(TransposeOp t) {
  auto m = t.getInput().getDefiningOp<MatMulOp>();
  if (!m || !m->hasOneUse() || !t.swapsLastTwoDims() ||
      typeOf(m.getLhs()).getRank() < 2 || typeOf(m.getRhs()).getRank() < 2)
    return false;
  OpBuilder b(t);
  auto transposed = [&](Value v) -> Value {
    return TransposeOp::create(
        b, m.getLoc(), v, TransposeOp::lastTwoDimsSwap(typeOf(v).getRank()));
  };
  Value lhs = transposed(m.getRhs());
  Value rhs = transposed(m.getLhs());
  Value product =
      MatMulOp::create(b, m.getLoc(), t.getType(), lhs, rhs).getResult();
  t.getResult().replaceAllUsesWith(product);
  t.erase();
  m.erase();
  return true;
}

struct GraphFuseEpilogues
    : lamina::graph::impl::GraphFuseEpiloguesBase<GraphFuseEpilogues> {
  void runOnOperation() override {
    getOperation().walk([&](func::FuncOp f) {
      for (Block &block : f.getBody()) {
        SmallVector<Operation *> candidates;
        for (Operation &op : block)
          if (isa<AddOp, CastOp, TransposeOp>(op))
            candidates.push_back(&op);
        // Each rewrite erases only the visited op and the product or norm
        // gradient before it (neither is a candidate).
        for (Operation *op : candidates) {
          if (auto add = dyn_cast<AddOp>(op)) {
            if (fuseAdd(add))
              ++numAdds;
            else if (fuseNormGradAdd(add))
              ++numNormGrads;
            continue;
          }
          if (auto t = dyn_cast<TransposeOp>(op)) {
            numSwapped += swapTransposedProduct(t);
            continue;
          }
          numNarrowed += narrowResult(cast<CastOp>(op));
        }
        eraseDeadOps(block);
      }
    });
  }
};
} // namespace
