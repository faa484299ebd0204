//===- VocabParallel.cpp - the embedding and the loss over a split vocabulary
//
// Megatron-LM's vocabulary-parallel layers as upstream ShardingInterface
// models with their own partition: each rank holds a block of the
// vocabulary (rows of the embedding table, columns of the logits) and the
// whole [tokens, vocabulary] tensor is never formed.
//
// * graph.gather on a [V, H] table (the embedding): each rank looks up the
//   ids in its block (the others read row 0 and are zeroed), then one
//   all-reduce;
// * graph.scatter_nd into a zero [V, H] table (the embedding's gradient):
//   each rank scatters the rows in its block into its own zero block;
// * graph.softmax_cross_entropy on split logits: the row max all-reduced
//   (max), the sum of exponentials and the label's logit (held by one
//   rank, 0 on the others) all-reduced (sum); 0 where the label is ignored;
// * its gradient: softmax from the same two all-reduces, minus the one-hot
//   of the labels in the rank's block.
//
// A rank's first row is process_linear_index * block (upstream's shard op).
//
//===----------------------------------------------------------------------===//

#include "ShardingModels.h"

#include "lamina/Dialect/Graph/IR/GraphOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

namespace lamina::ir::graph {
namespace {
using namespace sharding;

Value castTo(OpBuilder &b, Location loc, Value v, Type element) {
  auto type = cast<RankedTensorType>(v.getType());
  return CastOp::create(b, loc, tensorOf(type.getShape(), element), v);
}

/// `v` with a trailing dim of 1.
Value withUnitDim(OpBuilder &b, Location loc, Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> shape(type.getShape());
  shape.push_back(1);
  return ReshapeOp::create(b, loc, tensorOf(shape, type.getElementType()), v);
}

/// The embedding, `gather(table [V, H], ids, axis 0)`: loops (ids..., h, v),
/// v a sum (each row held by one rank).
struct GatherSharding : public GraphSharding<GatherSharding, GatherOp> {
  static bool embedding(GatherOp g) {
    return g.getAxis() == 0 && rankOf(g.getData()) == 2 &&
           rankOf(g.getIndices()) >= 0 && !g.getPaddingIdx();
  }

  LoopSpace space(Operation *op) const {
    LoopSpace s;
    auto g = cast<GatherOp>(op);
    MLIRContext *ctx = op->getContext();
    if (!embedding(g))
      return wholeSpace(op); // a gather of anything else
    SmallVector<int64_t> ids;
    for (int64_t d = 0; d < rankOf(g.getIndices()); ++d)
      ids.push_back(s.add(utils::IteratorType::parallel, true));
    int64_t h = s.add(utils::IteratorType::parallel, true);
    int64_t v = s.add(utils::IteratorType::reduction);
    SmallVector<int64_t> out(ids);
    out.push_back(h);
    s.map(ctx, {v, h});
    s.map(ctx, ids);
    s.map(ctx, out);
    return s.finish(ctx);
  }

  LogicalResult partition(Operation *op, ArrayRef<Value> operands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings,
                          IRMapping &map, SymbolTableCollection &symbols,
                          OpBuilder &b) const {
    auto g = cast<GatherOp>(op);
    ArrayRef<shard::GridAxis> axes = axesOf(operandShardings[0], 0);
    if (!embedding(g) || axes.empty())
      return partitionWithSums(op, space(op), operands, operandShardings,
                               resultShardings, map, symbols, b);
    if (!onlyVocabSplit(operandShardings, {0, -1}) ||
        !onlyVocabSplit(resultShardings, {-1}))
      return op->emitOpError("splits an embedding on more than its rows");
    FailureOr<Block> block = blockOf(
        op, b, operandShardings[0], axes,
        cast<RankedTensorType>(g.getData().getType()).getDimSize(0), symbols);
    if (failed(block))
      return failure();
    auto [shifted, in, safe] = block->local(operands[1]);
    (void)shifted;
    Value rows = GatherOp::create(b, op->getLoc(), g.getType(), operands[0],
                                  safe, g.getAxisAttr(), IntegerAttr());
    Type element = g.getType().getElementType();
    Value mask =
        castTo(b, op->getLoc(), withUnitDim(b, op->getLoc(), in), element);
    Value mine = MulOp::create(b, op->getLoc(), rows, mask);
    map.map(g.getResult(), block->allReduce(mine, shard::ReductionKind::Sum));
    return success();
  }
};

/// The embedding's gradient, `scatter_nd(zeros [V, H], ids [..., 1],
/// updates [..., H], add)`: loops (v, h, ids..., 1), only v split.
struct ScatterSharding : public GraphSharding<ScatterSharding, ScatterNDOp> {
  static bool rows(ScatterNDOp s) {
    auto ids = dyn_cast<RankedTensorType>(s.getIndices().getType());
    return s.getReduction() == "add" && rankOf(s.getData()) == 2 && ids &&
           ids.getRank() >= 1 && ids.getShape().back() == 1;
  }

  LoopSpace space(Operation *op) const {
    LoopSpace s;
    auto sc = cast<ScatterNDOp>(op);
    MLIRContext *ctx = op->getContext();
    if (!rows(sc))
      return wholeSpace(op);
    int64_t v = s.add(), h = s.add(utils::IteratorType::parallel, true);
    SmallVector<int64_t> ids;
    for (int64_t d = 0; d + 1 < rankOf(sc.getIndices()); ++d)
      ids.push_back(s.add(utils::IteratorType::parallel, true));
    SmallVector<int64_t> index(ids), updates(ids);
    index.push_back(s.add(utils::IteratorType::parallel, true));
    updates.push_back(h);
    s.map(ctx, {v, h});
    s.map(ctx, index);
    s.map(ctx, updates);
    s.map(ctx, {v, h});
    return s.finish(ctx);
  }

  LogicalResult partition(Operation *op, ArrayRef<Value> operands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings,
                          IRMapping &map, SymbolTableCollection &symbols,
                          OpBuilder &b) const {
    auto sc = cast<ScatterNDOp>(op);
    ArrayRef<shard::GridAxis> axes = axesOf(resultShardings[0], 0);
    if (!rows(sc) || axes.empty())
      return partitionWithSums(op, space(op), operands, operandShardings,
                               resultShardings, map, symbols, b);
    if (!onlyVocabSplit(resultShardings, {0}) ||
        !onlyVocabSplit(operandShardings, {0, -1, -1}))
      return op->emitOpError("splits an embedding gradient on more than its "
                             "rows");
    // The rank's rows start as zeros: the scatter's table must be a splat.
    Value data = sc.getData();
    while (auto ann = data.getDefiningOp<shard::ShardOp>())
      data = ann.getSrc();
    auto zeros = data.getDefiningOp<ConstantOp>();
    auto splat = zeros ? dyn_cast<SplatElementsAttr>(zeros.getValue())
                       : SplatElementsAttr();
    if (!splat)
      return op->emitOpError("scatters into a split table that is not a "
                             "constant fill");
    auto type = cast<RankedTensorType>(sc.getType());
    FailureOr<Block> block =
        blockOf(op, b, resultShardings[0], axes, type.getDimSize(0), symbols);
    if (failed(block))
      return failure();
    auto localType =
        tensorOf({block->size, type.getDimSize(1)}, type.getElementType());
    Value local = ConstantOp::create(
        b, op->getLoc(),
        SplatElementsAttr::get(localType, splat.getSplatValue<Attribute>()));
    auto [shifted, in, safe] = block->local(operands[1]);
    (void)shifted;
    Value mask = castTo(b, op->getLoc(), in, type.getElementType());
    Value updates = MulOp::create(b, op->getLoc(), operands[2], mask);
    map.map(sc.getResult(),
            ScatterNDOp::create(b, op->getLoc(), localType, local, safe,
                                updates, sc.getReductionAttr()));
    return success();
  }
};

/// `softmax_cross_entropy(logits [..., V], labels [...])` and its
/// gradient: loops (rows..., v), v a sum for the loss, parallel for the
/// gradient; only v splits.
template <typename Op>
struct CrossEntropySharding
    : public GraphSharding<CrossEntropySharding<Op>, Op> {
  static constexpr bool kGrad = std::is_same_v<Op, SoftmaxCrossEntropyGradOp>;

  LoopSpace space(Operation *op) const {
    LoopSpace s;
    auto ce = cast<Op>(op);
    int64_t rank = rankOf(ce.getLogits());
    if (rank < 1)
      return s;
    SmallVector<int64_t> rows;
    for (int64_t d = 0; d + 1 < rank; ++d)
      rows.push_back(s.add(utils::IteratorType::parallel, true));
    int64_t v = s.add(kGrad ? utils::IteratorType::parallel
                            : utils::IteratorType::reduction);
    SmallVector<int64_t> all(rows);
    all.push_back(v);
    MLIRContext *ctx = op->getContext();
    s.map(ctx, all);  // logits
    s.map(ctx, rows); // labels
    if constexpr (kGrad)
      s.map(ctx, rows); // grad_loss
    s.map(ctx, kGrad ? all : rows);
    return s.finish(ctx);
  }

  LogicalResult partition(Operation *op, ArrayRef<Value> operands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings,
                          IRMapping &map, SymbolTableCollection &symbols,
                          OpBuilder &b) const {
    auto ce = cast<Op>(op);
    auto logitsType = cast<RankedTensorType>(ce.getLogits().getType());
    int64_t last = logitsType.getRank() - 1;
    ArrayRef<shard::GridAxis> axes = axesOf(operandShardings[0], last);
    if (axes.empty())
      return partitionWithSums(op, space(op), operands, operandShardings,
                               resultShardings, map, symbols, b);
    if (!onlyVocabSplit(operandShardings, {last, -1, -1}) ||
        !onlyVocabSplit(resultShardings, {kGrad ? last : -1}))
      return op->emitOpError("splits the logits on more than the vocabulary");
    Type f32 = b.getF32Type();
    if (logitsType.getElementType() != f32 ||
        cast<RankedTensorType>(op->getResult(0).getType()).getElementType() !=
            f32)
      return op->emitOpError("over a split vocabulary takes f32 logits only");
    FailureOr<Block> block = blockOf(op, b, operandShardings[0], axes,
                                     logitsType.getDimSize(last), symbols);
    if (failed(block))
      return failure();
    Location loc = op->getLoc();
    Value logits = operands[0], labels = operands[1];
    auto lastAxis = b.getDenseI64ArrayAttr({last});
    auto sumRows = [&](Value v) {
      return ReduceSumOp::create(b, loc, v, lastAxis, b.getBoolAttr(true));
    };
    // The row max and the sum of exponentials over every rank's block.
    Value max = block->allReduce(
        ReduceMaxOp::create(b, loc, logits, lastAxis, b.getBoolAttr(true)),
        shard::ReductionKind::Max);
    Value exp = ExpOp::create(b, loc, SubOp::create(b, loc, logits, max));
    Value sum = block->allReduce(sumRows(exp), shard::ReductionKind::Sum);
    // The one-hot of the labels within the block (none where another rank
    // holds the label, or it is ignored).
    auto [shifted, in, safe] = block->local(labels);
    (void)in;
    (void)safe;
    Type i64 = cast<RankedTensorType>(labels.getType()).getElementType();
    SmallVector<APInt> iota;
    for (int64_t i = 0; i < block->size; ++i)
      iota.push_back(APInt(64, uint64_t(i)));
    Value columns = ConstantOp::create(
        b, loc, DenseElementsAttr::get(tensorOf({block->size}, i64), iota));
    Value hit = castTo(
        b, loc, EqualOp::create(b, loc, columns, withUnitDim(b, loc, shifted)),
        f32);
    Value kept =
        castTo(b, loc,
               NotOp::create(
                   b, loc,
                   EqualOp::create(
                       b, loc, labels,
                       scalar(b, loc, i64, ce.getIgnoreIndexAttr().getInt()))),
               f32);
    Value result;
    if constexpr (kGrad) {
      Value softmax = DivOp::create(b, loc, exp, sum);
      Value scale = MulOp::create(b, loc, withUnitDim(b, loc, operands[2]),
                                  withUnitDim(b, loc, kept));
      result =
          MulOp::create(b, loc, SubOp::create(b, loc, softmax, hit), scale);
    } else {
      Value target =
          block->allReduce(sumRows(MulOp::create(b, loc, logits, hit)),
                           shard::ReductionKind::Sum);
      Value lse = AddOp::create(b, loc, LogOp::create(b, loc, sum), max);
      Value loss = ReshapeOp::create(b, loc, ce.getType(),
                                     SubOp::create(b, loc, lse, target));
      result = MulOp::create(b, loc, loss, kept);
    }
    map.map(op->getResult(0), result);
    return success();
  }
};

/// A constant: a splat splits into the same splat of the shard's shape
/// (the embedding gradient's zero table); any other stays whole.
struct ConstantSharding : public GraphSharding<ConstantSharding, ConstantOp> {
  LoopSpace space(Operation *op) const {
    LoopSpace s;
    auto c = cast<ConstantOp>(op);
    bool splat = isa<SplatElementsAttr>(c.getValue());
    SmallVector<int64_t> loops;
    for (int64_t d = 0; d < rankOf(c.getResult()); ++d)
      loops.push_back(s.add(utils::IteratorType::parallel, !splat));
    s.map(op->getContext(), loops);
    return s.finish(op->getContext());
  }

  LogicalResult partition(Operation *op, ArrayRef<Value> operands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings,
                          IRMapping &map, SymbolTableCollection &symbols,
                          OpBuilder &b) const {
    auto c = cast<ConstantOp>(op);
    auto splat = dyn_cast<SplatElementsAttr>(c.getValue());
    const shard::Sharding &s = resultShardings[0];
    if (!splat || !s || !s.getGridAttr())
      return partitionWithSums(op, space(op), operands, operandShardings,
                               resultShardings, map, symbols, b);
    shard::GridOp grid = shard::getGridOrNull(op, s.getGridAttr(), symbols);
    auto type = cast<RankedTensorType>(c.getType());
    if (!grid)
      return op->emitOpError("has no grid");
    auto local = cast<RankedTensorType>(shard::shardType(type, grid, s));
    map.map(c.getResult(),
            ConstantOp::create(b, op->getLoc(),
                               SplatElementsAttr::get(
                                   local, splat.getSplatValue<Attribute>())));
    return success();
  }
};

} // namespace

void attachVocabParallelModels(MLIRContext *ctx) {
  ctx->getOrLoadDialect<arith::ArithDialect>();
  ctx->getOrLoadDialect<tensor::TensorDialect>();
  ConstantOp::attachInterface<ConstantSharding>(*ctx);
  GatherOp::attachInterface<GatherSharding>(*ctx);
  ScatterNDOp::attachInterface<ScatterSharding>(*ctx);
  SoftmaxCrossEntropyOp::attachInterface<
      CrossEntropySharding<SoftmaxCrossEntropyOp>>(*ctx);
  SoftmaxCrossEntropyGradOp::attachInterface<
      CrossEntropySharding<SoftmaxCrossEntropyGradOp>>(*ctx);
}

} // namespace lamina::ir::graph
