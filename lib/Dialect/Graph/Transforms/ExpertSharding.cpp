//===- ExpertSharding.cpp - a mixture-of-experts layer over a split group -===//
//
// graph.moe and graph.moe_grad with their experts split over the
// tensor-parallel group: every rank holds E/t experts whole (the experts'
// dim of gate_up and down in blocks, as the vocabulary-parallel embedding
// holds rows) and sees every token, as its group's ranks all do. Each runs
// its own experts over the picks that chose them: the picks are shifted
// into the rank's block, the others sent to no expert (index -1), so a
// rank's result is its experts' share of each token's sum, and one
// all-reduce adds the shares (vLLM's expert parallelism inside a
// tensor-parallel group; no all-to-all, since the tokens are already on
// every rank). The gradient: the input's and the routing weights' shares
// all-reduced the same way; each rank's experts' weight gradients are its
// own, in its block.
//
// The experts' loop is parallel, not a sum, to upstream's propagation: the
// results are whole once the partition has added the shares itself.
//
//===----------------------------------------------------------------------===//

#include "ShardingModels.h"

#include "lamina/Dialect/Graph/IR/GraphOps.h"

namespace lamina::ir::graph {
namespace {
using namespace sharding;

/// Loops (t, h, j, e, r2, r1): tokens, hidden, picks, experts, gate_up's
/// rows, down's columns; everything whole but the experts.
LoopSpace expertSpace(Operation *op, bool gradient) {
  LoopSpace s;
  MLIRContext *ctx = op->getContext();
  int64_t t = s.add(utils::IteratorType::parallel, true),
          h = s.add(utils::IteratorType::parallel, true),
          j = s.add(utils::IteratorType::parallel, true),
          e = s.add(utils::IteratorType::parallel),
          r2 = s.add(utils::IteratorType::parallel, true),
          r1 = s.add(utils::IteratorType::parallel, true);
  s.map(ctx, {t, h});     // input
  s.map(ctx, {t, j});     // indices
  s.map(ctx, {t, j});     // weights
  s.map(ctx, {e, r2, h}); // gate_up
  s.map(ctx, {e, h, r1}); // down
  if (gradient) {
    s.map(ctx, {t, h});     // grad_result
    s.map(ctx, {t, h});     // grad_input
    s.map(ctx, {t, j});     // grad_weights
    s.map(ctx, {e, r2, h}); // grad_gate_up
    s.map(ctx, {e, h, r1}); // grad_down
  } else {
    s.map(ctx, {t, h}); // result
  }
  return s.finish(ctx);
}

template <typename Op>
struct ExpertSharding : public GraphSharding<ExpertSharding<Op>, Op> {
  static constexpr bool kGradient = std::is_same_v<Op, MoEGradOp>;

  LoopSpace space(Operation *op) const {
    for (Value v : op->getOperands())
      if (rankOf(v) < 0)
        return LoopSpace();
    return expertSpace(op, kGradient);
  }

  LogicalResult partition(Operation *op, ArrayRef<Value> operands,
                          ArrayRef<shard::Sharding> operandShardings,
                          ArrayRef<shard::Sharding> resultShardings,
                          IRMapping &map, SymbolTableCollection &symbols,
                          OpBuilder &b) const {
    ArrayRef<shard::GridAxis> axes = axesOf(operandShardings[3], 0);
    if (axes.empty())
      return partitionWithSums(op, space(op), operands, operandShardings,
                               resultShardings, map, symbols, b);
    // Operand (and result) i split on dim 0 when it is the experts'.
    SmallVector<int64_t> operandDims = {-1, -1, -1, 0, 0};
    SmallVector<int64_t> resultDims = {-1};
    if (kGradient) {
      operandDims.push_back(-1);
      resultDims = {-1, -1, 0, 0};
    }
    if (!onlyVocabSplit(operandShardings, operandDims) ||
        !onlyVocabSplit(resultShardings, resultDims) ||
        axesOf(operandShardings[4], 0) != axes)
      return op->emitOpError("splits a mixture-of-experts layer on more than "
                             "its experts");
    auto gateUp = cast<RankedTensorType>(op->getOperand(3).getType());
    FailureOr<Block> block = blockOf(op, b, operandShardings[3], axes,
                                     gateUp.getDimSize(0), symbols);
    if (failed(block))
      return failure();
    Location loc = op->getLoc();
    // The picks of this rank's experts, shifted into its block; -1 (no
    // expert) for the others'.
    auto [shifted, in, safe] = block->local(operands[1]);
    (void)safe;
    auto idsType = cast<RankedTensorType>(operands[1].getType());
    Value none = BroadcastOp::create(
        b, loc, idsType, scalar(b, loc, idsType.getElementType(), -1));
    Value picks = SelectOp::create(b, loc, in, shifted, none);
    SmallVector<Value> args(operands.begin(), operands.end());
    args[1] = picks;
    SmallVector<Type> types;
    for (auto [i, r] : llvm::enumerate(op->getResults())) {
      auto type = cast<RankedTensorType>(r.getType());
      if (resultDims[i] < 0) {
        types.push_back(type);
        continue;
      }
      SmallVector<int64_t> shape(type.getShape());
      shape[0] = block->size;
      types.push_back(tensorOf(shape, type.getElementType()));
    }
    Operation *local = Op::create(b, loc, types, args, op->getAttrs());
    for (auto [i, r] : llvm::enumerate(op->getResults())) {
      Value share = local->getResult(unsigned(i));
      map.map(r, resultDims[i] < 0
                     ? block->allReduce(share, shard::ReductionKind::Sum)
                     : share);
    }
    return success();
  }
};

} // namespace

void attachExpertShardingModels(MLIRContext *ctx) {
  MoEOp::attachInterface<ExpertSharding<MoEOp>>(*ctx);
  MoEGradOp::attachInterface<ExpertSharding<MoEGradOp>>(*ctx);
}

} // namespace lamina::ir::graph
