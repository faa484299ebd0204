//===- FuseElementwise.cpp - elementwise groups -> fused_elementwise ------===//
//
// Greedy and bottom-up: each block is walked from its end, and every
// fusable op not yet in a group roots one, which then absorbs producers of
// its members while their results have no use outside the group and the
// kernel's limits (4 inputs, 16 steps) hold. Walking from the end makes
// the root the last op of its chain, so the groups are maximal.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"

namespace lamina::graph {
#define GEN_PASS_DEF_GRAPHFUSEELEMENTWISE
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace lamina::graph

using namespace mlir;
using namespace lamina::graph;

namespace {
/// The step name of an elementwise op the fused kernel computes, or "".
StringRef stepName(Operation *op) {
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

/// A step op on f32, f16 or bf16 (the kernels' types).
bool isFusable(Operation *op) {
  if (stepName(op).empty())
    return false;
  Type elt = cast<RankedTensorType>(op->getResult(0).getType()).getElementType();
  return elt.isF32() || elt.isF16() || elt.isBF16();
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

struct GraphFuseElementwise
    : lamina::graph::impl::GraphFuseElementwiseBase<GraphFuseElementwise> {
  void runOnOperation() override {
    for (func::FuncOp func : getOperation().getOps<func::FuncOp>())
      for (Block &block : func.getBody())
        fuseBlock(block);
  }

  void fuseBlock(Block &block) {
    SmallVector<Operation *> ops;
    for (Operation &op : llvm::reverse(block))
      ops.push_back(&op);
    llvm::DenseSet<Operation *> taken;
    for (Operation *root : ops) {
      if (taken.contains(root) || !isFusable(root))
        continue;
      llvm::SetVector<Operation *> members = grow(root);
      if (members.size() < 2)
        continue;
      taken.insert(members.begin(), members.end());
      replace(root, members);
    }
  }

  /// The root and every producer it can absorb, transitively.
  llvm::SetVector<Operation *> grow(Operation *root) {
    using Kernel = FusedElementwiseOp;
    Type type = root->getResult(0).getType();
    llvm::SetVector<Operation *> members;
    members.insert(root);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t m = 0; m < members.size(); ++m) {
        for (Value v : members[m]->getOperands()) {
          Operation *p = v.getDefiningOp();
          // Same shape as the result: no step runs on more elements than
          // the op it replaces.
          if (!p || members.contains(p) || !isFusable(p) ||
              v.getType() != type ||
              members.size() >= size_t(Kernel::kMaxSteps) ||
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
      names.push_back(stepName(op));
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
        root->getResult(0).getType(), inputs, b.getStrArrayAttr(names),
        b.getDenseI64ArrayAttr(lhs), b.getDenseI64ArrayAttr(rhs));
    root->getResult(0).replaceAllUsesWith(fused.getResult());
    for (Operation *op : llvm::reverse(members))
      op->erase();
    ++numGroups;
    numFusedOps += members.size();
  }
};
} // namespace
