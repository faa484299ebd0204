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
                   const StepBufferSizes &sizes, bool forwardOnly,
                   const StepBuffers &plan, const std::string &where) {
  SCOPED_TRACE(where);
  std::map<BufferKey, std::pair<int64_t, int64_t>> live; // [begin, end)
  auto size = [&](const BufferKey &k) {
    auto [kind, index, mb] = k;
    return (kind == BufferKind::Activation ? sizes.activation
            : kind == BufferKind::Gradient ? sizes.gradient
                                           : sizes.residual)[size_t(index)];
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
  for (const StepCall &c : calls) {
    int k = c.module, j = c.microBatch;
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
  EXPECT_TRUE(live.empty()) << "values left at the end of the step";
}

TEST(StepBuffers, EveryScheduleGetsADisjointPlan) {
  int plans = 0;
  for (ScheduleKind kind : kAllKinds)
    for (int zero : {0, 3})
      for (auto [L, p, m] : {std::tuple{4, 1, 2}, std::tuple{4, 2, 2},
                             std::tuple{4, 2, 4}, std::tuple{6, 3, 3},
                             std::tuple{8, 4, 8}}) {
        Expected<Schedule> s = generateSchedule(config(kind, L, p, m, 2, zero));
        if (!s.ok())
          continue;
        // Uneven sizes, a module without residuals.
        StepBufferSizes sizes;
        for (int k = 0; k < L; ++k) {
          sizes.activation.push_back(k < L - 1 ? 4096 + 64 * k : 0);
          sizes.gradient.push_back(k < L - 1 ? 4096 + 64 * k : 0);
          sizes.residual.push_back(k == 1 ? 0 : 1000 * (k + 1));
        }
        for (int g = 0; g < p; ++g, ++plans) {
          std::vector<StepCall> calls = lowerStep(s->ranks[size_t(g)], zero);
          StepBuffers plan;
          ASSERT_EQ(planStepBuffers(calls, L, sizes, false, plan), "");
          checkDisjoint(calls, L, sizes, false, plan,
                        std::string(scheduleKindName(kind)) +
                            " L=" + std::to_string(L) + " p=" +
                            std::to_string(p) + " m=" + std::to_string(m) +
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
  ASSERT_EQ(planStepBuffers(lowerStep(s.ranks[0], 0), 2, sizes, false, r0), "");
  ASSERT_EQ(planStepBuffers(lowerStep(s.ranks[1], 0), 2, sizes, false, r1), "");
  // Rank 0: F0 S0 F1 S1 [post g1] R(g0) W(S0) B0 R(g1) B1 W(S1): two
  // activations in flight with two gradients posted at once.
  EXPECT_EQ(r0.bytes, 4 * 4096);
  // Rank 1 posts both activations at the start; while the first one's
  // backward runs it also holds the gradient it sends.
  EXPECT_EQ(r1.bytes, 3 * 4096);
  // Evaluation: a forward's input dies at it.
  StepBuffers eval;
  std::vector<Action> forwards = {Action::recv(Payload::Activation, 0, 0, 0),
                                  Action::forward(1, 0),
                                  Action::recv(Payload::Activation, 0, 1, 0),
                                  Action::forward(1, 1)};
  ASSERT_EQ(planStepBuffers(lowerStep(forwards, 0), 2, sizes, true, eval), "");
  EXPECT_EQ(eval.bytes, 2 * 4096); // the second is posted before the first's wait
}

TEST(StepBuffers, InconsistentCallsAreRefused) {
  StepBufferSizes sizes{{4096, 0}, {4096, 0}, {0, 0}};
  StepBuffers plan;
  // A backward of module 1 with no forward before it.
  std::vector<StepCall> calls = {
      {CallKind::Backward, Payload::None, 1, 0, -1, ""}};
  EXPECT_EQ(planStepBuffers(calls, 2, sizes, false, plan),
            "call 0 reads the activations of boundary 0, micro-batch 0, "
            "which the step does not hold there");
  // A forward whose output nothing reads or sends.
  calls = {{CallKind::Forward, Payload::None, 0, 0, -1, ""}};
  EXPECT_EQ(planStepBuffers(calls, 2, sizes, false, plan),
            "the step still holds the activations of boundary 0, "
            "micro-batch 0 at its end");
  EXPECT_EQ(packedBytes({1, 64, 65}), 64 + 64 + 128);
}

} // namespace
