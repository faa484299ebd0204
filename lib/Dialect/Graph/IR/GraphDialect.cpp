//===- GraphDialect.cpp - graph dialect -----------------------------------===//

#include "lamina/Dialect/Graph/IR/GraphOps.h"
#include "lamina/Dialect/Graph/IR/NodeName.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace lamina::ir::graph;

#include "lamina/Dialect/Graph/IR/GraphDialect.cpp.inc"
#include "lamina/Dialect/Graph/IR/GraphEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "lamina/Dialect/Graph/IR/GraphAttrs.cpp.inc"

void GraphDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "lamina/Dialect/Graph/IR/GraphOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "lamina/Dialect/Graph/IR/GraphAttrs.cpp.inc"
      >();
}

LogicalResult TrainAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                LossKind loss, StringRef output,
                                StringRef labels, int64_t vocab,
                                int64_t ignoreIndex) {
  if (output.empty())
    return emitError() << "#graph.train needs the loss output's name";
  if ((loss == LossKind::CrossEntropy) != !labels.empty())
    return emitError() << "#graph.train: a labels input goes with "
                          "cross_entropy, and only with it";
  if (vocab < 0)
    return emitError() << "#graph.train: vocab must be >= 0";
  return success();
}

TrainAttr lamina::ir::graph::trainAttrOf(Operation *module) {
  return module ? module->getAttrOfType<TrainAttr>(kTrainAttr) : TrainAttr();
}

static constexpr StringLiteral kEntryAttr =
    GraphDialect::EntryAttrHelper::getNameStr();

static bool isMarkedEntry(Operation *op) {
  return isa<func::FuncOp>(op) && op->hasAttrOfType<UnitAttr>(kEntryAttr);
}

bool lamina::ir::graph::isEntryFunction(Operation *op) {
  auto func = dyn_cast<func::FuncOp>(op);
  if (!func)
    return false;
  if (isMarkedEntry(func))
    return true;
  if (func.getSymName() != "forward")
    return false;
  if (Block *block = func->getBlock())
    for (Operation &other : *block)
      if (isMarkedEntry(&other))
        return false;
  return true;
}

func::FuncOp lamina::ir::graph::entryFunctionOf(Operation *module) {
  func::FuncOp forward;
  for (auto func : module->getRegion(0).getOps<func::FuncOp>()) {
    if (isMarkedEntry(func))
      return func;
    if (func.getSymName() == "forward")
      forward = func;
  }
  return forward;
}

void lamina::ir::graph::setEntryFunction(Operation *func, bool entry) {
  if (entry)
    func->setAttr(kEntryAttr, UnitAttr::get(func->getContext()));
  else
    func->removeAttr(kEntryAttr);
}

Operation *GraphDialect::materializeConstant(OpBuilder &builder, Attribute value,
                                             Type type, Location loc) {
  auto elements = dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return ConstantOp::create(builder, loc, elements);
}

LogicalResult GraphDialect::verifyRegionArgAttribute(Operation *op,
                                                     unsigned region,
                                                     unsigned arg,
                                                     NamedAttribute attr) {
  if (attr.getName() == kNameAttr) {
    if (!isa<StringAttr>(attr.getValue()))
      return op->emitError() << "'" << kNameAttr << "' must be a string";
    return success();
  }
  if (attr.getName() == kKindAttr) {
    auto kind = dyn_cast<StringAttr>(attr.getValue());
    if (!kind || !llvm::is_contained({kKindInput, kKindTrainable, kKindConstant,
                                      kKindBoundary, kKindResidual,
                                      kKindCotangent, kKindParamCopy},
                                     kind.getValue()))
      return op->emitError() << "'" << kKindAttr << "' of argument " << arg
                             << " must be \"input\", \"trainable\", "
                                "\"constant\", \"boundary\", \"residual\", "
                                "\"cotangent\" or \"param_copy\"";
    return success();
  }
  if (attr.getName() == kTpSplitAttr) {
    auto dim = dyn_cast<IntegerAttr>(attr.getValue());
    if (!dim || dim.getInt() < 0)
      return op->emitError() << "'" << kTpSplitAttr << "' of argument " << arg
                             << " must be a non-negative integer";
    return success();
  }
  if (attr.getName() == kTpPartsAttr) {
    auto parts = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!parts || parts.size() != 2 || parts[0] < 0 || parts[1] < 2)
      return op->emitError() << "'" << kTpPartsAttr << "' of argument " << arg
                             << " must be [dim, parts] with parts >= 2";
    return success();
  }
  if (attr.getName() == kEpSplitAttr) {
    auto ranks = dyn_cast<IntegerAttr>(attr.getValue());
    if (!ranks || ranks.getInt() < 2)
      return op->emitError() << "'" << kEpSplitAttr << "' of argument " << arg
                             << " must be an integer >= 2";
    return success();
  }
  return op->emitError() << "unknown graph argument attribute '"
                         << attr.getName() << "'";
}

LogicalResult GraphDialect::verifyOperationAttribute(Operation *op,
                                                     NamedAttribute attr) {
  if (attr.getName() == kTrainAttr) {
    if (!isa<ModuleOp>(op) || !isa<TrainAttr>(attr.getValue()))
      return op->emitError() << "'" << kTrainAttr
                             << "' must be a #graph.train on the module";
    return success();
  }
  if (attr.getName() == kEntryAttr) {
    if (!isa<func::FuncOp>(op) || !isa<UnitAttr>(attr.getValue()))
      return op->emitError() << "'" << kEntryAttr
                             << "' must be a unit attribute on a func.func";
    // The passes act on one entry; two would make the choice arbitrary.
    // Reported on the second.
    for (Operation *other = op->getPrevNode(); other;
         other = other->getPrevNode())
      if (isMarkedEntry(other))
        return op->emitError()
               << "'" << kEntryAttr << "' on more than one function";
    return success();
  }
  if (attr.getName() != kOutputNamesAttr)
    return op->emitError() << "unknown graph attribute '" << attr.getName()
                           << "'";
  auto func = dyn_cast<func::FuncOp>(op);
  auto names = dyn_cast<ArrayAttr>(attr.getValue());
  if (!func || !names)
    return op->emitError() << "'" << kOutputNamesAttr
                           << "' must be an array on a func.func";
  if (names.size() != func.getNumResults() ||
      !llvm::all_of(names, [](Attribute a) { return isa<StringAttr>(a); }))
    return op->emitError() << "'" << kOutputNamesAttr
                           << "' needs one string per result";
  return success();
}

std::string lamina::ir::graph::nodeNameOf(Operation *op) {
  Location loc = op->getLoc();
  while (auto callsite = dyn_cast<CallSiteLoc>(loc))
    loc = callsite.getCallee();
  if (auto fused = dyn_cast<FusedLoc>(loc);
      fused && !fused.getLocations().empty())
    loc = fused.getLocations().front();
  if (auto name = dyn_cast<NameLoc>(loc))
    return "node '" + name.getName().getValue().str() + "'";
  std::string s;
  llvm::raw_string_ostream(s) << loc;
  return s;
}
