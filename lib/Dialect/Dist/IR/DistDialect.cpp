//===- DistDialect.cpp - dist dialect -------------------------------------===//
//
// The dialect's attributes annotate graph functions; their structural rules
// (one module per op, no backward edge along the chain, placements that
// cover every module exactly once) are checked here, so any IR a pass or a
// user writes is held to the contract of docs/modules.md.
//
//===----------------------------------------------------------------------===//

#include "lamina/Dialect/Dist/IR/DistDialect.h"
#include "lamina/Dialect/Dist/IR/DistOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace lamina::ir::dist;

#include "lamina/Dialect/Dist/IR/DistDialect.cpp.inc"
#include "lamina/Dialect/Dist/IR/DistEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "lamina/Dialect/Dist/IR/DistAttrs.cpp.inc"

void DistDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "lamina/Dialect/Dist/IR/DistAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "lamina/Dialect/Dist/IR/DistOps.cpp.inc"
      >();
}

LogicalResult ModuleAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 StringRef name, ModuleKind kind,
                                 int64_t body) {
  if (name.empty())
    return emitError() << "a module needs a name";
  if (body < -1)
    return emitError() << "module '" << name << "' has body " << body
                       << "; expected -1 (its own) or a body index";
  return success();
}

LogicalResult
PlacementAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t pp,
                      PlacementKind kind, ArrayRef<int64_t> ranks) {
  if (pp < 1)
    return emitError() << "placement over pp = " << pp
                       << " ranks; expected at least 1";
  for (auto [m, rank] : llvm::enumerate(ranks))
    if (rank < 0 || rank >= pp)
      return emitError() << "module " << m << " placed on rank " << rank
                         << ", outside [0, " << pp << ")";
  return success();
}

LogicalResult OutlinedAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                   int64_t module, StringRef name,
                                   int64_t numIn, int64_t numOut,
                                   int64_t numResiduals, bool recompute,
                                   bool copiesOnly) {
  if (module < 0 || numIn < 0 || numOut < 0 || numResiduals < 0)
    return emitError() << "dist.outlined: module, num_in, num_out and "
                          "num_residuals must be non-negative";
  if (name.empty())
    return emitError() << "dist.outlined: module " << module << " needs a name";
  return success();
}

namespace {
ArrayAttr chainOf(Operation *func) {
  return func ? func->getAttrOfType<ArrayAttr>(DistDialect::kChainAttr)
              : ArrayAttr();
}

LogicalResult verifyChain(Operation *op, Attribute value) {
  auto func = dyn_cast<func::FuncOp>(op);
  auto chain = dyn_cast<ArrayAttr>(value);
  if (!func || !chain || chain.empty())
    return op->emitError() << "'dist.chain' must be a non-empty array of "
                              "#dist.module on a func.func";
  llvm::StringSet<> names;
  for (auto [i, entry] : llvm::enumerate(chain)) {
    auto module = dyn_cast<ModuleAttr>(entry);
    if (!module)
      return op->emitError()
             << "'dist.chain' entry " << i << " is not a #dist.module";
    if (module.getKind() == ModuleKind::Embedding && i != 0)
      return op->emitError() << "embedding module '" << module.getName()
                             << "' must come first in the chain";
    if (module.getKind() == ModuleKind::Head && i + 1 != chain.size())
      return op->emitError() << "head module '" << module.getName()
                             << "' must come last in the chain";
    if (!names.insert(module.getName()).second)
      return op->emitError() << "module name '" << module.getName()
                             << "' appears twice in the chain";
  }
  if (func.isExternal())
    return success();
  for (Operation &inner : func.getBody().front().without_terminator())
    if (!inner.hasAttr(DistDialect::kModuleAttr))
      return inner.emitError()
             << "op without 'dist.module' in a function with a 'dist.chain'";
  return success();
}

LogicalResult verifyModuleIndex(Operation *op, Attribute value) {
  auto index = dyn_cast<IntegerAttr>(value);
  if (!index || index.getInt() < 0)
    return op->emitError() << "'dist.module' must be a non-negative integer";
  ArrayAttr chain = chainOf(op->getParentOfType<func::FuncOp>());
  if (!chain)
    return op->emitError()
           << "'dist.module' outside a function with a 'dist.chain'";
  if (index.getInt() >= static_cast<int64_t>(chain.size()))
    return op->emitError() << "'dist.module' " << index.getInt()
                           << " is out of range for a chain of " << chain.size()
                           << " modules";
  // The chain has no backward edge: a module reads only from itself and
  // from modules before it.
  for (Value operand : op->getOperands()) {
    Operation *def = operand.getDefiningOp();
    auto defIndex =
        def ? def->getAttrOfType<IntegerAttr>(DistDialect::kModuleAttr)
            : IntegerAttr();
    if (defIndex && defIndex.getInt() > index.getInt())
      return op->emitError()
             << "op in module " << index.getInt() << " reads a value of module "
             << defIndex.getInt() << ", which comes later in the chain";
  }
  return success();
}

LogicalResult verifyPlacement(Operation *op, Attribute value) {
  auto placement = dyn_cast<PlacementAttr>(value);
  // On the module op: the outlined modules' placement (dist-partition
  // after dist-outline-modules), one rank each.
  if (auto outlined = op->getAttrOfType<IntegerAttr>(
          DistDialect::kNumModulesAttr);
      isa<ModuleOp>(op) && outlined) {
    if (!placement)
      return op->emitError() << "'dist.placement' must be a #dist.placement";
    if (int64_t(placement.getRanks().size()) != outlined.getInt())
      return op->emitError() << "'dist.placement' places "
                             << placement.getRanks().size()
                             << " modules; the module has "
                             << outlined.getInt();
    return success();
  }
  ArrayAttr chain = chainOf(op);
  if (!placement || !chain)
    return op->emitError() << "'dist.placement' must be a #dist.placement on "
                              "a function with a 'dist.chain'";
  ArrayRef<int64_t> ranks = placement.getRanks();
  if (ranks.size() != chain.size())
    return op->emitError() << "'dist.placement' places " << ranks.size()
                           << " modules; the chain has " << chain.size();
  if (placement.getKind() == PlacementKind::Modular) {
    // Layer l on rank l mod pp; embedding and head go with their neighbour.
    int64_t layer = 0;
    for (auto [m, entry] : llvm::enumerate(chain)) {
      if (cast<ModuleAttr>(entry).getKind() != ModuleKind::Layer)
        continue;
      if (ranks[m] != layer % placement.getPp())
        return op->emitError()
               << "modular placement puts layer " << layer << " ('"
               << cast<ModuleAttr>(entry).getName() << "') on rank " << ranks[m]
               << "; expected " << layer % placement.getPp();
      ++layer;
    }
    return success();
  }
  for (size_t m = 1; m < ranks.size(); ++m)
    if (ranks[m] < ranks[m - 1])
      return op->emitError()
             << "placement '" << stringifyPlacementKind(placement.getKind())
             << "' must be contiguous, but module " << m << " is on rank "
             << ranks[m] << " after rank " << ranks[m - 1];
  return success();
}
} // namespace

LogicalResult DistDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kChainAttr)
    return verifyChain(op, attr.getValue());
  if (name == kModuleAttr)
    return verifyModuleIndex(op, attr.getValue());
  if (name == kPlacementAttr)
    return verifyPlacement(op, attr.getValue());
  if (name == kDiscoveryAttr) {
    auto how = dyn_cast<StringAttr>(attr.getValue());
    if (!how ||
        !llvm::is_contained({"names", "metadata", "structure", "regex", "none"},
                            how.getValue()))
      return op->emitError() << "'dist.discovery' must be \"names\", "
                                "\"metadata\", \"structure\", \"regex\" "
                                "or \"none\"";
    return success();
  }
  if (name == kOutlinedAttr) {
    // On an outlined module function (dist-outline-modules); the
    // attribute's own verifier checks its values.
    if (!isa<func::FuncOp>(op) || !isa<OutlinedAttr>(attr.getValue()))
      return op->emitError() << "'dist.outlined' must be a #dist.outlined on "
                                "a func.func";
    return success();
  }
  if (name == kNumModulesAttr) {
    auto v = dyn_cast<IntegerAttr>(attr.getValue());
    if (!isa<ModuleOp>(op) || !v || v.getInt() < 1)
      return op->emitError() << "'dist.num_modules' must be a positive "
                                "integer on a builtin.module";
    return success();
  }
  return op->emitError() << "unknown dist attribute '" << name << "'";
}
