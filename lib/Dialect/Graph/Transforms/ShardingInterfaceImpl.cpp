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

#include "lamina/Dialect/Graph/IR/GraphDialect.h"
#include "lamina/Dialect/Graph/IR/GraphOps.h"

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterface.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterfaceImpl.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/IRMapping.h"

using namespace mlir;
namespace shard = mlir::shard;

namespace lamina::graph {
namespace {

int64_t rankOf(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t ? t.getRank() : -1;
}

/// `op` cloned on the shards; where a summed loop is split, each shard's
/// result is a partial sum: all-reduced over the grid axes that split it.
LogicalResult
partitionWithSums(Operation *op, ArrayRef<utils::IteratorType> iterators,
                  ArrayRef<AffineMap> maps, ArrayRef<Value> partitionedOperands,
                  ArrayRef<shard::Sharding> operandShardings,
                  ArrayRef<shard::Sharding> resultShardings,
                  IRMapping &partitionMap, SymbolTableCollection &symbolTable,
                  OpBuilder &builder) {
  // Upstream shards only through projected permutations: a kept size-1
  // dim (keepdims) or a size-1 broadcast reads a constant index, which
  // propagation reports and partition must not size.
  if (!llvm::all_of(maps,
                    [](AffineMap m) { return m.isProjectedPermutation(); }))
    return op->emitOpError("cannot be partitioned: a size-1 dimension "
                           "(keepdims, or a broadcast) has no sharding rule");
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
          operandShardings, resultShardings, iterators, maps);
  shard::partitionTriviallyShardableOperation(
      *op, partitionedOperands, operandShardings, resultShardings, partitionMap,
      symbolTable, builder);
  if (!shard::isAtLeastOneReductionIteratorSharded(iterators, assignment))
    return success();
  SmallVector<shard::GridAxis> axes =
      shard::getReductionGridAxes(iterators, assignment);
  Value partial = partitionMap.lookup(op->getResult(0));
  Value sum = shard::AllReduceOp::create(builder, op->getLoc(), partial,
                                         resultShardings[0].getGrid(), axes,
                                         shard::ReductionKind::Sum);
  partitionMap.map(op->getResult(0), sum);
  return success();
}

/// What every model shares: a sum per reduction loop, and partition
/// through partitionWithSums with the model's loops and maps.
template <typename Model, typename Op>
struct GraphSharding
    : public shard::ShardingInterface::ExternalModel<Model, Op> {
  SmallVector<shard::ReductionKind>
  getReductionLoopIteratorKinds(Operation *op) const {
    SmallVector<utils::IteratorType> loops = model().getLoopIteratorTypes(op);
    return SmallVector<shard::ReductionKind>(
        llvm::count(loops, utils::IteratorType::reduction),
        shard::ReductionKind::Sum);
  }

  LogicalResult partition(Operation *op, ArrayRef<Value> partitionedOperands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings,
                          IRMapping &partitionMap,
                          SymbolTableCollection &symbolTable,
                          OpBuilder &builder) const {
    return partitionWithSums(op, model().getLoopIteratorTypes(op),
                             model().getIndexingMaps(op), partitionedOperands,
                             operandShardings, resultShardings, partitionMap,
                             symbolTable, builder);
  }

private:
  const Model &model() const { return static_cast<const Model &>(*this); }
};

/// `rank` parallel loops (none for an unranked value).
SmallVector<utils::IteratorType> parallelLoops(int64_t rank) {
  if (rank < 0)
    return {};
  return SmallVector<utils::IteratorType>(rank, utils::IteratorType::parallel);
}

/// The result's dims, each operand's aligned right (numpy broadcasting); a
/// dim of size 1 against a larger result dim reads element 0.
template <typename Op>
struct BroadcastElementwise
    : public GraphSharding<BroadcastElementwise<Op>, Op> {
  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *op) const {
    return parallelLoops(rankOf(op->getResult(0)));
  }

  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    MLIRContext *ctx = op->getContext();
    auto result = dyn_cast<RankedTensorType>(op->getResult(0).getType());
    if (!result)
      return {};
    int64_t rank = result.getRank();
    SmallVector<AffineMap> maps;
    for (Value operand : op->getOperands()) {
      auto type = dyn_cast<RankedTensorType>(operand.getType());
      if (!type || type.getRank() > rank)
        return {};
      SmallVector<AffineExpr> exprs;
      int64_t lead = rank - type.getRank();
      for (int64_t i = 0; i < type.getRank(); ++i)
        exprs.push_back(type.getDimSize(i) == 1 &&
                                result.getDimSize(lead + i) != 1
                            ? getAffineConstantExpr(0, ctx)
                            : getAffineDimExpr(lead + i, ctx));
      maps.push_back(AffineMap::get(rank, 0, exprs, ctx));
    }
    maps.push_back(AffineMap::getMultiDimIdentityMap(rank, ctx));
    return maps;
  }
};

/// `[..., m, k] x [..., k, n] -> [..., m, n]`: loops (batch..., m, n, k),
/// k a sum. A split k leaves each shard a partial sum: all-reduced.
struct MatMulSharding : public GraphSharding<MatMulSharding, MatMulOp> {
  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *op) const {
    int64_t rank = rankOf(op->getResult(0));
    if (rank < 2)
      return {};
    SmallVector<utils::IteratorType> types(rank, utils::IteratorType::parallel);
    types.push_back(utils::IteratorType::reduction);
    return types;
  }

  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    MLIRContext *ctx = op->getContext();
    int64_t rank = rankOf(op->getResult(0));
    if (rank < 2)
      return {};
    int64_t loops = rank + 1, m = rank - 2, n = rank - 1, k = rank;
    auto d = [&](int64_t i) { return getAffineDimExpr(i, ctx); };
    auto operandMap = [&](Value v, int64_t row, int64_t col) {
      auto type = cast<RankedTensorType>(v.getType());
      SmallVector<AffineExpr> exprs;
      int64_t lead = m - (type.getRank() - 2);
      for (int64_t i = 0; i + 2 < type.getRank(); ++i)
        exprs.push_back(
            type.getDimSize(i) == 1 &&
                    cast<RankedTensorType>(op->getResult(0).getType())
                            .getDimSize(lead + i) != 1
                ? getAffineConstantExpr(0, ctx)
                : d(lead + i));
      exprs.push_back(d(row));
      exprs.push_back(d(col));
      return AffineMap::get(loops, 0, exprs, ctx);
    };
    SmallVector<AffineExpr> out;
    for (int64_t i = 0; i < rank; ++i)
      out.push_back(d(i));
    return {operandMap(op->getOperand(0), m, k),
            operandMap(op->getOperand(1), k, n),
            AffineMap::get(loops, 0, out, ctx)};
  }
};

/// Result dim i is input dim perm[i]: one parallel loop per input dim.
struct TransposeSharding
    : public GraphSharding<TransposeSharding, TransposeOp> {
  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *op) const {
    return parallelLoops(rankOf(op->getOperand(0)));
  }

  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    MLIRContext *ctx = op->getContext();
    int64_t rank = rankOf(op->getOperand(0));
    if (rank < 0)
      return {};
    SmallVector<AffineExpr> out;
    for (int64_t p : cast<TransposeOp>(op).getPerm())
      out.push_back(getAffineDimExpr(p, ctx));
    return {AffineMap::getMultiDimIdentityMap(rank, ctx),
            AffineMap::get(rank, 0, out, ctx)};
  }
};

/// One loop per input dim, the reduced ones sums; a split reduced dim
/// leaves partial sums, all-reduced.
struct ReduceSumSharding
    : public GraphSharding<ReduceSumSharding, ReduceSumOp> {
  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *op) const {
    int64_t rank = rankOf(op->getOperand(0));
    if (rank < 0)
      return {};
    SmallVector<utils::IteratorType> types(rank, utils::IteratorType::parallel);
    for (int64_t a : cast<ReduceSumOp>(op).getAxes())
      types[size_t(a)] = utils::IteratorType::reduction;
    return types;
  }

  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    MLIRContext *ctx = op->getContext();
    auto reduce = cast<ReduceSumOp>(op);
    int64_t rank = rankOf(op->getOperand(0));
    if (rank < 0)
      return {};
    SmallVector<AffineExpr> out;
    for (int64_t i = 0; i < rank; ++i) {
      bool reduced = llvm::is_contained(reduce.getAxes(), i);
      if (!reduced)
        out.push_back(getAffineDimExpr(i, ctx));
      else if (reduce.getKeepdims())
        out.push_back(getAffineConstantExpr(0, ctx));
    }
    return {AffineMap::getMultiDimIdentityMap(rank, ctx),
            AffineMap::get(rank, 0, out, ctx)};
  }
};

template <typename... Ops> void attachElementwise(MLIRContext *ctx) {
  (Ops::template attachInterface<BroadcastElementwise<Ops>>(*ctx), ...);
}

} // namespace

void registerShardingInterfaceExternalModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, GraphDialect *) {
    ctx->getOrLoadDialect<shard::ShardDialect>();
    MatMulOp::attachInterface<MatMulSharding>(*ctx);
    TransposeOp::attachInterface<TransposeSharding>(*ctx);
    ReduceSumOp::attachInterface<ReduceSumSharding>(*ctx);
    attachElementwise<AddOp, SubOp, MulOp, DivOp, GeluOp, GeluDerivativeOp>(
        ctx);
  });
}

} // namespace lamina::graph
