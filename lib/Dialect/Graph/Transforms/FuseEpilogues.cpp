//===- FuseEpilogues.cpp - graph-fuse-epilogues ---------------------------===//
//
// Moves the adds right after a matmul (the linear layers' bias, the
// residual connection after an output projection) into the matmul as
// graph.fused_matmul, and a narrowing cast of its f32 result into its
// result type, so the BLAS call's epilogue does them; and the add that
// accumulates a norm's input gradient with the residual's into the norm's
// gradient kernel. One walk in program order: the inner add of
// add(add(matmul, b), r) is fused first, so the outer one finds a
// fused_matmul with a free addend. Then a product (of narrow operands)
// that only elementwise steps read is stored narrow (narrowActivation),
// and so is one only cross-entropy reads (narrowLogits).
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Autodiff.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"

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

/// `op` as a product, when it is a matmul or fused_matmul.
std::optional<Product> productOf(Operation *op) {
  if (auto m = dyn_cast<MatMulOp>(op))
    return Product{op, m.getLhs(), m.getRhs(), {}, {}};
  if (auto f = dyn_cast<FusedMatMulOp>(op))
    return Product{op, f.getLhs(), f.getRhs(), f.getBias(), f.getAddend()};
  return std::nullopt;
}

/// `v` as a product only this use reads, defined in `block`.
std::optional<Product> soleProduct(Value v, Block *block) {
  Operation *def = v.getDefiningOp();
  if (!def || def->getBlock() != block || !v.hasOneUse())
    return std::nullopt;
  return productOf(def);
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

/// `p` as one fused_matmul (a matmul when there is no epilogue) of `type`
/// at `b`, named after the product's node.
Value buildProduct(OpBuilder &b, const Product &p, RankedTensorType type) {
  return p.bias || p.addend
             ? FusedMatMulOp::create(b, p.op->getLoc(), type, p.lhs, p.rhs,
                                     p.bias, p.addend)
                   .getResult()
             : MatMulOp::create(b, p.op->getLoc(), type, p.lhs, p.rhs)
                   .getResult(); // a plain product narrowed
}

/// Replaces `old` and the product it reads with the fused product of
/// `type` at `old`, after every operand.
void replaceWithFused(Operation *old, const Product &p, RankedTensorType type) {
  OpBuilder b(old);
  Value fused = buildProduct(b, p, type);
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

/// The bias of a product stored as `narrow`: the narrow value it widens, or
/// a cast rounding it (cuBLASLt reads the bias in the output's type).
Value narrowBias(OpBuilder &b, Value bias, Type narrow) {
  if (Value origin = narrowOrigin(bias, narrow))
    return origin;
  return CastOp::create(b, bias.getLoc(), typeOf(bias).clone(narrow), bias)
      .getResult();
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
    OpBuilder b(c);
    p->bias = narrowBias(b, p->bias, narrow);
  }
  replaceWithFused(c, *p, to);
  return true;
}

/// Whether `v` reaches a function result through elementwise steps and
/// casts only (a parameter gradient summed with another, an output).
bool reachesResult(Value v) {
  SmallVector<Value> work{v};
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value x = work.pop_back_val();
    if (!seen.insert(x).second)
      continue;
    for (Operation *user : x.getUsers()) {
      if (isa<func::ReturnOp>(user))
        return true;
      if (isa<CastOp>(user) || !FusedElementwiseOp::stepOf(user).empty())
        llvm::append_range(work, user->getResults());
    }
  }
  return false;
}

/// `op` as a product of f16/bf16 operands without addend whose result is
/// f32: one that may be stored in the operands' type instead.
std::optional<Product> narrowableProduct(Operation *op) {
  std::optional<Product> p = productOf(op);
  if (!p)
    return std::nullopt;
  Type narrow = typeOf(p->lhs).getElementType();
  if (!(narrow.isF16() || narrow.isBF16()) ||
      typeOf(p->rhs).getElementType() != narrow ||
      !typeOf(op->getResult(0)).getElementType().isF32() || p->addend)
    return std::nullopt;
  return p;
}

/// A narrowable product stored as its operands' type (of the f32 `wide`
/// shape), its bias rounded to that type first, at `b`.
Value buildNarrow(OpBuilder &b, Product p, RankedTensorType wide) {
  Type narrow = typeOf(p.lhs).getElementType();
  if (p.bias)
    p.bias = narrowBias(b, p.bias, narrow);
  return buildProduct(b, p, wide.clone(narrow));
}

/// A product of T operands (no addend) whose f32 result only elementwise
/// steps read, and that no function result is made of -> the product
/// stored as T (its accumulator plus the T-rounded bias, rounded once) and
/// one widening cast per reader, which graph-fuse-elementwise absorbs as a
/// widening load: the f32 tensor is neither stored nor read. PyTorch's
/// autocast stores these activations (an MLP's hidden pre-activation, the
/// gradient of its output) in bf16 likewise; it makes one more rounding
/// than the f32 product, and halves their traffic.
bool narrowActivation(Operation *op) {
  std::optional<Product> p = narrowableProduct(op);
  Value result = op->getResult(0);
  if (!p || result.use_empty() ||
      !llvm::all_of(result.getUsers(),
                    [](Operation *user) {
                      return !FusedElementwiseOp::stepOf(user).empty();
                    }) ||
      reachesResult(result))
    return false;
  OpBuilder b(op);
  Value stored = buildNarrow(b, *p, typeOf(result));
  for (OpOperand &use : llvm::make_early_inc_range(result.getUses())) {
    b.setInsertionPoint(use.getOwner());
    use.set(CastOp::create(b, op->getLoc(), typeOf(result), stored));
  }
  op->erase();
  return true;
}

/// A product of T operands (no addend) whose f32 result only cross-entropy
/// ops read, as their logits, besides model outputs (`output:NAME`
/// results) -> the product stored as T. The cross-entropy kernels widen it
/// on load (their loss and its gradient stay f32); a function result made
/// of it becomes T (the train step's `output:logits`, which `run
/// --dump-outputs` widens back). PyTorch's autocast stores an LM head's
/// logits in bf16 likewise: one rounding more than the f32 product, and
/// the step's largest activation ([tokens, vocabulary]) written once and
/// read twice at half the bytes.
bool narrowLogits(Operation *op) {
  std::optional<Product> p = narrowableProduct(op);
  if (!p)
    return false;
  Value result = op->getResult(0);
  Type narrow = typeOf(p->lhs).getElementType();
  bool read = false;
  for (OpOperand &use : result.getUses()) {
    Operation *user = use.getOwner();
    // Only a model output (`output:NAME`, which the driver reads by its
    // type) may change type; any other result (a distributed module's
    // residual, which its backward module reads as f32) keeps it.
    if (isa<func::ReturnOp>(user)) {
      auto names =
          user->getParentOfType<func::FuncOp>()->getAttrOfType<ArrayAttr>(
              kOutputNamesAttr);
      unsigned i = use.getOperandNumber();
      auto name = names && i < names.size() ? dyn_cast<StringAttr>(names[i])
                                            : StringAttr();
      if (!name || !name.getValue().starts_with("output:"))
        return false;
      continue;
    }
    // A gradient of narrow logits has their type (graph-fuse-epilogues
    // narrowed it above, when a cast rounded it).
    auto grad = dyn_cast<SoftmaxCrossEntropyGradOp>(user);
    if (use.getOperandNumber() != 0 ||
        !(isa<SoftmaxCrossEntropyOp>(user) ||
          (grad && typeOf(grad.getGradLogits()).getElementType() == narrow)))
      return false;
    read = true;
  }
  if (!read)
    return false;
  OpBuilder b(op);
  Value stored = buildNarrow(b, *p, typeOf(result));
  Operation *ret = nullptr;
  for (OpOperand &use : llvm::make_early_inc_range(result.getUses())) {
    if (isa<func::ReturnOp>(use.getOwner()))
      ret = use.getOwner();
    use.set(stored);
  }
  op->erase();
  if (ret) {
    auto f = ret->getParentOfType<func::FuncOp>();
    f.setFunctionType(FunctionType::get(f.getContext(), f.getArgumentTypes(),
                                        ret->getOperandTypes()));
  }
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
        // After the epilogues: a product with an addend stays f32.
        SmallVector<Operation *> products;
        for (Operation &op : block)
          if (isa<MatMulOp, FusedMatMulOp>(op))
            products.push_back(&op);
        for (Operation *op : products) {
          if (narrowActivation(op))
            ++numActivations;
          else
            numLogits += narrowLogits(op);
        }
        eraseDeadOps(block);
      }
    });
  }
};
} // namespace
