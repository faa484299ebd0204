//===- Search.h - the fastest configuration that fits ----------*- C++ -*-===//
//
// Enumerates pp, dp, tp, micro-batch size and count, schedule, sharding
// level and recompute for a GPU count and global batch, and returns the
// fastest configurations whose memory fits. Every candidate is priced by a
// cheap lower bound (boundPlan); candidates are then
// simulated in order of that bound until the bound exceeds the k-th best
// simulated step, so the top k are exact without simulating everything.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_PLAN_SEARCH_H
#define LAMINA_PLAN_SEARCH_H

#include "lamina/Plan/CostModel.h"

#include <string>
#include <vector>

namespace lamina::plan {

struct SearchOptions {
  int gpus = 1;
  int64_t globalBatch = 1; ///< samples per step
  int top = 10;
  std::vector<schedule::ScheduleKind> schedules = {
      schedule::ScheduleKind::GPipe, schedule::ScheduleKind::OneFOneB,
      schedule::ScheduleKind::Interleaved1F1B,
      schedule::ScheduleKind::BreadthFirst, schedule::ScheduleKind::Layered};
  std::vector<int64_t> microBatchSizes = {1, 2, 4, 8};
  Precision precision = Precision::Bf16Mixed;
  /// PlanConfig::moeImbalance of every candidate.
  double moeImbalance = 1;
};

struct SearchResult {
  std::vector<Plan> best; ///< fastest first, at most `top`
  int enumerated = 0;     ///< valid configurations priced (lower bound)
  int staticFit = 0;      ///< of those, the memory bound fits
  int simulated = 0;      ///< timed by the simulator
  int fit = 0;            ///< simulated and fitting memory
  double seconds = 0;     ///< wall time of the search
};

schedule::Expected<SearchResult> searchPlans(const ModelDesc &desc,
                                             const Hardware &hw,
                                             const SearchOptions &options);
std::string formatSearch(const SearchResult &result, const ModelDesc &desc);
std::string formatSearchJson(const SearchResult &result);

/// Lower bounds, from the stage costs and the placement alone: on the step
/// time (a rank's compute plus the first micro-batch's way to it and the
/// last one's way back), and on the largest rank's memory (weights,
/// gradients, optimizer state and the activations its schedule must hold).
/// Fails like checkConfig.
struct PlanBound {
  double stepTime = 0;
  double memory = 0;
};
schedule::Expected<PlanBound> boundPlan(const ModelDesc &desc,
                                        const PlanConfig &config,
                                        const Hardware &hw);

} // namespace lamina::plan

#endif // LAMINA_PLAN_SEARCH_H
