//===- ScheduleIR.h - schedules to and from dist.schedule ops ---*- C++ -*-===//
//
// The bridge between the schedule library (lamina::schedule::Schedule, plain
// C++) and its IR form (dist.schedule / dist.rank / action ops). The passes
// dist-schedule, dist-insert-comm and dist-verify-schedule use it, and so
// does code generation: it reads the verified op with readSchedule and emits
// one action table per rank. docs/schedules.md ("As IR").
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_DIALECT_DIST_TRANSFORMS_SCHEDULEIR_H
#define LAMINA_DIALECT_DIST_TRANSFORMS_SCHEDULEIR_H

#include "lamina/Dialect/Dist/IR/DistOps.h"
#include "lamina/Schedule/Schedule.h"

#include "mlir/IR/Builders.h"

namespace lamina::ir::dist {

/// The schedule an op holds: config (kind, L, p, d, m, zero; no module
/// costs), placement, and `ranks[g]` = the actions of `dist.rank g` in order.
/// Fails, with an error on the op, when the op does not verify.
mlir::FailureOr<schedule::Schedule> readSchedule(ScheduleOp op);

/// The schedule a dist.program's steps run: `ranks[d * pp + p]` are the
/// actions of `dist.step p` (its calls, transfers, collectives and
/// optimizer step) with peers in replica `d`. The calls' callees must
/// resolve (the module verifies).
mlir::FailureOr<schedule::Schedule> readSchedule(ProgramOp op);

/// Builds the op for `s` at the builder's insertion point, one `dist.rank`
/// per list in rank order. `s` must have a valid config and placement and
/// actions with fields in range (as the generator's and readSchedule's have).
ScheduleOp buildSchedule(mlir::OpBuilder &builder, mlir::Location loc,
                         const schedule::Schedule &s);

/// The compute-only form (what dist-schedule writes): builds the op for
/// schedule::generateComputeOrder(config), or returns the generator's error
/// message for an invalid configuration (nothing is built then).
schedule::Expected<ScheduleOp>
buildComputeSchedule(mlir::OpBuilder &builder, mlir::Location loc,
                     const schedule::ScheduleConfig &config);

/// The action op of `rank` at `index` in its list, or null.
mlir::Operation *findAction(ScheduleOp op, int64_t rank, int64_t index);

/// Emits `message` (a schedule library diagnostic) as an error on the op it
/// names: the first "rank G (pp P, dp D) action #I" in it selects that
/// action op; else the first "rank G (pp ..." selects that dist.rank; else
/// the error goes on `op`.
mlir::InFlightDiagnostic emitScheduleError(ScheduleOp op,
                                           llvm::StringRef message);
/// The same for a dist.program: global rank G is step G mod pp, and action
/// #I its I-th action op.
mlir::InFlightDiagnostic emitScheduleError(ProgramOp op,
                                           llvm::StringRef message);

} // namespace lamina::ir::dist

#endif // LAMINA_DIALECT_DIST_TRANSFORMS_SCHEDULEIR_H
