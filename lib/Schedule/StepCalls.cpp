//===- StepCalls.cpp - one rank's actions as its compiled step's calls ----===//

#include "lamina/Schedule/StepCalls.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <tuple>

namespace lamina::schedule {

const char *callKindName(CallKind kind) {
  switch (kind) {
  case CallKind::Forward:
    return "forward";
  case CallKind::Backward:
    return "backward";
  case CallKind::Send:
    return "send";
  case CallKind::WaitSend:
    return "wait_send";
  case CallKind::PostRecv:
    return "post_recv";
  case CallKind::Recv:
    return "recv";
  case CallKind::AllGather:
    return "all_gather";
  case CallKind::ReduceScatter:
    return "reduce_scatter";
  case CallKind::AllReduce:
    return "all_reduce";
  case CallKind::UseWeights:
    return "use_weights";
  case CallKind::WaitGradients:
    return "wait_gradients";
  case CallKind::Accumulate:
    return "accumulate";
  case CallKind::WaitWeights:
    return "wait_weights";
  case CallKind::SumShared:
    return "sum_shared";
  case CallKind::WaitSharedSum:
    return "wait_shared_sum";
  case CallKind::GatherShared:
    return "gather_shared";
  case CallKind::WaitSharedGather:
    return "wait_shared_gather";
  case CallKind::OptimizerStep:
    return "optimizer_step";
  }
  return "?";
}

static StepCall callOf(CallKind kind, const Action &a) {
  return {kind, a.payload, a.module, a.microBatch, a.peer};
}

std::vector<SharedParam> sharedParamsOf(
    int p, int dp, int zeroLevel,
    const std::vector<std::pair<std::string, std::vector<int>>> &readers,
    const std::vector<int> &rankOf) {
  std::vector<SharedParam> out;
  for (const auto &[name, modules] : readers) {
    std::set<int> ranks;
    for (int k : modules)
      ranks.insert(rankOf[size_t(k)]);
    if (std::set<int>(modules.begin(), modules.end()).size() < 2 ||
        !ranks.count(p) || int(ranks.size()) * dp < 2)
      continue;
    // One replica keeps every level's state whole (level 0 in effect).
    out.push_back({name, dp > 1 && zeroLevel >= 1});
  }
  std::sort(out.begin(), out.end(),
            [](const SharedParam &a, const SharedParam &b) {
              return a.name < b.name;
            });
  return out;
}

std::vector<StepCall> directStep(const std::vector<Action> &list, int zeroLevel,
                                 const std::vector<SharedParam> &shared) {
  std::vector<StepCall> out;
  int runModule = -1;
  bool runBackward = false;
  // Gradient reductions started: levels 0-1 by module, levels 2-3 in
  // issue order.
  std::set<int> reductions;
  std::vector<int> scatters;
  auto wait = [&](int module, CallKind kind = CallKind::WaitGradients) {
    StepCall c;
    c.kind = kind;
    c.module = module;
    out.push_back(c);
  };
  auto named = [&](CallKind kind, const std::string &name) {
    StepCall c;
    c.kind = kind;
    c.name = name;
    out.push_back(c);
  };
  std::vector<int> gathered; // levels 1-2: after the optimizer
  std::vector<StepCall> sends;
  bool optimizes = false;
  for (const Action &a : list) {
    switch (a.kind) {
    case ActionKind::Forward:
    case ActionKind::Backward: {
      bool bwd = a.kind == ActionKind::Backward;
      if (zeroLevel == 3 && (runModule != a.module || runBackward != bwd))
        out.push_back(callOf(CallKind::UseWeights, a));
      runModule = a.module;
      runBackward = bwd;
      out.push_back(callOf(bwd ? CallKind::Backward : CallKind::Forward, a));
      if (bwd)
        out.push_back(callOf(CallKind::Accumulate, a));
      break;
    }
    case ActionKind::Send:
      out.push_back(callOf(CallKind::Send, a));
      sends.push_back(callOf(CallKind::WaitSend, a));
      break;
    case ActionKind::Recv:
      out.push_back(callOf(CallKind::Recv, a));
      break;
    case ActionKind::AllGather:
      if (zeroLevel == 1 || zeroLevel == 2)
        gathered.push_back(a.module);
      out.push_back(callOf(CallKind::AllGather, a));
      break;
    case ActionKind::ReduceScatter:
      if (zeroLevel >= 2)
        scatters.push_back(a.module);
      else
        reductions.insert(a.module);
      out.push_back(callOf(CallKind::ReduceScatter, a));
      break;
    case ActionKind::AllReduce:
      reductions.insert(a.module);
      out.push_back(callOf(CallKind::AllReduce, a));
      break;
    case ActionKind::OptimizerStep:
      optimizes = true;
      for (int module : reductions)
        wait(module);
      reductions.clear();
      for (int module : scatters)
        wait(module);
      scatters.clear();
      for (const SharedParam &p : shared)
        named(CallKind::SumShared, p.name);
      for (const SharedParam &p : shared)
        named(CallKind::WaitSharedSum, p.name);
      runModule = -1;
      out.push_back(callOf(CallKind::OptimizerStep, a));
      for (const SharedParam &p : shared)
        if (p.gathers)
          named(CallKind::GatherShared, p.name);
      break;
    }
  }
  out.insert(out.end(), sends.begin(), sends.end());
  for (int module : gathered)
    wait(module, CallKind::WaitWeights);
  if (optimizes)
    for (const SharedParam &p : shared)
      if (p.gathers)
        named(CallKind::WaitSharedGather, p.name);
  return out;
}

std::vector<StepCall> applyEdits(const std::vector<StepCall> &calls,
                                 const std::vector<StepEdit> &edits) {
  std::vector<std::vector<const StepEdit *>> before(calls.size() + 1);
  std::vector<bool> moved(calls.size(), false);
  for (const StepEdit &e : edits) {
    before[std::min(e.before, calls.size())].push_back(&e);
    if (e.from >= 0 && size_t(e.from) < calls.size())
      moved[size_t(e.from)] = true;
  }
  std::vector<StepCall> out;
  for (size_t i = 0; i <= calls.size(); ++i) {
    for (const StepEdit *e : before[i])
      out.push_back(e->from >= 0 ? calls[size_t(e->from)] : e->call);
    if (i < calls.size() && !moved[i])
      out.push_back(calls[i]);
  }
  return out;
}

namespace {
using Transfer = std::tuple<int, Payload, int, int>; // peer, payload, k, mb
Transfer transferOf(const StepCall &c) {
  return {c.peer, c.payload, c.module, c.microBatch};
}
bool computes(const StepCall &c) {
  return c.kind == CallKind::Forward || c.kind == CallKind::Backward;
}
} // namespace

std::vector<StepEdit> postReceives(const std::vector<StepCall> &calls) {
  std::set<Transfer> posted;
  for (const StepCall &c : calls)
    if (c.kind == CallKind::PostRecv)
      posted.insert(transferOf(c));
  // The receives not yet posted; each one's next from the same peer, and
  // the first per peer.
  std::vector<int> next(calls.size(), -1);
  std::map<int, int> later; // peer -> the next receive's index
  for (size_t i = calls.size(); i-- > 0;) {
    if (calls[i].kind != CallKind::Recv || posted.count(transferOf(calls[i])))
      continue;
    auto it = later.find(calls[i].peer);
    if (it != later.end())
      next[i] = it->second;
    later[calls[i].peer] = int(i);
  }
  std::vector<StepEdit> edits;
  auto post = [&](size_t before, int recv) {
    StepCall c = calls[size_t(recv)];
    c.kind = CallKind::PostRecv;
    edits.push_back({before, -1, c});
  };
  for (const auto &[peer, i] : later)
    post(0, i);
  for (size_t i = 0; i < calls.size(); ++i)
    if (next[i] >= 0)
      post(i, next[i]);
  return edits;
}

std::vector<StepEdit> waitSends(const std::vector<StepCall> &calls) {
  std::map<Transfer, size_t> waits; // each send's wait
  for (size_t i = 0; i < calls.size(); ++i)
    if (calls[i].kind == CallKind::WaitSend)
      waits.emplace(transferOf(calls[i]), i);
  std::vector<StepEdit> edits;
  for (size_t s = 0; s < calls.size(); ++s) {
    if (calls[s].kind != CallKind::Send)
      continue;
    auto w = waits.find(transferOf(calls[s]));
    if (w == waits.end() || w->second < s)
      continue;
    size_t second = s, seen = 0;
    while (++second < calls.size() && (!computes(calls[second]) || ++seen < 2))
      ;
    if (second < w->second)
      edits.push_back({second, int(w->second), {}});
  }
  return edits;
}

std::vector<StepEdit> retireReductions(const std::vector<StepCall> &calls,
                                       int zeroLevel) {
  if (zeroLevel < 2)
    return {};
  // The waits of the reduce-scatters in issue order: the n-th
  // WaitGradients of a module waits for its n-th reduce-scatter.
  std::map<int, std::deque<size_t>> waitsOf;
  for (size_t i = 0; i < calls.size(); ++i)
    if (calls[i].kind == CallKind::WaitGradients)
      waitsOf[calls[i].module].push_back(i);
  std::vector<StepEdit> edits;
  std::deque<size_t> inFlight; // the waits of the scatters in flight
  std::set<int> open;          // modules with a full gradient started
  for (size_t i = 0; i < calls.size(); ++i) {
    const StepCall &c = calls[i];
    if (c.kind == CallKind::ReduceScatter) {
      open.erase(c.module);
      std::deque<size_t> &w = waitsOf[c.module];
      if (!w.empty() && w.front() > i) {
        inFlight.push_back(w.front());
        w.pop_front();
      }
    } else if (c.kind == CallKind::WaitGradients) {
      // A wait already earlier than the optimizer retires its scatter.
      auto it = std::find(inFlight.begin(), inFlight.end(), i);
      if (it != inFlight.end())
        inFlight.erase(it);
    } else if (c.kind == CallKind::Accumulate && open.insert(c.module).second) {
      for (; inFlight.size() > 1; inFlight.pop_front())
        if (inFlight.front() > i)
          edits.push_back({i, int(inFlight.front()), {}});
    }
  }
  return edits;
}

std::vector<StepCall> lowerStep(const std::vector<Action> &list, int zeroLevel,
                                const std::vector<SharedParam> &shared) {
  std::vector<StepCall> calls = directStep(list, zeroLevel, shared);
  calls = applyEdits(calls, postReceives(calls));
  calls = applyEdits(calls, waitSends(calls));
  return applyEdits(calls, retireReductions(calls, zeroLevel));
}

std::string
checkStepsComplete(const std::vector<std::vector<StepCall>> &steps) {
  using Transfer = std::tuple<int, int, Payload, int, int>; // from, to, ...
  std::set<Transfer> sent, posted;
  // Shared parameters: the ranks issuing each collective, and how many did.
  std::map<std::pair<CallKind, std::string>, int> issuers, issued;
  for (const auto &calls : steps)
    for (const StepCall &c : calls)
      if (c.kind == CallKind::SumShared || c.kind == CallKind::GatherShared)
        ++issuers[{c.kind, c.name}];
  std::vector<size_t> at(steps.size(), 0);
  auto blocked = [&](int p, const StepCall &c) {
    switch (c.kind) {
    case CallKind::Recv:
      return !sent.count({c.peer, p, c.payload, c.module, c.microBatch});
    case CallKind::WaitSend:
      return !posted.count({p, c.peer, c.payload, c.module, c.microBatch});
    case CallKind::WaitSharedSum:
      return issued[{CallKind::SumShared, c.name}] <
             issuers[{CallKind::SumShared, c.name}];
    case CallKind::WaitSharedGather:
      return issued[{CallKind::GatherShared, c.name}] <
             issuers[{CallKind::GatherShared, c.name}];
    default:
      return false;
    }
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t p = 0; p < steps.size(); ++p) {
      for (; at[p] < steps[p].size(); ++at[p]) {
        const StepCall &c = steps[p][at[p]];
        if (blocked(int(p), c))
          break;
        progress = true;
        if (c.kind == CallKind::Send)
          sent.insert({int(p), c.peer, c.payload, c.module, c.microBatch});
        else if (c.kind == CallKind::PostRecv || c.kind == CallKind::Recv)
          posted.insert({c.peer, int(p), c.payload, c.module, c.microBatch});
        else if (c.kind == CallKind::SumShared ||
                 c.kind == CallKind::GatherShared)
          ++issued[{c.kind, c.name}];
      }
    }
  }
  std::string stuck;
  for (size_t p = 0; p < steps.size(); ++p) {
    if (at[p] == steps[p].size())
      continue;
    const StepCall &c = steps[p][at[p]];
    stuck += (stuck.empty() ? "" : "; ") + std::string("pipeline rank ") +
             std::to_string(p) + " waits forever at its call " +
             std::to_string(at[p]) + " (" + callKindName(c.kind);
    if (c.module >= 0)
      stuck += " " + std::to_string(c.module);
    if (c.microBatch >= 0)
      stuck += ", micro-batch " + std::to_string(c.microBatch);
    if (c.peer >= 0)
      stuck += ", peer " + std::to_string(c.peer);
    if (!c.name.empty())
      stuck += " '" + c.name + "'";
    stuck += ")";
  }
  return stuck;
}

} // namespace lamina::schedule
