//===- Trace.cpp - Chrome trace and Graphviz outputs ----------------------===//

#include "lamina/Plan/Report.h"

#include "lamina/Support/Json.h"

#include <cmath>
#include <cstdio>

namespace lamina::plan {

using schedule::Action;
using schedule::ActionKind;

namespace {
/// Thread of an action inside its rank's process: 0 compute, 1 sends,
/// 2 receives, 3 collectives (the simulator's four streams).
int trackOf(const Action &a) {
  if (a.isCompute())
    return 0;
  if (a.kind == ActionKind::Send)
    return 1;
  if (a.kind == ActionKind::Recv)
    return 2;
  return 3;
}
} // namespace

std::string formatChromeTrace(const Plan &p) {
  std::string out;
  json::Writer w(out, json::Layout::Compact);
  w.beginObject().field("displayTimeUnit", "ms");
  w.key("traceEvents").beginArray();
  const auto &s = p.schedule;
  const char *trackName[] = {"compute", "send", "recv", "collective"};
  for (int r = 0; r < (int)p.ranks.size() && !s.ranks.empty(); ++r) {
    w.beginObject()
        .field("name", "process_name")
        .field("ph", "M")
        .field("pid", r);
    w.key("args").beginObject().field("name", "pipeline rank " +
                                                   std::to_string(r));
    w.endObject().endObject();
    for (int t = 0; t < 4; ++t) {
      w.beginObject()
          .field("name", "thread_name")
          .field("ph", "M")
          .field("pid", r)
          .field("tid", t);
      w.key("args").beginObject().field("name", trackName[t]);
      w.endObject().endObject();
    }
    const int g = s.globalRank(r, 0);
    for (size_t i = 0; i < s.ranks[g].size(); ++i) {
      const Action &a = s.ranks[g][i];
      const auto &t = p.timeline.times[g][i];
      // Receives complete when their send does; show them only when they
      // waited (the slice is the wait).
      if (a.kind == ActionKind::Recv && t.end <= t.start)
        continue;
      w.beginObject()
          .field("name", schedule::formatAction(a))
          .field("cat", a.isCompute() ? "compute"
                        : a.isP2P()   ? "p2p"
                                      : "collective")
          .field("ph", "X")
          .field("pid", r)
          .field("tid", trackOf(a))
          .field("ts", t.start * 1e6)
          .field("dur", (t.end - t.start) * 1e6);
      w.key("args")
          .beginObject()
          .field("action", schedule::describeAction(a))
          .endObject()
          .endObject();
    }
  }
  w.endArray();
  w.key("metadata")
      .beginObject()
      .field("config", describeConfig(p.config))
      .field("hardware", p.hardware.name)
      .field("step_time_s", p.stepTime)
      .endObject();
  w.endObject();
  return out + "\n";
}

static std::string rankColour(int rank, int ranks) {
  // Evenly spaced hues, light enough for black text.
  double hue = ranks > 0 ? std::fmod(rank * 360.0 / ranks, 360.0) : 0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f 0.35 0.95", hue / 360.0);
  return buf;
}

std::string formatDot(const Plan &p, const ModelDesc &desc) {
  std::vector<int> rankOf(desc.modules.size(), -1);
  for (const RankStats &r : p.ranks)
    for (int m : r.modules)
      rankOf[m] = r.pipelineRank;
  std::string o = "digraph plan {\n  rankdir=LR;\n  node [shape=box, "
                  "style=\"rounded,filled\", fontname=\"Helvetica\"];\n";
  o += "  label=" + json::quote(desc.name + ": " + describeConfig(p.config)) +
       ";\n  labelloc=t;\n";
  const int P = static_cast<int>(p.ranks.size());
  for (size_t i = 0; i < desc.modules.size(); ++i) {
    const ModuleDesc &m = desc.modules[i];
    char params[32];
    if (m.params >= 1e9)
      std::snprintf(params, sizeof params, "%.2fB params", m.params / 1e9);
    else
      std::snprintf(params, sizeof params, "%.1fM params", m.params / 1e6);
    o += "  m" + std::to_string(i) + " [label=" +
         json::quote(m.name + "\nrank " + std::to_string(rankOf[i]) + "\n" +
                     params) +
         ", fillcolor=\"" + rankColour(rankOf[i], P) + "\"];\n";
  }
  // Chain edges; a transfer between ranks is drawn bold.
  for (size_t i = 0; i + 1 < desc.modules.size(); ++i)
    o += "  m" + std::to_string(i) + " -> m" + std::to_string(i + 1) +
         (rankOf[i] != rankOf[i + 1] ? " [style=bold, color=\"#c03030\"]"
                                     : "") +
         ";\n";
  if (!desc.sharedInputs.empty()) {
    o += "  shared [shape=note, label=" +
         json::quote("shared inputs:\n" + [&] {
           std::string s;
           for (const std::string &n : desc.sharedInputs)
             s += n + "\n";
           return s;
         }()) +
         "];\n";
  }
  o += "  subgraph cluster_legend {\n    label=\"pipeline ranks\";\n";
  for (int r = 0; r < P; ++r)
    o += "    legend" + std::to_string(r) + " [label=\"rank " +
         std::to_string(r) + "\", fillcolor=\"" + rankColour(r, P) + "\"];\n";
  o += "  }\n}\n";
  return o;
}

} // namespace lamina::plan
