//===- Simulate.h - schedule verification and timeline simulation ---------===//
//
// verifySchedule runs every rank's list in an event-driven simulation with
// buffered sends and blocking receives and collectives; simulateTimeline
// times a valid schedule on a compute stream and three communication streams
// per rank. Both are described in docs/schedules.md.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_SCHEDULE_SIMULATE_H
#define LAMINA_SCHEDULE_SIMULATE_H

#include "lamina/Schedule/Schedule.h"

#include <functional>
#include <string>
#include <vector>

namespace lamina::schedule {

/// Ok when the schedule is complete and cannot deadlock; otherwise one
/// diagnostic: a malformed action, an unmatched send or receive, a missing
/// dependency (with the rank and action index), a collective mismatch, or a
/// deadlock listing what every blocked rank waits on and the wait cycle.
/// Always terminates.
Status verifySchedule(const Schedule &schedule);

/// Durations for the timeline. forward/backward hold one value per module, or
/// a single value used for every module.
struct CostModel {
  std::vector<double> forward{1.0};
  std::vector<double> backward{2.0};
  double p2p = 0;           ///< one Send of an activation or its gradient
  double allGather = 0;     ///< one module's weights
  double reduceScatter = 0; ///< one module's gradients
  double allReduce = 0;     ///< one module's gradients
  double optimizer = 0;     ///< the whole optimizer step of a rank
};

/// Duration of `action` on global rank `rank`; must be finite and >= 0. A
/// Recv's own duration is ignored: it ends when the matching Send has ended.
using DurationFn = std::function<double(int rank, const Action &action)>;

struct ActionTime {
  double start = 0;
  double end = 0;
};

struct Timeline {
  /// Parallel to Schedule::ranks.
  std::vector<std::vector<ActionTime>> times;
  /// Latest end of any action on any rank (the step starts at 0).
  double stepTime = 0;
  /// Per global rank: time its compute stream is busy, and stepTime - busy.
  std::vector<double> busy;
  std::vector<double> idle;
  /// Sum of idle over sum of stepTime, over all ranks.
  double bubbleFraction = 0;
};

/// Verifies the schedule, then computes when every action starts and ends.
Expected<Timeline> simulateTimeline(const Schedule &schedule,
                                    const DurationFn &duration);
Expected<Timeline> simulateTimeline(const Schedule &schedule,
                                    const CostModel &cost);

/// ASCII Gantt chart: one row per rank for compute, plus rows for sends and
/// collectives that take time. One column is `unit` time (0: the smallest
/// positive compute duration).
std::string formatTimeline(const Schedule &schedule, const Timeline &timeline,
                           double unit = 0);

} // namespace lamina::schedule

#endif // LAMINA_SCHEDULE_SIMULATE_H
