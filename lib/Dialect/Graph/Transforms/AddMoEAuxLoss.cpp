//===- AddMoEAuxLoss.cpp - the routers' load-balancing loss ---------------===//
//
// Mixtral's load_balancing_loss_func over every layer's router, added to
// the training loss with a coefficient (lamina compile --moe-aux-loss):
//
//   aux = E * sum_{j, e} f[j, e] * P[e],
//   f[j, e] = mean over the routed tokens of all layers of [pick j is e],
//   P[e]    = mean over the same tokens of the router probability of e.
//
// The picks carry no gradient; the probabilities do.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Graph/IR/GraphDialect.h"
#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "llvm/Support/FormatVariadic.h"

namespace lamina::ir::graph {
#define GEN_PASS_DEF_GRAPHADDMOEAUXLOSS
#include "lamina/Dialect/Graph/Transforms/Passes.h.inc"
} // namespace lamina::ir::graph

using namespace mlir;
using namespace lamina::ir::graph;

namespace {

Value constant(ImplicitLocOpBuilder &b, RankedTensorType type,
               Attribute value) {
  return ConstantOp::create(
      b, cast<ElementsAttr>(DenseElementsAttr::get(type, value)));
}

struct GraphAddMoEAuxLoss
    : lamina::ir::graph::impl::GraphAddMoEAuxLossBase<GraphAddMoEAuxLoss> {
  using GraphAddMoEAuxLossBase::GraphAddMoEAuxLossBase;

  void runOnOperation() override {
    func::FuncOp f = getOperation();
    if (coef == 0.0 || !isEntryFunction(f))
      return;
    // Only read here: graph-add-loss wrote it on the module.
    TrainAttr train = trainAttrOf(f->getParentOp());
    if (!train || !f.getBody().hasOneBlock()) {
      f.emitError("graph-add-moe-aux-loss: needs a one-block entry function "
                  "and its loss (run graph-add-loss first)");
      return signalPassFailure();
    }
    // The routers: top-k picks that a graph.moe reads, on [T, E] probs.
    SmallVector<TopKOp> routers;
    f.walk([&](TopKOp topk) {
      if (llvm::any_of(topk.getIndices().getUsers(),
                       [](Operation *u) { return isa<MoEOp>(u); }))
        routers.push_back(topk);
    });
    if (routers.empty()) {
      f.emitError("--moe-aux-loss: the model has no mixture-of-experts "
                  "router (a top-k whose picks a graph.moe reads)");
      return signalPassFailure();
    }
    RankedTensorType first = routers.front().getInput().getType();
    for (TopKOp r : routers)
      if (r.getInput().getType().getRank() != 2 ||
          r.getInput().getType() != first ||
          r.getK() != routers.front().getK()) {
        r.emitError("--moe-aux-loss: the routers differ (")
            << r.getInput().getType() << ", k = " << r.getK() << " against "
            << first << ", k = " << routers.front().getK()
            << "); each must pick k of the same experts for the same tokens";
        return signalPassFailure();
      }
    auto ret = cast<func::ReturnOp>(f.getBody().front().getTerminator());
    auto names = f->getAttrOfType<ArrayAttr>(kOutputNamesAttr);
    std::optional<unsigned> lossIndex;
    for (unsigned i = 0; names && i < names.size(); ++i)
      if (cast<StringAttr>(names[i]).getValue() == train.getOutput())
        lossIndex = i;
    if (!lossIndex) {
      f.emitError("graph-add-moe-aux-loss: no output '")
          << train.getOutput() << "'";
      return signalPassFailure();
    }
    ImplicitLocOpBuilder b(
        NameLoc::get(StringAttr::get(&getContext(), "moe_aux_loss")), ret);
    Type element = first.getElementType();
    int64_t tokens = first.getDimSize(0), experts = first.getDimSize(1),
            k = routers.front().getK();
    auto scalarType = RankedTensorType::get({}, element);
    SmallVector<int64_t> iota(experts);
    for (int64_t e = 0; e < experts; ++e)
      iota[e] = e;
    Value positions = ConstantOp::create(
        b, cast<ElementsAttr>(DenseElementsAttr::get(
               RankedTensorType::get({experts}, b.getI64Type()),
               ArrayRef<int64_t>(iota))));
    Value one = constant(b, scalarType, b.getFloatAttr(element, 1.0));
    Value zero = constant(b, scalarType, b.getFloatAttr(element, 0.0));
    // Sums over every router's tokens: picks per (slot, expert), and probs.
    Value picks, probs;
    for (TopKOp r : routers) {
      Value idx = ReshapeOp::create(
          b, RankedTensorType::get({tokens, k, 1}, b.getI64Type()),
          r.getIndices());
      Value hit =
          SelectOp::create(b, EqualOp::create(b, idx, positions), one, zero);
      Value p = ReduceSumOp::create(b, hit, b.getDenseI64ArrayAttr(0),
                                    b.getBoolAttr(false));
      Value q = ReduceSumOp::create(b, r.getInput(), b.getDenseI64ArrayAttr(0),
                                    b.getBoolAttr(false));
      picks = picks ? Value(AddOp::create(b, picks, p)) : p;
      probs = probs ? Value(AddOp::create(b, probs, q)) : q;
    }
    // E * sum f P, with f and P means over routers * tokens rows.
    double rows = double(routers.size()) * double(tokens);
    Value prod = MulOp::create(b, picks, probs); // [k, E]
    Value sum = ReduceSumOp::create(b, prod, b.getDenseI64ArrayAttr({0, 1}),
                                    b.getBoolAttr(false));
    double scale = coef * double(experts) / (rows * rows);
    Value aux = MulOp::create(
        b, sum, constant(b, scalarType, b.getFloatAttr(element, scale)));
    Value loss = ret.getOperand(*lossIndex);
    if (cast<RankedTensorType>(loss.getType()) != scalarType)
      aux = CastOp::create(b, loss.getType(), aux);
    ret.setOperand(*lossIndex, AddOp::create(b, loss, aux));
    f.emitRemark("--moe-aux-loss ")
        << llvm::formatv("{0}", double(coef)).str()
        << ": the routers' load-balancing loss of " << routers.size()
        << " layer(s) (Mixtral's, over " << experts << " experts, top-" << k
        << ") added to the training loss";
  }
};

} // namespace
