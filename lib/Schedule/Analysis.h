//===- Analysis.h - shared by the verifier and the timeline ---------------===//
//
// analyzeSchedule runs the verifying simulation and, as a by-product, records
// for every action the actions it depends on; the timeline then only has to
// assign times along those edges.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_SCHEDULE_ANALYSIS_H
#define LAMINA_LIB_SCHEDULE_ANALYSIS_H

#include "lamina/Schedule/Schedule.h"

#include <string>
#include <utility>
#include <vector>

namespace lamina::schedule::detail {

/// Per-rank execution streams; each runs its actions in list order.
enum class Stream : unsigned char { Compute, Send, Recv, Collective };
constexpr int kNumStreams = 4;
Stream streamOf(const Action &a);

struct ActionDeps {
  std::vector<int> after; ///< local actions that must have ended
  int issueAfter = -1;    ///< comm only: the local compute before it in the list
  int sendRank = -1;      ///< Recv only: the matching Send
  int sendIndex = -1;
  int collective = -1; ///< collectives only: index into Analysis::collectives
};

struct Analysis {
  std::vector<std::vector<ActionDeps>> deps; ///< parallel to Schedule::ranks
  /// Members (global rank, action index) of every collective call.
  std::vector<std::vector<std::pair<int, int>>> collectives;
};

Expected<Analysis> analyzeSchedule(const Schedule &s);

/// "rank 3 (pp 1, dp 1)".
std::string rankName(const Schedule &s, int g);

} // namespace lamina::schedule::detail

#endif // LAMINA_LIB_SCHEDULE_ANALYSIS_H
