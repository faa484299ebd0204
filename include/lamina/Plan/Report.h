//===- Report.h - a priced plan as text, JSON, trace, DOT, HTML -*- C++ -*-===//
//
// Every output is computed from a Plan (CostModel.h) and the ModelDesc it
// was priced for. The JSON schema, the trace layout and the HTML page are
// described in docs/plan.md.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_PLAN_REPORT_H
#define LAMINA_PLAN_REPORT_H

#include "lamina/Plan/CostModel.h"

#include <string>
#include <utility>
#include <vector>

namespace lamina::plan {

/// The version of the JSON written by formatJson (bumped on breaking
/// changes; docs/plan.md lists the fields).
constexpr int kPlanJsonVersion = 1;

/// Modules -> ranks, per-rank memory and traffic, step time, bubble, MFU,
/// warnings.
std::string formatTextReport(const Plan &plan, const ModelDesc &desc);
/// The whole plan, timeline included, as one JSON object.
std::string formatJson(const Plan &plan, const ModelDesc &desc);
/// Chrome trace / Perfetto JSON: one process per pipeline rank with a
/// compute, a send and a collective track; one slice per action.
std::string formatChromeTrace(const Plan &plan);
/// Graphviz: the module chain, each module filled with its rank's colour.
std::string formatDot(const Plan &plan, const ModelDesc &desc);
/// One self-contained page: the tables and an SVG timeline, no scripts or
/// network access.
std::string formatHtml(const Plan &plan, const ModelDesc &desc);

/// "embedding, layer.0-11, head": module names with numbered runs folded.
std::string summarizeModules(const ModelDesc &desc,
                             const std::vector<int> &modules);

/// One configuration priced under several schedules (failures keep their
/// reason).
struct Comparison {
  struct Entry {
    schedule::ScheduleKind kind;
    bool ok = false;
    std::string error;
    Plan plan;
  };
  std::vector<Entry> entries;
};
Comparison compareSchedules(const ModelDesc &desc, const PlanConfig &base,
                            const Hardware &hw,
                            const std::vector<schedule::ScheduleKind> &kinds);
std::string formatComparison(const Comparison &comparison);
std::string formatComparisonJson(const Comparison &comparison);

} // namespace lamina::plan

#endif // LAMINA_PLAN_REPORT_H
