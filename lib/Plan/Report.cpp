//===- Report.cpp - text and JSON reports, schedule comparison ------------===//

#include "lamina/Plan/Report.h"

#include "lamina/Support/Json.h"

#include <cmath>
#include <cstdio>
#include <map>

namespace lamina::plan {

using schedule::Action;
using schedule::ActionKind;
using schedule::ScheduleKind;

namespace {
std::string fmt(const char *f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
std::string gib(double bytes) { return fmt("%.2f", bytes / (1 << 30)); }
/// 1.2 GB, 340 MB: traffic in decimal units like link speeds.
std::string bytesText(double b) {
  const char *unit[] = {"B", "KB", "MB", "GB", "TB"};
  int i = 0;
  while (b >= 1000 && i < 4) {
    b /= 1000;
    ++i;
  }
  return fmt(i ? "%.1f " : "%.0f ", b) + unit[i];
}
std::string seconds(double s) {
  if (s >= 1)
    return fmt("%.3f s", s);
  if (s >= 1e-3)
    return fmt("%.2f ms", s * 1e3);
  return fmt("%.1f us", s * 1e6);
}
std::string count(double n) {
  const char *suffix[] = {"", "K", "M", "B", "T"};
  int i = 0;
  while (n >= 1000 && i < 4) {
    n /= 1000;
    ++i;
  }
  return fmt(i ? "%.2f" : "%.0f", n) + suffix[i];
}
const char *roleName(ModuleRole r) {
  return r == ModuleRole::Embedding ? "embedding"
         : r == ModuleRole::Head    ? "head"
                                    : "layer";
}
/// Pipeline rank of every description module.
std::vector<int> rankOfModules(const Plan &p, const ModelDesc &desc) {
  std::vector<int> rank(desc.modules.size(), -1);
  for (const RankStats &r : p.ranks)
    for (int m : r.modules)
      rank[m] = r.pipelineRank;
  return rank;
}
std::string pad(std::string s, size_t w) {
  if (s.size() < w)
    s.insert(0, w - s.size(), ' ');
  return s;
}
} // namespace

std::string summarizeModules(const ModelDesc &desc,
                             const std::vector<int> &modules) {
  // Fold "prefix.N" names into arithmetic runs.
  std::vector<std::string> parts;
  size_t i = 0;
  auto split = [&](int m, std::string &prefix, long &n) {
    const std::string &name = desc.modules[m].name;
    size_t dot = name.find_last_of('.');
    if (dot == std::string::npos || dot + 1 == name.size() ||
        name.find_first_not_of("0123456789", dot + 1) != std::string::npos)
      return false;
    prefix = name.substr(0, dot + 1);
    n = std::stol(name.substr(dot + 1));
    return true;
  };
  while (i < modules.size()) {
    std::string prefix;
    long first;
    if (!split(modules[i], prefix, first)) {
      parts.push_back(desc.modules[modules[i++]].name);
      continue;
    }
    size_t j = i + 1;
    long step = 0, last = first;
    while (j < modules.size()) {
      std::string p2;
      long n;
      if (!split(modules[j], p2, n) || p2 != prefix)
        break;
      if (j == i + 1)
        step = n - first;
      if (n - last != step || step <= 0)
        break;
      last = n;
      ++j;
    }
    if (j - i == 1)
      parts.push_back(prefix + std::to_string(first));
    else if (step == 1)
      parts.push_back(prefix + std::to_string(first) + "-" +
                      std::to_string(last));
    else
      parts.push_back(prefix + std::to_string(first) + ".." +
                      std::to_string(last) + " step " + std::to_string(step));
    i = j;
  }
  std::string out;
  for (const std::string &p : parts)
    out += (out.empty() ? "" : ", ") + p;
  return out.empty() ? "(none)" : out;
}

std::string formatTextReport(const Plan &p, const ModelDesc &desc) {
  const PlanConfig &c = p.config;
  std::string o;
  o += "plan for " + desc.name + " (" + count(desc.totalParams()) +
       " parameters, " + std::to_string(desc.modules.size()) +
       " modules) on " + std::to_string(c.gpus()) + " x " + p.hardware.name +
       "\n";
  o += "config:     " + describeConfig(c) + "\n";
  if (int moe = desc.moeModules()) {
    const ModuleDesc *first = nullptr;
    for (const ModuleDesc &m : desc.modules)
      if (m.expertParams > 0 && !first)
        first = &m;
    o += "experts:    " + std::to_string(moe) + " module" +
         (moe > 1 ? "s" : "") + " with mixture-of-experts layers (" +
         std::to_string(first->experts) + " experts, top-" +
         std::to_string(first->expertsPerToken) +
         "): " + count(desc.activeParams()) + " of the " +
         count(desc.totalParams()) + " parameters active per token";
    if (const int split = expertSplit(*first, c); split > 1)
      o += "; " + std::to_string(first->experts / split) +
           (first->experts / split == 1 ? " expert" : " experts") +
           " per GPU (--" + (c.ep > 1 ? "ep " : "tp ") + std::to_string(split) +
           ")";
    if (const double f = moeImbalance(*first, c); f > 1)
      o += "; the busiest rank gets " + fmt("%g", f) +
           "x the mean rows (--moe-imbalance)";
    o += "\n";
  }
  const PrecisionBytes &prec = precisionBytes(c.precision);
  if (p.valueScale != 1)
    o += "values:     the model stores " +
         fmt("%.0f", prec.value / p.valueScale) +
         "-byte values; bytes are costed as " + prec.description + "\n";
  else if (c.precision != Precision::Bf16Mixed)
    o += std::string("values:     bytes are costed as ") + prec.description +
         "\n";
  o += "batch:      " + count(p.samplesPerStep) + " samples = " +
       count(p.tokensPerStep) + " tokens per step\n";
  o += "step time:  " + seconds(p.stepTime) + "\n";
  o += "bubble:     " + fmt("%.1f%%", p.bubbleFraction * 100) +
       " of compute-stream time idle\n";
  o += "exposed communication: " + seconds(p.exposedComm) +
       fmt(" (%.1f%% of the step; pipeline and data-parallel transfers)",
           p.stepTime > 0 ? p.exposedComm / p.stepTime * 100 : 0) +
       "\n";
  if (c.tp > 1)
    o += "tensor-parallel collectives: " + seconds(p.tensorParallelTime) +
         " per step on the busiest rank (inside compute)\n";
  if (c.ep > 1) {
    double ep = 0, bytes = 0;
    for (const RankStats &r : p.ranks) {
      double t = 0;
      for (int st : r.stages)
        t +=
            (p.stages[size_t(st)].epForward + p.stages[size_t(st)].epBackward) *
            c.microBatches;
      ep = std::max(ep, t);
      bytes = std::max(bytes, r.traffic.expertParallel);
    }
    o += "expert-parallel all-to-alls: " + seconds(ep) + ", " +
         bytesText(bytes) + " sent per step on the busiest rank (inside " +
         (c.moeImbalance > 1 ? "compute; timed for the busiest rank's rows, "
                               "the bytes for tokens routed evenly"
                             : "compute; for tokens routed evenly: a run's "
                               "routing moves more or less") +
         ")\n";
  }
  o += "throughput: " + count(p.tokensPerSecond) + " tokens/s, " +
       fmt("%.1f", p.hardwareTflopsPerGpu) + " TFLOP/s per GPU with " +
       "recompute (" + fmt("%.1f", p.megatronTflopsPerGpu) +
       " counting GEMMs only), " + fmt("%.1f", p.modelTflopsPerGpu) +
       " model TFLOP/s\n";
  o += "MFU:        " + fmt("%.1f%%", p.mfu * 100) +
       fmt(" (hardware FLOPs utilisation %.1f%%)", p.hfu * 100) + "\n";
  o += "memory:     peak " + gib(p.peakMemory) + " GiB of " +
       gib(p.hardware.hbmBytes) + " GiB" +
       (p.fits ? "" : "  ** DOES NOT FIT **") + "\n";

  o += "\nmodules -> pipeline ranks";
  if (c.tp > 1 || c.dp > 1)
    o += " (each rank is " + std::to_string(c.tp) + " tensor-parallel GPU" +
         (c.tp > 1 ? "s" : "") + " x " + std::to_string(c.dp) +
         " data-parallel replica" + (c.dp > 1 ? "s" : "") + ")";
  o += ":\n";
  for (const RankStats &r : p.ranks)
    o += "  rank " + std::to_string(r.pipelineRank) + ": " +
         summarizeModules(desc, r.modules) + "\n";

  o += "\nper pipeline rank (memory in GiB per GPU; traffic sent per GPU per "
       "step):\n";
  const char *hdr[] = {"rank",  "params", "weights", "grads", "optim",
                       "activ", "transient", "total", "p2p", "dp",
                       "tp",    "busy", "idle"};
  const size_t width[] = {4, 8, 8, 7, 7, 7, 9, 7, 9, 9, 9, 10, 10};
  for (size_t i = 0; i < 13; ++i)
    o += pad(hdr[i], width[i]) + (i + 1 < 13 ? " " : "\n");
  for (const RankStats &r : p.ranks) {
    const RankMemory &m = r.memory;
    std::string cells[] = {std::to_string(r.pipelineRank),
                           count(r.params),
                           gib(m.weights),
                           gib(m.grads),
                           gib(m.optimizer),
                           gib(m.activations),
                           gib(m.transient + m.gradientBuffers),
                           gib(m.total()),
                           bytesText(r.traffic.p2p),
                           bytesText(r.traffic.dataParallel),
                           bytesText(r.traffic.tensorParallel),
                           seconds(r.busy),
                           seconds(r.idle)};
    for (size_t i = 0; i < 13; ++i)
      o += pad(cells[i], width[i]) + (i + 1 < 13 ? " " : "\n");
  }
  // The compiled step's own figure (part of activ above).
  if (!p.ranks.empty()) {
    o += "\nstep buffer per pipeline rank (what the compiled step holds "
         "between its calls, planned as lamina compile plans it";
    o += p.ranks.front().memory.stepBuffersExact
             ? "):"
             : "; residuals estimated: plan with --recompute full, or "
               "with lamina compile's --loss flags for the compiled ones):";
    for (const RankStats &r : p.ranks)
      o += std::string(r.pipelineRank ? "," : "") + " rank " +
           std::to_string(r.pipelineRank) + " " +
           bytesText(r.memory.stepBuffers);
    o += "\n";
  }
  if (!p.warnings.empty()) {
    o += "\nwarnings:\n";
    for (const std::string &w : p.warnings)
      o += "  warning: " + w + "\n";
  }
  return o;
}

namespace {
const char *kindName(ActionKind k) {
  switch (k) {
  case ActionKind::Forward: return "forward";
  case ActionKind::Backward: return "backward";
  case ActionKind::Send: return "send";
  case ActionKind::Recv: return "recv";
  case ActionKind::AllGather: return "all-gather";
  case ActionKind::ReduceScatter: return "reduce-scatter";
  case ActionKind::AllReduce: return "all-reduce";
  case ActionKind::OptimizerStep: return "optimizer-step";
  }
  return "?";
}

void writeSummary(json::Writer &w, const Plan &p) {
  w.key("summary")
      .beginObject()
      .field("step_time_s", p.stepTime)
      .field("bubble_fraction", p.bubbleFraction)
      .field("compute_only_step_s", p.computeOnlyStep)
      .field("exposed_comm_s", p.exposedComm)
      .field("tensor_parallel_time_s", p.tensorParallelTime)
      .field("samples_per_step", p.samplesPerStep)
      .field("tokens_per_step", p.tokensPerStep)
      .field("tokens_per_s", p.tokensPerSecond)
      .field("model_flops_per_step", p.modelFlopsPerStep)
      .field("hardware_flops_per_step", p.hardwareFlopsPerStep)
      .field("matmul_flops_per_step", p.matmulFlopsPerStep)
      .field("model_tflops_per_gpu", p.modelTflopsPerGpu)
      .field("hardware_tflops_per_gpu", p.hardwareTflopsPerGpu)
      .field("matmul_tflops_per_gpu", p.megatronTflopsPerGpu)
      .field("mfu", p.mfu)
      .field("hfu", p.hfu)
      .field("peak_memory_bytes", p.peakMemory)
      .field("value_scale", p.valueScale)
      .field("fits", p.fits)
      .endObject();
}

void writeConfig(json::Writer &w, const PlanConfig &c) {
  w.key("config")
      .beginObject()
      .field("pp", c.pp)
      .field("dp", c.dp)
      .field("tp", c.tp)
      .field("ep", c.ep)
      .field("gpus", c.gpus())
      .field("micro_batches", c.microBatches)
      .field("micro_batch_size", (long long)c.microBatchSize)
      .field("schedule", schedule::scheduleKindName(c.schedule))
      .field("chunks", c.chunks)
      .field("zero", c.zero)
      .field("recompute", c.recompute ? "full" : "none")
      .field("target", c.paddedShards ? "cuda" : "host")
      .field("precision", precisionBytes(c.precision).name)
      .field("moe_imbalance", c.moeImbalance)
      .endObject();
}
} // namespace

std::string formatJson(const Plan &p, const ModelDesc &desc) {
  std::string out;
  json::Writer w(out);
  w.beginObject()
      .field("schema", "lamina-plan")
      .field("version", kPlanJsonVersion);
  const std::vector<int> rankOf = rankOfModules(p, desc);
  std::vector<int> stageOf(desc.modules.size(), -1);
  for (size_t s = 0; s < p.stages.size(); ++s)
    for (int m : p.stages[s].modules)
      stageOf[m] = static_cast<int>(s);
  w.key("model")
      .beginObject()
      .field("name", desc.name)
      .field("params", (long long)desc.totalParams())
      .field("active_params", desc.activeParams())
      .field("micro_batch_size", (long long)desc.microBatchSize)
      .field("seq_len", (long long)desc.seqLen)
      .field("hidden", (long long)desc.hidden)
      .field("discovery", desc.discovery);
  w.key("shared_inputs").beginArray();
  for (const std::string &s : desc.sharedInputs)
    w.value(s);
  w.endArray();
  w.key("shared_params").beginArray();
  for (const SharedParam &sp : desc.sharedParams) {
    w.beginObject()
        .field("name", sp.name)
        .field("params", (long long)sp.params);
    w.key("readers").beginArray();
    for (int m : sp.readers)
      w.value(desc.modules[size_t(m)].name);
    w.endArray();
    w.endObject();
  }
  w.endArray();
  w.key("modules").beginArray();
  for (size_t i = 0; i < desc.modules.size(); ++i) {
    const ModuleDesc &m = desc.modules[i];
    w.beginObject()
        .field("name", m.name)
        .field("role", roleName(m.role))
        .field("body", m.body)
        .field("params", (long long)m.params)
        .field("forward_flops", m.forwardFlops)
        .field("matmul_flops", m.matmulFlops)
        .field("forward_bytes", m.forwardBytes)
        .field("output_bytes", (long long)m.outputBytes)
        .field("activation_bytes", (long long)m.activationBytes)
        .field("stage", stageOf[i])
        .field("pipeline_rank", rankOf[i])
        .endObject();
  }
  w.endArray().endObject();
  const Hardware &h = p.hardware;
  w.key("hardware")
      .beginObject()
      .field("name", h.name)
      .field("peak_flops", h.peakFlops)
      .field("gemm_efficiency", h.gemmEfficiency)
      .field("hbm_bandwidth", h.hbmBandwidth)
      .field("hbm_efficiency", h.hbmEfficiency)
      .field("hbm_bytes", h.hbmBytes)
      .field("intra_node_bandwidth", h.intraNodeBandwidth)
      .field("inter_node_bandwidth", h.interNodeBandwidth)
      .field("intra_node_efficiency", h.intraNodeEfficiency)
      .field("inter_node_efficiency", h.interNodeEfficiency)
      .field("intra_node_latency", h.intraNodeLatency)
      .field("inter_node_latency", h.interNodeLatency)
      .field("gpus_per_node", h.gpusPerNode)
      .field("reserved_bytes", h.reservedBytes)
      .endObject();
  writeConfig(w, p.config);
  writeSummary(w, p);
  w.key("stages").beginArray();
  for (const Stage &s : p.stages) {
    w.beginObject();
    w.key("modules").beginArray();
    for (int m : s.modules)
      w.value(m);
    w.endArray();
    w.field("forward_s", s.forward)
        .field("backward_s", s.backward)
        .field("send_s", s.send)
        .field("all_gather_s", s.allGather)
        .field("reduce_scatter_s", s.reduceScatter)
        .field("all_reduce_s", s.allReduce)
        .field("experts_forward_s", s.expertForward)
        .field("experts_backward_s", s.expertBackward)
        .field("all_to_all_forward_s", s.epForward)
        .field("all_to_all_backward_s", s.epBackward)
        .endObject();
  }
  w.endArray();
  w.key("ranks").beginArray();
  for (const RankStats &r : p.ranks) {
    w.beginObject().field("pipeline_rank", r.pipelineRank);
    w.key("modules").beginArray();
    for (int m : r.modules)
      w.value(desc.modules[m].name);
    w.endArray();
    w.field("params", r.params);
    w.field("shared_params", r.sharedParams);
    w.key("memory")
        .beginObject()
        .field("weights", r.memory.weights)
        .field("grads", r.memory.grads)
        .field("optimizer", r.memory.optimizer)
        .field("activations", r.memory.activations)
        .field("transient", r.memory.transient)
        .field("gradient_buffers", r.memory.gradientBuffers)
        .field("step_buffers", r.memory.stepBuffers)
        .field("step_buffers_exact", r.memory.stepBuffersExact)
        .field("total", r.memory.total())
        .endObject();
    w.key("traffic")
        .beginObject()
        .field("p2p_bytes", r.traffic.p2p)
        .field("data_parallel_bytes", r.traffic.dataParallel)
        .field("tensor_parallel_bytes", r.traffic.tensorParallel)
        .field("expert_parallel_bytes", r.traffic.expertParallel)
        .field("sends", r.traffic.sends)
        .field("collectives", r.traffic.collectives)
        .endObject();
    w.field("busy_s", r.busy)
        .field("idle_s", r.idle)
        .field("peak_in_flight", r.peakInFlight)
        .endObject();
  }
  w.endArray();
  // Replica 0's timeline: the other replicas run the same one.
  w.key("timeline").beginArray();
  const auto &s = p.schedule;
  for (int r = 0; r < (int)p.ranks.size() && !s.ranks.empty(); ++r) {
    const int g = s.globalRank(r, 0);
    w.beginArray();
    for (size_t i = 0; i < s.ranks[g].size(); ++i) {
      const Action &a = s.ranks[g][i];
      const auto &t = p.timeline.times[g][i];
      w.beginObject()
          .field("action", schedule::formatAction(a))
          .field("kind", kindName(a.kind))
          .field("stage", a.module)
          .field("micro_batch", a.microBatch)
          .field("start_s", t.start)
          .field("end_s", t.end)
          .endObject();
    }
    w.endArray();
  }
  w.endArray();
  w.key("warnings").beginArray();
  for (const std::string &x : p.warnings)
    w.value(x);
  w.endArray().endObject();
  return out + "\n";
}

Comparison compareSchedules(const ModelDesc &desc, const PlanConfig &base,
                            const Hardware &hw,
                            const std::vector<ScheduleKind> &kinds) {
  Comparison cmp;
  for (ScheduleKind k : kinds) {
    PlanConfig c = base;
    c.schedule = k;
    // The layered schedule has no pipeline: compare it at p = 1 only.
    Comparison::Entry e;
    e.kind = k;
    schedule::Expected<Plan> p = evaluatePlan(desc, c, hw);
    e.ok = p.ok();
    if (p.ok()) {
      e.plan = std::move(*p);
      e.plan.timeline = {};
      e.plan.schedule.ranks.clear();
    } else {
      e.error = p.error();
    }
    cmp.entries.push_back(std::move(e));
  }
  return cmp;
}

std::string formatComparison(const Comparison &cmp) {
  std::vector<std::pair<std::string, std::vector<std::string>>> rows = {
      {"step time", {}},        {"bubble", {}},
      {"exposed comm", {}},     {"tokens/s", {}},
      {"TFLOP/s per GPU", {}},  {"MFU", {}},
      {"peak memory (GiB)", {}}, {"fits", {}},
      {"p2p sent/GPU", {}},      {"dp sent/GPU", {}},
      {"peak in flight", {}}};
  std::vector<std::string> names;
  std::string notes;
  for (const auto &e : cmp.entries) {
    names.push_back(schedule::scheduleKindName(e.kind));
    if (!e.ok) {
      for (auto &r : rows)
        r.second.push_back("-");
      notes += "  " + names.back() + ": " + e.error + "\n";
      continue;
    }
    const Plan &p = e.plan;
    double p2p = 0, dpb = 0;
    int inflight = 0;
    for (const RankStats &r : p.ranks) {
      p2p = std::max(p2p, r.traffic.p2p);
      dpb = std::max(dpb, r.traffic.dataParallel);
      inflight = std::max(inflight, r.peakInFlight);
    }
    std::string v[] = {seconds(p.stepTime),
                       fmt("%.1f%%", p.bubbleFraction * 100),
                       seconds(p.exposedComm),
                       count(p.tokensPerSecond),
                       fmt("%.1f", p.hardwareTflopsPerGpu),
                       fmt("%.1f%%", p.mfu * 100),
                       gib(p.peakMemory),
                       p.fits ? "yes" : "NO",
                       bytesText(p2p),
                       bytesText(dpb),
                       std::to_string(inflight)};
    for (size_t i = 0; i < rows.size(); ++i)
      rows[i].second.push_back(v[i]);
  }
  std::string o;
  if (!cmp.entries.empty() && cmp.entries[0].ok)
    o += "compare: " + describeConfig(cmp.entries[0].plan.config) +
         " (schedule varies)\n";
  size_t w0 = 18, w = 17;
  o += std::string(w0, ' ');
  for (const std::string &n : names)
    o += pad(n, w);
  o += "\n";
  for (const auto &[label, cells] : rows) {
    o += label + std::string(w0 - label.size(), ' ');
    for (const std::string &c : cells)
      o += pad(c, w);
    o += "\n";
  }
  if (!notes.empty())
    o += "not valid:\n" + notes;
  return o;
}

std::string formatComparisonJson(const Comparison &cmp) {
  std::string out;
  json::Writer w(out);
  w.beginObject()
      .field("schema", "lamina-plan-compare")
      .field("version", kPlanJsonVersion);
  w.key("plans").beginArray();
  for (const auto &e : cmp.entries) {
    w.beginObject().field("schedule", schedule::scheduleKindName(e.kind));
    if (!e.ok) {
      w.field("error", e.error).endObject();
      continue;
    }
    writeConfig(w, e.plan.config);
    writeSummary(w, e.plan);
    w.key("warnings").beginArray();
    for (const std::string &x : e.plan.warnings)
      w.value(x);
    w.endArray().endObject();
  }
  w.endArray().endObject();
  return out + "\n";
}

} // namespace lamina::plan
