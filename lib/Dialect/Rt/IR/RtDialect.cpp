//===- RtDialect.cpp - rt dialect registration ----------------------------===//

#include "lamina/Dialect/Rt/IR/RtDialect.h"
#include "lamina/Dialect/Rt/IR/RtOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace lamina::ir::rt;

#include "lamina/Dialect/Rt/IR/RtDialect.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "lamina/Dialect/Rt/IR/RtTypes.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "lamina/Dialect/Rt/IR/RtAttrs.cpp.inc"

LogicalResult DistAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               StringRef kind, int64_t modules, int64_t pp,
                               int64_t dp, int64_t microBatches, int64_t zero,
                               DenseI64ArrayAttr placement,
                               DenseI64ArrayAttr flatParams, int64_t tp) {
  if (modules < 1 || pp < 1 || dp < 1 || microBatches < 1 || zero < 0 ||
      zero > 3 || tp < 1)
    return emitError() << "rt.dist: modules, pp, dp, micro_batches and tp "
                          "must be at least 1, zero 0 to 3";
  if (!placement || !flatParams)
    return emitError() << "rt.dist: needs placement and flat_params";
  return success();
}

void RtDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "lamina/Dialect/Rt/IR/RtAttrs.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "lamina/Dialect/Rt/IR/RtTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "lamina/Dialect/Rt/IR/RtOps.cpp.inc"
      >();
}
