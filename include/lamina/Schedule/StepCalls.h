//===- StepCalls.h - one rank's actions as its compiled step's calls -----===//
//
// A verified action list says what a rank does; its compiled step also says
// when each receive is posted and when ZeRO 3's gathered weights are taken.
// lowerStep makes those two decisions, so convert-dist-to-rt and the
// runtime's hand-written test program (lamina-dist-exec-test) lower a list
// the same way. docs/schedules.md, "The compiled step".
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
  GatherShared, ///< start the all-gather of a shared parameter's parts
  WaitSharedGather,
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
/// effective one: 0 with one replica, as the runtime runs it):
/// * every receive is posted ahead: the first from each peer (ascending
///   peers) at the start, the next from a peer right before the previous
///   one is waited for, so a transfer overlaps the work before its use
///   while each pair's transfers stay in list order (NCCL matches them in
///   order);
/// * at ZeRO level 3, a UseWeights before the first call of each run (the
///   consecutive forwards, or backwards, of one module, transfers and
///   collectives between them not counting); the optimizer step ends a run;
/// * every Backward followed by the Accumulate of its parameter gradients;
/// * a WaitGradients for every gradient reduction the list starts: at
///   levels 2-3, between a backward and its Accumulate when that starts
///   a new gradient for the module (its first of the step, or its first
///   after its reduce-scatter), every reduce-scatter in flight but the
///   newest, oldest first, so a rank holds at most two full gradients and
///   the wait follows the backward's compute; the rest, and at levels 0-1
///   every module's all-reduce or reduce-scatter (ascending modules),
///   right before the optimizer step;
/// * the shared parameters' gradient sums (`shared`, in its order: every
///   holder issues them alike) started, then waited for, right before the
///   optimizer step; at ZeRO >= 1 their parts gathered right after it;
/// * every Send waited for (WaitSend) right before the second compute call
///   (forward or backward) after it, so it overlaps the one in between;
///   the sends no such call follows, at the end of the step;
/// * at the end, the waits for what the step leaves in flight: levels 1-2
///   the modules' parameter all-gathers after the optimizer (issue
///   order), then the shared parameters' gathers.
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
