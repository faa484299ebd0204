//===- RtOps.cpp - rt dialect verifiers -----------------------------------===//

#include "lamina/Dialect/Rt/IR/RtOps.h"
#include "lamina/Dialect/Dist/IR/DistDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/SmallBitVector.h"

using namespace mlir;
using namespace lamina::ir::rt;

/// Buffers are dense row-major with static shapes: what the runtime's Tensor
/// view can describe.
static LogicalResult verifyBuffer(Operation *op, MemRefType type) {
  if (!type.hasStaticShape())
    return op->emitOpError("needs a static shape, got ") << type;
  if (!type.getLayout().isIdentity())
    return op->emitOpError("needs the identity layout, got ") << type;
  return success();
}

LogicalResult ViewOp::verify() {
  if (getOffset() < 0 || getOffset() % kArenaAlignment != 0)
    return emitOpError("offset ")
           << getOffset() << " is not a non-negative multiple of "
           << kArenaAlignment;
  return verifyBuffer(*this, getResult().getType());
}

LogicalResult ConstantOp::verify() {
  MemRefType type = getResult().getType();
  auto valueType = dyn_cast<ShapedType>(getValue().getType());
  if (!valueType || valueType.getShape() != type.getShape() ||
      valueType.getElementType() != type.getElementType())
    return emitOpError("value of type ")
           << getValue().getType() << " does not match " << type;
  return verifyBuffer(*this, type);
}

/// A C++ (qualified) identifier: letters, digits, '_' and '::'.
static bool isQualifiedIdentifier(StringRef s) {
  if (s.empty() || isdigit(static_cast<unsigned char>(s.front())))
    return false;
  return llvm::all_of(s, [](char c) {
    return isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':';
  });
}

LogicalResult CallOp::verify() {
  if (!isQualifiedIdentifier(getCallee()))
    return emitOpError("callee '") << getCallee() << "' is not a C++ name";
  unsigned numBuffers = getBuffers().size();
  if (numBuffers == 0)
    return emitOpError("needs at least the buffer it writes");
  llvm::SmallBitVector used(numBuffers);
  for (Attribute arg : getArgs()) {
    if (auto index = dyn_cast<IntegerAttr>(arg);
        index && index.getType().isIndex()) {
      uint64_t i = index.getValue().getZExtValue();
      if (i >= numBuffers)
        return emitOpError("argument refers to buffer #")
               << i << " of " << numBuffers;
      used.set(i);
      continue;
    }
    if (auto s = dyn_cast<StringAttr>(arg)) {
      if (!isQualifiedIdentifier(s.getValue()))
        return emitOpError("string argument '")
               << s.getValue() << "' is not a C++ enumerator";
      continue;
    }
    if (isa<IntegerAttr, FloatAttr, BoolAttr, DenseI64ArrayAttr, UnitAttr>(arg))
      continue;
    return emitOpError("unsupported argument ") << arg;
  }
  if (!used.all())
    return emitOpError("buffer #") << used.find_first_unset()
                                   << " is not passed to the callee";
  for (Value v : getBuffers())
    if (failed(verifyBuffer(*this, cast<MemRefType>(v.getType()))))
      return failure();
  return success();
}

#define GET_OP_CLASSES
#include "lamina/Dialect/Rt/IR/RtOps.cpp.inc"

//===----------------------------------------------------------------------===//
// The step ops (RtStepOps.td)
//===----------------------------------------------------------------------===//

static LogicalResult nonNegative(Operation *op, StringRef what, int64_t v) {
  if (v < 0)
    return op->emitOpError(what) << " must be non-negative, got " << v;
  return success();
}

LogicalResult StepCallOp::verify() {
  if (failed(nonNegative(*this, "mb", getMb())))
    return failure();
  for (auto [what, offset] :
       {std::pair<StringRef, std::optional<int64_t>>{"in", getInput()},
        {"res", getResiduals()},
        {"cot", getCotangent()},
        {"out", getOutput()}})
    if (offset && failed(nonNegative(*this, what, *offset)))
      return failure();
  return success();
}

LogicalResult
StepCallOp::verifySymbolUses(SymbolTableCollection &symbolTable) {
  auto fn = symbolTable.lookupNearestSymbolFrom<func::FuncOp>(*this,
                                                             getCalleeAttr());
  if (!fn)
    return emitOpError("calls '") << getCallee() << "', which is no function";
  auto outlined = fn->getAttrOfType<ir::dist::OutlinedAttr>(
      ir::dist::DistDialect::kOutlinedAttr);
  if (!outlined)
    return emitOpError("calls @")
           << getCallee() << ", which is no outlined module function";
  if (getResiduals() && outlined.getNumResiduals() == 0)
    return emitOpError("has residuals at ")
           << *getResiduals() << " but @" << getCallee()
           << " keeps none (its backward recomputes)";
  bool backward = false;
  for (unsigned i = 0; i < fn.getNumArguments(); ++i)
    if (auto kind = fn.getArgAttrOfType<StringAttr>(i, "graph.kind"))
      backward |= kind.getValue() == "cotangent";
  if (getCotangent() && !backward)
    return emitOpError("has a cotangent at ")
           << *getCotangent() << " but @" << getCallee()
           << " is no backward (no cotangent argument)";
  return success();
}

template <typename Op> static LogicalResult verifyPeerTransfer(Op op) {
  if (failed(nonNegative(op, "boundary", op.getBoundary())) ||
      failed(nonNegative(op, "mb", op.getMb())))
    return failure();
  return nonNegative(op, "peer", op.getPeer());
}

template <typename Op> static LogicalResult verifyTransfer(Op op) {
  if (failed(verifyPeerTransfer(op)))
    return failure();
  if (auto v = op.getOffset(); v && failed(nonNegative(op, "offset", *v)))
    return failure();
  return success();
}

LogicalResult StepSendOp::verify() { return verifyTransfer(*this); }
LogicalResult StepWaitSendOp::verify() { return verifyPeerTransfer(*this); }
LogicalResult StepPostRecvOp::verify() { return verifyTransfer(*this); }
LogicalResult StepRecvOp::verify() { return verifyTransfer(*this); }
LogicalResult StepAllGatherOp::verify() {
  if (failed(nonNegative(*this, "module", getModule())))
    return failure();
  if (auto v = getOffset(); v && failed(nonNegative(*this, "at", *v)))
    return failure();
  return success();
}
LogicalResult StepReduceScatterOp::verify() {
  if (failed(nonNegative(*this, "module", getModule())))
    return failure();
  if (auto v = getFull(); v && failed(nonNegative(*this, "from", *v)))
    return failure();
  if (auto v = getPart(); v && failed(nonNegative(*this, "part", *v)))
    return failure();
  return success();
}
LogicalResult StepAllReduceOp::verify() {
  return nonNegative(*this, "module", getModule());
}
LogicalResult StepUseWeightsOp::verify() {
  return nonNegative(*this, "module", getModule());
}
LogicalResult StepWaitGradientsOp::verify() {
  return nonNegative(*this, "module", getModule());
}
LogicalResult StepAccumulateOp::verify() {
  if (failed(nonNegative(*this, "module", getModule())))
    return failure();
  if (auto v = getOffset(); v && failed(nonNegative(*this, "into", *v)))
    return failure();
  return success();
}
LogicalResult StepWaitWeightsOp::verify() {
  return nonNegative(*this, "module", getModule());
}
LogicalResult StepOptimizerOp::verify() { return success(); }

template <typename Op> static LogicalResult verifyShared(Op op) {
  if (op.getParam().empty())
    return op.emitOpError("needs a parameter name");
  return success();
}
LogicalResult StepSumSharedOp::verify() { return verifyShared(*this); }
LogicalResult StepWaitSharedSumOp::verify() { return verifyShared(*this); }
LogicalResult StepGatherSharedOp::verify() { return verifyShared(*this); }
LogicalResult StepWaitSharedGatherOp::verify() { return verifyShared(*this); }
