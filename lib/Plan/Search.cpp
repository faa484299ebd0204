//===- Search.cpp - enumerate, bound, simulate the promising ones ---------===//

#include "lamina/Plan/Search.h"

#include "lamina/Support/Json.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

namespace lamina::plan {

using schedule::Expected;
using schedule::ScheduleKind;
using schedule::Status;

Expected<PlanBound> boundPlan(const ModelDesc &desc, const PlanConfig &c,
                              const Hardware &hw) {
  Expected<std::vector<Stage>> stages = priceStages(desc, c, hw);
  if (!stages)
    return stages.status();
  const std::vector<Stage> &st = *stages;
  const int L = static_cast<int>(st.size());
  const bool contiguous = c.schedule == ScheduleKind::GPipe ||
                          c.schedule == ScheduleKind::OneFOneB;
  Expected<schedule::Placement> pl = schedule::placeModular(L, c.pp);
  if (contiguous) {
    std::vector<double> cost;
    for (const Stage &s : st)
      cost.push_back(s.forward + s.backward);
    pl = schedule::placeBalanced(cost, c.pp);
  }
  if (!pl)
    return pl.status();
  // Prefix sums of forward and backward time along the chain.
  std::vector<double> fwd(L + 1, 0), bwd(L + 1, 0);
  for (int l = 0; l < L; ++l) {
    fwd[l + 1] = fwd[l] + st[l].forward;
    bwd[l + 1] = bwd[l] + st[l].backward;
  }
  PlanBound b;
  const double d = c.dp, m = c.microBatches;
  const PrecisionBytes &prec = precisionBytes(c.precision);
  const double perParam = prec.weight / (c.zero >= 3 ? d : 1) +
                          prec.grad / (c.zero >= 2 ? d : 1) +
                          prec.optimizer / (c.zero >= 1 ? d : 1);
  for (int r = 0; r < c.pp; ++r) {
    std::vector<int> mine = pl->modulesOn(r);
    if (mine.empty())
      continue;
    // Rank r computes all its work; before it, micro-batch 0 must cross
    // every earlier stage forward, and after its last backward the last
    // micro-batch must still cross them backward.
    double work = 0, params = 0, keep = 0, full = 0;
    for (int l : mine) {
      work += (st[l].forward + st[l].backward) * m;
      params += st[l].params;
      keep += c.recompute ? st[l].checkpointBytes : st[l].activationBytes;
      full = std::max(full, c.recompute ? st[l].recomputedBytes : 0.0);
    }
    const int first = mine.front();
    b.stepTime = std::max(b.stepTime, fwd[first] + work + bwd[first]);
    // Micro-batches every schedule holds at once on this rank: all of
    // them where every forward precedes every backward, p - r in 1F1B,
    // at least one otherwise.
    double inFlight = 1;
    if (c.schedule == ScheduleKind::GPipe ||
        c.schedule == ScheduleKind::BreadthFirst ||
        c.schedule == ScheduleKind::Layered)
      inFlight = m;
    else if (c.schedule == ScheduleKind::OneFOneB)
      inFlight = std::min<double>(m, c.pp - r);
    b.memory = std::max(b.memory, params * perParam + keep * inFlight + full);
  }
  return b;
}

Expected<SearchResult> searchPlans(const ModelDesc &desc, const Hardware &hw,
                                   const SearchOptions &o) {
  auto t0 = std::chrono::steady_clock::now();
  if (o.gpus < 1)
    return Status::error("--gpus " + std::to_string(o.gpus) +
                         ": must be >= 1");
  if (o.globalBatch < 1)
    return Status::error("--global-batch " + std::to_string(o.globalBatch) +
                         ": must be >= 1");
  // Every candidate would fail it (checkConfig).
  if (Status s = checkMoeImbalance(desc, o.moeImbalance); !s)
    return s;
  int layers = 0;
  for (const ModuleDesc &m : desc.modules)
    layers += m.role == ModuleRole::Layer;
  if (!layers)
    layers = static_cast<int>(desc.modules.size());

  struct Candidate {
    PlanConfig config;
    PlanBound bound;
  };
  std::vector<Candidate> candidates;
  SearchResult result;
  const double usable = hw.hbmBytes - hw.reservedBytes;
  for (int tp = 1; tp <= std::min(o.gpus, hw.gpusPerNode); tp *= 2) {
    if (o.gpus % tp)
      continue;
    for (int pp = 1; pp <= std::min(o.gpus / tp, layers); ++pp) {
      if ((o.gpus / tp) % pp)
        continue;
      const int dp = o.gpus / tp / pp;
      if (o.globalBatch % dp)
        continue;
      for (int64_t b : o.microBatchSizes) {
        if ((o.globalBatch / dp) % b)
          continue;
        const int64_t m = o.globalBatch / dp / b;
        if (m > 1 << 20)
          continue;
        for (ScheduleKind kind : o.schedules) {
          // With one pipeline rank the modular schedules repeat layered
          // (breadth-first) and 1f1b (interleaved).
          if (pp == 1 && (kind == ScheduleKind::BreadthFirst ||
                          kind == ScheduleKind::Interleaved1F1B))
            continue;
          // Expert parallelism over groups of the replicas, for a
          // mixture-of-experts model whose experts they divide
          // (checkConfig).
          std::vector<int> eps = {1};
          if (desc.moeModules() > 0)
            for (int e = 2; e <= dp; ++e)
              if (dp % e == 0)
                eps.push_back(e);
          for (int ep : eps) {
            for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero)
              for (bool recompute : {true, false}) {
                PlanConfig c;
                c.pp = pp;
                c.dp = dp;
                c.tp = tp;
                c.ep = ep;
                c.microBatchSize = b;
                c.microBatches = static_cast<int>(m);
                c.schedule = kind;
                c.zero = zero;
                c.recompute = recompute;
                c.precision = o.precision;
                c.moeImbalance = o.moeImbalance;
                Expected<PlanBound> bound = boundPlan(desc, c, hw);
                if (!bound)
                  continue;
                ++result.enumerated;
                if (bound->memory > usable)
                  continue;
                ++result.staticFit;
                candidates.push_back({c, *bound});
              }
          }
        }
      }
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate &a, const Candidate &b) {
                     return a.bound.stepTime < b.bound.stepTime;
                   });
  EvaluateOptions quick;
  quick.exposedComm = false;
  quick.keepTimeline = false;
  quick.stepBuffers = false;
  std::vector<Plan> fitting; // sorted by step time, at most o.top
  for (const Candidate &cand : candidates) {
    if ((int)fitting.size() >= o.top &&
        cand.bound.stepTime >= fitting.back().stepTime)
      break; // every later candidate is at least as slow
    Expected<Plan> p = evaluatePlan(desc, cand.config, hw, quick);
    ++result.simulated;
    if (!p || !p->fits)
      continue;
    ++result.fit;
    auto at = std::upper_bound(
        fitting.begin(), fitting.end(), p->stepTime,
        [](double t, const Plan &q) { return t < q.stepTime; });
    fitting.insert(at, std::move(*p));
    if ((int)fitting.size() > o.top)
      fitting.pop_back();
  }
  // The winners again with every figure the search reports (exposed
  // communication; not the step buffers, which it does not show).
  EvaluateOptions winners;
  winners.stepBuffers = false;
  for (const Plan &p : fitting) {
    Expected<Plan> full = evaluatePlan(desc, p.config, hw, winners);
    if (full) {
      full->timeline = {};
      full->schedule.ranks.clear();
      result.best.push_back(std::move(*full));
    }
  }
  result.seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - t0)
                       .count();
  return result;
}

std::string formatSearch(const SearchResult &r, const ModelDesc &desc) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "search: %d configurations priced, %d pass the memory "
                "bound, %d simulated, %d fit memory (%.2f s)\n",
                r.enumerated, r.staticFit, r.simulated, r.fit, r.seconds);
  out += line;
  if (r.best.empty())
    return out + "no configuration fits memory\n";
  out += "model " + desc.name + " on " +
         std::to_string(r.best[0].config.gpus()) + " x " +
         r.best[0].hardware.name + ", fastest first:\n";
  // Wide enough for the longest (expert parallelism, its imbalance).
  int width = 52;
  for (const Plan &p : r.best)
    width = std::max(width, int(describeConfig(p.config).size()));
  std::snprintf(line, sizeof line, "  %-3s %-*s %9s %11s %8s %6s %7s %9s\n",
                "#", width, "config", "step (s)", "tokens/s", "TFLOP/s", "MFU",
                "bubble", "peak mem");
  out += line;
  int i = 0;
  for (const Plan &p : r.best) {
    std::snprintf(line, sizeof line,
                  "  %-3d %-*s %9.3f %11.0f %8.1f %5.1f%% %6.1f%% %5.1f GiB\n",
                  ++i, width, describeConfig(p.config).c_str(), p.stepTime,
                  p.tokensPerSecond, p.hardwareTflopsPerGpu, p.mfu * 100,
                  p.bubbleFraction * 100, p.peakMemory / (1 << 30));
    out += line;
  }
  return out;
}

std::string formatSearchJson(const SearchResult &r) {
  std::string out;
  json::Writer w(out);
  w.beginObject()
      .field("schema", "lamina-plan-search")
      .field("version", 1)
      .field("enumerated", r.enumerated)
      .field("static_fit", r.staticFit)
      .field("simulated", r.simulated)
      .field("fit", r.fit)
      .field("seconds", r.seconds);
  w.key("best").beginArray();
  for (const Plan &p : r.best) {
    w.beginObject()
        .field("config", describeConfig(p.config))
        .field("pp", p.config.pp)
        .field("dp", p.config.dp)
        .field("tp", p.config.tp)
        .field("ep", p.config.ep)
        .field("micro_batches", p.config.microBatches)
        .field("micro_batch_size", (long long)p.config.microBatchSize)
        .field("schedule", schedule::scheduleKindName(p.config.schedule))
        .field("zero", p.config.zero)
        .field("recompute", p.config.recompute)
        .field("precision", precisionBytes(p.config.precision).name)
        .field("moe_imbalance", p.config.moeImbalance)
        .field("step_time_s", p.stepTime)
        .field("tokens_per_s", p.tokensPerSecond)
        .field("hardware_tflops_per_gpu", p.hardwareTflopsPerGpu)
        .field("mfu", p.mfu)
        .field("bubble_fraction", p.bubbleFraction)
        .field("exposed_comm_s", p.exposedComm)
        .field("peak_memory_bytes", p.peakMemory)
        .endObject();
  }
  w.endArray().endObject();
  return out + "\n";
}

} // namespace lamina::plan
