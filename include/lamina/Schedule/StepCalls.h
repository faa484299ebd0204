//===- StepCalls.h - one rank's actions as its compiled step's calls -----===//
//
// A verified action list says what a rank does; its compiled step also says
// when each receive is posted and when the step waits for its sends and its
// gradient reductions. directStep writes the list as calls with every wait
// at its latest correct point (convert-dist-to-rt); postReceives, waitSends
// and retireReductions are the overlap decisions the rt passes apply to a
// step function; lowerStep composes them, so `lamina plan` and the
// runtime's hand-written test program (lamina-dist-exec-test) lower a list
// as the compiler does. docs/schedules.md, "The compiled step".
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_SCHEDULE_STEPCALLS_H
#define LAMINA_SCHEDULE_STEPCALLS_H

#include "lamina/Schedule/Schedule.h"

#include <string>
#include <vector>

namespace lamina::schedule {

enum class CallKind : unsigned char {
  Forward,
  Backward,
  Send,
  WaitSend, ///< wait for a send to complete (its buffer is then free)
  PostRecv, ///< start receiving (the transfer runs while later work does)
  Recv,     ///< wait for a posted receive (posting it first if it is not)
  AllGather,
  ReduceScatter,
  AllReduce,
  UseWeights,    ///< ZeRO 3: wait for the module's oldest all-gather, read it
  WaitGradients, ///< wait for the module's oldest gradient reduction
  Accumulate,    ///< add the backward's parameter gradients to the module's
  OptimizerStep,
  WaitWeights, ///< levels 1-2: wait for the module's all-gather after the
               ///< optimizer
  SumShared,   ///< start the gradient sum of a shared parameter (`name`)
  WaitSharedSum,
  GatherShared,     ///< start the all-gather of a shared parameter's parts
  WaitSharedGather, ///< the last kind (rt's StepIR reads kinds up to it)
};

/// One call of a rank's step; fields as Action's (peer: as in the list);
/// `name` the shared parameter of the *Shared* kinds.
struct StepCall {
  CallKind kind = CallKind::Forward;
  Payload payload = Payload::None;
  int module = -1;
  int microBatch = -1;
  int peer = -1;
  std::string name;
};

/// A trainable parameter several modules read (a tied embedding) that this
/// rank holds and whose gradient it sums with the other holders (all their
/// replicas: more than one rank): the runtime keeps it whole, outside the
/// modules' flat layouts.
struct SharedParam {
  std::string name;
  /// ZeRO >= 1: each holder updates its part, then the parts are gathered.
  bool gathers = false;
};

/// The parameters read by more than one module whose holders (the pipeline
/// ranks of those modules, in every replica: `dp` each) are more than one
/// rank, held by pipeline rank `p`, by name: what lowerStep sums. With one
/// replica every ZeRO level keeps them whole (no gathers).
/// `readers[name]` are the modules reading trainable `name`, `rankOf` the
/// placement.
std::vector<SharedParam> sharedParamsOf(
    int p, int dp, int zeroLevel,
    const std::vector<std::pair<std::string, std::vector<int>>> &readers,
    const std::vector<int> &rankOf);

const char *callKindName(CallKind kind);

/// The calls of one rank's action list at ZeRO level `zeroLevel` (the
/// effective one: 0 with one replica, as the runtime runs it), in list
/// order, with every wait at the latest point that is correct and no
/// overlap decided yet (convert-dist-to-rt's output):
/// * every receive waited for (and posted) where the list has it;
/// * at ZeRO level 3, a UseWeights before the first call of each run (the
///   consecutive forwards, or backwards, of one module, transfers and
///   collectives between them not counting); the optimizer step ends a run;
/// * every Backward followed by the Accumulate of its parameter gradients;
/// * right before the optimizer step, a WaitGradients for every gradient
///   reduction the list starts (levels 0-1 by ascending module, levels 2-3
///   in issue order), then the shared parameters' gradient sums (`shared`,
///   in its order: every holder issues them alike) started and waited for;
///   at ZeRO >= 1 their parts gathered right after it;
/// * at the end, the waits for what the step leaves in flight: every send
///   (issue order), levels 1-2 the modules' parameter all-gathers after the
///   optimizer (issue order), then the shared parameters' gathers.
std::vector<StepCall> directStep(const std::vector<Action> &list, int zeroLevel,
                                 const std::vector<SharedParam> &shared = {});

/// A change of a step's calls: `call` (or, with `from` >= 0, the call at
/// index `from`, moved) placed right before the call at index `before`
/// (the number of calls: at the end). Several edits before one call land
/// in their order. The rt passes apply them to a step function's ops.
struct StepEdit {
  size_t before = 0;
  int from = -1;
  StepCall call;
};

/// `calls` with `edits` applied (indices into `calls`).
std::vector<StepCall> applyEdits(const std::vector<StepCall> &calls,
                                 const std::vector<StepEdit> &edits);

/// Posts receives ahead (rt-post-receives): for each peer, its first
/// receive not yet posted at the start of the step (ascending peers), and
/// every later one right before the previous one is waited for, so a
/// transfer overlaps the work before its use while each pair's transfers
/// stay in list order (NCCL matches them in order).
std::vector<StepEdit> postReceives(const std::vector<StepCall> &calls);

/// Waits for each send (rt-wait-sends) right before the second compute
/// call (forward or backward) after it, so it overlaps the one in between
/// and its buffer is free for what follows; the sends no such call
/// follows keep their wait where it is.
std::vector<StepEdit> waitSends(const std::vector<StepCall> &calls);

/// Levels 2-3 (rt-retire-reductions): when an Accumulate starts a new
/// gradient for its module (the module's first of the step, or its first
/// after its reduce-scatter), waits for every reduce-scatter in flight but
/// the newest, oldest first, right before it (after the backward), so a
/// rank holds at most two full gradients and the wait follows the
/// backward's compute. Moves the WaitGradients that directStep puts before
/// the optimizer.
std::vector<StepEdit> retireReductions(const std::vector<StepCall> &calls,
                                       int zeroLevel);

/// The compiled step's calls: directStep, then postReceives, waitSends and
/// retireReductions, as the rt phase's passes apply them.
std::vector<StepCall> lowerStep(const std::vector<Action> &list, int zeroLevel,
                                const std::vector<SharedParam> &shared = {});

/// Runs the lowered steps of every pipeline rank (replica 0: peers are
/// pipeline ranks) against each other: a Recv waits for its peer's Send, a
/// WaitSend for the peer's PostRecv (or Recv) of the transfer, the wait of a
/// shared parameter's sum or gather for that call on every rank issuing it.
/// Returns "" when every step runs to its end, else which calls wait on each
/// other forever (the compiler's waits would deadlock the program).
std::string checkStepsComplete(const std::vector<std::vector<StepCall>> &steps);

} // namespace lamina::schedule

#endif // LAMINA_SCHEDULE_STEPCALLS_H
