//===- PlacementTest.cpp - contiguous, modular, balanced placements -------===//

#include "lamina/Schedule/Placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

using namespace lamina::schedule;

namespace {

// Every module on exactly one rank in range: the union of modulesOn over all
// ranks is 0..L-1 with no repeats.
void expectPartition(const Placement &pl, int L, int p) {
  ASSERT_EQ(pl.numModules(), L);
  ASSERT_EQ(pl.numRanks, p);
  std::vector<int> seen(L, 0);
  for (int r = 0; r < p; ++r)
    for (int l : pl.modulesOn(r)) {
      ASSERT_GE(l, 0);
      ASSERT_LT(l, L);
      ++seen[l];
    }
  for (int l = 0; l < L; ++l)
    EXPECT_EQ(seen[l], 1) << "module " << l << " with L=" << L << " p=" << p;
}

TEST(Placement, ContiguousNeverDropsOrDuplicates) {
  for (int L = 1; L <= 40; ++L)
    for (int p = 1; p <= 12; ++p) {
      Expected<Placement> pl = placeContiguous(L, p);
      ASSERT_TRUE(pl.ok()) << pl.error();
      expectPartition(*pl, L, p);
      EXPECT_TRUE(std::is_sorted(pl->rankOf.begin(), pl->rankOf.end()));
      for (int r = 0; r < p; ++r) {
        // The first L % p ranks get one module more.
        size_t want = L / p + (r < L % p ? 1 : 0);
        EXPECT_EQ(pl->modulesOn(r).size(), want) << "L=" << L << " p=" << p;
      }
    }
}

TEST(Placement, ModularIsModuleModP) {
  for (int L = 1; L <= 40; ++L)
    for (int p = 1; p <= 12; ++p) {
      Expected<Placement> pl = placeModular(L, p);
      ASSERT_TRUE(pl.ok()) << pl.error();
      expectPartition(*pl, L, p);
      for (int l = 0; l < L; ++l)
        EXPECT_EQ(pl->rankOf[l], l % p);
    }
}

// The smallest achievable max-rank cost over all contiguous splits into
// min(L, p) non-empty blocks, by enumerating the cut points.
double bruteForceBest(const std::vector<double> &cost, int p) {
  int L = static_cast<int>(cost.size()), k = std::min(L, p);
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> cuts(k - 1);
  // Choose k - 1 cut positions among 1..L-1 (bitmask over L - 1 positions).
  for (unsigned mask = 0; mask < (1u << (L - 1)); ++mask) {
    if (__builtin_popcount(mask) != k - 1)
      continue;
    double worst = 0, sum = 0;
    for (int l = 0; l < L; ++l) {
      sum += cost[l];
      if (l == L - 1 || (mask >> l & 1u)) {
        worst = std::max(worst, sum);
        sum = 0;
      }
    }
    best = std::min(best, worst);
  }
  return best;
}

TEST(Placement, BalancedMatchesBruteForce) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> units(0, 9);
  for (int L = 1; L <= 9; ++L)
    for (int p = 1; p <= 5; ++p)
      for (int trial = 0; trial < 6; ++trial) {
        std::vector<double> cost(L);
        for (double &c : cost)
          c = units(rng); // integers: sums are exact in double
        Expected<Placement> pl = placeBalanced(cost, p);
        ASSERT_TRUE(pl.ok()) << pl.error();
        expectPartition(*pl, L, p);
        EXPECT_TRUE(std::is_sorted(pl->rankOf.begin(), pl->rankOf.end()));
        for (int r = 0; r < std::min(L, p); ++r)
          EXPECT_FALSE(pl->modulesOn(r).empty()) << "rank " << r;
        EXPECT_EQ(maxRankCost(*pl, cost), bruteForceBest(cost, p))
            << "L=" << L << " p=" << p;
      }
}

TEST(Placement, BalancedBeatsContiguousOnSkewedCosts) {
  // A heavy embedding and a heavy head: contiguous blocks of 2 give
  // [10 1][1 1][1 10] with max 11; balanced isolates them, max 10.
  std::vector<double> cost{10, 1, 1, 1, 1, 10};
  Expected<Placement> bal = placeBalanced(cost, 3);
  Expected<Placement> con = placeContiguous(6, 3);
  ASSERT_TRUE(bal.ok() && con.ok());
  EXPECT_EQ(maxRankCost(*con, cost), 11);
  EXPECT_EQ(maxRankCost(*bal, cost), 10);
  EXPECT_EQ(bal->rankOf, (std::vector<int>{0, 1, 1, 1, 1, 2}));
}

TEST(Placement, Errors) {
  EXPECT_FALSE(placeContiguous(0, 2).ok());
  EXPECT_FALSE(placeContiguous(4, 0).ok());
  EXPECT_FALSE(placeModular(-1, 2).ok());
  Expected<Placement> neg = placeBalanced({1, -1}, 2);
  ASSERT_FALSE(neg.ok());
  EXPECT_NE(neg.error().find("module 1"), std::string::npos) << neg.error();
  EXPECT_FALSE(placeBalanced({1, std::nan("")}, 2).ok());
  EXPECT_FALSE(placeBalanced({}, 2).ok());
}

} // namespace
