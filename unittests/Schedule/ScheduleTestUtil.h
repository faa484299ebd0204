//===- ScheduleTestUtil.h - shared helpers of the schedule tests ----------===//
#ifndef LAMINA_UNITTESTS_SCHEDULE_SCHEDULETESTUTIL_H
#define LAMINA_UNITTESTS_SCHEDULE_SCHEDULETESTUTIL_H

#include "lamina/Schedule/Schedule.h"

#include <gtest/gtest.h>

namespace lamina::schedule::test {

inline constexpr ScheduleKind kAllKinds[] = {
    ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved1F1B,
    ScheduleKind::BreadthFirst, ScheduleKind::Layered};

inline ScheduleConfig config(ScheduleKind kind, int L, int p, int m, int d = 1,
                             int zero = 0) {
  ScheduleConfig c;
  c.kind = kind;
  c.numModules = L;
  c.pipelineRanks = p;
  c.microBatches = m;
  c.dataParallel = d;
  c.zeroLevel = zero;
  return c;
}

/// A schedule the test expects to be generated.
inline Schedule make(ScheduleKind kind, int L, int p, int m, int d = 1,
                     int zero = 0) {
  Expected<Schedule> s = generateSchedule(config(kind, L, p, m, d, zero));
  EXPECT_TRUE(s.ok()) << s.error();
  return *s;
}

} // namespace lamina::schedule::test

#endif
