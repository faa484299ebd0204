//===- StepBuffers.h - the memory plan of one rank's step -------*- C++ -*-===//
//
// What a rank's step holds between its calls -- the boundary values it
// computes or receives, their gradients, the residuals a forward keeps for
// its backward, and ZeRO's gathered weights and full gradients -- gets a
// static offset in one step buffer, planned from the lowered calls
// (lowerStep): each value lives from the call that writes it (a forward, a
// backward, the posting of its receive, an all-gather, the accumulate that
// starts a run's gradient, a reduce-scatter's part) to its last reader (a
// forward, the backward, the wait for its send, the end of the run reading
// the gathered weights, the wait for the reduce-scatter), and the
// greedy-by-size planner (MemoryPlan.h) places them. convert-dist-to-rt writes
// the offsets into the step's ops and the runtime allocates the buffer once;
// `lamina plan` runs the same function over the same calls.
// docs/distributed.md, "The step's memory".
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_SCHEDULE_STEPBUFFERS_H
#define LAMINA_SCHEDULE_STEPBUFFERS_H

#include "lamina/Schedule/StepCalls.h"

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace lamina::schedule {

enum class BufferKind : unsigned char {
  Activation,
  Gradient,
  Residual,
  Gathered,     ///< ZeRO 3: a run's gathered weights
  FullGradient, ///< levels 2-3: a run's full gradient
  GradientPart, ///< levels 2-3: a later reduce-scatter's part
};

/// The byte sizes of what a step holds, as the runtime packs them (each
/// tensor 64-byte aligned; stepBufferBytes): per boundary b (module b's
/// outputs) its values and their gradient, per module its residuals (0: the
/// backward recomputes them). Per module at ZeRO 3 its gathered weights (or
/// their copies) for one run, at levels 2-3 its full f32 gradient for one
/// run and the part a later reduce-scatter of the step leaves (empty: none).
struct StepBufferSizes {
  std::vector<int64_t> activation, gradient, residual;
  std::vector<int64_t> gathered, fullGradient, gradientPart;
  /// The sizes of `kind`'s values, by boundary or module.
  const std::vector<int64_t> &of(BufferKind kind) const;
};

/// The elements of the full buffers and of each part when `total` elements
/// are cut into `parts`: MPI's cut (the first total % parts parts one
/// longer) or, `padded`, NCCL's equal chunks (the runtime's
/// evenShards/paddedShards).
struct ShardCapacity {
  int64_t full = 0, shard = 0;
};
ShardCapacity shardCapacity(int64_t total, int parts, bool padded);

/// The bytes of tensors of `bytes` each packed one after the other, each
/// starting 64-byte aligned (the runtime's layout of a boundary or of a
/// module's residuals).
int64_t packedBytes(const std::vector<int64_t> &bytes);

/// One value a step holds: boundary `index`'s activations or gradient, or
/// module `index`'s residuals, of micro-batch `microBatch`; for ZeRO's
/// kinds module `index`'s n-th of the step.
using BufferKey = std::tuple<BufferKind, int, int>;

/// Where one call reads and writes in the step buffer (-1: none). A
/// forward or backward: `in` the boundary values it reads, `res` the
/// residuals, `cot` the gradient of its outputs, `out` what it writes for
/// the next module. A transfer: `at` its values. ZeRO: an all-gather's
/// weights, an accumulate's or a reduce-scatter's full gradient `at`, a
/// later reduce-scatter's `part`.
struct CallOffsets {
  int64_t in = -1, res = -1, cot = -1, out = -1, at = -1, part = -1;
};

/// The memory plan of one step.
struct StepBuffers {
  std::map<BufferKey, int64_t> offsets; ///< every value the step holds
  int64_t bytes = 0;                    ///< the step buffer's size
  std::vector<CallOffsets> calls;       ///< per call of the step
  /// Offset of a value, or -1 when the step holds none (a residual of a
  /// recomputing module).
  int64_t offsetOf(BufferKind kind, int index, int microBatch) const {
    auto it = offsets.find({kind, index, microBatch});
    return it == offsets.end() ? -1 : it->second;
  }
};

/// Plans the buffers of the lowered step `calls` of a chain of
/// `numModules` modules at ZeRO level `zeroLevel` (the effective one);
/// `forwardOnly`: an evaluation step (a forward's input dies at it, no
/// residuals are kept). Returns "" and the plan, or why the calls cannot
/// be planned (a value read before it is written, or never released).
std::string planStepBuffers(const std::vector<StepCall> &calls, int numModules,
                            const StepBufferSizes &sizes, int zeroLevel,
                            bool forwardOnly, StepBuffers &out);

} // namespace lamina::schedule

#endif // LAMINA_SCHEDULE_STEPBUFFERS_H
