//===- StepIR.h - step functions to and from schedule calls -----*- C++ -*-===//
//
// The bridge between a step function's rt.step_* ops and the schedule
// library's calls (lamina::schedule::StepCall, plain C++): convert-dist-to-rt
// builds the ops from directStep's calls, and the rt passes read them back,
// compute their decisions with the library's functions (the ones `lamina
// plan` runs too) and apply them to the ops.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_DIALECT_RT_TRANSFORMS_STEPIR_H
#define LAMINA_DIALECT_RT_TRANSFORMS_STEPIR_H

#include "lamina/Schedule/StepBuffers.h"
#include "lamina/Schedule/StepCalls.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace lamina::ir::rt {

/// Attributes of a step function: its pipeline rank (what makes a
/// `func.func` a step function), its effective ZeRO level, and its step
/// buffer's bytes (set by rt-plan-step-buffers).
inline constexpr llvm::StringLiteral kStepPpAttr = "rt.step_pp";
inline constexpr llvm::StringLiteral kStepZeroAttr = "rt.step_zero";
inline constexpr llvm::StringLiteral kStepBufferBytesAttr =
    "rt.step_buffer_bytes";
inline constexpr llvm::StringLiteral kForwardOnlyAttr = "rt.forward_only";

/// Whether `f` is a step function (has `rt.step_pp`).
bool isStepFunction(mlir::func::FuncOp f);

/// Each outlined module function's module and whether it is a backward, by
/// name (from `dist.outlined` and the `fwd_`/`bwd_` names).
using Callees = std::map<std::string, std::pair<int64_t, bool>>;
Callees calleesOf(mlir::ModuleOp module);

/// A step function's ops (its terminator left out) and their calls.
struct StepOps {
  std::vector<mlir::Operation *> ops;
  std::vector<schedule::StepCall> calls;
};

/// Reads `f`'s body. With `callees`, each rt.step_call reads as the
/// Forward or Backward of its callee's module (an unknown callee is an
/// error on the op); without, as a Forward of module -1 (what the passes
/// that only count compute calls need). Fails, with an error on the op, on
/// an op that is no step op.
mlir::FailureOr<StepOps> readStep(mlir::func::FuncOp f,
                                  const Callees *callees = nullptr);

/// Builds the op of `c` at `b`'s insertion point, without step-buffer
/// offsets; `callee` names the function of a Forward or Backward.
mlir::Operation *buildStepOp(mlir::OpBuilder &b, mlir::Location loc,
                             mlir::Value state, const schedule::StepCall &c,
                             mlir::FlatSymbolRefAttr callee = {});

/// Applies `edits` (indices into `step.calls`) to `f`'s ops: moved ops
/// move, new calls are built before the op they precede.
void applyEdits(mlir::func::FuncOp f, const StepOps &step,
                const std::vector<schedule::StepEdit> &edits);

/// The modules reading each trainable parameter (their forwards' arguments).
std::map<std::string, std::vector<int>> readersOf(mlir::ModuleOp module);

/// The experts split over an expert-parallel group (`graph.ep_split` on a
/// forward's argument): each one's module and the group's size.
std::map<std::string, std::pair<int, int64_t>>
expertBlocksOf(mlir::ModuleOp module);

/// The packed sizes of what the steps hold, from the module functions: the
/// forward's boundary outputs and residuals, the backward's cotangents, and
/// at ZeRO >= 2 the modules' gathered weights and gradients as the runtime
/// lays them out: the trainable parameters only that module reads, flat,
/// cut over `dp` replicas as `padded` (NCCL) or MPI's collectives cut them.
/// `flat` gets each module's flat layout's elements.
mlir::FailureOr<schedule::StepBufferSizes>
stepBufferSizes(mlir::ModuleOp module, int numModules, int zero, int dp,
                bool padded, std::vector<int64_t> &flat);

} // namespace lamina::ir::rt

#endif // LAMINA_DIALECT_RT_TRANSFORMS_STEPIR_H
