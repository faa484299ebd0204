//===- MemoryPlanTest.cpp - the greedy-by-size arena planner --------------===//

#include "lamina/Schedule/MemoryPlan.h"

#include <gtest/gtest.h>

#include <random>

using namespace lamina;

TEST(MemoryPlan, DisjointLifetimesShareBytes) {
  // a [0,1], b [2,3]: never live together, one slot.
  std::vector<BufferRequest> r = {{100, 0, 1}, {100, 2, 3}};
  MemoryPlan p = planMemory(r, 64);
  EXPECT_TRUE(isValidPlan(r, p));
  EXPECT_EQ(p.offsets[0], p.offsets[1]);
  EXPECT_EQ(p.peakBytes, 128);
  EXPECT_EQ(p.totalBytes, 256);
}

TEST(MemoryPlan, OverlappingLifetimesDoNot) {
  std::vector<BufferRequest> r = {{100, 0, 2}, {100, 1, 3}, {64, 2, 2}};
  MemoryPlan p = planMemory(r, 64);
  EXPECT_TRUE(isValidPlan(r, p));
  EXPECT_EQ(p.peakBytes, 128 + 128 + 64);
  for (int64_t off : p.offsets)
    EXPECT_EQ(off % 64, 0);
}

TEST(MemoryPlan, SmallBufferFillsAGap) {
  // Two big buffers live throughout with a hole between them left by a
  // medium one that died: a small late buffer goes into the hole.
  std::vector<BufferRequest> r = {
      {1024, 0, 10}, {512, 0, 1}, {1024, 0, 10}, {256, 5, 6}};
  MemoryPlan p = planMemory(r, 64);
  EXPECT_TRUE(isValidPlan(r, p));
  EXPECT_EQ(p.peakBytes, 1024 + 1024 + 512);
}

TEST(MemoryPlan, ZeroByteBuffersTakeNothing) {
  std::vector<BufferRequest> r = {{0, 0, 5}, {64, 0, 5}};
  MemoryPlan p = planMemory(r, 64);
  EXPECT_TRUE(isValidPlan(r, p));
  EXPECT_EQ(p.peakBytes, 64);
}

TEST(MemoryPlan, RandomPlansAreValidAndNoWorseThanTheLiveMaximum) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<BufferRequest> r;
    int n = 1 + int(rng() % 60);
    for (int i = 0; i < n; ++i) {
      int64_t first = rng() % 40, len = rng() % 10;
      r.push_back({int64_t(rng() % 5000), first, first + len});
    }
    MemoryPlan p = planMemory(r, 64);
    ASSERT_TRUE(isValidPlan(r, p)) << "trial " << trial;
    // A lower bound: the bytes live at the busiest op.
    int64_t lower = 0;
    for (int64_t t = 0; t < 50; ++t) {
      int64_t live = 0;
      for (const BufferRequest &b : r)
        if (b.first <= t && t <= b.last)
          live += (b.bytes + 63) / 64 * 64;
      lower = std::max(lower, live);
    }
    EXPECT_GE(p.peakBytes, lower);
    EXPECT_LE(p.peakBytes, p.totalBytes);
  }
}
