//===- Html.cpp - one self-contained page ---------------------------------===//
//
// The text report's tables as HTML plus an inline SVG timeline: one row per
// pipeline rank for compute and one for its communication, an action per
// rectangle with its name in a <title> tooltip. Neighbouring actions of the
// same kind narrower than a few pixels are merged so a trillion-parameter
// plan still renders quickly. No scripts, fonts or links to load.
//
//===----------------------------------------------------------------------===//

#include "lamina/Plan/Report.h"

#include <algorithm>
#include <cstdio>

namespace lamina::plan {

using schedule::Action;
using schedule::ActionKind;

namespace {
std::string esc(const std::string &s) {
  std::string o;
  for (char c : s)
    switch (c) {
    case '<': o += "&lt;"; break;
    case '>': o += "&gt;"; break;
    case '&': o += "&amp;"; break;
    case '"': o += "&quot;"; break;
    default: o += c;
    }
  return o;
}
std::string num(const char *f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
const char *colourOf(const Action &a) {
  switch (a.kind) {
  case ActionKind::Forward: return "#4c8bf5";
  case ActionKind::Backward: return "#34a853";
  case ActionKind::OptimizerStep: return "#9c27b0";
  case ActionKind::Send:
  case ActionKind::Recv: return "#fbbc05";
  default: return "#ea4335";
  }
}

std::string svgTimeline(const Plan &p) {
  const auto &s = p.schedule;
  if (s.ranks.empty() || p.stepTime <= 0)
    return "<p>(no timeline)</p>";
  const double W = 1200, rowH = 16, label = 70;
  const int P = static_cast<int>(p.ranks.size());
  const double H = P * (2 * rowH + 6) + 30;
  const double scale = W / p.stepTime;
  std::string o = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
                  num("%.0f", W + label + 10) + "\" height=\"" +
                  num("%.0f", H) + "\" font-family=\"sans-serif\" "
                  "font-size=\"11\">\n";
  for (int r = 0; r < P; ++r) {
    const int g = s.globalRank(r, 0);
    const double y = r * (2 * rowH + 6);
    o += "<text x=\"0\" y=\"" + num("%.1f", y + rowH - 4) + "\">rank " +
         std::to_string(r) + "</text>\n";
    o += "<text x=\"0\" y=\"" + num("%.1f", y + 2 * rowH - 4) +
         "\" fill=\"#777\">comm</text>\n";
    // Per row, merge runs of same-coloured slivers.
    for (int row = 0; row < 2; ++row) {
      struct Box {
        double x0, x1;
        const char *colour;
        std::string title;
        int merged;
      };
      std::vector<Box> boxes;
      for (size_t i = 0; i < s.ranks[g].size(); ++i) {
        const Action &a = s.ranks[g][i];
        if ((row == 0) != a.isCompute() || a.kind == ActionKind::Recv)
          continue;
        const auto &t = p.timeline.times[g][i];
        if (t.end <= t.start)
          continue;
        double x0 = t.start * scale, x1 = t.end * scale;
        if (!boxes.empty() && boxes.back().colour == colourOf(a) &&
            x0 - boxes.back().x1 < 0.5 && x1 - boxes.back().x0 < 3) {
          boxes.back().x1 = std::max(boxes.back().x1, x1);
          ++boxes.back().merged;
          continue;
        }
        boxes.push_back({x0, x1, colourOf(a),
                         schedule::describeAction(a) + " " +
                             num("%.3f", t.start * 1e3) + "-" +
                             num("%.3f", t.end * 1e3) + " ms",
                         1});
      }
      for (const Box &b : boxes)
        o += "<rect x=\"" + num("%.2f", label + b.x0) + "\" y=\"" +
             num("%.1f", y + row * rowH) + "\" width=\"" +
             num("%.2f", std::max(0.3, b.x1 - b.x0)) + "\" height=\"" +
             num("%.0f", rowH - 2) + "\" fill=\"" + b.colour +
             "\"><title>" +
             esc(b.merged > 1 ? b.title + " and " +
                                    std::to_string(b.merged - 1) + " more"
                              : b.title) +
             "</title></rect>\n";
    }
  }
  const double yAxis = P * (2 * rowH + 6) + 14;
  for (int i = 0; i <= 10; ++i) {
    double x = label + W * i / 10;
    o += "<text x=\"" + num("%.1f", x) + "\" y=\"" + num("%.0f", yAxis) +
         "\" text-anchor=\"middle\">" +
         num("%.3g", p.stepTime * i / 10) + " s</text>\n";
  }
  return o + "</svg>\n";
}
} // namespace

std::string formatHtml(const Plan &p, const ModelDesc &desc) {
  std::string o =
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\n<title>" +
      esc("lamina plan: " + desc.name) + "</title>\n<style>\n"
      "body{font-family:sans-serif;margin:1.5em;color:#222}\n"
      "table{border-collapse:collapse;margin:.5em 0 1.5em}\n"
      "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}\n"
      "th{background:#f2f2f2} td.l{text-align:left}\n"
      ".warn{color:#a00} .key span{display:inline-block;width:12px;"
      "height:12px;margin:0 4px 0 12px}\n</style></head><body>\n";
  o += "<h1>" + esc(desc.name) + "</h1>\n<p>" +
       esc(describeConfig(p.config)) + " on " +
       std::to_string(p.config.gpus()) + " &times; " + esc(p.hardware.name) +
       "</p>\n";
  o += "<h2>Summary</h2>\n<table>\n";
  auto row = [&](const std::string &k, const std::string &v) {
    o += "<tr><th>" + esc(k) + "</th><td>" + esc(v) + "</td></tr>\n";
  };
  row("parameters", num("%.4g", double(desc.totalParams())));
  row("samples / tokens per step", num("%.0f", p.samplesPerStep) + " / " +
                                       num("%.0f", p.tokensPerStep));
  row("step time", num("%.4g s", p.stepTime));
  row("bubble", num("%.1f%%", p.bubbleFraction * 100));
  row("exposed communication", num("%.4g s", p.exposedComm));
  row("tensor-parallel collectives (inside compute)",
      num("%.4g s", p.tensorParallelTime));
  row("tokens/s", num("%.0f", p.tokensPerSecond));
  row("TFLOP/s per GPU (with recompute)", num("%.1f", p.hardwareTflopsPerGpu));
  row("model TFLOP/s per GPU", num("%.1f", p.modelTflopsPerGpu));
  row("MFU", num("%.1f%%", p.mfu * 100));
  row("peak memory per GPU", num("%.2f GiB", p.peakMemory / (1 << 30)) +
                                 (p.fits ? "" : " (does not fit)"));
  o += "</table>\n";
  if (!p.warnings.empty()) {
    o += "<h2>Warnings</h2>\n<ul>\n";
    for (const std::string &w : p.warnings)
      o += "<li class=\"warn\">" + esc(w) + "</li>\n";
    o += "</ul>\n";
  }
  o += "<h2>Pipeline ranks</h2>\n<p>Memory in GiB per GPU; traffic in GB "
       "sent per GPU per step.</p>\n<table>\n<tr><th>rank</th><th>modules"
       "</th><th>params</th><th>weights</th><th>grads</th><th>optimizer</th>"
       "<th>activations</th><th>transient</th><th>gradient buffers</th>"
       "<th>total</th><th>p2p</th>"
       "<th>data parallel</th><th>tensor parallel</th><th>busy s</th>"
       "<th>idle s</th></tr>\n";
  for (const RankStats &r : p.ranks) {
    auto g = [](double b) { return num("%.2f", b / (1 << 30)); };
    auto gb = [](double b) { return num("%.3f", b / 1e9); };
    o += "<tr><td>" + std::to_string(r.pipelineRank) + "</td><td class=\"l\">" +
         esc(summarizeModules(desc, r.modules)) + "</td><td>" +
         num("%.4g", r.params) + "</td><td>" + g(r.memory.weights) +
         "</td><td>" + g(r.memory.grads) + "</td><td>" + g(r.memory.optimizer) +
         "</td><td>" + g(r.memory.activations) + "</td><td>" +
         g(r.memory.transient) + "</td><td>" + g(r.memory.gradientBuffers) +
         "</td><td>" + g(r.memory.total()) + "</td><td>" + gb(r.traffic.p2p) +
         "</td><td>" + gb(r.traffic.dataParallel) + "</td><td>" +
         gb(r.traffic.tensorParallel) + "</td><td>" + num("%.4g", r.busy) +
         "</td><td>" + num("%.4g", r.idle) + "</td></tr>\n";
  }
  o += "</table>\n<h2>Timeline</h2>\n<p class=\"key\">"
       "<span style=\"background:#4c8bf5\"></span>forward"
       "<span style=\"background:#34a853\"></span>backward"
       "<span style=\"background:#9c27b0\"></span>optimizer"
       "<span style=\"background:#fbbc05\"></span>send"
       "<span style=\"background:#ea4335\"></span>collective</p>\n";
  o += svgTimeline(p);
  o += "<h2>Modules</h2>\n<table>\n<tr><th>module</th><th>role</th>"
       "<th>params</th><th>forward GFLOP</th><th>output MB</th></tr>\n";
  for (const ModuleDesc &m : desc.modules)
    o += "<tr><td class=\"l\">" + esc(m.name) + "</td><td class=\"l\">" +
         (m.role == ModuleRole::Embedding ? "embedding"
          : m.role == ModuleRole::Head    ? "head"
                                          : "layer") +
         "</td><td>" + num("%.4g", double(m.params)) + "</td><td>" +
         num("%.4g", m.forwardFlops / 1e9) + "</td><td>" +
         num("%.4g", m.outputBytes / 1e6) + "</td></tr>\n";
  o += "</table>\n</body></html>\n";
  return o;
}

} // namespace lamina::plan
