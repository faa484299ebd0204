//===- StepBuffersTest.cpp - the memory plan of one rank's step -----------===//

#include "lamina/Schedule/StepBuffers.h"

#include "ScheduleTestUtil.h"

#include <gtest/gtest.h>

#include <map>

using namespace lamina::schedule;
using lamina::schedule::test::config;
using lamina::schedule::test::kAllKinds;

namespace {

/// Walks the calls as the runtime does and checks that no value is written
/// over another the step still holds, and that every value fits.
void checkDisjoint(const std::vector<StepCall> &calls, int numModules,
                   const StepBufferSizes &sizes, int zero, bool forwardOnly,
                   const StepBuffers &plan, const std::string &where) {
  SCOPED_TRACE(where);
  std::map<BufferKey, std::pair<int64_t, int64_t>> live; // [begin, end)
  auto size = [&](const BufferKey &k) {
    return sizes.of(std::get<0>(k))[size_t(std::get<1>(k))];
  };

  auto write = [&](BufferKey k) {
    if (size(k) == 0)
      return;
    int64_t at = plan.offsetOf(std::get<0>(k), std::get<1>(k), std::get<2>(k));
    ASSERT_GE(at, 0);
    ASSERT_LE(at + size(k), plan.bytes);
    for (const auto &[other, range] : live)
      EXPECT_TRUE(at + size(k) <= range.first || range.second <= at)
          << "a value is written over one the step holds";
    live[k] = {at, at + size(k)};
  };
  auto release = [&](BufferKey k) { live.erase(k); };
  auto transfer = [](const StepCall &c) {
    return BufferKey{c.payload == Payload::ActivationGrad
                         ? BufferKind::Gradient
                         : BufferKind::Activation,
                     c.module, c.microBatch};
  };
  // ZeRO, as the runtime holds its buffers: gathers per module (FIFO), the
  // run's weights, the open full gradient, the scatters in flight.
  std::map<int, std::vector<BufferKey>> gathers;
  std::map<std::pair<BufferKind, int>, int> count;
  std::map<int, BufferKey> open;
  std::map<int, bool> scattered;
  std::vector<std::vector<BufferKey>> scatters;
  std::vector<BufferKey> active;
  auto fresh = [&](BufferKind kind, int k) {
    return BufferKey{kind, k, count[{kind, k}]++};
  };
  auto endRun = [&] {
    for (const BufferKey &key : active)
      release(key);
    active.clear();
  };
  for (const StepCall &c : calls) {
    int k = c.module, j = c.microBatch;
    if (zero == 3 && c.kind == CallKind::AllGather) {
      gathers[k].push_back(fresh(BufferKind::Gathered, k));
      write(gathers[k].back());
    } else if (zero == 3 && c.kind == CallKind::UseWeights) {
      endRun();
      ASSERT_FALSE(gathers[k].empty());
      active = {gathers[k].front()};
      gathers[k].erase(gathers[k].begin());
    } else if (c.kind == CallKind::OptimizerStep) {
      endRun();
    } else if (zero >= 2 && c.kind == CallKind::Accumulate) {
      if (!open.count(k)) {
        open[k] = fresh(BufferKind::FullGradient, k);
        write(open[k]);
      }
    } else if (zero >= 2 && c.kind == CallKind::ReduceScatter) {
      if (!open.count(k)) {
        open[k] = fresh(BufferKind::FullGradient, k);
        write(open[k]);
      }
      scatters.push_back({open[k]});
      open.erase(k);
      if (scattered[k]) {
        scatters.back().push_back(fresh(BufferKind::GradientPart, k));
        write(scatters.back().back());
      }
      scattered[k] = true;
    } else if (zero >= 2 && c.kind == CallKind::WaitGradients) {
      ASSERT_FALSE(scatters.empty());
      for (const BufferKey &key : scatters.front())
        release(key);
      scatters.erase(scatters.begin());
    }
    switch (c.kind) {
    case CallKind::Forward:
      if (k < numModules - 1)
        write({BufferKind::Activation, k, j});
      if (!forwardOnly)
        write({BufferKind::Residual, k, j});
      if (forwardOnly && k > 0)
        release({BufferKind::Activation, k - 1, j});
      break;
    case CallKind::Backward:
      if (k > 0)
        write({BufferKind::Gradient, k - 1, j});
      release({BufferKind::Activation, k - 1, j});
      release({BufferKind::Residual, k, j});
      release({BufferKind::Gradient, k, j});
      break;
    case CallKind::PostRecv:
      write(transfer(c));
      break;
    case CallKind::WaitSend:
      release(transfer(c));
      break;
    default:
      break;
    }
  }
  endRun();
  EXPECT_TRUE(live.empty()) << "values left at the end of the step";
}

TEST(StepBuffers, EveryScheduleGetsADisjointPlan) {
  int plans = 0;
  for (ScheduleKind kind : kAllKinds)
    for (int zero : {0, 2, 3})
      for (auto [L, p, m] :
           {std::tuple{4, 1, 2}, std::tuple{4, 2, 2}, std::tuple{4, 2, 4},
            std::tuple{6, 3, 3}, std::tuple{8, 4, 8}}) {
        Expected<Schedule> s = generateSchedule(config(kind, L, p, m, 2, zero));
        if (!s.ok())
          continue;
        // Uneven sizes, a module without residuals; ZeRO's buffers.
        StepBufferSizes sizes;
        for (int k = 0; k < L; ++k) {
          sizes.activation.push_back(k < L - 1 ? 4096 + 64 * k : 0);
          sizes.gradient.push_back(k < L - 1 ? 4096 + 64 * k : 0);
          sizes.residual.push_back(k == 1 ? 0 : 1000 * (k + 1));
          sizes.gathered.push_back(zero == 3 ? 20000 + 128 * k : 0);
          sizes.fullGradient.push_back(40000 + 128 * k);
          sizes.gradientPart.push_back(20000 + 64 * k);
        }
        for (int g = 0; g < p; ++g, ++plans) {
          std::vector<StepCall> calls = lowerStep(s->ranks[size_t(g)], zero);
          StepBuffers plan;
          ASSERT_EQ(planStepBuffers(calls, L, sizes, zero, false, plan), "");
          checkDisjoint(
              calls, L, sizes, zero, false, plan,
              std::string(scheduleKindName(kind)) + " L=" + std::to_string(L) +
                  " p=" + std::to_string(p) + " m=" + std::to_string(m) +
                  " rank=" + std::to_string(g));
        }
      }
  EXPECT_GT(plans, 50);
}

TEST(StepBuffers, OneFOneBHoldsItsMicroBatchesInFlight) {
  // 1F1B, two modules on two ranks, two micro-batches, no residuals:
  // rank 0 keeps nothing of its own between forward and backward (module 0
  // reads only model inputs) but each sent value until its wait, and the
  // posted gradients; rank 1 holds the received values until its backward.
  Schedule s = test::make(ScheduleKind::OneFOneB, 2, 2, 2);
  StepBufferSizes sizes{{4096, 0}, {4096, 0}, {0, 0}};
  StepBuffers r0, r1;
  ASSERT_EQ(planStepBuffers(lowerStep(s.ranks[0], 0), 2, sizes, 0, false, r0),
            "");
  ASSERT_EQ(planStepBuffers(lowerStep(s.ranks[1], 0), 2, sizes, 0, false, r1),
            "");
  // Rank 0: F0 S0 F1 S1 [post g1] R(g0) W(S0) B0 R(g1) B1 W(S1): two
  // activations in flight with two gradients posted at once.
  EXPECT_EQ(r0.bytes, 4 * 4096);
  // Rank 1 posts both activations at the start; while the first one's
  // backward runs it also holds the gradient it sends.
  EXPECT_EQ(r1.bytes, 3 * 4096);
  // Evaluation: a forward's input dies at it.
  StepBuffers eval;
  std::vector<Action> forwards = {
      Action::recv(Payload::Activation, 0, 0, 0), Action::forward(1, 0),
      Action::recv(Payload::Activation, 0, 1, 0), Action::forward(1, 1)};
  ASSERT_EQ(planStepBuffers(lowerStep(forwards, 0), 2, sizes, 0, true, eval),
            "");
  EXPECT_EQ(eval.bytes,
            2 * 4096); // the second is posted before the first's wait
}

TEST(StepBuffers, InconsistentCallsAreRefused) {
  StepBufferSizes sizes{{4096, 0}, {4096, 0}, {0, 0}};
  StepBuffers plan;
  // A backward of module 1 with no forward before it.
  std::vector<StepCall> calls = {
      {CallKind::Backward, Payload::None, 1, 0, -1, ""}};
  EXPECT_EQ(planStepBuffers(calls, 2, sizes, 0, false, plan),
            "call 0 reads the activations of boundary 0, micro-batch 0, "
            "which the step does not hold there");
  // A forward whose output nothing reads or sends.
  calls = {{CallKind::Forward, Payload::None, 0, 0, -1, ""}};
  EXPECT_EQ(planStepBuffers(calls, 2, sizes, 0, false, plan),
            "the step still holds the activations of boundary 0, "
            "micro-batch 0 at its end");
  EXPECT_EQ(packedBytes({1, 64, 65}), 64 + 64 + 128);
}

TEST(StepBuffers, ZeroThreeHoldsTwoRunsWeightsAndTwoFullGradients) {
  // Layered, one rank, three modules at ZeRO 3: a module's weights are
  // gathered one run ahead, so at most two runs' weights at once; a run's
  // full gradient lives until its reduce-scatter is waited for, at most
  // two at once (lowerStep's waits).
  Schedule s = test::make(ScheduleKind::Layered, 3, 1, 2, 2, 3);
  StepBufferSizes sizes{
      {4096, 4096, 0},       {4096, 4096, 0},       {0, 0, 0},
      {10240, 10240, 10240}, {20480, 20480, 20480}, {10240, 10240, 10240}};
  StepBuffers plan;
  std::vector<StepCall> calls = lowerStep(s.ranks[0], 3);
  ASSERT_EQ(planStepBuffers(calls, 3, sizes, 3, false, plan), "");
  checkDisjoint(calls, 3, sizes, 3, false, plan, "layered zero 3");
  int gathers = 0, accumulates = 0, scatters = 0;
  ASSERT_EQ(plan.calls.size(), calls.size());
  for (size_t n = 0; n < calls.size(); ++n) {
    const CallOffsets &o = plan.calls[n];
    switch (calls[n].kind) {
    case CallKind::AllGather:
      ++gathers;
      EXPECT_GE(o.at, 0);
      break;
    case CallKind::Accumulate:
      ++accumulates;
      EXPECT_GE(o.at, 0);
      break;
    case CallKind::ReduceScatter:
      ++scatters;
      EXPECT_GE(o.at, 0);
      EXPECT_EQ(o.part, -1) << "one run a module a step: no part";
      break;
    default:
      break;
    }
  }
  EXPECT_EQ(gathers, 6); // each module's forward run and backward run
  EXPECT_EQ(accumulates, 6);
  EXPECT_EQ(scatters, 3);
  // Two runs' weights, two full gradients and the boundaries in flight
  // fit in less than every buffer at once.
  EXPECT_LT(plan.bytes, 6 * 10240 + 3 * 20480 + 4 * 4096);
  // Levels 0-1 hold no ZeRO buffers.
  StepBuffers none;
  std::vector<StepCall> level1 = lowerStep(s.ranks[0], 1);
  ASSERT_EQ(planStepBuffers(level1, 3, sizes, 1, false, none), "");
  ASSERT_EQ(none.calls.size(), level1.size());
  for (size_t n = 0; n < level1.size(); ++n)
    if (level1[n].kind == CallKind::AllGather ||
        level1[n].kind == CallKind::Accumulate ||
        level1[n].kind == CallKind::ReduceScatter) {
      EXPECT_EQ(none.calls[n].at, -1);
      EXPECT_EQ(none.calls[n].part, -1);
    }
}

} // namespace
