//===- GenerateTest.cpp - schedule generation over a grid of shapes -------===//

#include "lamina/Schedule/Simulate.h"

#include "ScheduleTestUtil.h"

#include <gtest/gtest.h>

#include <array>
#include <map>

using namespace lamina::schedule;
using lamina::schedule::test::config;
using lamina::schedule::test::kAllKinds;

namespace {


// The documented preconditions of generateSchedule.
bool shouldGenerate(ScheduleKind k, int L, int p, int m) {
  if (k == ScheduleKind::Layered && p != 1)
    return false;
  if (L < p)
    return false;
  if (k == ScheduleKind::Interleaved1F1B && (L % p != 0 || m % p != 0))
    return false;
  return !(k == ScheduleKind::BreadthFirst && m < p);
}

bool isLGA(ScheduleKind k) {
  return k == ScheduleKind::BreadthFirst || k == ScheduleKind::Layered;
}

// Compute actions of one rank, in order.
std::vector<Action> computes(const Schedule &s, int g) {
  std::vector<Action> out;
  for (const Action &a : s.ranks[g])
    if (a.kind == ActionKind::Forward || a.kind == ActionKind::Backward)
      out.push_back(a);
  return out;
}

std::string tokens(const std::vector<Action> &list) {
  std::string out;
  for (const Action &a : list)
    out += (out.empty() ? "" : " ") + formatAction(a);
  return out;
}

// How many actions of `kind` for `module` rank g runs.
int count(const Schedule &s, int g, ActionKind kind, int module) {
  int n = 0;
  for (const Action &a : s.ranks[g])
    n += a.kind == kind && a.module == module;
  return n;
}

TEST(Generate, KindNamesRoundTrip) {
  for (ScheduleKind k : kAllKinds)
    EXPECT_EQ(parseScheduleKind(scheduleKindName(k)), k);
  EXPECT_FALSE(parseScheduleKind("zero-bubble").has_value());
}

// Every schedule for a grid of (L, p, m, d, zero level): generated exactly
// when its preconditions hold, verified, every (module, mb) forward and
// backward exactly once per replica (m times per replica, m*d overall), every
// send matched by one receive, and the collectives of the sharding level.
TEST(Generate, GridVerifiesAndIsComplete) {
  int generated = 0;
  for (ScheduleKind kind : kAllKinds)
    for (int L : {1, 2, 3, 4, 6, 8})
      for (int p : {1, 2, 3, 4})
        for (int m : {1, 2, 3, 4, 6})
          for (int d : {1, 2})
            for (int zero = 0; zero <= 3; ++zero) {
              SCOPED_TRACE(std::string(scheduleKindName(kind)) +
                           " L=" + std::to_string(L) + " p=" +
                           std::to_string(p) + " m=" + std::to_string(m) +
                           " d=" + std::to_string(d) +
                           " zero=" + std::to_string(zero));
              Expected<Schedule> s =
                  generateSchedule(config(kind, L, p, m, d, zero));
              ASSERT_EQ(s.ok(), shouldGenerate(kind, L, p, m)) << s.error();
              if (!s)
                continue;
              ++generated;
              ASSERT_EQ(s->numRanks(), p * d);
              Status v = verifySchedule(*s);
              ASSERT_TRUE(v.ok()) << v.message();

              std::map<std::array<int, 4>, int> computeCount; // dp, dir, l, mb
              std::map<std::array<int, 5>, int> sends, recvs;
              for (int g = 0; g < s->numRanks(); ++g)
                for (const Action &a : s->ranks[g]) {
                  if (a.kind == ActionKind::Forward ||
                      a.kind == ActionKind::Backward)
                    ++computeCount[{s->dataRank(g),
                                    a.kind == ActionKind::Backward, a.module,
                                    a.microBatch}];
                  else if (a.kind == ActionKind::Send)
                    ++sends[{g, a.peer, int(a.payload), a.module,
                             a.microBatch}];
                  else if (a.kind == ActionKind::Recv)
                    ++recvs[{a.peer, g, int(a.payload), a.module,
                             a.microBatch}];
                }
              EXPECT_EQ(computeCount.size(), size_t(2 * L * m * d));
              for (const auto &[key, n] : computeCount)
                EXPECT_EQ(n, 1);
              EXPECT_EQ(sends, recvs);
              int crossings = 0;
              for (int b = 0; b + 1 < L; ++b)
                crossings +=
                    s->placement.rankOf[b] != s->placement.rankOf[b + 1];
              EXPECT_EQ(sends.size(), size_t(2 * crossings * m * d));

              for (int g = 0; g < s->numRanks(); ++g)
                for (int l : s->placement.modulesOn(s->pipelineRank(g))) {
                  int ag = count(*s, g, ActionKind::AllGather, l);
                  int rs = count(*s, g, ActionKind::ReduceScatter, l);
                  int ar = count(*s, g, ActionKind::AllReduce, l);
                  if (d == 1) {
                    EXPECT_EQ(ag + rs + ar, 0);
                  } else if (zero == 0) {
                    EXPECT_EQ(ar, 1);
                    EXPECT_EQ(ag + rs, 0);
                  } else if (zero < 3) {
                    EXPECT_EQ(rs, 1);
                    EXPECT_EQ(ag, 1);
                    EXPECT_EQ(ar, 0);
                  } else if (isLGA(kind)) {
                    EXPECT_EQ(ag, 2);
                    EXPECT_EQ(rs, 1);
                  } else {
                    EXPECT_GE(ag, 2);
                    EXPECT_LE(ag, 2 * m);
                    EXPECT_GE(rs, 1);
                    EXPECT_LE(rs, m);
                  }
                }
            }
  EXPECT_GT(generated, 500);
}

TEST(Generate, Level3CollectivesLGAVersusDepthFirst) {
  // Two modules per stage, so depth-first schedules never run the same
  // module twice in a row: its weights are gathered before every forward and
  // every backward (2m) and its gradient reduce-scattered after every
  // backward (m). LGA gathers twice and reduces once per module per step.
  const int p = 2, L = 4, m = 4, d = 2;
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB,
                            ScheduleKind::BreadthFirst}) {
    Expected<Schedule> s = generateSchedule(config(kind, L, p, m, d, 3));
    ASSERT_TRUE(s.ok()) << s.error();
    for (int g = 0; g < s->numRanks(); ++g)
      for (int l : s->placement.modulesOn(s->pipelineRank(g))) {
        int wantAG = isLGA(kind) ? 2 : 2 * m, wantRS = isLGA(kind) ? 1 : m;
        EXPECT_EQ(count(*s, g, ActionKind::AllGather, l), wantAG)
            << scheduleKindName(kind) << " module " << l;
        EXPECT_EQ(count(*s, g, ActionKind::ReduceScatter, l), wantRS)
            << scheduleKindName(kind) << " module " << l;
      }
  }
  Expected<Schedule> layered =
      generateSchedule(config(ScheduleKind::Layered, 6, 1, 8, 4, 3));
  ASSERT_TRUE(layered.ok());
  for (int l = 0; l < 6; ++l) {
    EXPECT_EQ(count(*layered, 0, ActionKind::AllGather, l), 2);
    EXPECT_EQ(count(*layered, 0, ActionKind::ReduceScatter, l), 1);
  }
  // Interleaved gathers once per run of the same chunk: the warm-up and
  // cool-down runs cover p micro-batches, the steady state one each.
  Expected<Schedule> inter =
      generateSchedule(config(ScheduleKind::Interleaved1F1B, 4, 2, 4, 2, 3));
  ASSERT_TRUE(inter.ok());
  int ag = 0;
  for (int l : {0, 2})
    ag += count(*inter, 0, ActionKind::AllGather, l);
  EXPECT_LT(ag, 2 * 2 * 4);
}

TEST(Generate, GPipeWithOneModulePerStageGathersLikeLGA) {
  // With L = p every stage runs its module for all micro-batches in a row,
  // so the run rule gives the LGA counts.
  Expected<Schedule> s =
      generateSchedule(config(ScheduleKind::GPipe, 3, 3, 4, 2, 3));
  ASSERT_TRUE(s.ok());
  for (int g = 0; g < s->numRanks(); ++g) {
    EXPECT_EQ(count(*s, g, ActionKind::AllGather, s->pipelineRank(g)), 2);
    EXPECT_EQ(count(*s, g, ActionKind::ReduceScatter, s->pipelineRank(g)), 1);
  }
}

TEST(Generate, ComputeOrders) {
  auto order = [](ScheduleKind k, int L, int p, int m, int g) {
    Expected<Schedule> s = generateSchedule(config(k, L, p, m));
    EXPECT_TRUE(s.ok()) << s.error();
    return s ? tokens(computes(*s, g)) : std::string();
  };
  EXPECT_EQ(order(ScheduleKind::GPipe, 4, 2, 2, 1),
            "F2.0 F3.0 F2.1 F3.1 B3.0 B2.0 B3.1 B2.1");
  EXPECT_EQ(order(ScheduleKind::OneFOneB, 2, 2, 3, 0),
            "F0.0 F0.1 B0.0 F0.2 B0.1 B0.2");
  EXPECT_EQ(order(ScheduleKind::BreadthFirst, 4, 2, 2, 0),
            "F0.0 F0.1 F2.0 F2.1 B2.1 B2.0 B0.1 B0.0");
  EXPECT_EQ(order(ScheduleKind::Layered, 2, 1, 2, 0),
            "F0.0 F0.1 F1.0 F1.1 B1.1 B1.0 B0.1 B0.0");
  // Megatron: rank 0 warms up (p-1)*2 + (v-1)*p = 4 forwards, chunk by chunk
  // in groups of p micro-batches, then alternates, then cools down.
  EXPECT_EQ(order(ScheduleKind::Interleaved1F1B, 4, 2, 4, 0),
            "F0.0 F0.1 F2.0 F2.1 F0.2 B2.0 F0.3 B2.1 F2.2 B0.0 F2.3 B0.1 "
            "B2.2 B2.3 B0.2 B0.3");
}

TEST(Generate, OneFOneBBoundsInFlightMicroBatches) {
  // In-flight micro-batches (forward started, backward not finished) on
  // stage r: at most p - r for 1F1B, all m for GPipe.
  const int p = 4, m = 8;
  for (ScheduleKind k : {ScheduleKind::GPipe, ScheduleKind::OneFOneB}) {
    Expected<Schedule> s = generateSchedule(config(k, 8, p, m));
    ASSERT_TRUE(s.ok());
    for (int r = 0; r < p; ++r) {
      int first = s->placement.modulesOn(r).front(), live = 0, peak = 0;
      for (const Action &a : computes(*s, r))
        if (a.module == first) {
          live += a.kind == ActionKind::Forward ? 1 : -1;
          peak = std::max(peak, live);
        }
      EXPECT_EQ(peak, k == ScheduleKind::GPipe ? m : p - r) << "rank " << r;
    }
  }
}

TEST(Generate, BalancedPlacementFromModuleCost) {
  ScheduleConfig c = config(ScheduleKind::OneFOneB, 6, 3, 3);
  c.moduleCost = {10, 1, 1, 1, 1, 10};
  Expected<Schedule> s = generateSchedule(c);
  ASSERT_TRUE(s.ok()) << s.error();
  EXPECT_EQ(s->placement.rankOf, (std::vector<int>{0, 1, 1, 1, 1, 2}));
  EXPECT_TRUE(verifySchedule(*s).ok());
  c.moduleCost = {1, 2};
  Expected<Schedule> bad = generateSchedule(c);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("moduleCost has 2 entries"), std::string::npos);
}

TEST(Generate, Errors) {
  auto error = [](ScheduleConfig c) {
    Expected<Schedule> s = generateSchedule(c);
    EXPECT_FALSE(s.ok());
    return s.ok() ? std::string() : s.error();
  };
  std::string bf = error(config(ScheduleKind::BreadthFirst, 8, 4, 3));
  EXPECT_NE(bf.find("breadth-first needs m >= p"), std::string::npos) << bf;
  EXPECT_NE(bf.find("m = 3"), std::string::npos) << bf;
  EXPECT_NE(error(config(ScheduleKind::Layered, 4, 2, 4)).find("p = 1"),
            std::string::npos);
  EXPECT_NE(error(config(ScheduleKind::Interleaved1F1B, 6, 4, 4))
                .find("L divisible by p"),
            std::string::npos);
  EXPECT_NE(error(config(ScheduleKind::Interleaved1F1B, 4, 2, 3))
                .find("multiple of p"),
            std::string::npos);
  EXPECT_NE(error(config(ScheduleKind::GPipe, 2, 4, 4)).find("L = 2 < p = 4"),
            std::string::npos);
  EXPECT_NE(error(config(ScheduleKind::GPipe, 2, 1, 4, 1, 4)).find("level"),
            std::string::npos);
  EXPECT_NE(error(config(ScheduleKind::GPipe, 2, 1, 0)).find("micro-batches"),
            std::string::npos);
  EXPECT_NE(error(config(ScheduleKind::Layered, 1 << 20, 1, 1 << 10, 8))
                .find("too large"),
            std::string::npos);
}

TEST(Generate, FormatSchedule) {
  Expected<Schedule> s = generateSchedule(config(ScheduleKind::GPipe, 4, 2, 2));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(formatSchedule(*s),
            "gpipe: L=4 p=2 m=2 d=1 zero=0\n"
            "rank 0 (pp 0, dp 0): F0.0 F1.0 Sa1.0>1 F0.1 F1.1 Sa1.1>1 Rg1.0<1 "
            "B1.0 B0.0 Rg1.1<1 B1.1 B0.1 OPT\n"
            "rank 1 (pp 1, dp 0): Ra1.0<0 F2.0 F3.0 Ra1.1<0 F2.1 F3.1 B3.0 "
            "B2.0 Sg1.0>0 B3.1 B2.1 Sg1.1>0 OPT\n");
  EXPECT_EQ(describeAction(s->ranks[1][0]),
            "Recv(activation, boundary 1, mb 0, from rank 0)");
  EXPECT_EQ(describeAction(Action::reduceScatter(3)),
            "ReduceScatter(weight gradients, module 3)");
  // Long lists wrap with an indent.
  std::string narrow = formatSchedule(*s, 40);
  EXPECT_NE(narrow.find("\n    "), std::string::npos);
  for (size_t start = 0, end; (end = narrow.find('\n', start)) !=
                              std::string::npos;
       start = end + 1)
    EXPECT_LE(end - start, 40u);
}

} // namespace
