//===- ShardingInterfaceImpl.cpp - graph ops' sharding rules --------------===//
//
// Each op's iteration space in upstream's terms (loop iterator types and
// one indexing map per operand and result), which is all that
// sharding-propagation needs; partition clones the op on the shards
// (partitionTriviallyShardableOperation) and, where a sum's dimension is
// split, all-reduces the partial results, as upstream's linalg models do.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Graph/Transforms/ShardingInterfaceImpl.h"

#include "ShardingModels.h"

#include "lamina/Dialect/Graph/IR/GraphDialect.h"
#include "lamina/Dialect/Graph/IR/GraphOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterface.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterfaceImpl.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallBitVector.h"

#include <type_traits>
#include <vector>

using namespace mlir;
namespace shard = mlir::shard;

namespace lamina::ir::graph {
// The helpers ShardingModels.h declares (and documents).
namespace sharding {

SmallVector<int64_t> broadcastLoops(LoopSpace &space, Value v,
                                    ArrayRef<int64_t> loops,
                                    ArrayRef<int64_t> sizes) {
  auto type = cast<RankedTensorType>(v.getType());
  int64_t lead = int64_t(loops.size()) - type.getRank();
  SmallVector<int64_t> out;
  for (int64_t i = 0; i < type.getRank(); ++i) {
    bool broadcast = type.getDimSize(i) == 1 && sizes[size_t(lead + i)] != 1;
    out.push_back(broadcast ? space.add(utils::IteratorType::parallel, true)
                            : loops[size_t(lead + i)]);
  }
  return out;
}

LoopSpace wholeSpace(Operation *op) {
  LoopSpace s;
  for (Value v : llvm::concat<Value>(op->getOperands(), op->getResults())) {
    int64_t rank = rankOf(v);
    if (rank < 0)
      return LoopSpace();
    SmallVector<int64_t> loops;
    for (int64_t d = 0; d < rank; ++d)
      loops.push_back(s.add(utils::IteratorType::parallel, true));
    s.map(op->getContext(), loops);
  }
  return s.finish(op->getContext());
}

LogicalResult partitionWithSums(Operation *op, const LoopSpace &space,
                                ArrayRef<Value> partitionedOperands,
                                ArrayRef<shard::Sharding> operandShardings,
                                ArrayRef<shard::Sharding> resultShardings,
                                IRMapping &partitionMap,
                                SymbolTableCollection &symbolTable,
                                OpBuilder &builder) {
  if (!space.ruled)
    return op->emitOpError("has no sharding rule for these shapes");
  // A value propagation left unannotated (a constant's result) is whole;
  // upstream sizes shards only on a grid, so name the grid for it, and an
  // op without any sharding is cloned as it is.
  FlatSymbolRefAttr grid;
  for (const shard::Sharding &sh :
       llvm::concat<const shard::Sharding>(operandShardings, resultShardings))
    if (sh.getGridAttr())
      grid = sh.getGridAttr();
  if (!grid) {
    builder.clone(*op, partitionMap);
    return success();
  }
  auto whole = [&](ArrayRef<shard::Sharding> in) {
    std::vector<shard::Sharding> out(in.begin(), in.end());
    for (shard::Sharding &sh : out)
      if (!sh.getGridAttr())
        sh = shard::Sharding::get(grid, {});
    return out;
  };
  std::vector<shard::Sharding> operandsOn = whole(operandShardings);
  std::vector<shard::Sharding> resultsOn = whole(resultShardings);
  // An unannotated result (an unread lse) is split as its loops are.
  shard::ShardingArray loops = shard::getGridAxisAssignmentForLoopIterators(
      operandsOn, resultsOn, space.iterators, space.maps);
  for (auto [i, sh] : llvm::enumerate(resultShardings)) {
    if (sh.getGridAttr())
      continue;
    AffineMap map = space.maps[operandShardings.size() + i];
    SmallVector<shard::GridAxesAttr> axes;
    for (AffineExpr e : map.getResults()) {
      auto d = dyn_cast<AffineDimExpr>(e);
      axes.push_back(shard::GridAxesAttr::get(
          op->getContext(),
          d ? ArrayRef<shard::GridAxis>(loops[d.getPosition()])
            : ArrayRef<shard::GridAxis>()));
    }
    resultsOn[i] = shard::Sharding::get(grid, axes);
  }
  operandShardings = operandsOn;
  resultShardings = resultsOn;
  // Only whole shards: a dim the grid does not divide (an odd width) is
  // refused here rather than mis-sized.
  auto even = [&](ValueRange values, ArrayRef<shard::Sharding> shardings) {
    for (auto [value, sharding] : llvm::zip(values, shardings)) {
      auto type = dyn_cast<RankedTensorType>(value.getType());
      if (!sharding || !type)
        continue;
      shard::GridOp grid =
          shard::getGridOrNull(op, sharding.getGridAttr(), symbolTable);
      if (!grid || int64_t(sharding.getSplitAxes().size()) > type.getRank())
        return false;
      for (auto [dim, axes] : llvm::enumerate(sharding.getSplitAxes())) {
        int64_t ranks = 1;
        for (int16_t axis : axes.asArrayRef())
          ranks *= grid.getShape()[size_t(axis)];
        int64_t size = type.getDimSize(int64_t(dim));
        if (ranks > 1 && (ShapedType::isDynamic(size) || size % ranks != 0))
          return false;
      }
    }
    return true;
  };
  if (!even(op->getOperands(), operandShardings) ||
      !even(op->getResults(), resultShardings))
    return op->emitOpError("a sharding splits a dimension the grid does not "
                           "divide");
  shard::ShardingArray assignment =
      shard::getGridAxisAssignmentForLoopIterators(
          operandShardings, resultShardings, space.iterators, space.maps);
  for (auto [loop, axes] : llvm::enumerate(assignment))
    if (!axes.empty() && space.whole.test(unsigned(loop)))
      return op->emitOpError("cannot be split on loop ")
             << loop << ": the op has no local form for it (a normalized, "
             << "sliced, concatenated or attended dim)";
  shard::partitionTriviallyShardableOperation(
      *op, partitionedOperands, operandShardings, resultShardings, partitionMap,
      symbolTable, builder);
  if (!shard::isAtLeastOneReductionIteratorSharded(space.iterators, assignment))
    return success();
  SmallVector<shard::GridAxis> axes =
      shard::getReductionGridAxes(space.iterators, assignment);
  for (Value result : op->getResults()) {
    Value partial = partitionMap.lookup(result);
    Value sum = shard::AllReduceOp::create(builder, op->getLoc(), partial,
                                           resultShardings[0].getGrid(), axes,
                                           shard::ReductionKind::Sum);
    partitionMap.map(result, sum);
  }
  return success();
}

ArrayRef<shard::GridAxis> axesOf(const shard::Sharding &s, int64_t dim) {
  if (!s || dim >= int64_t(s.getSplitAxes().size()))
    return {};
  return s.getSplitAxes()[size_t(dim)].asArrayRef();
}

bool onlyVocabSplit(ArrayRef<shard::Sharding> shardings,
                    ArrayRef<int64_t> vocabDims) {
  for (auto [i, s] : llvm::enumerate(shardings)) {
    if (!s)
      continue;
    for (auto [d, axes] : llvm::enumerate(s.getSplitAxes()))
      if (!axes.asArrayRef().empty() && int64_t(d) != vocabDims[i])
        return false;
  }
  return true;
}

RankedTensorType tensorOf(ArrayRef<int64_t> shape, Type element) {
  return RankedTensorType::get(shape, element);
}

Value scalar(OpBuilder &b, Location loc, Type element, int64_t value) {
  return ConstantOp::create(
      b, loc,
      DenseElementsAttr::get(tensorOf({}, element),
                             Attribute(IntegerAttr::get(element, value))));
}

std::tuple<Value, Value, Value> Block::local(Value ids) {
  auto idsType = cast<RankedTensorType>(ids.getType());
  Type i64 = idsType.getElementType();
  Value index = shard::ProcessLinearIndexOp::create(b, loc, grid);
  Value first = arith::IndexCastOp::create(b, loc, i64, index);
  first = tensor::FromElementsOp::create(b, loc, tensorOf({}, i64),
                                         ValueRange{first});
  first = MulOp::create(b, loc, first, scalar(b, loc, i64, size));
  Value shifted = SubOp::create(b, loc, ids, first);
  Value zero = scalar(b, loc, i64, 0);
  Value in =
      AndOp::create(b, loc, GreaterEqualOp::create(b, loc, shifted, zero),
                    LessOp::create(b, loc, shifted, scalar(b, loc, i64, size)));
  Value safe = SelectOp::create(b, loc, in, shifted,
                                BroadcastOp::create(b, loc, idsType, zero));
  return {shifted, in, safe};
}

Value Block::allReduce(Value v, shard::ReductionKind kind) {
  return shard::AllReduceOp::create(b, loc, v.getType(), grid.getSymName(),
                                    axes, v, kind);
}

FailureOr<Block> blockOf(Operation *op, OpBuilder &b, const shard::Sharding &s,
                         ArrayRef<shard::GridAxis> axes, int64_t vocab,
                         SymbolTableCollection &symbols) {
  shard::GridOp grid = shard::getGridOrNull(op, s.getGridAttr(), symbols);
  if (!grid || grid.getShape().size() != 1 || axes.size() != 1 || axes[0] != 0)
    return op->emitOpError("splits its vocabulary over a grid other than "
                           "one group of ranks");
  int64_t ranks = grid.getShape()[0];
  if (ShapedType::isDynamic(vocab) || vocab % ranks != 0)
    return op->emitOpError("a vocabulary of ")
           << vocab << " does not divide over " << ranks << " ranks";
  return Block{b, op->getLoc(), grid,
               SmallVector<shard::GridAxis>(axes.begin(), axes.end()),
               vocab / ranks};
}

} // namespace sharding

namespace {
using namespace sharding;

/// The result's dims, each operand's aligned right (numpy broadcasting).
template <typename Op>
struct BroadcastElementwise
    : public GraphSharding<BroadcastElementwise<Op>, Op> {
  LoopSpace space(Operation *op) const {
    LoopSpace s;
    int64_t rank = rankOf(op->getResult(0));
    if (rank < 0 || llvm::any_of(op->getOperands(), [&](Value v) {
          return rankOf(v) < 0 || rankOf(v) > rank;
        }))
      return s;
    SmallVector<int64_t> loops;
    for (int64_t i = 0; i < rank; ++i)
      loops.push_back(s.add());
    SmallVector<int64_t> sizes = sizesOf(op->getResult(0));
    for (Value operand : op->getOperands())
      s.map(op->getContext(), broadcastLoops(s, operand, loops, sizes));
    s.map(op->getContext(), loops);
    return s.finish(op->getContext());
  }
};

/// `[..., m, k] x [..., k, n] -> [..., m, n]`: loops (batch..., m, n, k),
/// k a sum. A split k leaves each shard a partial sum: all-reduced.
struct MatMulSharding : public GraphSharding<MatMulSharding, MatMulOp> {
  LoopSpace space(Operation *op) const {
    LoopSpace s;
    int64_t rank = rankOf(op->getResult(0));
    if (rank < 2)
      return s;
    SmallVector<int64_t> loops;
    for (int64_t i = 0; i < rank; ++i)
      loops.push_back(s.add());
    int64_t k = s.add(utils::IteratorType::reduction);
    SmallVector<int64_t> sizes = sizesOf(op->getResult(0));
    auto operand = [&](Value v, int64_t row, int64_t col) {
      auto type = cast<RankedTensorType>(v.getType());
      SmallVector<int64_t> batch(loops.begin(), loops.end() - 2);
      SmallVector<int64_t> batchSizes(sizes.begin(), sizes.end() - 2);
      // The operand's batch dims aligned right against the result's.
      SmallVector<int64_t> dims;
      int64_t lead = int64_t(batch.size()) - (type.getRank() - 2);
      for (int64_t i = 0; i + 2 < type.getRank(); ++i) {
        bool broadcast =
            type.getDimSize(i) == 1 && batchSizes[size_t(lead + i)] != 1;
        dims.push_back(broadcast ? s.add(utils::IteratorType::parallel, true)
                                 : batch[size_t(lead + i)]);
      }
      dims.push_back(row);
      dims.push_back(col);
      s.map(op->getContext(), dims);
    };
    int64_t m = loops[size_t(rank - 2)], n = loops[size_t(rank - 1)];
    operand(op->getOperand(0), m, k);
    operand(op->getOperand(1), k, n);
    s.map(op->getContext(), loops);
    return s.finish(op->getContext());
  }
};

/// Result dim i is input dim perm[i]: one parallel loop per input dim.
struct TransposeSharding
    : public GraphSharding<TransposeSharding, TransposeOp> {
  LoopSpace space(Operation *op) const {
    LoopSpace s;
    int64_t rank = rankOf(op->getOperand(0));
    if (rank < 0)
      return s;
    SmallVector<int64_t> loops, out;
    for (int64_t i = 0; i < rank; ++i)
      loops.push_back(s.add());
    for (int64_t p : cast<TransposeOp>(op).getPerm())
      out.push_back(loops[size_t(p)]);
    s.map(op->getContext(), loops);
    s.map(op->getContext(), out);
    return s.finish(op->getContext());
  }
};

/// One loop per input dim, the reduced ones sums (a kept size-1 dim a
/// loop of its own); a split reduced dim leaves partial sums, all-reduced.
struct ReduceSumSharding
    : public GraphSharding<ReduceSumSharding, ReduceSumOp> {
  LoopSpace space(Operation *op) const {
    LoopSpace s;
    auto reduce = cast<ReduceSumOp>(op);
    int64_t rank = rankOf(op->getOperand(0));
    if (rank < 0)
      return s;
    SmallVector<int64_t> loops, out;
    for (int64_t i = 0; i < rank; ++i) {
      bool reduced = llvm::is_contained(reduce.getAxes(), i);
      loops.push_back(s.add(reduced ? utils::IteratorType::reduction
                                    : utils::IteratorType::parallel));
      if (!reduced)
        out.push_back(loops.back());
    }
    for (int64_t i = 0; i < rank; ++i)
      if (reduce.getKeepdims() && llvm::is_contained(reduce.getAxes(), i))
        out.insert(out.begin() + i, s.add(utils::IteratorType::parallel, true));
    s.map(op->getContext(), loops);
    s.map(op->getContext(), out);
    return s.finish(op->getContext());
  }
};

/// A norm over dims [axis, rank) of its input: the leading dims parallel,
/// the normalized ones whole; the scale and bias read the normalized dims.
/// Its gradient sums the scale's and bias's over the leading dims: where
/// those are split (sequence parallelism's norms) each rank's are partial
/// sums, all-reduced.
template <typename Op>
struct NormSharding : public GraphSharding<NormSharding<Op>, Op> {
  LoopSpace space(Operation *op) const {
    LoopSpace s;
    auto norm = cast<Op>(op);
    Value input = op->getOperand(0);
    int64_t rank = rankOf(input);
    int64_t axis = int64_t(norm.getAxis());
    if (rank < 0 || axis < 0 || axis >= rank)
      return s;
    constexpr bool grad = std::is_same_v<Op, LayerNormGradOp> ||
                          std::is_same_v<Op, RMSNormGradOp>;
    SmallVector<int64_t> loops;
    for (int64_t i = 0; i < rank; ++i)
      loops.push_back(s.add(utils::IteratorType::parallel, i >= axis));
    SmallVector<int64_t> normalized(loops.begin() + axis, loops.end());
    MLIRContext *ctx = op->getContext();
    for (Value operand : op->getOperands())
      s.map(ctx, rankOf(operand) == rank ? ArrayRef<int64_t>(loops)
                                         : ArrayRef<int64_t>(normalized));
    for (Value result : op->getResults())
      s.map(ctx, rankOf(result) == rank ? ArrayRef<int64_t>(loops)
                                        : ArrayRef<int64_t>(normalized));
    return s.finish(ctx);
  }

  LogicalResult partition(Operation *op, ArrayRef<Value> partitionedOperands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings,
                          IRMapping &partitionMap,
                          SymbolTableCollection &symbolTable,
                          OpBuilder &builder) const {
    if (failed(GraphSharding<NormSharding<Op>, Op>::partition(
            op, partitionedOperands, operandShardings, resultShardings,
            partitionMap, symbolTable, builder)))
      return failure();
    constexpr bool grad = std::is_same_v<Op, LayerNormGradOp> ||
                          std::is_same_v<Op, RMSNormGradOp>;
    const shard::Sharding &input = operandShardings[0];
    if (!grad || !input || !input.getGridAttr())
      return success();
    // The leading dims' grid axes: the scale's and bias's gradients sum
    // over them.
    SmallVector<shard::GridAxis> axes;
    int64_t axis = int64_t(cast<Op>(op).getAxis());
    for (auto [d, split] : llvm::enumerate(input.getSplitAxes()))
      if (int64_t(d) < axis)
        axes.append(split.asArrayRef().begin(), split.asArrayRef().end());
    if (axes.empty())
      return success();
    for (Value result : op->getResults().drop_front()) {
      Value partial = partitionMap.lookup(result);
      partitionMap.map(
          result, shard::AllReduceOp::create(builder, op->getLoc(), partial,
                                             input.getGrid(), axes,
                                             shard::ReductionKind::Sum));
    }
    return success();
  }
};

/// Attention over heads: loops (batch, heads, queries, head dim, keys);
/// q, out and their gradients read (b, h, s, d) (seq_major: (b, s, h, d)),
/// k and v (b, h, keys, d) with their own head count (grouped-query
/// attention: a contiguous split of both keeps each query head with its
/// key/value head), lse (b, h, s), a bias (b, h, s, keys) broadcast. Only
/// batch and heads split.
template <typename Op>
struct AttentionSharding : public GraphSharding<AttentionSharding<Op>, Op> {
  LoopSpace space(Operation *op) const {
    LoopSpace s;
    auto attn = cast<Op>(op);
    if (rankOf(attn.getQ()) != 4)
      return s;
    int64_t b = s.add(), h = s.add(),
            q = s.add(utils::IteratorType::parallel, true);
    int64_t d = s.add(utils::IteratorType::parallel, true);
    int64_t k = s.add(utils::IteratorType::parallel, true);
    bool seqMajor = attn.getSeqMajor();
    SmallVector<int64_t> query = seqMajor ? SmallVector<int64_t>{b, q, h, d}
                                          : SmallVector<int64_t>{b, h, q, d};
    SmallVector<int64_t> keys = seqMajor ? SmallVector<int64_t>{b, k, h, d}
                                         : SmallVector<int64_t>{b, h, k, d};
    SmallVector<int64_t> lse{b, h, q};
    SmallVector<int64_t> bias{b, h, q, k};
    SmallVector<int64_t> biasSizes = {
        cast<RankedTensorType>(attn.getQ().getType()).getDimSize(0),
        cast<RankedTensorType>(attn.getQ().getType())
            .getDimSize(seqMajor ? 2 : 1),
        cast<RankedTensorType>(attn.getQ().getType())
            .getDimSize(seqMajor ? 1 : 2),
        cast<RankedTensorType>(attn.getK().getType())
            .getDimSize(seqMajor ? 1 : 2)};
    MLIRContext *ctx = op->getContext();
    // Operands q, k, v[, out, lse, grad_out][, bias]; results out, lse or
    // the gradients of q, k, v.
    unsigned numOperands = op->getNumOperands();
    for (unsigned i = 0; i < numOperands; ++i) {
      Value operand = op->getOperand(i);
      if (attn.getBias() && i + 1 == numOperands)
        s.map(ctx, broadcastLoops(s, operand, bias, biasSizes));
      else if (rankOf(operand) == 3)
        s.map(ctx, lse);
      else
        s.map(ctx, i == 1 || i == 2 ? keys : query);
    }
    for (unsigned i = 0; i < op->getNumResults(); ++i) {
      if (rankOf(op->getResult(i)) == 3)
        s.map(ctx, lse);
      else
        s.map(ctx, std::is_same_v<Op, AttentionGradOp> && i > 0 ? keys : query);
    }
    return s.finish(ctx);
  }
};
/// A reshape as groups of dims whose sizes multiply alike ([2,16,32] ->
/// [2,16,4,8]: {0}{0}, {1}{1}, {2}{2,3}). A group's one coarse dim maps to
/// its fine dims' outermost loop, so a contiguous split of it is a split of
/// that loop (the heads of a projection); the inner loops stay whole, as do
/// the dims of many-to-many groups. Size-1 dims get loops of their own.
struct ReshapeSharding : public GraphSharding<ReshapeSharding, ReshapeOp> {
  LoopSpace space(Operation *op) const {
    LoopSpace s;
    auto in = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
    auto out = dyn_cast<RankedTensorType>(op->getResult(0).getType());
    if (!in || !out || !in.hasStaticShape() || !out.hasStaticShape())
      return s;
    ArrayRef<int64_t> a = in.getShape(), b = out.getShape();
    SmallVector<int64_t> inLoops(a.size(), -1), outLoops(b.size(), -1);
    size_t i = 0, j = 0;
    while (i < a.size() || j < b.size()) {
      bool oneA = i < a.size() && a[i] == 1, oneB = j < b.size() && b[j] == 1;
      if (oneA && oneB) {
        inLoops[i++] = outLoops[j++] =
            s.add(utils::IteratorType::parallel, true);
        continue;
      }
      if (oneA || oneB) {
        (oneA ? inLoops[i++] : outLoops[j++]) =
            s.add(utils::IteratorType::parallel, true);
        continue;
      }
      if (i == a.size() || j == b.size())
        return LoopSpace();
      size_t gi = i, gj = j;
      int64_t pa = a[i++], pb = b[j++];
      while (pa != pb) {
        if (pa < pb && i < a.size())
          pa *= a[i++];
        else if (pb < pa && j < b.size())
          pb *= b[j++];
        else
          return LoopSpace();
      }
      bool expand = i - gi == 1, collapse = j - gj == 1;
      // The fine side's dims each a loop, the first splittable when the
      // other side is one dim; a many-to-many group all whole.
      SmallVector<int64_t> &fine = expand ? outLoops : inLoops;
      size_t first = expand ? gj : gi, last = expand ? j : i;
      for (size_t f = first; f < last; ++f)
        fine[f] = s.add(utils::IteratorType::parallel,
                        f != first || !(expand || collapse));
      if (expand)
        inLoops[gi] = outLoops[gj];
      else if (collapse)
        outLoops[gj] = inLoops[gi];
      else
        for (size_t f = gj; f < j; ++f)
          outLoops[f] = s.add(utils::IteratorType::parallel, true);
    }
    s.map(op->getContext(), inLoops);
    s.map(op->getContext(), outLoops);
    return s.finish(op->getContext());
  }
};

/// A slice splits only the dims it takes whole; the clone's sizes are the
/// shard's.
struct SliceSharding : public GraphSharding<SliceSharding, SliceOp> {
  LoopSpace space(Operation *op) const {
    LoopSpace s;
    auto slice = cast<SliceOp>(op);
    auto in = dyn_cast<RankedTensorType>(slice.getInput().getType());
    if (!in)
      return s;
    SmallVector<int64_t> loops;
    for (int64_t d = 0; d < in.getRank(); ++d) {
      bool taken = slice.getStarts()[size_t(d)] == 0 &&
                   slice.getSteps()[size_t(d)] == 1 &&
                   slice.getSizes()[size_t(d)] == in.getDimSize(d);
      loops.push_back(s.add(utils::IteratorType::parallel, !taken));
    }
    s.map(op->getContext(), loops);
    s.map(op->getContext(), loops);
    return s.finish(op->getContext());
  }
  void localize(Operation *clone) const {
    auto slice = cast<SliceOp>(clone);
    slice.setSizes(
        cast<RankedTensorType>(slice.getResult().getType()).getShape());
  }
};

/// A concat splits any dim but its axis.
struct ConcatSharding : public GraphSharding<ConcatSharding, ConcatOp> {
  LoopSpace space(Operation *op) const {
    LoopSpace s;
    int64_t rank = rankOf(op->getResult(0));
    int64_t axis = int64_t(cast<ConcatOp>(op).getAxis());
    if (rank < 0)
      return s;
    SmallVector<int64_t> loops;
    for (int64_t d = 0; d < rank; ++d)
      loops.push_back(s.add(utils::IteratorType::parallel, d == axis));
    for (unsigned i = 0; i <= op->getNumOperands(); ++i)
      s.map(op->getContext(), loops);
    return s.finish(op->getContext());
  }
};

/// A broadcast's input aligned right against its result.
struct BroadcastSharding
    : public GraphSharding<BroadcastSharding, BroadcastOp> {
  LoopSpace space(Operation *op) const {
    LoopSpace s;
    int64_t rank = rankOf(op->getResult(0));
    if (rank < 0 || rankOf(op->getOperand(0)) < 0 ||
        rankOf(op->getOperand(0)) > rank)
      return s;
    SmallVector<int64_t> loops;
    for (int64_t d = 0; d < rank; ++d)
      loops.push_back(s.add());
    s.map(op->getContext(), broadcastLoops(s, op->getOperand(0), loops,
                                           sizesOf(op->getResult(0))));
    s.map(op->getContext(), loops);
    return s.finish(op->getContext());
  }
};

/// Ops with no tensor-parallel rule (a softmax, a cumulative sum, top-k,
/// expert parallelism's row layout and all-to-all: whole on every rank).
template <typename Op>
struct WholeSharding : public GraphSharding<WholeSharding<Op>, Op> {
  LoopSpace space(Operation *op) const { return wholeSpace(op); }
};

template <template <typename> class Model, typename... Ops>
void attach(MLIRContext *ctx) {
  (Ops::template attachInterface<Model<Ops>>(*ctx), ...);
}

} // namespace

void registerShardingInterfaceExternalModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, GraphDialect *) {
    ctx->getOrLoadDialect<shard::ShardDialect>();
    MatMulOp::attachInterface<MatMulSharding>(*ctx);
    TransposeOp::attachInterface<TransposeSharding>(*ctx);
    ReduceSumOp::attachInterface<ReduceSumSharding>(*ctx);
    ReshapeOp::attachInterface<ReshapeSharding>(*ctx);
    SliceOp::attachInterface<SliceSharding>(*ctx);
    ConcatOp::attachInterface<ConcatSharding>(*ctx);
    BroadcastOp::attachInterface<BroadcastSharding>(*ctx);
    attach<BroadcastElementwise, NegOp, AbsOp, ExpOp, LogOp, SqrtOp,
           ReciprocalOp, TanhOp, ErfOp, SigmoidOp, ReluOp, CosOp, SinOp, NotOp,
           GeluOp, GeluDerivativeOp, AddOp, SubOp, MulOp, DivOp, PowOp, MinOp,
           MaxOp, AndOp, OrOp, EqualOp, GreaterOp, GreaterEqualOp, LessOp,
           LessEqualOp, SelectOp, CastOp>(ctx);
    attach<NormSharding, LayerNormOp, RMSNormOp, LayerNormGradOp,
           RMSNormGradOp>(ctx);
    attach<AttentionSharding, AttentionOp, AttentionGradOp>(ctx);
    attach<WholeSharding, SoftmaxOp, LogSoftmaxOp, SoftmaxGradOp,
           LogSoftmaxGradOp, ReduceMeanOp, ReduceMaxOp, ReduceProdOp, CumSumOp,
           TileOp, TriluOp, GatherNDOp, TopKOp, MoEDispatchOp, MoEExchangeOp,
           MoERowExpertsOp, MoECombineOp, MoECombineGradOp>(ctx);
    attachVocabParallelModels(ctx);
    attachExpertShardingModels(ctx);
  });
}

} // namespace lamina::ir::graph
