//===- Partition.cpp - dist-partition -------------------------------------===//
//
// Maps the chain's modules to pipeline ranks with the schedule library's
// placements (lib/Schedule/Placement.cpp), which code generation uses too.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Dist/Transforms/Passes.h"
#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Schedule/Placement.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace lamina::ir::dist {
#define GEN_PASS_DEF_DISTPARTITION
#include "lamina/Dialect/Dist/Transforms/Passes.h.inc"
} // namespace lamina::ir::dist

using namespace mlir;
using namespace lamina;
using namespace lamina::ir::dist;

namespace {
struct DistPartition : ir::dist::impl::DistPartitionBase<DistPartition> {
  using Base::Base;

  void runOnOperation() override {
    auto func = getOperation().lookupSymbol<func::FuncOp>(functionName);
    // After dist-outline-modules: the outlined modules, on the module op,
    // which dist-schedule reads (the one placement of the program).
    if (!func && getOperation()->hasAttr(DistDialect::kNumModulesAttr))
      return placeOutlined();
    if (!func) {
      mlir::emitError(getOperation().getLoc())
          << "dist-partition: no function @" << functionName;
      return signalPassFailure();
    }
    auto chain = func->getAttrOfType<ArrayAttr>(DistDialect::kChainAttr);
    if (!chain) {
      mlir::emitError(func.getLoc())
          << "dist-partition: @" << functionName
          << " has no 'dist.chain'; run dist-discover-modules "
             "first";
      return signalPassFailure();
    }
    int64_t numRanks = pp;
    if (numRanks < 1) {
      mlir::emitError(func.getLoc())
          << "dist-partition: --pp=" << numRanks << " must be at least 1";
      return signalPassFailure();
    }
    std::optional<PlacementKind> kind = symbolizePlacementKind(placement);
    if (!kind) {
      mlir::emitError(func.getLoc())
          << "dist-partition: unknown --placement='" << placement
          << "'; expected contiguous, modular or balanced";
      return signalPassFailure();
    }
    FailureOr<SmallVector<int64_t>> ranks = place(func, chain, *kind);
    if (failed(ranks))
      return signalPassFailure();
    func->setAttr(DistDialect::kPlacementAttr,
                  PlacementAttr::get(&getContext(), numRanks, *kind, *ranks));
  }

  void placeOutlined() {
    ModuleOp module = getOperation();
    int64_t numModules =
        module->getAttrOfType<IntegerAttr>(DistDialect::kNumModulesAttr).getInt();
    std::optional<PlacementKind> kind = symbolizePlacementKind(placement);
    if (!kind) {
      module.emitError() << "dist-partition: unknown --placement='"
                         << placement
                         << "'; expected contiguous, modular or balanced";
      return signalPassFailure();
    }
    // More ranks than modules is the schedule's to refuse (it names the
    // schedule); the placements leave the last ranks empty.
    if (pp < 1) {
      module.emitError() << "dist-partition: pp=" << int64_t(pp)
                         << " must be at least 1";
      return signalPassFailure();
    }
    int ranks = static_cast<int>(pp), count = static_cast<int>(numModules);
    schedule::Expected<schedule::Placement> result =
        schedule::Status::error("no placement");
    if (*kind == PlacementKind::Balanced) {
      // Each module's forward and backward FLOPs.
      std::vector<double> cost(count, 0.0);
      for (auto f : module.getOps<func::FuncOp>()) {
        auto outlined =
            f->getAttrOfType<OutlinedAttr>(DistDialect::kOutlinedAttr);
        if (!outlined)
          continue;
        int64_t k = outlined.getModule();
        f.walk([&](ir::graph::CostOpInterface op) {
          cost[k] += static_cast<double>(op.getFlops());
        });
      }
      result = schedule::placeBalanced(cost, ranks);
    } else {
      result = *kind == PlacementKind::Modular
                   ? schedule::placeModular(count, ranks)
                   : schedule::placeContiguous(count, ranks);
    }
    if (!result.ok()) {
      module.emitError() << "dist-partition: " << result.error();
      return signalPassFailure();
    }
    SmallVector<int64_t> rankOf(result->rankOf.begin(), result->rankOf.end());
    module->setAttr(DistDialect::kPlacementAttr,
                    PlacementAttr::get(&getContext(), pp, *kind, rankOf));
  }

  FailureOr<SmallVector<int64_t>> place(func::FuncOp func, ArrayAttr chain,
                                        PlacementKind kind) {
    int numModules = static_cast<int>(chain.size());
    int64_t numRanks = pp;
    int ranks = static_cast<int>(numRanks);
    SmallVector<int> layers;
    for (auto [m, entry] : llvm::enumerate(chain))
      if (cast<ModuleAttr>(entry).getKind() == ModuleKind::Layer)
        layers.push_back(static_cast<int>(m));
    if (layers.empty())
      for (int m = 0; m < numModules; ++m)
        layers.push_back(m);
    if (kind != PlacementKind::Balanced &&
        static_cast<int64_t>(layers.size()) < numRanks)
      mlir::emitWarning(func.getLoc())
          << "dist-partition: " << layers.size()
          << " layers on --pp=" << numRanks << " ranks leave "
          << numRanks - static_cast<int64_t>(layers.size())
          << " ranks without a layer";

    schedule::Expected<schedule::Placement> result =
        schedule::Status::error("no placement");
    if (kind == PlacementKind::Balanced) {
      // Forward FLOPs per module; a heavy embedding or head counts like the
      // layers it displaces.
      std::vector<double> cost(numModules, 0.0);
      func.walk([&](ir::graph::CostOpInterface op) {
        if (auto m = op->getAttrOfType<IntegerAttr>(DistDialect::kModuleAttr))
          cost[m.getInt()] += static_cast<double>(op.getFlops());
      });
      result = schedule::placeBalanced(cost, ranks);
      if (!result.ok()) {
        mlir::emitError(func.getLoc()) << "dist-partition: " << result.error();
        return failure();
      }
      return SmallVector<int64_t>(result->rankOf.begin(), result->rankOf.end());
    }
    int numLayers = static_cast<int>(layers.size());
    result = kind == PlacementKind::Modular
                 ? schedule::placeModular(numLayers, ranks)
                 : schedule::placeContiguous(numLayers, ranks);
    if (!result.ok()) {
      mlir::emitError(func.getLoc()) << "dist-partition: " << result.error();
      return failure();
    }
    // The embedding rides with the first layer, the head with the last.
    SmallVector<int64_t> rankOf(numModules, 0);
    for (auto [l, m] : llvm::enumerate(layers))
      rankOf[m] = result->rankOf[l];
    for (int m = 0; m < numModules; ++m) {
      auto k = cast<ModuleAttr>(chain[m]).getKind();
      if (k == ModuleKind::Embedding)
        rankOf[m] = result->rankOf.front();
      else if (k == ModuleKind::Head)
        rankOf[m] = result->rankOf.back();
    }
    return rankOf;
  }
};
} // namespace
