//===- StepCallsTest.cpp - a rank's actions as its compiled step's calls --===//

#include "lamina/Schedule/StepCalls.h"

#include "ScheduleTestUtil.h"

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <set>
#include <tuple>

using namespace lamina::schedule;
using lamina::schedule::test::config;
using lamina::schedule::test::kAllKinds;

namespace {

using Key = std::tuple<Payload, int, int, int>; // payload, boundary, mb, peer

Key keyOf(const StepCall &c) {
  return {c.payload, c.module, c.microBatch, c.peer};
}

/// The calls of one list, checked against it.
void checkCalls(const std::vector<Action> &list, int zero,
                const std::string &where) {
  SCOPED_TRACE(where);
  std::vector<StepCall> calls = lowerStep(list, zero);
  // Without the posts and the uses of gathered weights, the calls are the
  // actions, in order.
  std::vector<Action> actions;
  std::map<int, std::deque<Key>> posted; // per peer, in posting order
  std::map<int, int> gathered;           // ZeRO 3: gathers not yet used
  int runModule = -1;
  bool inUse = false;
  // Gradient reductions in flight: levels 2-3 in order, levels 0-1 any.
  std::deque<int> scatters;
  std::multiset<int> reductions;
  std::set<int> open;       // levels 2-3: modules with a full gradient
  int pendingBackward = -1; // a backward whose Accumulate is due
  std::map<Key, int> sending; // sends in flight: compute calls since
  bool atEnd = false;         // the end-of-step waits have started
  for (const StepCall &c : calls) {
    if (pendingBackward >= 0) {
      EXPECT_TRUE(c.kind == CallKind::WaitGradients ||
                  c.kind == CallKind::Accumulate)
          << "only waits between a backward and its accumulate";
    }
    switch (c.kind) {
    case CallKind::Accumulate:
      EXPECT_EQ(c.module, pendingBackward);
      pendingBackward = -1;
      // Levels 2-3: a new full gradient only with at most one other in
      // flight.
      if (zero >= 2 && open.insert(c.module).second) {
        EXPECT_LE(scatters.size(), 1u);
      }
      continue;
    case CallKind::WaitGradients:
      if (zero >= 2) {
        ASSERT_FALSE(scatters.empty());
        EXPECT_EQ(scatters.front(), c.module) << "waited out of order";
        scatters.pop_front();
      } else {
        ASSERT_EQ(reductions.count(c.module), 1u);
        reductions.erase(c.module);
      }
      continue;
    case CallKind::PostRecv:
      posted[c.peer].push_back(keyOf(c));
      // The next receive from a peer is posted only once the one before
      // it is about to be waited for: at most two outstanding per peer.
      EXPECT_LE(posted[c.peer].size(), 2u);
      continue;
    case CallKind::UseWeights:
      EXPECT_EQ(zero, 3);
      EXPECT_GT(gathered[c.module]--, 0)
          << "module " << c.module << " used before its gather";
      runModule = c.module;
      inUse = true;
      continue;
    case CallKind::Recv: {
      // Waited for in posting order: NCCL matches a pair's transfers in
      // order.
      ASSERT_FALSE(posted[c.peer].empty());
      EXPECT_EQ(posted[c.peer].front(), keyOf(c));
      posted[c.peer].pop_front();
      actions.push_back(
          {ActionKind::Recv, c.payload, c.module, c.microBatch, c.peer});
      continue;
    }
    case CallKind::WaitSend:
      ASSERT_EQ(sending.count(keyOf(c)), 1u) << "a wait for no send";
      // Before the second compute call after the send; with none after
      // it, at the end.
      if (sending[keyOf(c)] == 0)
        atEnd = true;
      else
        EXPECT_EQ(sending[keyOf(c)], 1) << "waited for too early";
      sending.erase(keyOf(c));
      continue;
    case CallKind::Forward:
    case CallKind::Backward: {
      bool bwd = c.kind == CallKind::Backward;
      EXPECT_FALSE(atEnd) << "a send waited for early, a compute call after";
      for (auto &[key, computed] : sending)
        EXPECT_EQ(computed++, 0) << "a send in flight past its second "
                                    "compute call";
      // ZeRO 3: the call reads weights its module's UseWeights took.
      if (zero == 3) {
        EXPECT_TRUE(inUse && runModule == c.module) << "module " << c.module;
      }
      if (bwd)
        pendingBackward = c.module;
      actions.push_back({bwd ? ActionKind::Backward : ActionKind::Forward,
                         c.payload, c.module, c.microBatch, c.peer});
      continue;
    }
    case CallKind::Send:
      sending[keyOf(c)] = 0;
      actions.push_back(
          {ActionKind::Send, c.payload, c.module, c.microBatch, c.peer});
      continue;
    case CallKind::AllGather:
      ++gathered[c.module];
      actions.push_back(
          {ActionKind::AllGather, c.payload, c.module, c.microBatch, c.peer});
      continue;
    case CallKind::ReduceScatter:
      if (zero >= 2) {
        scatters.push_back(c.module);
        open.erase(c.module);
      } else {
        reductions.insert(c.module);
      }
      actions.push_back({ActionKind::ReduceScatter, c.payload, c.module,
                         c.microBatch, c.peer});
      continue;
    case CallKind::AllReduce:
      reductions.insert(c.module);
      actions.push_back(
          {ActionKind::AllReduce, c.payload, c.module, c.microBatch, c.peer});
      continue;
    case CallKind::WaitWeights:
      EXPECT_TRUE(zero == 1 || zero == 2);
      EXPECT_GT(gathered[c.module]--, 0)
          << "module " << c.module << " waited for without a gather";
      continue;
    case CallKind::SumShared:
    case CallKind::WaitSharedSum:
    case CallKind::GatherShared:
    case CallKind::WaitSharedGather:
      ADD_FAILURE() << "no shared parameters here";
      continue;
    case CallKind::OptimizerStep:
      inUse = false;
      EXPECT_TRUE(scatters.empty() && reductions.empty())
          << "the optimizer runs before a gradient reduction is waited for";
      actions.push_back({ActionKind::OptimizerStep, c.payload, c.module,
                         c.microBatch, c.peer});
      continue;
    }
  }
  ASSERT_EQ(actions.size(), list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    EXPECT_EQ(actions[i].kind, list[i].kind) << "call " << i;
    EXPECT_EQ(actions[i].module, list[i].module) << "call " << i;
    EXPECT_EQ(actions[i].microBatch, list[i].microBatch) << "call " << i;
    if (list[i].kind == ActionKind::Send || list[i].kind == ActionKind::Recv) {
      EXPECT_EQ(actions[i].payload, list[i].payload) << "call " << i;
      EXPECT_EQ(actions[i].peer, list[i].peer) << "call " << i;
    }
  }
  EXPECT_TRUE(sending.empty()) << "a send never waited for";
  for (const auto &[peer, left] : posted)
    EXPECT_TRUE(left.empty())
        << "a receive from " << peer << " is posted and never waited for";
  // Levels 1-2: every gather after the optimizer is waited for; level 3:
  // every one is used.
  for (const auto &[module, left] : gathered)
    EXPECT_EQ(left, 0) << "module " << module << "'s gathers";
}

TEST(StepCalls, EveryScheduleLowersToItsActions) {
  int lists = 0;
  for (ScheduleKind kind : kAllKinds)
    for (int zero = 0; zero <= 3; ++zero)
      for (auto [L, p, m] :
           {std::tuple{2, 1, 2}, std::tuple{4, 2, 2}, std::tuple{4, 2, 4},
            std::tuple{6, 3, 3}, std::tuple{8, 4, 4}}) {
        Expected<Schedule> s = generateSchedule(config(kind, L, p, m, 2, zero));
        if (!s.ok())
          continue; // preconditions: GenerateTest covers them
        for (size_t g = 0; g < s->ranks.size(); ++g, ++lists)
          checkCalls(s->ranks[g], zero,
                     std::string(scheduleKindName(kind)) +
                         " L=" + std::to_string(L) + " p=" + std::to_string(p) +
                         " m=" + std::to_string(m) + " zero=" +
                         std::to_string(zero) + " rank=" + std::to_string(g));
      }
  EXPECT_GT(lists, 300);
}

TEST(StepCalls, ReceivesArePostedAheadOfTheirWait) {
  // Two receives from one peer: the first posted at the start, the second
  // right before the first is waited for.
  std::vector<Action> list = {
      Action::forward(0, 0),  Action::recv(Payload::ActivationGrad, 0, 0, 1),
      Action::backward(0, 0), Action::recv(Payload::ActivationGrad, 0, 1, 1),
      Action::backward(0, 1),
  };
  std::vector<StepCall> calls = lowerStep(list, 0);
  std::vector<CallKind> kinds;
  for (const StepCall &c : calls)
    kinds.push_back(c.kind);
  EXPECT_EQ(kinds,
            (std::vector<CallKind>{
                CallKind::PostRecv, CallKind::Forward, CallKind::PostRecv,
                CallKind::Recv, CallKind::Backward, CallKind::Accumulate,
                CallKind::Recv, CallKind::Backward, CallKind::Accumulate}));
  EXPECT_EQ(calls[0].microBatch, 0);
  EXPECT_EQ(calls[2].microBatch, 1);
}

TEST(StepCalls, ZeroThreeTakesWeightsOncePerRun) {
  std::vector<Action> list = {
      Action::allGather(0),
      Action::forward(0, 0),
      Action::send(Payload::Activation, 0, 0, 1),
      Action::forward(0, 1),
      Action::allGather(0),
      Action::backward(0, 1),
      Action::backward(0, 0),
      Action::reduceScatter(0),
      Action::optimizerStep(),
  };
  int uses = 0;
  for (const StepCall &c : lowerStep(list, 3))
    uses += c.kind == CallKind::UseWeights;
  EXPECT_EQ(uses, 2); // the forwards' run and the backwards'
  for (const StepCall &c : lowerStep(list, 2))
    EXPECT_NE(c.kind, CallKind::UseWeights);
}

TEST(StepCalls, ReduceScattersAreWaitedForAfterTheNextRunsBackward) {
  // Layered at ZeRO 2, two modules on one rank: module 1's reduce-scatter
  // stays in flight while module 0's backward runs; module 0's first
  // accumulate (a second full gradient) waits for nothing older; both
  // are waited for before the optimizer, oldest first.
  std::vector<Action> list = {
      Action::forward(0, 0),   Action::forward(1, 0),
      Action::backward(1, 0),  Action::reduceScatter(1),
      Action::backward(0, 0),  Action::reduceScatter(0),
      Action::optimizerStep(),
  };
  std::vector<std::pair<CallKind, int>> got;
  for (const StepCall &c : lowerStep(list, 2))
    got.push_back({c.kind, c.module});
  std::vector<std::pair<CallKind, int>> want = {
      {CallKind::Forward, 0},       {CallKind::Forward, 1},
      {CallKind::Backward, 1},      {CallKind::Accumulate, 1},
      {CallKind::ReduceScatter, 1}, {CallKind::Backward, 0},
      {CallKind::Accumulate, 0},    {CallKind::ReduceScatter, 0},
      {CallKind::WaitGradients, 1}, {CallKind::WaitGradients, 0},
      {CallKind::OptimizerStep, -1}};
  EXPECT_EQ(got, want);
  // Three modules: the third run's first backward waits for the oldest.
  list = {Action::forward(0, 0),    Action::forward(1, 0),
          Action::forward(2, 0),    Action::backward(2, 0),
          Action::reduceScatter(2), Action::backward(1, 0),
          Action::reduceScatter(1), Action::backward(0, 0),
          Action::reduceScatter(0), Action::optimizerStep()};
  got.clear();
  for (const StepCall &c : lowerStep(list, 2))
    got.push_back({c.kind, c.module});
  want = {{CallKind::Forward, 0},       {CallKind::Forward, 1},
          {CallKind::Forward, 2},       {CallKind::Backward, 2},
          {CallKind::Accumulate, 2},    {CallKind::ReduceScatter, 2},
          {CallKind::Backward, 1},      {CallKind::Accumulate, 1},
          {CallKind::ReduceScatter, 1}, {CallKind::Backward, 0},
          {CallKind::WaitGradients, 2}, {CallKind::Accumulate, 0},
          {CallKind::ReduceScatter, 0}, {CallKind::WaitGradients, 1},
          {CallKind::WaitGradients, 0}, {CallKind::OptimizerStep, -1}};
  EXPECT_EQ(got, want);
}

TEST(StepCalls, SharedParametersAreSummedAroundTheOptimizer) {
  // A tied embedding held by this rank and another: its gradient sum
  // (started for every shared parameter, then waited for) before the
  // optimizer; at ZeRO 1 its parts gathered after it and waited for at
  // the end, after the modules' parameter gathers.
  std::vector<std::pair<std::string, std::vector<int>>> readers = {
      {"emb", {0, 1}}, {"w0", {0}}, {"w1", {1}}, {"pos", {0, 1}}};
  std::vector<int> rankOf = {0, 1};
  std::vector<SharedParam> shared = sharedParamsOf(0, 2, 1, readers, rankOf);
  ASSERT_EQ(shared.size(), 2u);
  EXPECT_EQ(shared[0].name, "emb"); // by name: every holder alike
  EXPECT_EQ(shared[1].name, "pos");
  EXPECT_TRUE(shared[0].gathers);
  std::vector<Action> list = {Action::forward(0, 0), Action::backward(0, 0),
                              Action::reduceScatter(0), Action::optimizerStep(),
                              Action::allGather(0)};
  std::vector<std::pair<CallKind, std::string>> got;
  for (const StepCall &c : lowerStep(list, 1, shared))
    got.push_back({c.kind, c.name});
  std::vector<std::pair<CallKind, std::string>> want = {
      {CallKind::Forward, ""},
      {CallKind::Backward, ""},
      {CallKind::Accumulate, ""},
      {CallKind::ReduceScatter, ""},
      {CallKind::WaitGradients, ""},
      {CallKind::SumShared, "emb"},
      {CallKind::SumShared, "pos"},
      {CallKind::WaitSharedSum, "emb"},
      {CallKind::WaitSharedSum, "pos"},
      {CallKind::OptimizerStep, ""},
      {CallKind::GatherShared, "emb"},
      {CallKind::GatherShared, "pos"},
      {CallKind::AllGather, ""},
      {CallKind::WaitWeights, ""},
      {CallKind::WaitSharedGather, "emb"},
      {CallKind::WaitSharedGather, "pos"}};
  EXPECT_EQ(got, want);
  // One holder, one replica: nothing to sum. Both readers on one rank with
  // two replicas: summed over the replicas, whole at ZeRO 0.
  EXPECT_TRUE(sharedParamsOf(0, 1, 0, readers, {0, 0}).empty());
  std::vector<SharedParam> replicas = sharedParamsOf(0, 2, 0, readers, {0, 0});
  ASSERT_EQ(replicas.size(), 2u);
  EXPECT_FALSE(replicas[0].gathers);
  // One replica keeps them whole at every level (level 0 in effect).
  std::vector<SharedParam> one = sharedParamsOf(0, 1, 1, readers, rankOf);
  ASSERT_EQ(one.size(), 2u);
  EXPECT_FALSE(one[0].gathers);
  // A rank that holds none of the readers takes no part.
  EXPECT_TRUE(sharedParamsOf(2, 2, 1, readers, {0, 1}).empty());
}

TEST(StepCalls, SendsAreWaitedForAfterOneComputeCall) {
  // Each send overlaps the next forward or backward and is waited for
  // before the one after; the last at the end of the step.
  std::vector<Action> list = {
      Action::forward(0, 0),  Action::send(Payload::Activation, 0, 0, 1),
      Action::forward(0, 1),  Action::send(Payload::Activation, 0, 1, 1),
      Action::forward(0, 2),  Action::send(Payload::Activation, 0, 2, 1),
      Action::optimizerStep()};
  std::vector<std::pair<CallKind, int>> got;
  for (const StepCall &c : lowerStep(list, 0))
    got.push_back({c.kind, c.microBatch});
  std::vector<std::pair<CallKind, int>> want = {
      {CallKind::Forward, 0},  {CallKind::Send, 0},
      {CallKind::Forward, 1},  {CallKind::Send, 1},
      {CallKind::WaitSend, 0}, {CallKind::Forward, 2},
      {CallKind::Send, 2},     {CallKind::OptimizerStep, -1},
      {CallKind::WaitSend, 1}, {CallKind::WaitSend, 2}};
  EXPECT_EQ(got, want);
}

/// Every rank's lowered step of `s` (replica 0).
std::vector<std::vector<StepCall>> loweredSteps(const Schedule &s, int zero) {
  std::vector<std::vector<StepCall>> steps;
  for (int p = 0; p < s.config.pipelineRanks; ++p)
    steps.push_back(lowerStep(s.ranks[size_t(p)], zero));
  return steps;
}

TEST(StepCalls, EveryScheduleRunsToItsEnd) {
  int checked = 0;
  for (ScheduleKind kind : kAllKinds)
    for (int zero : {0, 3})
      for (auto [L, p, m] :
           {std::tuple{4, 2, 2}, std::tuple{4, 2, 4}, std::tuple{6, 3, 3},
            std::tuple{8, 4, 4}, std::tuple{8, 4, 8}, std::tuple{8, 2, 6}}) {
        Expected<Schedule> s = generateSchedule(config(kind, L, p, m, 2, zero));
        if (!s.ok())
          continue;
        ++checked;
        EXPECT_EQ(checkStepsComplete(loweredSteps(*s, zero)), "")
            << scheduleKindName(kind) << " L=" << L << " p=" << p << " m=" << m;
      }
  EXPECT_GT(checked, 30);
}

TEST(StepCalls, DirectStepsRunToTheirEndAndComposeToLowerStep) {
  // convert-dist-to-rt's output is deadlock-free before any pass moves a
  // wait, and the passes' edits applied one by one give lowerStep.
  int checked = 0;
  for (ScheduleKind kind : kAllKinds)
    for (int zero : {0, 1, 2, 3})
      for (auto [L, p, m] :
           {std::tuple{4, 2, 4}, std::tuple{6, 3, 3}, std::tuple{8, 4, 8}}) {
        Expected<Schedule> s = generateSchedule(config(kind, L, p, m, 2, zero));
        if (!s.ok())
          continue;
        ++checked;
        std::vector<std::vector<StepCall>> direct;
        for (int r = 0; r < p; ++r) {
          direct.push_back(directStep(s->ranks[size_t(r)], zero));
          std::vector<StepCall> calls = direct.back();
          // Each pass is idempotent: a second run changes nothing.
          calls = applyEdits(calls, postReceives(calls));
          EXPECT_TRUE(postReceives(calls).empty());
          calls = applyEdits(calls, waitSends(calls));
          EXPECT_TRUE(waitSends(calls).empty());
          calls = applyEdits(calls, retireReductions(calls, zero));
          EXPECT_TRUE(retireReductions(calls, zero).empty());
          std::vector<StepCall> lowered = lowerStep(s->ranks[size_t(r)], zero);
          ASSERT_EQ(calls.size(), lowered.size());
          for (size_t i = 0; i < calls.size(); ++i) {
            EXPECT_EQ(calls[i].kind, lowered[i].kind) << i;
            EXPECT_EQ(keyOf(calls[i]), keyOf(lowered[i])) << i;
          }
        }
        EXPECT_EQ(checkStepsComplete(direct), "")
            << scheduleKindName(kind) << " L=" << L << " p=" << p;
      }
  EXPECT_GT(checked, 40);
}

TEST(StepCalls, EditsMoveAndInsertInOrder) {
  auto call = [](CallKind k, int module) {
    StepCall c;
    c.kind = k;
    c.module = module;
    return c;
  };
  std::vector<StepCall> calls = {call(CallKind::Forward, 0),
                                 call(CallKind::Forward, 1),
                                 call(CallKind::WaitWeights, 2)};
  std::vector<StepCall> got =
      applyEdits(calls, {{1, 2, {}},
                         {1, -1, call(CallKind::UseWeights, 3)},
                         {3, -1, call(CallKind::OptimizerStep, -1)}});
  std::vector<std::pair<CallKind, int>> seq;
  for (const StepCall &c : got)
    seq.push_back({c.kind, c.module});
  std::vector<std::pair<CallKind, int>> want = {{CallKind::Forward, 0},
                                                {CallKind::WaitWeights, 2},
                                                {CallKind::UseWeights, 3},
                                                {CallKind::Forward, 1},
                                                {CallKind::OptimizerStep, -1}};
  EXPECT_EQ(seq, want);
}

TEST(StepCalls, DeadlockedStepsAreNamed) {
  // Each rank waits for the other's transfer before sending its own.
  std::vector<std::vector<StepCall>> steps(2);
  StepCall recv{CallKind::Recv, Payload::Activation, 0, 0, 1, ""};
  StepCall send{CallKind::Send, Payload::ActivationGrad, 0, 0, 1, ""};
  steps[0] = {recv, send};
  recv.peer = send.peer = 0;
  steps[1] = {recv, send};
  std::string stuck = checkStepsComplete(steps);
  EXPECT_NE(stuck.find("pipeline rank 0 waits forever at its call 0 (recv 0, "
                       "micro-batch 0, peer 1)"),
            std::string::npos)
      << stuck;
  EXPECT_NE(stuck.find("pipeline rank 1"), std::string::npos) << stuck;
  // A send waited for before its peer posts the receive, which the peer
  // does only after a transfer the sender starts later.
  StepCall a{CallKind::Send, Payload::Activation, 0, 0, 1, ""};
  StepCall waitA = a;
  waitA.kind = CallKind::WaitSend;
  StepCall b{CallKind::Send, Payload::Activation, 0, 1, 1, ""};
  StepCall recvB{CallKind::Recv, Payload::Activation, 0, 1, 0, ""};
  StepCall recvA{CallKind::Recv, Payload::Activation, 0, 0, 0, ""};
  steps[0] = {a, waitA, b};
  steps[1] = {recvB, recvA};
  EXPECT_NE(checkStepsComplete(steps), "");
  steps[0] = {a, b, waitA};
  EXPECT_EQ(checkStepsComplete(steps), "");
}

} // namespace
