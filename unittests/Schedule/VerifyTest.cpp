//===- VerifyTest.cpp - broken schedules yield diagnostics, not hangs -----===//

#include "lamina/Schedule/Simulate.h"

#include "ScheduleTestUtil.h"

#include <gtest/gtest.h>

#include <random>

using namespace lamina::schedule;

namespace {
/// A generated schedule that also verifies.
Schedule make(ScheduleKind kind, int L, int p, int m, int d = 1, int zero = 0) {
  Schedule s = test::make(kind, L, p, m, d, zero);
  EXPECT_TRUE(verifySchedule(s).ok());
  return s;
}


size_t find(const std::vector<Action> &list, const Action &a) {
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i] == a)
      return i;
  ADD_FAILURE() << "no " << describeAction(a);
  return 0;
}

// Moves list[from] so that it ends up at index `to`.
void move(std::vector<Action> &list, size_t from, size_t to) {
  Action a = list[from];
  list.erase(list.begin() + from);
  list.insert(list.begin() + to, a);
}

std::string failure(const Schedule &s) {
  Status st = verifySchedule(s);
  EXPECT_FALSE(st.ok()) << formatSchedule(s);
  return st.message();
}

#define EXPECT_CONTAINS(text, part)                                            \
  EXPECT_NE((text).find(part), std::string::npos) << (text)

TEST(Verify, DroppedReceiveIsUnmatchedSend) {
  Schedule s = make(ScheduleKind::OneFOneB, 4, 2, 3);
  auto &r1 = s.ranks[1];
  r1.erase(r1.begin() + find(r1, Action::recv(Payload::Activation, 1, 2, 0)));
  std::string msg = failure(s);
  EXPECT_CONTAINS(msg, "unmatched send: rank 0 (pp 0, dp 0)");
  EXPECT_CONTAINS(msg, "Send(activation, boundary 1, mb 2, to rank 1)");
}

TEST(Verify, DroppedSendIsUnmatchedReceive) {
  Schedule s = make(ScheduleKind::GPipe, 2, 2, 2);
  auto &r1 = s.ranks[1];
  r1.erase(r1.begin() +
           find(r1, Action::send(Payload::ActivationGrad, 0, 1, 0)));
  EXPECT_CONTAINS(failure(s), "unmatched receive: rank 0");
}

// breadth-first, L=4, p=2, m=2: rank 0 runs modules 0 and 2, rank 1 modules
// 1 and 3. Swapping rank 0's receive of module 1's output (input of F2.0)
// with its receive of module 1's gradient (input of B0.0) makes rank 0 wait
// for a gradient that needs module 3's forward, which waits for F2.0 on
// rank 0: a cycle.
TEST(Verify, SwappedReceivesDeadlockWithDiagnostic) {
  Schedule s = make(ScheduleKind::BreadthFirst, 4, 2, 2);
  auto &r0 = s.ranks[0];
  std::swap(r0[find(r0, Action::recv(Payload::Activation, 1, 0, 1))],
            r0[find(r0, Action::recv(Payload::ActivationGrad, 0, 0, 1))]);
  std::string msg = failure(s);
  EXPECT_CONTAINS(msg, "deadlock: no rank can progress; 2 of 2 ranks blocked");
  EXPECT_CONTAINS(msg, "rank 0 (pp 0, dp 0) action #4 Recv(gradient, "
                       "boundary 0, mb 0, from rank 1) waits for rank 1");
  EXPECT_CONTAINS(msg, "rank 1 (pp 1, dp 0) action #6 Recv(activation, "
                       "boundary 2, mb 0, from rank 0) waits for rank 0");
  EXPECT_CONTAINS(msg, "wait cycle: rank 0 -> rank 1 -> rank 0");
}

TEST(Verify, HoistedGradientReceiveDeadlocks) {
  // Every local dependency still holds (the receive only moved earlier), so
  // only the simulation can find this.
  Schedule s = make(ScheduleKind::OneFOneB, 3, 3, 3);
  auto &r1 = s.ranks[1];
  move(r1, find(r1, Action::recv(Payload::ActivationGrad, 1, 0, 2)), 0);
  std::string msg = failure(s);
  EXPECT_CONTAINS(msg, "deadlock");
  EXPECT_CONTAINS(msg, "wait cycle: rank 1 -> rank 2 -> rank 1");
  EXPECT_CONTAINS(msg, "rank 0 (pp 0, dp 0) action #");
}

TEST(Verify, CollectiveAndPointToPointCycle) {
  // gpipe L=2 p=2 d=2: groups {0, 2} and {1, 3}. Rank 2 enters its
  // all-reduce before sending to rank 3; rank 1 enters its all-reduce before
  // sending to rank 0. 2 waits for 0 (collective), 0 for 1 (receive), 1 for
  // 3 (collective), 3 for 2 (receive).
  Schedule s = make(ScheduleKind::GPipe, 2, 2, 1, 2, 0);
  auto &r2 = s.ranks[2];
  move(r2, find(r2, Action::allReduce(0)), 1);
  auto &r1 = s.ranks[1];
  move(r1, find(r1, Action::allReduce(1)),
       find(r1, Action::send(Payload::ActivationGrad, 0, 0, 0)));
  std::string msg = failure(s);
  EXPECT_CONTAINS(msg, "4 of 4 ranks blocked");
  EXPECT_CONTAINS(msg, "waits in a data-parallel collective for rank 0");
  EXPECT_CONTAINS(msg, "wait cycle: rank 0 -> rank 1 -> rank 3 -> rank 2 -> "
                       "rank 0");
}

TEST(Verify, MissingInputNamesTheAction) {
  // Moving a receive after its consumer leaves the forward without input.
  Schedule s = make(ScheduleKind::GPipe, 2, 2, 2);
  auto &r1 = s.ranks[1];
  size_t i = find(r1, Action::recv(Payload::Activation, 0, 0, 0));
  move(r1, i, i + 1);
  EXPECT_CONTAINS(failure(s), "rank 1 (pp 1, dp 0) action #0 Forward(module "
                              "1, mb 0): its input, module 0's activation "
                              "for mb 0, is not available");
}

TEST(Verify, LocalDependencies) {
  {
    Schedule s = make(ScheduleKind::Layered, 2, 1, 1);
    auto &r = s.ranks[0]; // F0.0 F1.0 B1.0 B0.0 OPT
    std::swap(r[1], r[2]);
    EXPECT_CONTAINS(failure(s), "no earlier Forward(module 1, mb 0)");
  }
  {
    Schedule s = make(ScheduleKind::Layered, 2, 1, 1);
    std::swap(s.ranks[0][2], s.ranks[0][3]); // B0.0 before B1.0
    EXPECT_CONTAINS(failure(s), "the gradient of its output (from module 1");
  }
  {
    Schedule s = make(ScheduleKind::Layered, 2, 1, 2);
    s.ranks[0][1] = Action::forward(0, 0);
    EXPECT_CONTAINS(failure(s), "repeats action #0");
  }
  {
    Schedule s = make(ScheduleKind::Layered, 2, 1, 2);
    auto &r = s.ranks[0];
    r.erase(r.begin() + find(r, Action::backward(0, 1)));
    EXPECT_CONTAINS(failure(s), "never runs Backward(module 0, mb 1)");
  }
  {
    Schedule s = make(ScheduleKind::Layered, 2, 1, 1);
    move(s.ranks[0], s.ranks[0].size() - 1, 0); // optimizer first
    EXPECT_CONTAINS(failure(s), "runs after the optimizer step");
  }
  {
    Schedule s = make(ScheduleKind::GPipe, 2, 2, 1);
    auto &r0 = s.ranks[0]; // F0.0 Sa0.0>1 Rg0.0<1 B0.0 OPT
    std::swap(r0[0], r0[1]);
    EXPECT_CONTAINS(failure(s), "sends before Forward(module 0, mb 0)");
  }
}

TEST(Verify, ShardingRules) {
  {
    // Level 3: weights must be gathered before use.
    Schedule s = make(ScheduleKind::Layered, 2, 1, 2, 2, 3);
    for (auto &list : s.ranks)
      list.erase(list.begin()); // the first AG0
    EXPECT_CONTAINS(failure(s), "module 0's weights are never all-gathered");
  }
  {
    // Level 0: every gradient all-reduced before the optimizer step.
    Schedule s = make(ScheduleKind::Layered, 2, 1, 2, 2, 0);
    for (auto &list : s.ranks)
      list.erase(list.begin() + find(list, Action::allReduce(0)));
    EXPECT_CONTAINS(failure(s), "the gradient of module 0 (Backward at action "
                                "#8) is not reduced");
  }
  {
    // Level 1: parameters re-gathered after the step.
    Schedule s = make(ScheduleKind::Layered, 2, 1, 2, 2, 1);
    for (auto &list : s.ranks)
      list.pop_back();
    EXPECT_CONTAINS(failure(s), "never all-gathers module 1's updated");
  }
  {
    // The wrong collective for the level.
    Schedule s = make(ScheduleKind::Layered, 2, 1, 2, 2, 0);
    for (auto &list : s.ranks)
      list[find(list, Action::allReduce(1))] = Action::reduceScatter(1);
    EXPECT_CONTAINS(failure(s), "sharding level 0 uses all-reduce");
  }
  {
    // A reduction with no gradient since the previous one.
    Schedule s = make(ScheduleKind::Layered, 2, 1, 2, 2, 0);
    for (auto &list : s.ranks)
      move(list, find(list, Action::allReduce(0)), 0);
    EXPECT_CONTAINS(failure(s), "no new gradient of module 0");
  }
}

TEST(Verify, CollectiveMismatchAndCount) {
  {
    Schedule s = make(ScheduleKind::Layered, 2, 1, 2, 2, 0);
    auto &r1 = s.ranks[1];
    std::swap(r1[find(r1, Action::allReduce(0))],
              r1[find(r1, Action::allReduce(1))]);
    EXPECT_CONTAINS(failure(s), "collective mismatch in the data-parallel "
                                "group of pipeline rank 0");
  }
  {
    Schedule s = make(ScheduleKind::BreadthFirst, 4, 2, 2, 2, 3);
    auto &r3 = s.ranks[3];
    r3.erase(r3.begin() + find(r3, Action::reduceScatter(3)));
    EXPECT_CONTAINS(failure(s), "rank 1 (pp 1, dp 0) issues 6 collectives but "
                                "rank 3 (pp 1, dp 1) issues 5");
  }
}

TEST(Verify, MalformedActions) {
  auto broken = [](auto edit) {
    Schedule s = make(ScheduleKind::GPipe, 4, 2, 2);
    edit(s);
    return failure(s);
  };
  EXPECT_CONTAINS(broken([](Schedule &s) { s.ranks[0][0].module = 2; }),
                  "module 2 is placed on pipeline rank 1");
  EXPECT_CONTAINS(broken([](Schedule &s) { s.ranks[0][0].microBatch = 9; }),
                  "out of range");
  EXPECT_CONTAINS(broken([](Schedule &s) { s.ranks[0][2].peer = 0; }),
                  "peer must be another rank");
  EXPECT_CONTAINS(broken([](Schedule &s) { s.ranks[0][2].module = 0; }),
                  "boundary 0 runs from pipeline rank 0 to 0");
  EXPECT_CONTAINS(broken([](Schedule &s) { s.ranks.pop_back(); }),
                  "expected p * d = 2");
  EXPECT_CONTAINS(
      broken([](Schedule &s) { s.placement.rankOf[0] = 5; }),
      "placement puts module 0 on pipeline rank 5");
  EXPECT_CONTAINS(broken([](Schedule &s) {
                    s.ranks[0].push_back(Action::send(Payload::Activation, 1,
                                                      0, 1));
                  }),
                  "duplicate send");
}

// Random edits of valid schedules: verification always terminates with ok or
// a diagnostic, and whatever it accepts the timeline can time (the timeline's
// constraints are implied by the verifier's sequential order).
TEST(Verify, RandomEditsNeverHang) {
  std::mt19937 rng(2024);
  const Schedule bases[] = {
      make(ScheduleKind::BreadthFirst, 6, 3, 4, 2, 3),
      make(ScheduleKind::Interleaved1F1B, 4, 2, 2, 2, 0),
      make(ScheduleKind::OneFOneB, 3, 3, 4, 2, 1),
  };
  int accepted = 0, rejected = 0;
  for (int trial = 0; trial < 600; ++trial) {
    Schedule s = bases[trial % 3];
    for (int edits = 1 + trial % 3; edits > 0; --edits) {
      auto &list = s.ranks[rng() % s.ranks.size()];
      size_t i = rng() % list.size(), j = rng() % list.size();
      switch (rng() % 3) {
      case 0:
        std::swap(list[i], list[j]);
        break;
      case 1:
        move(list, i, j);
        break;
      default:
        list.erase(list.begin() + i);
      }
    }
    Status st = verifySchedule(s);
    if (!st.ok()) {
      ++rejected;
      EXPECT_FALSE(st.message().empty());
      continue;
    }
    ++accepted;
    Expected<Timeline> t = simulateTimeline(s, CostModel{});
    EXPECT_TRUE(t.ok()) << t.error();
  }
  EXPECT_GT(rejected, 300);
  EXPECT_GT(accepted, 0); // some swaps are harmless, e.g. two collectives
}

// The evaluation step verifies as a forward-only schedule for every kind
// the grid generates, and not as a training one (no backward).
TEST(Verify, EvalSchedulesAreForwardOnly) {
  int checked = 0;
  for (ScheduleKind k : test::kAllKinds)
    for (int L : {1, 2, 4})
      for (int p : {1, 2})
        for (int d : {1, 2})
          for (int zero : {0, 3}) {
            ScheduleConfig c = test::config(k, L, p, 2, d, zero);
            Expected<Schedule> eval = generateEvalSchedule(c);
            if (!generateSchedule(c).ok()) {
              EXPECT_FALSE(eval.ok());
              continue;
            }
            ASSERT_TRUE(eval.ok()) << eval.error();
            EXPECT_TRUE(eval->config.forwardOnly);
            EXPECT_TRUE(verifySchedule(*eval).ok())
                << verifySchedule(*eval).message() << formatSchedule(*eval);
            Schedule training = *eval;
            training.config.forwardOnly = false;
            EXPECT_CONTAINS(failure(training), "never runs Backward");
            ++checked;
          }
  EXPECT_GT(checked, 20);
}

// A forward-only step refuses what only training does, and still needs
// every forward.
TEST(Verify, EvalScheduleRejectsTrainingActions) {
  ScheduleConfig c = test::config(ScheduleKind::GPipe, 2, 2, 1);
  Schedule s = *generateEvalSchedule(c);
  Schedule withBackward = s;
  withBackward.ranks[1].push_back(Action::backward(1, 0));
  EXPECT_CONTAINS(failure(withBackward), "forward-only (evaluation) step");
  Schedule missing = s;
  missing.ranks[0].clear();
  missing.ranks[1].clear();
  EXPECT_CONTAINS(failure(missing), "never runs Forward");
}

} // namespace
