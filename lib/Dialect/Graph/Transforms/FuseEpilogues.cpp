//===- FuseEpilogues.cpp - graph-fuse-epilogues ---------------------------===//
//
// Moves the adds right after a matmul (the linear layers' bias, the
// residual connection after an output projection) into the matmul as
// graph.fused_matmul, and a narrowing cast of its f32 result into its
// result type, so the BLAS call's epilogue does them; and the add that
// accumulates a norm's input gradient with the residual's into the norm's
// gradient kernel. Patterns, run by the greedy driver over a block's adds,
// casts and transposes in program order: the inner add of
// add(add(matmul, b), r) is fused first, so the outer one finds a
// fused_matmul with a free addend. Then, over its products, a product (of
// narrow operands) that only elementwise steps read is stored narrow
// (narrowActivation), and so is one only cross-entropy reads
// (narrowLogits). narrowResiduals, across a module's two functions, stays
// a walk.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Graph/Transforms/FuseEpilogues.h"
#include "FusionDriver.h"
#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Autodiff.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"

namespace lamina::ir::graph {
#define GEN_PASS_DEF_GRAPHFUSEEPILOGUES
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace lamina::ir::graph

using namespace mlir;
using namespace lamina::ir::graph;

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
void replaceWithFused(RewriterBase &rewriter, Operation *old, const Product &p,
                      RankedTensorType type) {
  rewriter.setInsertionPoint(old);
  Value fused = buildProduct(rewriter, p, type);
  rewriter.replaceOp(old, fused);
  rewriter.eraseOp(p.op);
}

/// add(product, row) -> bias; add(product, value of its type) -> addend.
bool fuseAdd(RewriterBase &rewriter, AddOp add) {
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
    replaceWithFused(rewriter, add, *p, type);
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
bool narrowResult(RewriterBase &rewriter, CastOp c) {
  RankedTensorType to = c.getType();
  Type narrow = to.getElementType();
  // The LM head's gradient: the cross-entropy gradient kernel stores it
  // narrow (rounded once, as the cast rounds).
  if (auto grad = c.getInput().getDefiningOp<SoftmaxCrossEntropyGradOp>();
      grad && grad->hasOneUse() && (narrow.isF16() || narrow.isBF16()) &&
      typeOf(c.getInput()).getElementType().isF32()) {
    rewriter.setInsertionPoint(c);
    auto narrowed = SoftmaxCrossEntropyGradOp::create(
        rewriter, grad.getLoc(), to, grad.getLogits(), grad.getLabels(),
        grad.getGradLoss(), grad.getIgnoreIndexAttr());
    rewriter.replaceOp(c, narrowed.getResult());
    rewriter.eraseOp(grad);
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
    rewriter.setInsertionPoint(c);
    p->bias = narrowBias(rewriter, p->bias, narrow);
  }
  replaceWithFused(rewriter, c, *p, to);
  return true;
}

/// The name of the function result `use` (an operand of a return) makes.
StringAttr resultName(OpOperand &use) {
  auto names =
      use.getOwner()->getParentOfType<func::FuncOp>()->getAttrOfType<ArrayAttr>(
          kOutputNamesAttr);
  unsigned i = use.getOperandNumber();
  return names && i < names.size() ? dyn_cast<StringAttr>(names[i])
                                   : StringAttr();
}

/// Whether `v` reaches a function result through elementwise steps and
/// casts only (a parameter gradient summed with another, an output); with
/// `residuals` false, a distributed forward's `residual:N` results do not
/// count (its backward reads them, as one function would read the value).
bool reachesResult(Value v, bool residuals = true) {
  SmallVector<Value> work{v};
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value x = work.pop_back_val();
    if (!seen.insert(x).second)
      continue;
    for (OpOperand &use : x.getUses()) {
      Operation *user = use.getOwner();
      if (isa<func::ReturnOp>(user)) {
        StringAttr name = resultName(use);
        if (residuals || !name || !name.getValue().starts_with("residual:"))
          return true;
        continue;
      }
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

/// The reads `uses` (of an f32 value of type `wide`) read `narrow` through
/// a widening cast each, at `loc` (graph-fuse-elementwise absorbs each as
/// a widening load).
void widenReads(RewriterBase &rewriter, ArrayRef<OpOperand *> uses,
                Value narrow, Type wide, Location loc) {
  for (OpOperand *use : uses) {
    rewriter.setInsertionPoint(use->getOwner());
    Value widened = CastOp::create(rewriter, loc, wide, narrow);
    rewriter.modifyOpInPlace(use->getOwner(), [&] { use->set(widened); });
  }
}

SmallVector<OpOperand *> usesOf(Value v) {
  SmallVector<OpOperand *> uses;
  for (OpOperand &use : v.getUses())
    uses.push_back(&use);
  return uses;
}

/// Whether `v` is read, only by elementwise steps, and no function result
/// is made of it (narrowActivation's condition on its readers).
bool readOnlyElementwise(Value v) {
  return !v.use_empty() && llvm::all_of(v.getUsers(), [](Operation *user) {
    return !FusedElementwiseOp::stepOf(user).empty();
  }) && !reachesResult(v);
}

/// A product of T operands (no addend) whose f32 result only elementwise
/// steps read, and that no function result is made of -> the product
/// stored as T (its accumulator plus the T-rounded bias, rounded once) and
/// one widening cast per reader, which graph-fuse-elementwise absorbs as a
/// widening load: the f32 tensor is neither stored nor read. PyTorch's
/// autocast stores these activations (an MLP's hidden pre-activation, the
/// gradient of its output) in bf16 likewise; it makes one more rounding
/// than the f32 product, and halves their traffic.
bool narrowActivation(RewriterBase &rewriter, Operation *op) {
  std::optional<Product> p = narrowableProduct(op);
  Value result = op->getResult(0);
  if (!p || !readOnlyElementwise(result))
    return false;
  rewriter.setInsertionPoint(op);
  Value stored = buildNarrow(rewriter, *p, typeOf(result));
  widenReads(rewriter, usesOf(result), stored, result.getType(), op->getLoc());
  rewriter.eraseOp(op);
  return true;
}

/// A product of T operands (no addend) whose f32 result only norm
/// gradients read, as the gradient of their result, and that no function
/// result is made of -> the product stored as T, which the norm gradient
/// kernels widen on load. PyTorch's autocast hands a norm's backward the
/// T gradient of the matmul its output feeds likewise; the f32 product is
/// neither written nor read ([tokens, hidden] at every norm of a
/// transformer's backward).
bool narrowNormGradient(RewriterBase &rewriter, Operation *op) {
  std::optional<Product> p = narrowableProduct(op);
  Value result = op->getResult(0);
  if (!p || result.use_empty() ||
      !llvm::all_of(result.getUses(), [](OpOperand &use) {
        return isa<LayerNormGradOp, RMSNormGradOp>(use.getOwner()) &&
               use.getOperandNumber() == 2; // grad_result
      }))
    return false;
  rewriter.setInsertionPoint(op);
  rewriter.replaceOp(op, buildNarrow(rewriter, *p, typeOf(result)));
  return true;
}

/// `f`'s type after its entry block's arguments or its results changed.
void syncFunctionType(RewriterBase &rewriter, func::FuncOp f) {
  auto ret = cast<func::ReturnOp>(f.front().getTerminator());
  rewriter.modifyOpInPlace(f, [&] {
    f.setFunctionType(FunctionType::get(
        f.getContext(), f.front().getArgumentTypes(), ret.getOperandTypes()));
  });
}

/// A product of T operands (no addend) whose f32 result only cross-entropy
/// ops read, as their logits, besides model outputs (`output:NAME`
/// results) and the results `residual` accepts by name -> the product
/// stored as T. The cross-entropy kernels widen it on load (their loss and
/// its gradient stay f32); a function result made of it becomes T (the
/// train step's `output:logits`, which `run --dump-outputs` widens back).
/// PyTorch's autocast stores an LM head's logits in bf16 likewise: one
/// rounding more than the f32 product, and the step's largest activation
/// ([tokens, vocabulary]) written once and read twice at half the bytes.
bool narrowLogits(RewriterBase &rewriter, Operation *op,
                  llvm::function_ref<bool(StringRef)> residual = nullptr) {
  std::optional<Product> p = narrowableProduct(op);
  if (!p)
    return false;
  Value result = op->getResult(0);
  Type narrow = typeOf(p->lhs).getElementType();
  bool read = false;
  for (OpOperand &use : result.getUses()) {
    Operation *user = use.getOwner();
    // Only a model output (`output:NAME`, which the driver reads by its
    // type) may change type, or a residual whose reader changes with it
    // (narrowResiduals); any other result keeps it.
    if (isa<func::ReturnOp>(user)) {
      StringAttr name = resultName(use);
      if (!name || !(name.getValue().starts_with("output:") ||
                     (residual && residual(name.getValue()))))
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
  rewriter.setInsertionPoint(op);
  Value stored = buildNarrow(rewriter, *p, typeOf(result));
  Operation *ret = nullptr;
  for (OpOperand &use : llvm::make_early_inc_range(result.getUses())) {
    if (isa<func::ReturnOp>(use.getOwner()))
      ret = use.getOwner();
    rewriter.modifyOpInPlace(use.getOwner(), [&] { use.set(stored); });
  }
  rewriter.eraseOp(op);
  if (ret)
    syncFunctionType(rewriter, ret->getParentOfType<func::FuncOp>());
  return true;
}

/// narrowActivation across a module's forward and backward: a product of T
/// operands (no addend) that the forward returns as residuals (of
/// `residuals`: the backward's arguments by name) and otherwise only
/// elementwise steps read, no other result being made of it, and whose
/// backward arguments only elementwise steps read likewise -> stored as T
/// in both functions, each read widened. The backward's type is left to
/// the caller.
bool narrowResidualActivation(RewriterBase &rewriter, Operation *op,
                              const llvm::StringMap<BlockArgument> &residuals) {
  std::optional<Product> p = narrowableProduct(op);
  if (!p)
    return false;
  Value result = op->getResult(0);
  SmallVector<BlockArgument> args;
  for (OpOperand &use : result.getUses()) {
    Operation *user = use.getOwner();
    if (isa<func::ReturnOp>(user)) {
      StringAttr name = resultName(use);
      auto it = name ? residuals.find(name.getValue()) : residuals.end();
      if (it == residuals.end() || !readOnlyElementwise(it->second))
        return false;
      args.push_back(it->second);
      continue;
    }
    if (FusedElementwiseOp::stepOf(user).empty() ||
        llvm::any_of(user->getResults(),
                     [](Value r) { return reachesResult(r, false); }))
      return false;
  }
  if (args.empty())
    return false;
  rewriter.setInsertionPoint(op);
  Value stored = buildNarrow(rewriter, *p, typeOf(result));
  auto fwd = op->getParentOfType<func::FuncOp>();
  for (OpOperand &use : llvm::make_early_inc_range(result.getUses()))
    if (isa<func::ReturnOp>(use.getOwner()))
      rewriter.modifyOpInPlace(use.getOwner(), [&] { use.set(stored); });
  widenReads(rewriter, usesOf(result), stored, result.getType(), op->getLoc());
  rewriter.eraseOp(op);
  syncFunctionType(rewriter, fwd);
  for (BlockArgument a : args) { // the backward's argument likewise
    RankedTensorType wide = typeOf(a);
    SmallVector<OpOperand *> uses = usesOf(a);
    a.setType(wide.clone(typeOf(stored).getElementType()));
    widenReads(rewriter, uses, a, wide, a.getLoc());
  }
  return true;
}

/// Whether `arg` is read, and only as the logits of cross-entropy
/// gradients of element type `narrow`.
bool readAsNarrowLogits(Value arg, Type narrow) {
  return !arg.use_empty() && llvm::all_of(arg.getUses(), [&](OpOperand &use) {
    auto grad = dyn_cast<SoftmaxCrossEntropyGradOp>(use.getOwner());
    return grad && use.getOperandNumber() == 0 &&
           typeOf(grad.getGradLogits()).getElementType() == narrow;
  });
}

/// The same norm-gradient op with `addend` added to its input gradient,
/// built at `b` (after every operand).
Operation *withAddend(OpBuilder &b, Operation *norm, Value addend) {
  if (auto ln = dyn_cast<LayerNormGradOp>(norm))
    return LayerNormGradOp::create(
        b, ln.getLoc(), ln->getResultTypes(), ln.getInput(), ln.getScale(),
        ln.getGradResult(), addend, ln.getAxisAttr(), ln.getEpsilonAttr());
  auto rms = cast<RMSNormGradOp>(norm);
  return RMSNormGradOp::create(
      b, rms.getLoc(), rms->getResultTypes(), rms.getInput(), rms.getScale(),
      rms.getGradResult(), addend, rms.getAxisAttr(), rms.getEpsilonAttr());
}

/// add(norm_grad.grad_input, other of its type) -> the norm's gradient
/// kernel adds `other` itself. The new op goes where the old one was when
/// `other` is defined before it, else at the add when the parameter
/// gradients are read only after the add.
bool fuseNormGradAdd(RewriterBase &rewriter, AddOp add) {
  RankedTensorType type = add.getType();
  for (auto [mine, other] : {std::pair(add.getLhs(), add.getRhs()),
                             std::pair(add.getRhs(), add.getLhs())}) {
    Operation *norm = mine.getDefiningOp();
    if (!norm || !isa<LayerNormGradOp, RMSNormGradOp>(norm) ||
        norm->getBlock() != add->getBlock() || mine != norm->getResult(0) ||
        !mine.hasOneUse() || typeOf(mine) != type || typeOf(other) != type ||
        norm->getNumOperands() != 3)
      continue;
    Operation *def = other.getDefiningOp();
    bool otherFirst = !def || def->getBlock() != norm->getBlock() ||
                      def->isBeforeInBlock(norm);
    bool paramsAfter =
        llvm::all_of(norm->getResults().drop_front(), [&](Value r) {
          return llvm::all_of(r.getUsers(), [&](Operation *user) {
            return user->getBlock() == add->getBlock() &&
                   add->isBeforeInBlock(user);
          });
        });
    if (!otherFirst && !paramsAfter)
      continue;
    rewriter.setInsertionPoint(otherFirst ? norm : add.getOperation());
    Operation *fused = withAddend(rewriter, norm, other);
    rewriter.replaceAllUsesWith(add.getResult(), fused->getResult(0));
    for (auto [from, to] : llvm::zip_equal(norm->getResults().drop_front(),
                                           fused->getResults().drop_front()))
      rewriter.replaceAllUsesWith(from, to);
    rewriter.eraseOp(add);
    rewriter.eraseOp(norm);
    return true;
  }
  return false;
}

/// transpose(matmul(a, b)) over the last two dims, the product read by
/// nothing else -> matmul(b^T, a^T): the same sums, produced in the layout
/// wanted (the tied LM head's weight gradient). The operands' transposes
/// fold into the GEMM's flags (convert-graph-to-rt), so no kernel moves the
/// result.
bool swapTransposedProduct(RewriterBase &rewriter, TransposeOp t) {
  auto m = t.getInput().getDefiningOp<MatMulOp>();
  if (!m || !m->hasOneUse() || !t.swapsLastTwoDims() ||
      typeOf(m.getLhs()).getRank() < 2 || typeOf(m.getRhs()).getRank() < 2)
    return false;
  rewriter.setInsertionPoint(t);
  auto transposed = [&](Value v) -> Value {
    return TransposeOp::create(
        rewriter, m.getLoc(), v,
        TransposeOp::lastTwoDimsSwap(typeOf(v).getRank()));
  };
  Value lhs = transposed(m.getRhs());
  Value rhs = transposed(m.getLhs());
  Value product =
      MatMulOp::create(rewriter, m.getLoc(), t.getType(), lhs, rhs).getResult();
  rewriter.replaceOp(t, product);
  rewriter.eraseOp(m);
  return true;
}

} // namespace

unsigned lamina::ir::graph::narrowResiduals(func::FuncOp fwd,
                                            func::FuncOp bwd) {
  llvm::StringMap<BlockArgument> residuals;
  for (BlockArgument a : bwd.getArguments()) {
    auto kind = bwd.getArgAttrOfType<StringAttr>(a.getArgNumber(), kKindAttr);
    auto name = bwd.getArgAttrOfType<StringAttr>(a.getArgNumber(), kNameAttr);
    if (kind && kind.getValue() == kKindResidual && name)
      residuals[name.getValue()] = a;
  }
  SmallVector<Operation *> products;
  fwd.walk([&](Operation *op) {
    if (isa<MatMulOp, FusedMatMulOp>(op))
      products.push_back(op);
  });
  IRRewriter rewriter(fwd.getContext());
  unsigned narrowed = 0;
  for (Operation *op : products) {
    std::optional<Product> p = narrowableProduct(op);
    if (!p)
      continue;
    Type narrow = typeOf(p->lhs).getElementType();
    if (narrowResidualActivation(rewriter, op, residuals)) {
      ++narrowed;
      continue;
    }
    // Logits: the gradients read the narrow argument as it is.
    SmallVector<BlockArgument> args;
    auto residual = [&](StringRef name) {
      auto it = residuals.find(name);
      if (it == residuals.end() || !readAsNarrowLogits(it->second, narrow))
        return false;
      args.push_back(it->second);
      return true;
    };
    if (!narrowLogits(rewriter, op, residual))
      continue;
    for (BlockArgument a : args)
      a.setType(typeOf(a).clone(narrow));
    ++narrowed;
  }
  syncFunctionType(rewriter, bwd);
  return narrowed;
}

namespace {
/// add(product, x) into the product's epilogue, or add(norm gradient, x)
/// into the norm's gradient kernel.
struct FuseAdd : OpRewritePattern<AddOp> {
  FuseAdd(MLIRContext *ctx, llvm::Statistic &adds, llvm::Statistic &normGrads)
      : OpRewritePattern(ctx), adds(adds), normGrads(normGrads) {}

  LogicalResult matchAndRewrite(AddOp add,
                                PatternRewriter &rewriter) const override {
    if (fuseAdd(rewriter, add)) {
      ++adds;
      return success();
    }
    if (fuseNormGradAdd(rewriter, add)) {
      ++normGrads;
      return success();
    }
    return failure();
  }

  llvm::Statistic &adds, &normGrads;
};

/// A product of narrow operands stored narrow, by what reads it.
template <typename ProductOp>
struct NarrowProduct : OpRewritePattern<ProductOp> {
  NarrowProduct(MLIRContext *ctx, llvm::Statistic &activations,
                llvm::Statistic &normGradients, llvm::Statistic &logits)
      : OpRewritePattern<ProductOp>(ctx), activations(activations),
        normGradients(normGradients), logits(logits) {}

  LogicalResult matchAndRewrite(ProductOp op,
                                PatternRewriter &rewriter) const override {
    if (narrowActivation(rewriter, op))
      ++activations;
    else if (narrowNormGradient(rewriter, op))
      ++normGradients;
    else if (narrowLogits(rewriter, op))
      ++logits;
    else
      return failure();
    return success();
  }

  llvm::Statistic &activations, &normGradients, &logits;
};

struct GraphFuseEpilogues
    : lamina::ir::graph::impl::GraphFuseEpiloguesBase<GraphFuseEpilogues> {
  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    RewritePatternSet epilogueSet(ctx);
    epilogueSet.add<FuseAdd>(ctx, numAdds, numNormGrads);
    // A narrowing cast of a product's (or a cross-entropy gradient's) f32
    // result into its result type; a transposed product swapped.
    epilogueSet.add<FunctionPattern<CastOp>>(ctx, narrowResult, numNarrowed);
    epilogueSet.add<FunctionPattern<TransposeOp>>(ctx, swapTransposedProduct,
                                                  numSwapped);
    FrozenRewritePatternSet epilogues(std::move(epilogueSet));
    RewritePatternSet narrowSet(ctx);
    narrowSet.add<NarrowProduct<MatMulOp>, NarrowProduct<FusedMatMulOp>>(
        ctx, numActivations, numNormGradients, numLogits);
    FrozenRewritePatternSet narrow(std::move(narrowSet));
    for (Block &block : getOperation().getBody()) {
      // Each rewrite erases only the visited op and the product or norm
      // gradient before it (neither is an anchor).
      SmallVector<Operation *> candidates;
      for (Operation &op : block)
        if (isa<AddOp, CastOp, TransposeOp>(op) && !isOpTriviallyDead(&op))
          candidates.push_back(&op);
      if (failed(applyFusionPatterns(candidates, epilogues)))
        return signalPassFailure();
      // After the epilogues: a product with an addend stays f32.
      SmallVector<Operation *> products;
      for (Operation &op : block)
        if (isa<MatMulOp, FusedMatMulOp>(op) && !isOpTriviallyDead(&op))
          products.push_back(&op);
      if (failed(applyFusionPatterns(products, narrow)))
        return signalPassFailure();
      eraseDeadOps(block);
    }
  }
};
} // namespace
