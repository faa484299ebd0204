//===- Placement.h - modules onto pipeline ranks ---------------------------===//
//
// A placement maps each of L modules (the chain's layers, in order) to one of
// p pipeline ranks. See docs/schedules.md and METHODS.md section 2.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_SCHEDULE_PLACEMENT_H
#define LAMINA_SCHEDULE_PLACEMENT_H

#include "lamina/Schedule/Expected.h"

#include <vector>

namespace lamina::schedule {

struct Placement {
  int numRanks = 0;
  /// rankOf[l] is the pipeline rank that holds module l.
  std::vector<int> rankOf;

  int numModules() const { return static_cast<int>(rankOf.size()); }
  /// The modules on `rank`, ascending.
  std::vector<int> modulesOn(int rank) const;
};

/// Rank r holds a contiguous block; when L % p != 0 the first L % p ranks get
/// one module more. With L < p the last p - L ranks hold nothing.
Expected<Placement> placeContiguous(int numModules, int numRanks);

/// Module l on rank l mod p (MPP, "looped"; interleaved 1F1B's chunks).
Expected<Placement> placeModular(int numModules, int numRanks);

/// Contiguous blocks that minimise the largest per-rank sum of `moduleCost`
/// (exact dynamic programme, O(p L^2)). Every rank gets at least one module
/// when L >= p; otherwise ranks L..p-1 are empty. Costs must be finite and
/// non-negative.
Expected<Placement> placeBalanced(const std::vector<double> &moduleCost,
                                  int numRanks);

/// The largest per-rank sum of `moduleCost` under `placement`.
double maxRankCost(const Placement &placement,
                   const std::vector<double> &moduleCost);

} // namespace lamina::schedule

#endif // LAMINA_SCHEDULE_PLACEMENT_H
