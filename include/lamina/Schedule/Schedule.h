//===- Schedule.h - per-rank action lists for pipeline training -----------===//
//
// A schedule is, for every global rank, the ordered list of actions it runs in
// one training step: module forwards and backwards, point-to-point transfers
// across module boundaries, data-parallel collectives, the optimizer step.
// The library has no MLIR dependency: the planner and the code generator both
// use it. docs/schedules.md describes the model and every schedule.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_SCHEDULE_SCHEDULE_H
#define LAMINA_SCHEDULE_SCHEDULE_H

#include "lamina/Schedule/Expected.h"
#include "lamina/Schedule/Placement.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lamina::schedule {

enum class ActionKind : unsigned char {
  Forward,
  Backward,
  Send,
  Recv,
  AllGather,
  ReduceScatter,
  AllReduce,
  OptimizerStep,
};

/// What an action moves or touches: the cost model turns it into bytes.
enum class Payload : unsigned char {
  None,           ///< forward, backward, optimizer step
  Activation,     ///< module `module`'s output for one micro-batch (b*s*h)
  ActivationGrad, ///< the gradient of that output (same size)
  Weights,        ///< module `module`'s parameters (N_l)
  WeightGrads,    ///< module `module`'s parameter gradients (N_l)
};

/// One step of one rank. Field use by kind:
///   Forward/Backward: module, microBatch.
///   Send/Recv: payload (Activation or ActivationGrad), module = the boundary
///     b, i.e. the output of module b that feeds module b + 1, microBatch,
///     peer = the global rank on the other side.
///   AllGather (Weights) / ReduceScatter, AllReduce (WeightGrads): module; the
///     group is the data-parallel group of the issuing rank (all ranks with
///     the same pipeline rank), matched by call order within the group.
///   OptimizerStep: nothing (updates every module on the rank).
struct Action {
  ActionKind kind = ActionKind::Forward;
  Payload payload = Payload::None;
  int module = -1;
  int microBatch = -1;
  int peer = -1;

  static Action forward(int module, int mb) {
    return {ActionKind::Forward, Payload::None, module, mb, -1};
  }
  static Action backward(int module, int mb) {
    return {ActionKind::Backward, Payload::None, module, mb, -1};
  }
  static Action send(Payload what, int boundary, int mb, int peer) {
    return {ActionKind::Send, what, boundary, mb, peer};
  }
  static Action recv(Payload what, int boundary, int mb, int peer) {
    return {ActionKind::Recv, what, boundary, mb, peer};
  }
  static Action allGather(int module) {
    return {ActionKind::AllGather, Payload::Weights, module, -1, -1};
  }
  static Action reduceScatter(int module) {
    return {ActionKind::ReduceScatter, Payload::WeightGrads, module, -1, -1};
  }
  static Action allReduce(int module) {
    return {ActionKind::AllReduce, Payload::WeightGrads, module, -1, -1};
  }
  static Action optimizerStep() {
    return {ActionKind::OptimizerStep, Payload::None, -1, -1, -1};
  }

  bool isCompute() const {
    return kind == ActionKind::Forward || kind == ActionKind::Backward ||
           kind == ActionKind::OptimizerStep;
  }
  bool isP2P() const {
    return kind == ActionKind::Send || kind == ActionKind::Recv;
  }
  bool isCollective() const {
    return kind == ActionKind::AllGather ||
           kind == ActionKind::ReduceScatter || kind == ActionKind::AllReduce;
  }
  friend bool operator==(const Action &a, const Action &b) {
    return a.kind == b.kind && a.payload == b.payload &&
           a.module == b.module && a.microBatch == b.microBatch &&
           a.peer == b.peer;
  }
  friend bool operator!=(const Action &a, const Action &b) { return !(a == b); }
};

enum class ScheduleKind : unsigned char {
  GPipe,           ///< contiguous; all forwards, then all backwards
  OneFOneB,        ///< contiguous; warm-up, one-forward-one-backward, cool-down
  Interleaved1F1B, ///< modular, v = L/p chunks; Megatron's depth-first order
  BreadthFirst,    ///< modular; layered gradient accumulation on each rank
  Layered,         ///< p = 1; layered gradient accumulation, data parallel
};

/// "gpipe", "1f1b", "interleaved-1f1b", "breadth-first", "layered".
const char *scheduleKindName(ScheduleKind kind);
std::optional<ScheduleKind> parseScheduleKind(std::string_view name);

struct ScheduleConfig {
  ScheduleKind kind = ScheduleKind::BreadthFirst;
  int numModules = 1;    ///< L
  int pipelineRanks = 1; ///< p
  int microBatches = 1;  ///< m, per step per data-parallel replica
  int dataParallel = 1;  ///< d
  int zeroLevel = 0;     ///< data-parallel sharding level, 0-3
  /// Optional per-module cost; gpipe and 1f1b then use placeBalanced instead
  /// of placeContiguous. Ignored by the modular schedules.
  std::vector<double> moduleCost;
  /// The placement decided before the schedule (dist-partition); when
  /// absent, placementFor applies the schedule's own rule.
  std::optional<Placement> placement;
  /// An evaluation (forward-only) step: every forward once, no backward,
  /// no gradient reduction, no optimizer step (generateEvalSchedule).
  bool forwardOnly = false;
};

/// The modules' pipeline ranks for `config`: its given placement, checked
/// (contiguous blocks for gpipe and 1f1b, module l on rank l mod p for the
/// modular schedules), or the rule: placeModular for interleaved-1f1b,
/// breadth-first and layered, placeBalanced with moduleCost, else
/// placeContiguous.
Expected<Placement> placementFor(const ScheduleConfig &config);

struct Schedule {
  ScheduleConfig config;
  Placement placement;
  /// One list per global rank g = dp * p + pp (pp: pipeline rank, dp:
  /// data-parallel replica).
  std::vector<std::vector<Action>> ranks;

  int numRanks() const { return static_cast<int>(ranks.size()); }
  int pipelineRank(int g) const { return g % config.pipelineRanks; }
  int dataRank(int g) const { return g / config.pipelineRanks; }
  int globalRank(int pp, int dp) const {
    return dp * config.pipelineRanks + pp;
  }
};

/// Builds the schedule, or explains why the configuration is invalid (for
/// example breadth-first with m < p, interleaved-1f1b with L % p != 0 or
/// m % p != 0, layered with p > 1, a pipeline schedule with L < p).
/// Equal to lowerComputeOrder(generateComputeOrder(config)), then, at
/// level 3, prefetchGathers applied to every list (the passes dist-schedule,
/// dist-insert-comm and dist-prefetch-gathers).
Expected<Schedule> generateSchedule(const ScheduleConfig &config);

/// Generation, step 1: the placement and, per pipeline rank, the order of its
/// compute actions. Every global rank's list (replicas get identical ones)
/// holds only Forward and Backward actions followed by one OptimizerStep.
/// Fails for the configurations generateSchedule refuses.
Expected<Schedule> generateComputeOrder(const ScheduleConfig &config);

/// Generation, step 2, the same for every schedule kind: lowers compute-only
/// lists (as generateComputeOrder makes them, or edited) by adding the Recv
/// before and the Send after each compute whose input or output lives on
/// another pipeline rank (peers in the rank's own replica), and, when d > 1,
/// the data-parallel collectives of the sharding level (docs/schedules.md):
/// each at the latest point (level 3: each run's all-gather right before
/// the run) or, for reductions, as soon as the gradient is complete.
/// Fails when the config or placement is invalid, a list holds anything but
/// Forward/Backward (module and micro-batch in range) and one final
/// OptimizerStep, or there are not p * d lists.
Expected<Schedule> lowerComputeOrder(const Schedule &compute);

/// A move within one rank's list: the action at `from` placed right before
/// the one at `before` (the list's size: at the end). Moves before one
/// action land in their order.
struct ActionMove {
  size_t before = 0;
  size_t from = 0;
};

/// `list` with `moves` applied (indices into `list`).
std::vector<Action> applyMoves(const std::vector<Action> &list,
                               const std::vector<ActionMove> &moves);

/// Level 3 (dist-prefetch-gathers): each run's all-gather (a run: the
/// consecutive forwards, or backwards, of one module) moved from right
/// before the run to right after the previous run's first compute and its
/// send, so the gather overlaps the previous run and at most two modules'
/// full weights are resident. The first run's gather stays. Lists without
/// such gathers (other levels, forward-only steps) get no moves.
std::vector<ActionMove> prefetchGathers(const std::vector<Action> &list);

/// The evaluation step over the training schedule's placement: each rank
/// runs its modules in ascending order, every micro-batch through one
/// before the next (at sharding level 3 with d > 1, one all-gather per
/// module first), receiving each input and sending each output that lives
/// on another pipeline rank. The result has config.forwardOnly set;
/// verifySchedule checks it as a forward-only step. Fails for the
/// configurations generateSchedule refuses.
Expected<Schedule> generateEvalSchedule(const ScheduleConfig &config);

/// Short token, e.g. "F3.1", "Sa2.0>1" (send activation of boundary 2, mb 0
/// to rank 1), "Rg2.0<3", "AG4", "RS4", "AR4", "OPT". See docs/schedules.md.
std::string formatAction(const Action &action);
/// Long form for diagnostics, e.g. "Recv(activation, boundary 2, mb 0, from
/// rank 1)".
std::string describeAction(const Action &action);
/// A header line, then every rank's list of short tokens, wrapped at ~`width`
/// columns.
std::string formatSchedule(const Schedule &schedule, int width = 100);

} // namespace lamina::schedule

#endif // LAMINA_SCHEDULE_SCHEDULE_H
