//===- CollectiveCalls.cpp - a module function's tensor-parallel calls ----===//
//
// What upstream's shard-partition leaves in a tensor-parallel module
// function, as calls of include/lamina/Runtime/TensorParallel.h: the
// collectives on the function's group, and its rank in the group (read by
// the vocabulary-parallel ops as
// `tensor.from_elements(arith.index_cast(shard.process_linear_index))`,
// one call writing the tensor; the scalar ops have no buffer).
//
//===----------------------------------------------------------------------===//

#include "lamina/Conversion/GraphToRt/GraphToRt.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace lamina;

namespace {
std::optional<StringRef> reduceEnumerator(shard::ReductionKind kind) {
  switch (kind) {
  case shard::ReductionKind::Sum:
    return StringRef("lamina::rt::GroupReduce::Sum");
  case shard::ReductionKind::Max:
    return StringRef("lamina::rt::GroupReduce::Max");
  default:
    return std::nullopt;
  }
}

/// The group's rank as an index: process_linear_index, through index
/// casts.
bool isGroupRankIndex(Value v) {
  while (auto cast = v.getDefiningOp<arith::IndexCastOp>())
    v = cast.getIn();
  return v.getDefiningOp<shard::ProcessLinearIndexOp>() != nullptr;
}
} // namespace

bool lamina::isGroupRankScalar(Operation *op) {
  if (!isa<shard::ProcessLinearIndexOp, arith::IndexCastOp>(op) ||
      op->getNumResults() != 1 || !isGroupRankIndex(op->getResult(0)))
    return false;
  return llvm::all_of(op->getUsers(), [](Operation *user) {
    return isGroupRankScalar(user) || isa<tensor::FromElementsOp>(user);
  });
}

std::optional<KernelCall> lamina::getCollectiveCall(Operation *op, Builder &b) {
  auto call = [&](StringRef callee, ArrayRef<Attribute> args) {
    return KernelCall{("lamina::rt::tp::" + callee).str(),
                      SmallVector<Attribute>(args.begin(), args.end())};
  };
  // Buffer 0 is the operand, buffer 1 the result.
  Attribute in = b.getIndexAttr(0), out = b.getIndexAttr(1);
  auto enumerator = [&](shard::ReductionKind kind) -> Attribute {
    std::optional<StringRef> e = reduceEnumerator(kind);
    return e ? b.getStringAttr(*e) : Attribute();
  };
  using Result = std::optional<KernelCall>;
  return llvm::TypeSwitch<Operation *, Result>(op)
      .Case([&](shard::AllReduceOp o) -> Result {
        Attribute kind = enumerator(o.getReduction());
        if (!kind)
          return std::nullopt;
        return call("allReduce", {kind, in, out});
      })
      .Case([&](shard::AllGatherOp o) -> Result {
        return call(
            "allGather",
            {in, b.getI64IntegerAttr(o.getGatherAxis().getSExtValue()), out});
      })
      .Case([&](shard::ReduceScatterOp o) -> Result {
        Attribute kind = enumerator(o.getReduction());
        if (!kind || o.getReduction() != shard::ReductionKind::Sum)
          return std::nullopt;
        return call("reduceScatter",
                    {kind, in,
                     b.getI64IntegerAttr(o.getScatterAxis().getSExtValue()),
                     out});
      })
      .Case([&](shard::AllSliceOp o) -> Result {
        return call(
            "allSlice",
            {in, b.getI64IntegerAttr(o.getSliceAxis().getSExtValue()), out});
      })
      .Case([&](tensor::FromElementsOp o) -> Result {
        // The result is the call's only buffer.
        if (o.getElements().size() != 1 ||
            !isGroupRankIndex(o.getElements()[0]))
          return std::nullopt;
        return call("groupRank", {b.getIndexAttr(0)});
      })
      .Default([](Operation *) { return Result(); });
}
