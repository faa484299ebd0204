//===- ShardingModels.h - what the graph ops' sharding models share -*- C++
//-*-===//
//
// Internal to lib/Dialect/Graph/Transforms: the loop-space description of
// an op that upstream's ShardingInterface reads, and the partition that
// clones an op on its shards and all-reduces its partial sums. The models
// are in ShardingInterfaceImpl.cpp (layout, elementwise, GEMMs, norms,
// attention) and VocabParallel.cpp (the embedding, its gradient and the
// cross-entropy over a split vocabulary).
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_DIALECT_GRAPH_TRANSFORMS_SHARDINGMODELS_H
#define LAMINA_LIB_DIALECT_GRAPH_TRANSFORMS_SHARDINGMODELS_H

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterface.h"
#include "mlir/Dialect/Shard/Interfaces/ShardingInterfaceImpl.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SmallBitVector.h"

#include <tuple>

namespace lamina::ir::graph::sharding {

using namespace mlir;

inline int64_t rankOf(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t ? t.getRank() : -1;
}

inline SmallVector<int64_t> sizesOf(Value v) {
  return SmallVector<int64_t>(cast<RankedTensorType>(v.getType()).getShape());
}

/// An op's iteration space in upstream's terms: one iterator per loop, one
/// map per operand then per result, and the loops a split must not reach
/// (the op has no local form for them: a normalized axis, a sliced dim,
/// attention's keys). A size-1 dim that broadcasts gets a loop of its own,
/// never split, so every map stays a projected permutation, which is all
/// upstream's propagation reads. Not `ruled` (never finished): no rule for
/// these shapes.
struct LoopSpace {
  SmallVector<utils::IteratorType> iterators;
  SmallVector<AffineMap> maps;
  llvm::SmallBitVector whole;
  bool ruled = false;

  int64_t add(utils::IteratorType type = utils::IteratorType::parallel,
              bool keepWhole = false) {
    iterators.push_back(type);
    whole.push_back(keepWhole);
    return int64_t(iterators.size()) - 1;
  }
  /// Maps built from loop numbers per dim (added after the loops).
  void map(MLIRContext *ctx, ArrayRef<int64_t> loops) {
    SmallVector<AffineExpr> exprs;
    for (int64_t l : loops)
      exprs.push_back(getAffineDimExpr(unsigned(l), ctx));
    pending.push_back(SmallVector<AffineExpr>(exprs));
  }
  /// Fixes the dim count of every map once all loops exist.
  LoopSpace &finish(MLIRContext *ctx) {
    for (auto &exprs : pending)
      maps.push_back(AffineMap::get(unsigned(iterators.size()), 0, exprs, ctx));
    pending.clear();
    ruled = true;
    return *this;
  }

private:
  SmallVector<SmallVector<AffineExpr>> pending;
};

/// The loops of a value aligned right against `loops` (numpy
/// broadcasting): a size-1 dim against a larger one gets a new whole loop.
SmallVector<int64_t> broadcastLoops(LoopSpace &space, Value v,
                                    ArrayRef<int64_t> loops,
                                    ArrayRef<int64_t> sizes);

/// Every dim of every operand and result a whole loop of its own, none
/// shared: no split propagates through the op, and one that reaches it is
/// refused naming it rather than mis-computed (ops with no rule).
LoopSpace wholeSpace(Operation *op);

/// `op` cloned on the shards; where a summed loop is split, each shard's
/// result is a partial sum: all-reduced over the grid axes that split it.
LogicalResult partitionWithSums(Operation *op, const LoopSpace &space,
                                ArrayRef<Value> partitionedOperands,
                                ArrayRef<shard::Sharding> operandShardings,
                                ArrayRef<shard::Sharding> resultShardings,
                                IRMapping &partitionMap,
                                SymbolTableCollection &symbolTable,
                                OpBuilder &builder);

/// The grid axes splitting dim `dim` of `s` (none: whole).
ArrayRef<shard::GridAxis> axesOf(const shard::Sharding &s, int64_t dim);
/// Only one dim split, vocabDims[i] of shardings[i] (-1: none): every other
/// dim of every value whole.
bool onlyVocabSplit(ArrayRef<shard::Sharding> shardings,
                    ArrayRef<int64_t> vocabDims);
RankedTensorType tensorOf(ArrayRef<int64_t> shape, Type element);
/// A 0-d integer constant of type `element`.
Value scalar(OpBuilder &b, Location loc, Type element, int64_t value);

/// A dim split in equal blocks over one group of ranks (a vocabulary, the
/// experts): the grid, and the block's index arithmetic.
struct Block {
  OpBuilder &b;
  Location loc;
  shard::GridOp grid;
  SmallVector<shard::GridAxis> axes;
  int64_t size; // rows (or logits, experts) per rank

  /// `ids - first row`, whether each is in this rank's block, and the
  /// shifted ids with those outside replaced by 0 (a row every rank has).
  std::tuple<Value, Value, Value> local(Value ids);
  Value allReduce(Value v, shard::ReductionKind kind);
};

/// The grid and block of a dim of `vocab` entries split over `axes`;
/// failure (an error on `op`) when the grid is not a group of ranks that
/// divides it.
FailureOr<Block> blockOf(Operation *op, OpBuilder &b, const shard::Sharding &s,
                         ArrayRef<shard::GridAxis> axes, int64_t vocab,
                         SymbolTableCollection &symbols);

/// What every model shares: its LoopSpace (Model::space) read as upstream's
/// loops and maps, a sum per reduction loop, and partition through
/// partitionWithSums; Model::localize fixes the attributes of the clone
/// that name global sizes.
template <typename Model, typename Op>
struct GraphSharding
    : public shard::ShardingInterface::ExternalModel<Model, Op> {
  SmallVector<utils::IteratorType> getLoopIteratorTypes(Operation *op) const {
    return model().space(op).iterators;
  }
  SmallVector<AffineMap> getIndexingMaps(Operation *op) const {
    return model().space(op).maps;
  }
  /// Upstream's option from the operands' and results' shardings, less any
  /// split of a whole loop: the op then reads that operand whole, and
  /// partition reshards it (an all-gather) instead of failing.
  FailureOr<shard::ShardingOption>
  getShardingOption(Operation *op, ArrayRef<shard::Sharding> operandShardings,
                    ArrayRef<shard::Sharding> resultShardings) const {
    FailureOr<shard::ShardingOption> option =
        shard::detail::defaultGetShardingOption(op, operandShardings,
                                                resultShardings);
    if (failed(option))
      return failure();
    LoopSpace s = model().space(op);
    for (auto [loop, axes] : llvm::enumerate(option->shardingArray))
      if (loop < s.whole.size() && s.whole.test(unsigned(loop)))
        axes.clear();
    return option;
  }

  SmallVector<shard::ReductionKind>
  getReductionLoopIteratorKinds(Operation *op) const {
    SmallVector<utils::IteratorType> loops = getLoopIteratorTypes(op);
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
    if (failed(partitionWithSums(op, model().space(op), partitionedOperands,
                                 operandShardings, resultShardings,
                                 partitionMap, symbolTable, builder)))
      return failure();
    Value first = partitionMap.lookup(op->getResult(0));
    Operation *clone = first.getDefiningOp();
    if (auto sum = dyn_cast<shard::AllReduceOp>(clone))
      clone = sum.getInput().getDefiningOp();
    model().localize(clone);
    return success();
  }
  void localize(Operation *) const {}

private:
  const Model &model() const { return static_cast<const Model &>(*this); }
};

} // namespace lamina::ir::graph::sharding

namespace lamina::ir::graph {
/// The models of VocabParallel.cpp: the embedding, its gradient and the
/// cross-entropy over a vocabulary split across the group.
void attachVocabParallelModels(mlir::MLIRContext *ctx);
/// The models of ExpertSharding.cpp: a mixture-of-experts layer and its
/// gradient with the experts split over the group.
void attachExpertShardingModels(mlir::MLIRContext *ctx);
} // namespace lamina::ir::graph

#endif // LAMINA_LIB_DIALECT_GRAPH_TRANSFORMS_SHARDINGMODELS_H
