//===- TimelineTest.cpp - simulated step times and bubbles ----------------===//

#include "lamina/Schedule/Simulate.h"

#include "ScheduleTestUtil.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace lamina::schedule;
using lamina::schedule::test::make;

namespace {


Timeline simulate(const Schedule &s, const CostModel &cost) {
  Expected<Timeline> t = simulateTimeline(s, cost);
  EXPECT_TRUE(t.ok()) << t.error();
  return *t;
}

CostModel compute(double tf, double tb) {
  CostModel c;
  c.forward = {tf};
  c.backward = {tb};
  return c;
}

const ActionTime &timeOf(const Schedule &s, const Timeline &t, int g,
                         const Action &a) {
  for (size_t i = 0; i < s.ranks[g].size(); ++i)
    if (s.ranks[g][i] == a)
      return t.times[g][i];
  ADD_FAILURE() << "no " << describeAction(a);
  return t.times[g][0];
}

// GPipe and 1F1B, k = L/p modules per stage, forward tf and backward tb per
// module, no communication time. In GPipe stage r runs the forward of mb j
// in [(r + j) k tf, (r + j + 1) k tf): every stage starts r slots late and
// the last stage ends its forwards at (m + p - 1) k tf. The backwards mirror
// it from there and take (m + p - 1) k tb. So
//   step = (m + p - 1) k (tf + tb),  busy = m k (tf + tb) on every stage,
//   bubble = 1 - busy / step = (p - 1) / (m + p - 1).
// 1F1B reorders work inside the same dependency chains: the first stage still
// waits p - 1 slots for its first gradient and the last stage p - 1 slots for
// its first input, so the step is the same.
TEST(Timeline, GPipeAndOneFOneBBubble) {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB})
    for (int p = 1; p <= 4; ++p)
      for (int m = 1; m <= 8; ++m)
        for (double tb : {1.0, 2.0}) {
          const int k = 2, L = k * p;
          Schedule s = make(kind, L, p, m);
          Timeline t = simulate(s, compute(1, tb));
          SCOPED_TRACE(std::string(scheduleKindName(kind)) + " p=" +
                       std::to_string(p) + " m=" + std::to_string(m));
          EXPECT_DOUBLE_EQ(t.stepTime, (m + p - 1) * k * (1 + tb));
          EXPECT_NEAR(t.bubbleFraction, (p - 1.0) / (m + p - 1), 1e-12);
          for (int g = 0; g < s.numRanks(); ++g) {
            EXPECT_DOUBLE_EQ(t.busy[g], m * k * (1 + tb));
            EXPECT_DOUBLE_EQ(t.idle[g], t.stepTime - t.busy[g]);
          }
        }
}

// Interleaved 1F1B with v chunks per rank and m a multiple of p: the fill and
// drain still cost p - 1 slots, but a slot is now one chunk (1/v of a stage),
// so in chunk units busy = v m (tf + tb), idle = (p - 1)(tf + tb) and
//   bubble = (p - 1) / (v m + p - 1),
// strictly below 1F1B's (p - 1) / (m + p - 1) whenever v > 1.
TEST(Timeline, InterleavedReducesTheBubble) {
  for (int p = 2; p <= 4; ++p)
    for (int v = 1; v <= 3; ++v)
      for (int m = p; m <= 3 * p; m += p)
        for (double tb : {1.0, 2.0}) {
          SCOPED_TRACE("p=" + std::to_string(p) + " v=" + std::to_string(v) +
                       " m=" + std::to_string(m));
          Schedule s = make(ScheduleKind::Interleaved1F1B, v * p, p, m);
          Timeline t = simulate(s, compute(1, tb));
          EXPECT_NEAR(t.bubbleFraction, (p - 1.0) / (v * m + p - 1), 1e-12);
          Timeline base =
              simulate(make(ScheduleKind::OneFOneB, v * p, p, m), compute(1, tb));
          if (v > 1)
            EXPECT_LT(t.bubbleFraction, base.bubbleFraction);
          else
            EXPECT_NEAR(t.bubbleFraction, base.bubbleFraction, 1e-12);
        }
}

// Breadth-first (LGA + modular placement), L/p modules per rank, m >= p. Rank
// r starts module r's forwards at r tf (module r - 1 has produced mb 0) and
// then never waits: module l + p needs module l + p - 1's output for mb 0,
// produced p - 1 slots after this rank produced module l's mb 0, and the rank
// is busy with module l's m >= p micro-batches meanwhile. So every rank runs
// (L/p) m forwards back to back from r tf, the backwards mirror it, and
//   step = ((L/p) m + p - 1)(tf + tb),  bubble = (p - 1) / ((L/p) m + p - 1).
TEST(Timeline, BreadthFirstBubble) {
  for (int p = 1; p <= 4; ++p)
    for (int v = 1; v <= 3; ++v)
      for (int m = p; m <= p + 4; ++m) {
        SCOPED_TRACE("p=" + std::to_string(p) + " L/p=" + std::to_string(v) +
                     " m=" + std::to_string(m));
        Schedule s = make(ScheduleKind::BreadthFirst, v * p, p, m);
        Timeline t = simulate(s, compute(1, 2));
        EXPECT_DOUBLE_EQ(t.stepTime, (v * m + p - 1) * 3.0);
        EXPECT_NEAR(t.bubbleFraction, (p - 1.0) / (v * m + p - 1), 1e-12);
        if (p > 1) {
          Timeline gp = simulate(make(ScheduleKind::GPipe, v * p, p, m),
                                 compute(1, 2));
          if (v > 1) {
            EXPECT_LT(t.bubbleFraction, gp.bubbleFraction);
          }
        }
      }
  Timeline layered = simulate(make(ScheduleKind::Layered, 4, 1, 3), compute(1, 2));
  EXPECT_EQ(layered.bubbleFraction, 0);
  EXPECT_DOUBLE_EQ(layered.stepTime, 4 * 3 * 3.0);
}

TEST(Timeline, PointToPointByHand) {
  // gpipe L=2 p=2 m=1, tf=1, tb=2, p2p=0.5:
  // F0 [0,1], send [1,1.5], F1 [1.5,2.5], B1 [2.5,4.5], send [4.5,5], B0 [5,7].
  Schedule s = make(ScheduleKind::GPipe, 2, 2, 1);
  CostModel c = compute(1, 2);
  c.p2p = 0.5;
  Timeline t = simulate(s, c);
  EXPECT_DOUBLE_EQ(t.stepTime, 7);
  EXPECT_DOUBLE_EQ(timeOf(s, t, 1, Action::forward(1, 0)).start, 1.5);
  EXPECT_DOUBLE_EQ(timeOf(s, t, 1, Action::backward(1, 0)).end, 4.5);
  const ActionTime &recv =
      timeOf(s, t, 0, Action::recv(Payload::ActivationGrad, 0, 0, 1));
  EXPECT_DOUBLE_EQ(recv.start, 0); // posted at once, waits for the send
  EXPECT_DOUBLE_EQ(recv.end, 5);
  EXPECT_DOUBLE_EQ(timeOf(s, t, 0, Action::backward(0, 0)).start, 5);
  EXPECT_DOUBLE_EQ(t.busy[0], 3);
  EXPECT_DOUBLE_EQ(t.busy[1], 3);
}

TEST(Timeline, PointToPointOverlapsBreadthFirstCompute) {
  // Receives are posted ahead, so a transfer shorter than a forward only
  // delays the fill: each of the p - 1 hops of mb 0 down and of the
  // gradient back adds its time once.
  Schedule s = make(ScheduleKind::BreadthFirst, 8, 4, 8);
  double base = simulate(s, compute(1, 2)).stepTime;
  CostModel c = compute(1, 2);
  c.p2p = 0.25;
  double with = simulate(s, c).stepTime;
  EXPECT_DOUBLE_EQ(with, base + 2 * 3 * 0.25);
}

// Sharding level 3, layered (LGA): 2 all-gathers + 1 reduce-scatter per
// module, issued one run ahead, hide behind the m micro-batches of the
// previous module; only the first gather and the last reduce-scatter are
// exposed. Depth-first accumulation (gpipe, p = 1) gathers before every
// forward and backward, and with gathers slower than a forward it is
// communication bound.
TEST(Timeline, LayeredHidesLevel3Collectives) {
  const int L = 4, m = 4;
  CostModel c = compute(1, 2);
  c.allGather = c.reduceScatter = 1.5;
  Schedule lga = make(ScheduleKind::Layered, L, 1, m, 2, 3);
  Timeline t = simulate(lga, c);
  EXPECT_DOUBLE_EQ(t.stepTime, 1.5 + L * m * 3.0 + 1.5);
  Schedule df = make(ScheduleKind::GPipe, L, 1, m, 2, 3);
  Timeline tdf = simulate(df, c);
  EXPECT_GT(tdf.stepTime, t.stepTime + 10);
  EXPECT_GT(tdf.bubbleFraction, 3 * t.bubbleFraction);
}

TEST(Timeline, AllReduceOverlapsEarlierBackwards) {
  // Level 0: module l's all-reduce runs while module l - 1 computes its
  // backwards, so only the last module's (module 0) is exposed.
  Schedule s = make(ScheduleKind::Layered, 3, 1, 2, 2, 0);
  CostModel c = compute(1, 2);
  c.allReduce = 2;
  c.optimizer = 1;
  Timeline t = simulate(s, c);
  EXPECT_DOUBLE_EQ(t.stepTime, 3 * 2 * 3.0 + 2 + 1);
  const ActionTime &ar2 = timeOf(s, t, 0, Action::allReduce(2));
  EXPECT_DOUBLE_EQ(ar2.start, 3 * 2 * 1.0 + 2 * 2.0);
  EXPECT_DOUBLE_EQ(t.busy[0], 3 * 2 * 3.0 + 1);
}

TEST(Timeline, CallbackAndPerModuleCosts) {
  Schedule s = make(ScheduleKind::GPipe, 4, 2, 2);
  CostModel c;
  c.forward = {1, 2, 3, 4};
  c.backward = {2, 4, 6, 8};
  Timeline t = simulate(s, c);
  EXPECT_DOUBLE_EQ(t.busy[0], 2 * (1 + 2 + 2 + 4));
  EXPECT_DOUBLE_EQ(t.busy[1], 2 * (3 + 4 + 6 + 8));
  // The same through a callback.
  Expected<Timeline> viaFn =
      simulateTimeline(s, [](int, const Action &a) -> double {
        if (a.kind == ActionKind::Forward)
          return a.module + 1;
        return a.kind == ActionKind::Backward ? 2 * (a.module + 1) : 0;
      });
  ASSERT_TRUE(viaFn.ok());
  EXPECT_DOUBLE_EQ(viaFn->stepTime, t.stepTime);
}

TEST(Timeline, Errors) {
  Schedule s = make(ScheduleKind::GPipe, 4, 2, 2);
  CostModel wrong;
  wrong.forward = {1, 2};
  Expected<Timeline> a = simulateTimeline(s, wrong);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().find("1 or L = 4"), std::string::npos) << a.error();
  Expected<Timeline> b =
      simulateTimeline(s, [](int, const Action &) { return -1.0; });
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().find("must be finite and >= 0"), std::string::npos);
  s.ranks[1].erase(s.ranks[1].begin()); // the first receive
  Expected<Timeline> c = simulateTimeline(s, compute(1, 2));
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().find("unmatched send"), std::string::npos) << c.error();
}

TEST(Timeline, FormatTimeline) {
  Schedule s = make(ScheduleKind::GPipe, 4, 2, 2);
  Timeline t = simulate(s, compute(1, 2));
  EXPECT_EQ(formatTimeline(s, t),
            "   | 0    1    2    3    4    5    6    7    8    9    10   11   "
            "12   13   14   15   16   17\n"
            "r0 | F0.0 F1.0 F0.1 F1.1 .    .    .    .    .    .    B1.0----- "
            "B0.0----- B1.1----- B0.1-----\n"
            "r1 | .    .    F2.0 F3.0 F2.1 F3.1 B3.0----- B2.0----- B3.1----- "
            "B2.1----- .    .    .    .\n"
            "step 18, bubble 33.3%\n");
  // Communication that takes time gets its own rows.
  Schedule dp = make(ScheduleKind::BreadthFirst, 4, 2, 2, 2, 3);
  CostModel c = compute(1, 2);
  c.p2p = 1;
  c.allGather = 1;
  std::string chart = formatTimeline(dp, simulate(dp, c));
  EXPECT_NE(chart.find("r3 p2p | "), std::string::npos) << chart;
  EXPECT_NE(chart.find("r3 dp  | AG1-"), std::string::npos) << chart;
  EXPECT_NE(chart.find(" a1.0 "), std::string::npos) << chart;
}

} // namespace
