//===- Autocast.cpp - f32 matmuls -> bf16/f16 matmuls ---------------------===//
//
// Mixed precision as a graph rewrite (PyTorch's autocast): each f32
// graph.matmul reads low-precision casts of its operands, computes in the
// low precision (the kernels accumulate in f32) and its result is cast back
// to f32. Nothing else changes, so signatures, norms, softmax and losses
// stay f32, and graph-autodiff (the gradient of a cast is the cast back)
// makes the backward's matmuls low-precision too.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Autodiff.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"

namespace lamina::ir::graph {
#define GEN_PASS_DEF_GRAPHAUTOCAST
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace lamina::ir::graph

using namespace mlir;
using namespace lamina::ir::graph;

namespace {
bool isF32Tensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && t.getElementType().isF32();
}

/// The low-precision versions of the f32 values of one block, each made
/// once, right before the first matmul that needs it.
class Caster {
public:
  Caster(Type low, llvm::Statistic &numCasts) : low(low), numCasts(numCasts) {}

  /// `v` (f32) in the low precision, built before `user` when new.

  Value get(Value v, Operation *user) {
    if (Value known = cache.lookup(v))
      return known;
    Value result;
    OpBuilder b(user);
    if (auto cast = v.getDefiningOp<CastOp>();
        cast && cast.getInput().getType() == withLow(v.getType())) {
      // f32 of a low-precision value: exactly that value.
      result = cast.getInput();
    } else if (auto t = v.getDefiningOp<TransposeOp>();
               t && isF32Tensor(t.getInput()) &&
               (t.swapsLastTwoDims() || isWidened(t.getInput()) ||
                llvm::all_of(t->getUsers(), [](Operation *u) {
                  return isa<MatMulOp, AttentionOp>(u);
                }))) {
      // Cast, then transpose: the transpose moves half the bytes and still
      // folds into the matmul's transposition flag; a widened value needs
      // no cast at all.
      Value input = get(t.getInput(), user);
      result = TransposeOp::create(b, t.getLoc(), input, t.getPerm());
    } else if (auto r = v.getDefiningOp<ReshapeOp>();
               r && isF32Tensor(r.getInput()) &&
               (isWidened(r.getInput()) || onlyFeedsNarrow(r.getInput()))) {
      // A view of a widened value (attention's output, heads merged), or
      // of one only narrow ops read.
      Value input = get(r.getInput(), user);
      result = ReshapeOp::create(b, r.getLoc(), withLow(v.getType()), input);
    } else if (auto s = v.getDefiningOp<SliceOp>();
               s && isF32Tensor(s.getInput()) &&
               onlyFeedsNarrow(s.getInput())) {
      // q, k and v sliced from one projection: cast the projection once
      // (graph-fuse-elementwise folds that cast into its bias add) and
      // slice half the bytes.
      Value input = get(s.getInput(), user);
      result = SliceOp::create(b, s.getLoc(), withLow(v.getType()), input,
                               s.getStartsAttr(), s.getSizesAttr(),
                               s.getStepsAttr());
    } else {
      result = CastOp::create(b, v.getLoc(), withLow(v.getType()), v);
      ++numCasts;
    }
    cache[v] = result;
    return result;
  }

private:
  Type withLow(Type t) { return cast<RankedTensorType>(t).clone(low); }

  /// Whether every reader of `v`, through slices, reshapes and transposes,
  /// is an operand this pass narrows (a matmul's, attention's q, k, v).
  bool onlyFeedsNarrow(Value v, int depth = 0) {
    // (An unused value -- an f32 slice whose reader was just narrowed --
    // costs nothing either way.)
    if (depth > 8)
      return false;
    for (OpOperand &use : v.getUses()) {
      Operation *u = use.getOwner();
      if (isa<MatMulOp>(u))
        continue;
      if (auto at = dyn_cast<AttentionOp>(u); at && use.getOperandNumber() < 3)
        continue;
      if (auto c = dyn_cast<CastOp>(u);
          c && c.getType() == withLow(v.getType()))
        continue; // this pass's own cast, made for another reader

      if (!isa<SliceOp, ReshapeOp, TransposeOp>(u) ||
          !onlyFeedsNarrow(u->getResult(0), depth + 1))
        return false;
    }
    return true;
  }

  /// Whether `v` is a low-precision value cast to f32, seen through
  /// reshapes and transposes: its low version costs no cast.
  bool isWidened(Value v) {
    if (auto cast = v.getDefiningOp<CastOp>())
      return cast.getInput().getType() == withLow(v.getType());
    if (isa_and_nonnull<ReshapeOp, TransposeOp>(v.getDefiningOp()))
      return isWidened(v.getDefiningOp()->getOperand(0));
    return false;
  }

  Type low;
  llvm::Statistic &numCasts;
  llvm::DenseMap<Value, Value> cache;
};

struct GraphAutocast
    : lamina::ir::graph::impl::GraphAutocastBase<GraphAutocast> {
  using Base::Base;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    Builder builder(&getContext());
    Type low;
    if (precision == "bf16")
      low = builder.getBF16Type();
    else if (precision == "f16")
      low = builder.getF16Type();
    else {
      func.emitError("graph-autocast: unknown precision '")
          << precision << "' (expected bf16 or f16)";
      return signalPassFailure();
    }
    for (Block &block : func.getBody()) {
      Caster caster(low, numCasts);
      // Attention and matmuls in block order, so every cached narrow
      // value is built before all its readers, and a matmul after an
      // attention reads its narrow output without a cast. Attention's q,
      // k, v and out narrow; its scores and lse stay f32 inside the
      // kernel, and the bias, a mask, as it is.
      SmallVector<Operation *> targets;
      for (Operation &op : block)
        if (isa<AttentionOp, MatMulOp>(op))
          targets.push_back(&op);
      for (Operation *op : targets) {
        if (auto at = dyn_cast<AttentionOp>(op)) {
          if (!isF32Tensor(at.getQ()) || !isF32Tensor(at.getK()) ||
              !isF32Tensor(at.getV()) || !at.getLse().use_empty())
            continue;
          OpBuilder b(at);
          Value q = caster.get(at.getQ(), at), k = caster.get(at.getK(), at),
                v = caster.get(at.getV(), at);
          auto narrow = AttentionOp::create(
              b, at.getLoc(),
              TypeRange{
                  cast<RankedTensorType>(at.getOut().getType()).clone(low),
                  at.getLse().getType()},
              q, k, v, at.getBias(), at.getScaleAttr(), at.getCausalAttr(),
              at.getSeqMajorAttr());
          narrow->setDiscardableAttrs(at->getDiscardableAttrDictionary());
          auto wide = CastOp::create(b, at.getLoc(), at.getOut().getType(),
                                     narrow.getOut());
          at.getOut().replaceAllUsesWith(wide.getResult());
          at.erase();
          ++numAttentions;
          continue;
        }
        auto mm = cast<MatMulOp>(op);
        if (!isF32Tensor(mm.getLhs()) || !isF32Tensor(mm.getRhs()) ||
            !isF32Tensor(mm.getResult()))
          continue;
        Value lhs = caster.get(mm.getLhs(), mm);
        Value rhs = caster.get(mm.getRhs(), mm);
        OpBuilder b(mm);
        auto narrow = MatMulOp::create(b, mm.getLoc(), lhs, rhs);
        narrow->setDiscardableAttrs(mm->getDiscardableAttrDictionary());
        auto wide = CastOp::create(b, mm.getLoc(), mm.getType(), narrow);
        mm.getResult().replaceAllUsesWith(wide.getResult());
        mm.erase();
        ++numMatMuls;
      }
      // What only fed the narrowed ops (the f32 casts back of matmuls
      // now read narrow, f32 transposes, reshapes and slices).
      eraseDeadOps(block);
    }
  }
};
} // namespace
