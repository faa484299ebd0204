//===- RtDialect.cpp - rt dialect registration ----------------------------===//

#include "lamina/Dialect/Rt/IR/RtDialect.h"
#include "lamina/Dialect/Rt/IR/RtOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace lamina::rt_ir;

#include "lamina/Dialect/Rt/IR/RtDialect.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "lamina/Dialect/Rt/IR/RtTypes.cpp.inc"

void RtDialect::initialize() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "lamina/Dialect/Rt/IR/RtTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "lamina/Dialect/Rt/IR/RtOps.cpp.inc"
      >();
}
