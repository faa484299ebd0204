//===- Placement.cpp - contiguous, modular and balanced placements --------===//

#include "lamina/Schedule/Placement.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace lamina::schedule {

namespace {
constexpr int kMaxModules = 1 << 20;
constexpr int kMaxRanks = 1 << 16;

Status checkSizes(int numModules, int numRanks) {
  if (numModules < 1 || numModules > kMaxModules)
    return Status::error("number of modules must be in [1, " +
                         std::to_string(kMaxModules) + "], got " +
                         std::to_string(numModules));
  if (numRanks < 1 || numRanks > kMaxRanks)
    return Status::error("number of pipeline ranks must be in [1, " +
                         std::to_string(kMaxRanks) + "], got " +
                         std::to_string(numRanks));
  return Status::success();
}
} // namespace

std::vector<int> Placement::modulesOn(int rank) const {
  std::vector<int> out;
  for (int l = 0; l < numModules(); ++l)
    if (rankOf[l] == rank)
      out.push_back(l);
  return out;
}

Expected<Placement> placeContiguous(int numModules, int numRanks) {
  if (Status s = checkSizes(numModules, numRanks); !s)
    return s;
  Placement p{numRanks, std::vector<int>(numModules)};
  int base = numModules / numRanks, extra = numModules % numRanks;
  int l = 0;
  for (int r = 0; r < numRanks; ++r)
    for (int k = 0, n = base + (r < extra ? 1 : 0); k < n; ++k)
      p.rankOf[l++] = r;
  return p;
}

Expected<Placement> placeModular(int numModules, int numRanks) {
  if (Status s = checkSizes(numModules, numRanks); !s)
    return s;
  Placement p{numRanks, std::vector<int>(numModules)};
  for (int l = 0; l < numModules; ++l)
    p.rankOf[l] = l % numRanks;
  return p;
}

Expected<Placement> placeBalanced(const std::vector<double> &moduleCost,
                                  int numRanks) {
  int n = static_cast<int>(moduleCost.size());
  if (Status s = checkSizes(n, numRanks); !s)
    return s;
  for (int l = 0; l < n; ++l)
    if (!std::isfinite(moduleCost[l]) || moduleCost[l] < 0)
      return Status::error("module " + std::to_string(l) +
                           " has an invalid cost (must be finite and >= 0)");
  // The DP is O(k n^2) time and O(k n) memory; refuse sizes it cannot do fast.
  int k = std::min(n, numRanks);
  if (static_cast<double>(k) * n * n > 1e9)
    return Status::error("balanced placement of " + std::to_string(n) +
                         " modules on " + std::to_string(numRanks) +
                         " ranks is too large for the exact DP");
  std::vector<double> prefix(n + 1, 0.0);
  for (int l = 0; l < n; ++l)
    prefix[l + 1] = prefix[l] + moduleCost[l];
  const double inf = std::numeric_limits<double>::infinity();
  // best[j][i]: smallest max-part cost splitting modules [0, i) into j
  // non-empty parts; cut[j][i]: start of the last part in that optimum.
  std::vector<std::vector<double>> best(k + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> cut(k + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int j = 1; j <= k; ++j)
    for (int i = j; i <= n - (k - j); ++i)
      for (int s = j - 1; s < i; ++s) {
        double c = std::max(best[j - 1][s], prefix[i] - prefix[s]);
        if (c < best[j][i]) {
          best[j][i] = c;
          cut[j][i] = s;
        }
      }
  Placement p{numRanks, std::vector<int>(n)};
  for (int j = k, i = n; j >= 1; --j) {
    int s = cut[j][i];
    for (int l = s; l < i; ++l)
      p.rankOf[l] = j - 1;
    i = s;
  }
  return p;
}

double maxRankCost(const Placement &placement,
                   const std::vector<double> &moduleCost) {
  std::vector<double> sum(placement.numRanks, 0.0);
  for (int l = 0; l < placement.numModules() &&
                  l < static_cast<int>(moduleCost.size());
       ++l)
    sum[placement.rankOf[l]] += moduleCost[l];
  return sum.empty() ? 0.0 : *std::max_element(sum.begin(), sum.end());
}

} // namespace lamina::schedule
