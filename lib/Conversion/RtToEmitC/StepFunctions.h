//===- StepFunctions.h - rt step functions to EmitC -------------*- C++ -*-===//
//
// Private to convert-rt-to-emitc: the step functions of convert-dist-to-rt
// as C++ functions calling the runtime's step library (namespace
// lamina::rt::step, include/lamina/Runtime/DistProgram.h).
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_CONVERSION_RTTOEMITC_STEPFUNCTIONS_H
#define LAMINA_LIB_CONVERSION_RTTOEMITC_STEPFUNCTIONS_H

#include "mlir/IR/BuiltinOps.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace lamina {

/// A C++ string literal with `s`'s bytes (RtToEmitCPass.cpp).
std::string cString(llvm::StringRef s);

struct StepFunctions {
  /// The emitted functions' names per pipeline rank: the training step's
  /// and the evaluation step's (empty: none).
  std::vector<std::string> train, eval;
  /// Their step buffers' bytes (rt.step_buffer_bytes), per pipeline rank.
  std::vector<int64_t> trainBytes, evalBytes;
  /// The directed pairs of pipeline ranks the steps send over, sorted.
  std::vector<std::pair<int64_t, int64_t>> edges;
};

/// Lowers every `func.func` with `rt.step_pp` of `module` to an
/// `emitc.func` of the same name in its place. `callees` maps each outlined
/// function's name to its module and whether it is a backward. Fails, with
/// an error on the op, on a callee not in `callees`, a missing or repeated
/// pipeline rank, and with `cuda` on transfers from one rank to another
/// that the receiver waits for in another order than they are sent (NCCL
/// matches a pair's transfers in order).
mlir::FailureOr<StepFunctions> lowerStepFunctions(
    mlir::ModuleOp module,
    const std::map<std::string, std::pair<int64_t, bool>> &callees,
    int64_t pp, bool cuda);

} // namespace lamina

#endif // LAMINA_LIB_CONVERSION_RTTOEMITC_STEPFUNCTIONS_H
