//===- FuseElementwise.cpp - elementwise groups -> fused_elementwise ------===//
//
// Greedy and bottom-up: each block is walked from its end, and every
// fusable op not yet in a group roots one, which then absorbs producers of
// its members while their results have no use outside the group and the
// kernel's limits (4 inputs, 16 steps) hold. Walking from the end makes
// the root the last op of its chain, so the groups are maximal.
//
// Float casts at the boundary of an f32 chain are absorbed too, exactly:
// the kernel loads every input widened to f32, computes in f32 and rounds
// the last register once on store. So a widening cast (f16/bf16 -> f32)
// whose operand becomes a group input is the identity on the registers
// (widening is exact), and a narrowing cast (f32 -> f16/bf16) as the root
// is the kernel's rounding store (the same round-to-nearest-even as the
// cast kernel). A narrowing cast is never absorbed in the middle of a
// chain (that would drop a rounding), nor is a chain computing in f16 or
// bf16 given casts (its steps would change type). A group needs one step
// that is not a cast.
//
// The grouping stays a walk, not a rewrite pattern: it is a partition of
// the block, not a local match. Which group an op joins depends on the
// groups rooted after it (the first that can take it does), and the greedy
// driver would visit a group's input producers right after its rewrite
// (re-queued as operands of erased ops), before the ops between them and
// the root, so other groups would form. The bias-gradient sums that follow
// (FuseSum) are local, and a pattern.
//
//===----------------------------------------------------------------------===//

#include "FusionDriver.h"

#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SetVector.h"

namespace lamina::ir::graph {
#define GEN_PASS_DEF_GRAPHFUSEELEMENTWISE
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace lamina::ir::graph

using namespace mlir;
using namespace lamina::ir::graph;

namespace {
bool isHalfFloat(Type t) { return t.isF16() || t.isBF16(); }

Type elementOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType();
}

/// A step op on f32, f16 or bf16 (the kernels' types).
bool isFusable(Operation *op) {
  if (FusedElementwiseOp::stepOf(op).empty())
    return false;
  Type elt = elementOf(op->getResult(0));
  return elt.isF32() || isHalfFloat(elt);
}

/// A graph.cast f16/bf16 -> f32: absorbed on a group's input side.
bool isWideningCast(Operation *op) {
  auto c = dyn_cast<CastOp>(op);
  return c && isHalfFloat(elementOf(c.getInput())) &&
         elementOf(c.getResult()).isF32();
}

/// A graph.cast f32 -> f16/bf16: absorbed only as a group's root.
bool isNarrowingCast(Operation *op) {
  auto c = dyn_cast<CastOp>(op);
  return c && elementOf(c.getInput()).isF32() &&
         isHalfFloat(elementOf(c.getResult()));
}

/// The group's steps: its ops that are not casts.
size_t numSteps(const llvm::SetVector<Operation *> &members) {
  return llvm::count_if(members,
                        [](Operation *op) { return !isa<CastOp>(op); });
}

/// The group's inputs: operands of its ops that no op of the group defines,
/// each once, in order of first use.
SmallVector<Value> groupInputs(const llvm::SetVector<Operation *> &members) {
  llvm::SetVector<Value> inputs;
  for (Operation *op : members)
    for (Value v : op->getOperands())
      if (!members.contains(v.getDefiningOp()))
        inputs.insert(v);
  return inputs.takeVector();
}

/// keepdims false over the leading dims (at least one, not all) of an f32
/// value, to more than one column (a single total is the reductions'
/// other kernel, with its own order).
bool isLeadingSum(ReduceSumOp sum) {
  auto type = cast<RankedTensorType>(sum.getInput().getType());
  ArrayRef<int64_t> axes = sum.getAxes();
  if (!type.getElementType().isF32() || sum.getKeepdims() ||
      !elementOf(sum.getResult()).isF32() || axes.empty() ||
      int64_t(axes.size()) >= type.getRank() ||
      cast<RankedTensorType>(sum.getType()).getNumElements() < 2)
    return false;
  for (auto [i, a] : llvm::enumerate(axes))
    if (a != int64_t(i))
      return false;
  return true;
}

/// The first f32 -> f16/bf16 cast of `x`, or null.
CastOp narrowingUser(Value x) {
  for (Operation *user : x.getUsers())
    if (isNarrowingCast(user))
      return cast<CastOp>(user);
  return CastOp();
}

/// An f32 value used by a sum over its leading dims (a bias gradient) and
/// a narrowing cast (the operand of that bias's matmuls) gets both from
/// one fused_elementwise with two results. When nothing else reads the
/// value and a chain (a fused group or one step op) makes it, the chain
/// joins and the f32 tensor is never stored; otherwise (a norm's input
/// gradient, read on by the residual path) the op has no steps and reads
/// the value once instead of twice.
struct FuseSum : CountedPattern<ReduceSumOp> {
  using CountedPattern::CountedPattern;

  bool rewrite(ReduceSumOp sum, PatternRewriter &rewriter) const override {
    Value x = sum.getInput();
    CastOp narrow;
    if (!isLeadingSum(sum) || !(narrow = narrowingUser(x)))
      return false;
    Operation *chain = x.getDefiningOp();
    auto f = dyn_cast_or_null<FusedElementwiseOp>(chain);
    bool join = chain && ((f && !f.getSum()) || isFusable(chain)) &&
                std::distance(x.use_begin(), x.use_end()) == 2;
    SmallVector<Value> inputs{x};
    SmallVector<Attribute> names;
    SmallVector<int64_t> lhs, rhs;
    Operation *at = sum->isBeforeInBlock(narrow) ? sum.getOperation()
                                                 : narrow.getOperation();
    SmallVector<Location> locs{sum.getLoc(), narrow.getLoc()};
    if (join && f) {
      inputs.assign(f.getInputs().begin(), f.getInputs().end());
      names.assign(f.getOps().begin(), f.getOps().end());
      llvm::append_range(lhs, f.getLhs());
      llvm::append_range(rhs, f.getRhs());
    } else if (join) { // one step on the op's distinct operands
      llvm::SetVector<Value> distinct(chain->operand_begin(),
                                      chain->operand_end());
      inputs.assign(distinct.begin(), distinct.end());
      auto reg = [&](Value v) {
        return int64_t(llvm::find(distinct, v) - distinct.begin());
      };
      names.push_back(StringAttr::get(chain->getContext(),
                                      FusedElementwiseOp::stepOf(chain)));
      lhs.push_back(reg(chain->getOperand(0)));
      rhs.push_back(chain->getNumOperands() == 2 ? reg(chain->getOperand(1))
                                                 : -1);
    }
    if (join) {
      at = chain;
      locs.insert(locs.begin(), chain->getLoc());
    }
    rewriter.setInsertionPoint(at);
    auto merged = FusedElementwiseOp::create(
        rewriter, FusedLoc::get(x.getContext(), locs),
        narrow.getResult().getType(), sum.getResult().getType(), inputs,
        rewriter.getArrayAttr(names), rewriter.getDenseI64ArrayAttr(lhs),
        rewriter.getDenseI64ArrayAttr(rhs));
    rewriter.replaceOp(narrow, merged.getResult());
    rewriter.replaceOp(sum, merged.getSum());
    if (join)
      rewriter.eraseOp(chain);
    return true;
  }
};

struct GraphFuseElementwise
    : lamina::ir::graph::impl::GraphFuseElementwiseBase<GraphFuseElementwise> {
  void runOnOperation() override {
    RewritePatternSet sumSet(&getContext());
    sumSet.add<FuseSum>(&getContext(), numSums);
    FrozenRewritePatternSet sums(std::move(sumSet));
    for (Block &block : getOperation().getBody()) {
      fuseBlock(block);
      // Then each bias gradient sum with its narrowing cast (FuseSum).
      SmallVector<Operation *> anchors;
      for (ReduceSumOp sum : block.getOps<ReduceSumOp>())
        if (!isOpTriviallyDead(sum))
          anchors.push_back(sum);
      if (failed(applyFusionPatterns(anchors, sums)))
        return signalPassFailure();
    }
  }

  void fuseBlock(Block &block) {
    SmallVector<Operation *> ops;
    for (Operation &op : llvm::reverse(block))
      ops.push_back(&op);
    llvm::DenseSet<Operation *> taken;
    for (Operation *root : ops) {
      if (taken.contains(root) || (!isFusable(root) && !isNarrowingCast(root)))
        continue;
      llvm::SetVector<Operation *> members = grow(root);
      // Worth a kernel: two ops or more, one of them a real step.
      if (members.size() < 2 || numSteps(members) == 0)
        continue;
      taken.insert(members.begin(), members.end());
      replace(root, members);
    }
  }

  /// The root and every producer it can absorb, transitively.
  llvm::SetVector<Operation *> grow(Operation *root) {
    using Kernel = FusedElementwiseOp;
    // The chain's type: the root's result, or for a narrowing cast root
    // its f32 operand. Every absorbed value has it (same shape: no step
    // runs on more elements than the op it replaces).
    bool narrowingRoot = isNarrowingCast(root);
    Type type =
        (narrowingRoot ? root->getOperand(0) : root->getResult(0)).getType();
    bool f32Chain =
        elementOf(narrowingRoot ? root->getOperand(0) : root->getResult(0))
            .isF32();
    llvm::SetVector<Operation *> members;
    members.insert(root);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t m = 0; m < members.size(); ++m) {
        // A widening cast's f16/bf16 operand is a group input: its
        // producer computes in f16/bf16, rounding per op.
        if (isWideningCast(members[m]))
          continue;
        for (Value v : members[m]->getOperands()) {
          Operation *p = v.getDefiningOp();
          bool cast = p && f32Chain && isWideningCast(p);
          if (!p || members.contains(p) || (!isFusable(p) && !cast) ||
              v.getType() != type ||
              (!cast && numSteps(members) >= size_t(Kernel::kMaxSteps)) ||
              !llvm::all_of(v.getUsers(), [&](Operation *user) {
                return members.contains(user);
              }))
            continue;
          members.insert(p);
          if (groupInputs(members).size() > size_t(Kernel::kMaxInputs)) {
            members.pop_back();
            continue;
          }
          changed = true;
        }
      }
    }
    return members;
  }

  void replace(Operation *root, const llvm::SetVector<Operation *> &group) {
    SmallVector<Operation *> members(group.begin(), group.end());
    llvm::sort(members, [](Operation *a, Operation *b) {
      return a->isBeforeInBlock(b);
    });
    SetVector<Operation *> ordered(members.begin(), members.end());
    SmallVector<Value> inputs = groupInputs(ordered);
    llvm::DenseMap<Value, int64_t> reg;
    for (auto [i, v] : llvm::enumerate(inputs))
      reg[v] = int64_t(i);
    SmallVector<StringRef> names;
    SmallVector<int64_t> lhs, rhs;
    SmallVector<Location> locs{root->getLoc()};
    for (Operation *op : members) {
      if (isa<CastOp>(op)) {
        // The identity on the f32 registers: a widening cast reads an
        // input (widened on load), the root narrowing cast the last step
        // (rounded on store).
        reg[op->getResult(0)] = reg.lookup(op->getOperand(0));
        if (op != root)
          locs.push_back(op->getLoc());
        continue;
      }
      names.push_back(FusedElementwiseOp::stepOf(op));
      lhs.push_back(reg.lookup(op->getOperand(0)));
      rhs.push_back(op->getNumOperands() == 2 ? reg.lookup(op->getOperand(1))
                                              : -1);
      reg[op->getResult(0)] = int64_t(inputs.size() + names.size() - 1);
      if (op != root)
        locs.push_back(op->getLoc());
    }
    OpBuilder b(root);
    auto fused = FusedElementwiseOp::create(
        b, FusedLoc::get(root->getContext(), locs),
        root->getResult(0).getType(), /*sum=*/Type(), inputs,
        b.getStrArrayAttr(names), b.getDenseI64ArrayAttr(lhs),
        b.getDenseI64ArrayAttr(rhs));
    root->getResult(0).replaceAllUsesWith(fused.getResult());
    for (Operation *op : llvm::reverse(members))
      op->erase();
    ++numGroups;
    numFusedOps += members.size();
  }
};
} // namespace
