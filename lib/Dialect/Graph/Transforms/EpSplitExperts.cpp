//===- EpSplitExperts.cpp - a layer's experts over the replicas ----------===//
//
// Expert parallelism (lamina compile --ep R): each graph.moe becomes the
// dispatch to the ranks holding the picked experts, an all-to-all, the
// rank's own experts over the rows it received, the all-to-all back and
// the weighted combine (GraphMoEOps.td). The expert weights become this
// rank's block of E / R experts (graph.ep_split). Done before autodiff:
// the backward's all-to-alls are the exchanges' gradients.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Graph/IR/GraphDialect.h"
#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <algorithm>

namespace lamina::ir::graph {
#define GEN_PASS_DEF_GRAPHEPSPLITEXPERTS
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace lamina::ir::graph

using namespace mlir;
using namespace lamina::ir::graph;

namespace {

/// A trainable argument of `f` that `moe` alone reads.
BlockArgument expertWeights(func::FuncOp f, MoEOp moe, Value v) {
  auto arg = dyn_cast<BlockArgument>(v);
  if (!arg || arg.getOwner() != &f.getBody().front())
    return {};
  auto kind = f.getArgAttrOfType<StringAttr>(arg.getArgNumber(), kKindAttr);
  if (!kind || kind.getValue() != kKindTrainable ||
      llvm::any_of(arg.getUsers(), [&](Operation *u) { return u != moe; }))
    return {};
  return arg;
}

struct GraphEpSplitExperts
    : lamina::ir::graph::impl::GraphEpSplitExpertsBase<GraphEpSplitExperts> {
  using GraphEpSplitExpertsBase::GraphEpSplitExpertsBase;

  void runOnOperation() override {
    if (ranks <= 1)
      return;
    func::FuncOp f = getOperation();
    SmallVector<MoEOp> layers;
    f.walk([&](MoEOp m) { layers.push_back(m); });
    // The model's forward: --ep on a model without experts is a mistake.
    if (layers.empty() && isEntryFunction(f)) {
      f.emitError("--ep ") << unsigned(ranks)
                           << ": the model has no mixture-of-experts layer "
                              "(an experts' loop Lamina recognises as "
                              "graph.moe) to split";
      return signalPassFailure();
    }
    for (MoEOp m : layers)
      if (failed(split(f, m)))
        return signalPassFailure();
    // The experts' blocks in the signature.
    f.setType(FunctionType::get(&getContext(),
                                f.getBody().front().getArgumentTypes(),
                                f.getFunctionType().getResults()));
  }

  LogicalResult split(func::FuncOp f, MoEOp moe) {
    const int64_t r = int64_t(ranks);
    auto gateUpType = cast<RankedTensorType>(moe.getGateUp().getType());
    auto downType = cast<RankedTensorType>(moe.getDown().getType());
    auto x = cast<RankedTensorType>(moe.getInput().getType());
    int64_t experts = gateUpType.getDimSize(0),
            k = cast<RankedTensorType>(moe.getIndices().getType())
                    .getDimSize(1);
    if (experts % r != 0)
      return moe.emitError("--ep ")
             << r << ": the " << experts
             << " experts of this mixture-of-experts layer do not split "
                "evenly over the ranks";
    BlockArgument gateUp = expertWeights(f, moe, moe.getGateUp()),
                  down = expertWeights(f, moe, moe.getDown());
    if (!gateUp || !down || gateUp == down)
      return moe.emitError("--ep: the experts' weights of this "
                           "mixture-of-experts layer must be trainable "
                           "initializers that only it reads");
    int64_t local = experts / r;
    int64_t capacity = x.getDimSize(0) * std::min(k, local);
    auto localType = [&](RankedTensorType t) {
      SmallVector<int64_t> shape(t.getShape());
      shape[0] = local;
      return RankedTensorType::get(shape, t.getElementType());
    };
    gateUp.setType(localType(gateUpType));
    down.setType(localType(downType));
    OpBuilder b(moe);
    for (BlockArgument a : {gateUp, down})
      f.setArgAttr(a.getArgNumber(), kEpSplitAttr, b.getI64IntegerAttr(r));

    Location loc = moe.getLoc();
    auto i64 = b.getI64Type();
    auto rowsType = RankedTensorType::get({r * capacity, x.getDimSize(1)},
                                          x.getElementType());
    auto countsType = RankedTensorType::get({r, local}, i64);
    auto dispatch =
        MoEDispatchOp::create(b, loc, rowsType, countsType, moe.getInput(),
                              moe.getIndices(), experts, r);
    auto there = MoEExchangeOp::create(
        b, loc, rowsType, countsType, dispatch.getRows(), dispatch.getCounts());
    auto idsType = RankedTensorType::get({r * capacity, 1}, i64);
    Value ids = MoERowExpertsOp::create(b, loc, idsType, there.getReceived());
    auto onesType =
        RankedTensorType::get({r * capacity, 1}, x.getElementType());
    Value ones = ConstantOp::create(
        b, loc,
        cast<ElementsAttr>(DenseElementsAttr::get(
            onesType, b.getFloatAttr(x.getElementType(), 1.0))));
    Value out = MoEOp::create(b, loc, rowsType, there.getResult(), ids, ones,
                              gateUp, down);
    auto back = MoEExchangeOp::create(b, loc, rowsType, countsType, out,
                                      there.getReceived());
    Value result =
        MoECombineOp::create(b, loc, moe.getType(), back.getResult(),
                             moe.getIndices(), moe.getWeights(), experts, r);
    moe.replaceAllUsesWith(result);
    moe.erase();
    emitRemark(loc) << "--ep " << r << ": " << local << " of the " << experts
                    << " experts on each rank; each token's rows go to the "
                       "ranks holding its experts and back (two all-to-alls "
                       "forward, two backward; buffers of "
                    << capacity << " rows per rank)";
    ++numSplit;
    return success();
  }
};

} // namespace
