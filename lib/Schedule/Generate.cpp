//===- Generate.cpp - gpipe, 1f1b, interleaved, breadth-first, layered ----===//
//
// Generation is two steps, each callable on its own (the dist-schedule and
// dist-insert-comm passes run them over IR). First, generateComputeOrder:
// each schedule fixes, per pipeline rank, the order of its compute actions
// (forward/backward of a module for a micro-batch, then the optimizer step),
// copied for the d data-parallel replicas. Then lowerComputeOrder inserts
// everything else the same way for every schedule: a Recv right before a
// compute whose input lives on another rank, a Send right after a compute
// whose output is needed elsewhere, and the data-parallel collectives of the
// sharding level.
//
//===----------------------------------------------------------------------===//

#include "lamina/Schedule/Schedule.h"

#include "Analysis.h"

#include <algorithm>
#include <cstdint>

namespace lamina::schedule {

namespace {

struct Compute {
  bool backward;
  int module;
  int mb;
};
using Order = std::vector<std::vector<Compute>>; // per pipeline rank

Status validate(const ScheduleConfig &c) {
  auto bad = [](const std::string &what, int v, int lo, int hi) {
    return Status::error(what + " must be in [" + std::to_string(lo) + ", " +
                         std::to_string(hi) + "], got " + std::to_string(v));
  };
  if (c.numModules < 1 || c.numModules > (1 << 20))
    return bad("number of modules L", c.numModules, 1, 1 << 20);
  if (c.pipelineRanks < 1 || c.pipelineRanks > (1 << 16))
    return bad("pipeline ranks p", c.pipelineRanks, 1, 1 << 16);
  if (c.microBatches < 1 || c.microBatches > (1 << 20))
    return bad("micro-batches m", c.microBatches, 1, 1 << 20);
  if (c.dataParallel < 1 || c.dataParallel > (1 << 16))
    return bad("data-parallel degree d", c.dataParallel, 1, 1 << 16);
  if (c.zeroLevel < 0 || c.zeroLevel > 3)
    return bad("sharding level", c.zeroLevel, 0, 3);
  // Every compute action exists once per replica; keep the lists in memory.
  if (2.0 * c.numModules * c.microBatches * c.dataParallel > 5e7)
    return Status::error("schedule too large: 2*L*m*d = " +
                         std::to_string(2.0 * c.numModules * c.microBatches *
                                        c.dataParallel) +
                         " compute actions (limit 5e7)");
  std::string name = scheduleKindName(c.kind);
  int L = c.numModules, p = c.pipelineRanks, m = c.microBatches;
  if (c.kind == ScheduleKind::Layered && p != 1)
    return Status::error("layered is data parallel only and needs p = 1 (got "
                         "p = " + std::to_string(p) +
                         "); use breadth-first to pipeline it");
  if (L < p)
    return Status::error(name + " needs at least one module per pipeline "
                         "rank: L = " + std::to_string(L) + " < p = " +
                         std::to_string(p));
  if (c.kind == ScheduleKind::Interleaved1F1B && L % p != 0)
    return Status::error("interleaved-1f1b needs L divisible by p to give "
                         "every rank v = L/p chunks: L = " + std::to_string(L) +
                         ", p = " + std::to_string(p));
  // Megatron's own requirement. With a partial last group the order stays
  // valid but its bubble can exceed plain 1F1B's (measured), so refuse it.
  if (c.kind == ScheduleKind::Interleaved1F1B && m % p != 0)
    return Status::error("interleaved-1f1b needs m to be a multiple of p "
                         "(depth-first groups of p micro-batches): m = " +
                         std::to_string(m) + ", p = " + std::to_string(p));
  if (c.kind == ScheduleKind::BreadthFirst && m < p)
    return Status::error(
        "breadth-first needs m >= p: with m = " + std::to_string(m) +
        " micro-batches and p = " + std::to_string(p) +
        " pipeline ranks a rank would sit idle waiting for the wrap-around "
        "input of its next module; use more micro-batches or another schedule");
  if (!c.moduleCost.empty() &&
      static_cast<int>(c.moduleCost.size()) != L)
    return Status::error("moduleCost has " +
                         std::to_string(c.moduleCost.size()) +
                         " entries for L = " + std::to_string(L) + " modules");
  return Status::success();
}

void forwards(std::vector<Compute> &out, const std::vector<int> &mods, int mb) {
  for (int l : mods)
    out.push_back({false, l, mb});
}
void backwards(std::vector<Compute> &out, const std::vector<int> &mods, int mb) {
  for (auto it = mods.rbegin(); it != mods.rend(); ++it)
    out.push_back({true, *it, mb});
}

// GPipe: a stage runs the forward of its whole block per micro-batch, all
// micro-batches, then the backwards in the same micro-batch order (PyTorch's
// ScheduleGPipe order).
Order orderGPipe(const Placement &pl, int m) {
  Order order(pl.numRanks);
  for (int r = 0; r < pl.numRanks; ++r) {
    std::vector<int> mods = pl.modulesOn(r);
    for (int mb = 0; mb < m; ++mb)
      forwards(order[r], mods, mb);
    for (int mb = 0; mb < m; ++mb)
      backwards(order[r], mods, mb);
  }
  return order;
}

// 1F1B (PipeDream-flush): p - r - 1 warm-up forwards, then alternate one
// forward and one backward, then drain the remaining backwards.
Order order1F1B(const Placement &pl, int m) {
  int p = pl.numRanks;
  Order order(p);
  for (int r = 0; r < p; ++r) {
    std::vector<int> mods = pl.modulesOn(r);
    int warm = std::min(p - r - 1, m);
    for (int mb = 0; mb < warm; ++mb)
      forwards(order[r], mods, mb);
    for (int i = 0; i < m - warm; ++i) {
      forwards(order[r], mods, warm + i);
      backwards(order[r], mods, i);
    }
    for (int mb = m - warm; mb < m; ++mb)
      backwards(order[r], mods, mb);
  }
  return order;
}

// Megatron's interleaved 1F1B. Chunk c of rank r is module c*p + r. Forwards
// go depth-first in groups of p micro-batches: for each group, chunk 0 for the
// group's micro-batches, then chunk 1, ...; backwards the same with chunks
// reversed. Warm-up is (p - r - 1) * 2 + (v - 1) * p forwards (Megatron's
// count), then 1F1B, then cool-down. m is a multiple of p (validated).
Order orderInterleaved(const Placement &pl, int m) {
  int p = pl.numRanks, v = pl.numModules() / p;
  Order order(p);
  for (int r = 0; r < p; ++r) {
    std::vector<Compute> fwd, bwd;
    for (int g0 = 0; g0 < m; g0 += p)
      for (int c = 0; c < v; ++c)
        for (int mb = g0; mb < g0 + p; ++mb) {
          fwd.push_back({false, c * p + r, mb});
          bwd.push_back({true, (v - 1 - c) * p + r, mb});
        }
    int total = v * m;
    int warm = std::min((p - r - 1) * 2 + (v - 1) * p, total);
    std::vector<Compute> &out = order[r];
    for (int i = 0; i < warm; ++i)
      out.push_back(fwd[i]);
    for (int i = 0; i < total - warm; ++i) {
      out.push_back(fwd[warm + i]);
      out.push_back(bwd[i]);
    }
    for (int i = total - warm; i < total; ++i)
      out.push_back(bwd[i]);
  }
  return order;
}

// Layered gradient accumulation on each rank: for each of its modules in
// order, the forward of every micro-batch; then the modules in reverse, each
// with its micro-batches in reverse (the freshest activation first, as
// PyTorch's ScheduleLoopedBFS).
Order orderBreadthFirst(const Placement &pl, int m) {
  Order order(pl.numRanks);
  for (int r = 0; r < pl.numRanks; ++r) {
    std::vector<int> mods = pl.modulesOn(r);
    for (int l : mods)
      for (int mb = 0; mb < m; ++mb)
        order[r].push_back({false, l, mb});
    for (auto it = mods.rbegin(); it != mods.rend(); ++it)
      for (int mb = m - 1; mb >= 0; --mb)
        order[r].push_back({true, *it, mb});
  }
  return order;
}

// Lowers one pipeline rank's compute order; peers are pipeline ranks here.
std::vector<Action> lower(const ScheduleConfig &c, const Placement &pl, int r,
                          const std::vector<Compute> &ord) {
  const int L = c.numModules, n = static_cast<int>(ord.size());
  const bool dp = c.dataParallel > 1;
  const int level = c.zeroLevel;
  std::vector<int> lastBackward(L, -1);
  for (int i = 0; i < n; ++i)
    if (ord[i].backward)
      lastBackward[ord[i].module] = i;
  // Level 3 keeps a module's full weights for a run: a maximal stretch of
  // consecutive computes of the same module in the same direction.
  auto sameRun = [&](int i, int j) {
    return ord[i].module == ord[j].module && ord[i].backward == ord[j].backward;
  };

  std::vector<Action> out;
  for (int i = 0; i < n; ++i) {
    const Compute &x = ord[i];
    const int l = x.module, mb = x.mb;
    const bool runStart = i == 0 || !sameRun(i - 1, i);
    const bool runEnd = i + 1 == n || !sameRun(i, i + 1);
    // Level 3: the run's weights gathered right before it
    // (dist-prefetch-gathers moves the gather one run ahead).
    if (dp && level == 3 && runStart)
      out.push_back(Action::allGather(l));
    if (!x.backward && l > 0 && pl.rankOf[l - 1] != r)
      out.push_back(Action::recv(Payload::Activation, l - 1, mb, pl.rankOf[l - 1]));
    if (x.backward && l + 1 < L && pl.rankOf[l + 1] != r)
      out.push_back(Action::recv(Payload::ActivationGrad, l, mb, pl.rankOf[l + 1]));
    out.push_back(x.backward ? Action::backward(l, mb) : Action::forward(l, mb));
    if (!x.backward && l + 1 < L && pl.rankOf[l + 1] != r)
      out.push_back(Action::send(Payload::Activation, l, mb, pl.rankOf[l + 1]));
    if (x.backward && l > 0 && pl.rankOf[l - 1] != r)
      out.push_back(Action::send(Payload::ActivationGrad, l - 1, mb, pl.rankOf[l - 1]));
    if (!dp)
      continue;
    if (level == 3) {
      if (runEnd && x.backward)
        out.push_back(Action::reduceScatter(l));
    } else if (i == lastBackward[l]) {
      out.push_back(level == 0 ? Action::allReduce(l) : Action::reduceScatter(l));
    }
  }
  out.push_back(Action::optimizerStep());
  if (dp && (level == 1 || level == 2))
    for (int l : pl.modulesOn(r))
      out.push_back(Action::allGather(l));
  return out;
}

} // namespace

const char *scheduleKindName(ScheduleKind kind) {
  switch (kind) {
  case ScheduleKind::GPipe:
    return "gpipe";
  case ScheduleKind::OneFOneB:
    return "1f1b";
  case ScheduleKind::Interleaved1F1B:
    return "interleaved-1f1b";
  case ScheduleKind::BreadthFirst:
    return "breadth-first";
  case ScheduleKind::Layered:
    return "layered";
  }
  return "?";
}

std::optional<ScheduleKind> parseScheduleKind(std::string_view name) {
  for (ScheduleKind k :
       {ScheduleKind::GPipe, ScheduleKind::OneFOneB,
        ScheduleKind::Interleaved1F1B, ScheduleKind::BreadthFirst,
        ScheduleKind::Layered})
    if (name == scheduleKindName(k))
      return k;
  return std::nullopt;
}

Expected<Placement> placementFor(const ScheduleConfig &config) {
  const int L = config.numModules, p = config.pipelineRanks;
  const bool contiguous = config.kind == ScheduleKind::GPipe ||
                          config.kind == ScheduleKind::OneFOneB;
  if (!config.placement)
    return !contiguous                  ? placeModular(L, p)
           : config.moduleCost.empty() ? placeContiguous(L, p)
                                       : placeBalanced(config.moduleCost, p);
  const Placement &pl = *config.placement;
  if (pl.numRanks != p || pl.numModules() != L)
    return Status::error("the placement is for " +
                         std::to_string(pl.numModules()) + " modules on " +
                         std::to_string(pl.numRanks) +
                         " ranks; the schedule has L = " + std::to_string(L) +
                         ", p = " + std::to_string(p));
  std::string name = scheduleKindName(config.kind);
  for (int l = 0; l < L; ++l) {
    int r = pl.rankOf[l];
    bool ok = contiguous ? r < p && (l == 0 ? r == 0
                                            : r == pl.rankOf[l - 1] ||
                                                  r == pl.rankOf[l - 1] + 1)
                         : r == l % p;
    if (!ok)
      return Status::error(
          name + (contiguous ? " needs contiguous blocks of modules on "
                               "ascending ranks"
                             : " needs module l on rank l mod p (the modular "
                               "placement)") +
          "; the placement puts module " + std::to_string(l) + " on rank " +
          std::to_string(r));
  }
  return pl;
}

Expected<Schedule> generateComputeOrder(const ScheduleConfig &config) {
  if (Status s = validate(config); !s)
    return s;
  const int p = config.pipelineRanks;
  const int m = config.microBatches, d = config.dataParallel;
  Expected<Placement> pl = placementFor(config);
  if (!pl)
    return pl.status();

  Order order;
  switch (config.kind) {
  case ScheduleKind::GPipe:
    order = orderGPipe(*pl, m);
    break;
  case ScheduleKind::OneFOneB:
    order = order1F1B(*pl, m);
    break;
  case ScheduleKind::Interleaved1F1B:
    order = orderInterleaved(*pl, m);
    break;
  case ScheduleKind::BreadthFirst:
  case ScheduleKind::Layered:
    order = orderBreadthFirst(*pl, m);
    break;
  }

  Schedule s;
  s.config = config;
  s.placement = *pl;
  s.ranks.resize(static_cast<size_t>(p) * d);
  for (int r = 0; r < p; ++r) {
    std::vector<Action> list;
    list.reserve(order[r].size() + 1);
    for (const Compute &x : order[r])
      list.push_back(x.backward ? Action::backward(x.module, x.mb)
                                : Action::forward(x.module, x.mb));
    list.push_back(Action::optimizerStep());
    for (int dp = 0; dp < d; ++dp)
      s.ranks[s.globalRank(r, dp)] = list;
  }
  return s;
}

Expected<Schedule> lowerComputeOrder(const Schedule &compute) {
  const ScheduleConfig &config = compute.config;
  if (Status s = validate(config); !s)
    return s;
  const int L = config.numModules, p = config.pipelineRanks;
  const int m = config.microBatches, d = config.dataParallel;
  const Placement &pl = compute.placement;
  if (pl.numRanks != p || pl.numModules() != L)
    return Status::error("placement is for " + std::to_string(pl.numModules()) +
                         " modules on " + std::to_string(pl.numRanks) +
                         " ranks; the config has L = " + std::to_string(L) +
                         ", p = " + std::to_string(p));
  for (int l = 0; l < L; ++l)
    if (pl.rankOf[l] < 0 || pl.rankOf[l] >= p)
      return Status::error("placement puts module " + std::to_string(l) +
                           " on pipeline rank " + std::to_string(pl.rankOf[l]) +
                           ", outside [0, " + std::to_string(p) + ")");
  if (compute.numRanks() != p * d)
    return Status::error("compute order has " +
                         std::to_string(compute.numRanks()) +
                         " lists; p * d = " + std::to_string(p * d));

  Schedule s;
  s.config = config;
  s.placement = pl;
  s.ranks.resize(static_cast<size_t>(p) * d);
  for (int g = 0; g < compute.numRanks(); ++g) {
    const std::vector<Action> &in = compute.ranks[g];
    std::vector<Compute> ord;
    ord.reserve(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
      const Action &a = in[i];
      auto where = [&] {
        return detail::rankName(s, g) + " action #" + std::to_string(i) + " " +
               describeAction(a);
      };
      bool last = i + 1 == in.size();
      if (a.kind == ActionKind::OptimizerStep && last)
        continue;
      if (a.kind != ActionKind::Forward && a.kind != ActionKind::Backward)
        return Status::error(where() + ": a compute order holds only forwards "
                             "and backwards, then one OptimizerStep");
      if (a.module < 0 || a.module >= L || a.microBatch < 0 ||
          a.microBatch >= m)
        return Status::error(where() + ": module or micro-batch out of range");
      ord.push_back({a.kind == ActionKind::Backward, a.module, a.microBatch});
    }
    if (in.empty() || in.back().kind != ActionKind::OptimizerStep)
      return Status::error(detail::rankName(s, g) +
                           ": a compute order ends with one OptimizerStep");
    const int dp = s.dataRank(g);
    std::vector<Action> &out = s.ranks[g];
    out = lower(config, pl, s.pipelineRank(g), ord);
    for (Action &a : out)
      if (a.isP2P())
        a.peer = s.globalRank(a.peer, dp);
  }
  return s;
}

Expected<Schedule> generateEvalSchedule(const ScheduleConfig &config) {
  if (Status s = validate(config); !s)
    return s;
  Expected<Placement> pl = placementFor(config);
  if (!pl)
    return pl.status();
  const int L = config.numModules, p = config.pipelineRanks;
  const int m = config.microBatches, d = config.dataParallel;
  Schedule s;
  s.config = config;
  s.config.forwardOnly = true;
  s.placement = *pl;
  s.ranks.resize(static_cast<size_t>(p) * d);
  for (int dp = 0; dp < d; ++dp)
    for (int r = 0; r < p; ++r) {
      std::vector<Action> &list = s.ranks[s.globalRank(r, dp)];
      for (int l = 0; l < L; ++l) {
        if (pl->rankOf[l] != r)
          continue;
        if (config.zeroLevel == 3 && d > 1)
          list.push_back(Action::allGather(l));
        for (int mb = 0; mb < m; ++mb) {
          if (l > 0 && pl->rankOf[l - 1] != r)
            list.push_back(Action::recv(Payload::Activation, l - 1, mb,
                                        s.globalRank(pl->rankOf[l - 1], dp)));
          list.push_back(Action::forward(l, mb));
          if (l + 1 < L && pl->rankOf[l + 1] != r)
            list.push_back(Action::send(Payload::Activation, l, mb,
                                        s.globalRank(pl->rankOf[l + 1], dp)));
        }
      }
    }
  return s;
}

std::vector<Action> applyMoves(const std::vector<Action> &list,
                               const std::vector<ActionMove> &moves) {
  std::vector<std::vector<size_t>> before(list.size() + 1);
  std::vector<bool> moved(list.size(), false);
  for (const ActionMove &m : moves) {
    before[std::min(m.before, list.size())].push_back(m.from);
    moved[m.from] = true;
  }
  std::vector<Action> out;
  for (size_t i = 0; i <= list.size(); ++i) {
    for (size_t from : before[i])
      out.push_back(list[from]);
    if (i < list.size() && !moved[i])
      out.push_back(list[i]);
  }
  return out;
}

std::vector<ActionMove> prefetchGathers(const std::vector<Action> &list) {
  auto computes = [](const Action &a) {
    return a.kind == ActionKind::Forward || a.kind == ActionKind::Backward;
  };
  // Each compute's run, and each run's first compute.
  std::vector<size_t> firstOfRun;
  std::vector<int> runOf(list.size(), -1);
  for (size_t i = 0, last = list.size(); i < list.size(); ++i) {
    if (!computes(list[i]))
      continue;
    if (last == list.size() || list[last].module != list[i].module ||
        list[last].kind != list[i].kind)
      firstOfRun.push_back(i);
    runOf[i] = int(firstOfRun.size()) - 1;
    last = i;
  }
  std::vector<ActionMove> moves;
  for (size_t g = 0; g < list.size(); ++g) {
    if (list[g].kind != ActionKind::AllGather)
      continue;
    size_t c = g + 1;
    while (c < list.size() && !computes(list[c]) &&
           list[c].kind != ActionKind::OptimizerStep)
      ++c;
    // Only a gather right before a run of its module (not the first run).
    if (c == list.size() || !computes(list[c]) ||
        list[c].module != list[g].module || runOf[c] < 1 ||
        firstOfRun[size_t(runOf[c])] != c)
      continue;
    size_t at = firstOfRun[size_t(runOf[c] - 1)] + 1;
    if (at < list.size() && list[at].kind == ActionKind::Send)
      ++at;
    if (at < g)
      moves.push_back({at, g});
  }
  return moves;
}

Expected<Schedule> generateSchedule(const ScheduleConfig &config) {
  Expected<Schedule> compute = generateComputeOrder(config);
  if (!compute)
    return compute.status();
  Expected<Schedule> lowered = lowerComputeOrder(*compute);
  if (!lowered || config.zeroLevel != 3 || config.dataParallel < 2)
    return lowered;
  Schedule s = *lowered;
  for (std::vector<Action> &list : s.ranks)
    list = applyMoves(list, prefetchGathers(list));
  return s;
}

} // namespace lamina::schedule
