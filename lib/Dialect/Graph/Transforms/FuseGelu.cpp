//===- FuseGelu.cpp - elementwise GELU chains -> graph.gelu ---------------===//
//
// One pattern per anchor, not one per spelling: each chain is anchored at
// its tanh or erf and walked outwards, so commuted operands are handled
// once, in one place.
//
//===----------------------------------------------------------------------===//

#include "ChainMatch.h"
#include "FusionDriver.h"

#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Matchers.h"

#include <cmath>
#include <type_traits>

namespace lamina::ir::graph {
#define GEN_PASS_DEF_GRAPHFUSEGELU
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace lamina::ir::graph

using namespace mlir;
using namespace lamina::ir::graph;

namespace {
using namespace lamina::ir::graph::chain;

struct Chain {
  Value x;
  Operation *root = nullptr;
  SmallVector<Operation *> ops; // everything the gelu replaces
};

/// x from the argument of tanh: 0.7978845608 (x + 0.044715 x^3).
Value matchTanhArgument(Value arg, Chain &chain) {
  Operation *scale = def(arg);
  Value sum = otherThanScalar<MulOp>(scale, std::sqrt(2.0 / M_PI));
  auto add = dyn_cast_or_null<AddOp>(def(sum));
  if (!add || !sum.hasOneUse())
    return {};
  for (auto [x, cubic] : {std::pair(add.getLhs(), add.getRhs()),
                          std::pair(add.getRhs(), add.getLhs())}) {
    Value cube = otherThanScalar<MulOp>(def(cubic), 0.044715);
    auto pow = dyn_cast_or_null<PowOp>(def(cube));
    if (!cube || !cubic.hasOneUse() || !cube.hasOneUse() || !pow ||
        pow.getLhs() != x || !isScalar(pow.getRhs(), 3.0))
      continue;
    chain.ops.append({scale, add, def(cubic), pow});
    return x;
  }
  return {};
}

/// x from the argument of erf: x / sqrt(2) or x * (1 / sqrt(2)).
Value matchErfArgument(Value arg, Chain &chain) {
  Operation *scale = def(arg);
  Value x;
  if (auto div = dyn_cast_or_null<DivOp>(scale);
      div && isScalar(div.getRhs(), std::sqrt(2.0)))
    x = div.getLhs();
  else
    x = otherThanScalar<MulOp>(scale, std::sqrt(0.5));
  if (x)
    chain.ops.push_back(scale);
  return x;
}

/// From `d = 1 + f(x)` to the value 0.5 * x * d, in any association.
Operation *matchOuterProduct(Value d, Value x, Chain &chain) {
  Operation *user = soleUser(d);
  if (!isa_and_nonnull<MulOp>(user))
    return nullptr;
  // (0.5 x) d
  Value other = otherThan<MulOp>(user, d);
  if (other && other.hasOneUse() && otherThanScalar<MulOp>(def(other), 0.5) == x) {
    chain.ops.push_back(def(other));
    return user;
  }
  // (x d) 0.5
  if (other == x) {
    Operation *outer = soleUser(user->getResult(0));
    if (otherThanScalar<MulOp>(outer, 0.5) == user->getResult(0)) {
      chain.ops.push_back(user);
      return outer;
    }
  }
  // x (0.5 d)
  if (otherThanScalar<MulOp>(user, 0.5) == d) {
    Operation *outer = soleUser(user->getResult(0));
    if (otherThan<MulOp>(outer, user->getResult(0)) == x) {
      chain.ops.push_back(user);
      return outer;
    }
  }
  return nullptr;
}

std::optional<Chain> matchGelu(Operation *fn, bool tanh) {
  Chain chain;
  Value arg = fn->getOperand(0);
  if (!arg.hasOneUse())
    return std::nullopt;
  chain.x = tanh ? matchTanhArgument(arg, chain) : matchErfArgument(arg, chain);
  if (!chain.x)
    return std::nullopt;
  chain.ops.push_back(fn);
  Operation *plusOne = soleUser(fn->getResult(0));
  Value d = plusOne ? plusOne->getResult(0) : Value();
  if (!d || otherThanScalar<AddOp>(plusOne, 1.0) != fn->getResult(0))
    return std::nullopt;
  chain.ops.push_back(plusOne);
  chain.root = matchOuterProduct(d, chain.x, chain);
  if (!chain.root || chain.root->getResult(0).getType() != chain.x.getType())
    return std::nullopt;
  return chain;
}

/// The chain anchored at a tanh or erf -> one graph.gelu at its last op.
template <typename FnOp> struct FuseGeluChain : CountedPattern<FnOp> {
  using CountedPattern<FnOp>::CountedPattern;

  bool rewrite(FnOp fn, PatternRewriter &rewriter) const override {
    constexpr bool tanh = std::is_same_v<FnOp, TanhOp>;
    std::optional<Chain> chain = matchGelu(fn, tanh);
    if (!chain)
      return false;
    rewriter.setInsertionPoint(chain->root);
    auto gelu = GeluOp::create(rewriter, chain->root->getLoc(),
                               chain->x.getType(), chain->x, tanh);
    rewriter.replaceOp(chain->root, gelu.getResult());
    eraseDead(rewriter, chain->ops);
    return true;
  }
};

struct GraphFuseGelu
    : lamina::ir::graph::impl::GraphFuseGeluBase<GraphFuseGelu> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseGeluChain<TanhOp>, FuseGeluChain<ErfOp>>(&getContext(),
                                                              numFused);
    if (failed(applyFusionPatterns(anchorsOf<TanhOp, ErfOp>(getOperation()),
                                   std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
