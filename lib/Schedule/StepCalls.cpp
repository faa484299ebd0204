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

std::vector<StepCall> lowerStep(const std::vector<Action> &list, int zeroLevel,
                                const std::vector<SharedParam> &shared) {
  // Each receive's next one from the same peer, and the first per peer.
  std::vector<int> next(list.size(), -1);
  std::map<int, int> later; // peer -> the next receive's index
  for (size_t i = list.size(); i-- > 0;) {
    if (list[i].kind != ActionKind::Recv)
      continue;
    auto it = later.find(list[i].peer);
    if (it != later.end())
      next[i] = it->second;
    later[list[i].peer] = int(i);
  }
  std::vector<StepCall> out;
  for (const auto &[peer, i] : later)
    out.push_back(callOf(CallKind::PostRecv, list[size_t(i)]));
  int runModule = -1;
  bool runBackward = false;
  // Gradient reductions started and not yet waited for: levels 2-3 in
  // issue order, levels 0-1 by module. Levels 2-3: the modules whose
  // gradient a backward has started and no reduce-scatter has taken.
  std::deque<int> scatters;
  std::set<int> reductions, open;
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
  // Sends in flight, with the compute calls issued since each.
  std::vector<std::pair<StepCall, int>> sending;
  auto waitSends = [&](int computed) {
    size_t keep = 0;
    for (auto &s : sending) {
      if (s.second >= computed) {
        StepCall c = s.first;
        c.kind = CallKind::WaitSend;
        out.push_back(c);
      } else {
        sending[keep++] = s;
      }
    }
    sending.resize(keep);
  };
  for (size_t i = 0; i < list.size(); ++i) {
    const Action &a = list[i];
    switch (a.kind) {
    case ActionKind::Forward:
    case ActionKind::Backward: {
      bool bwd = a.kind == ActionKind::Backward;
      if (zeroLevel == 3 && (runModule != a.module || runBackward != bwd))
        out.push_back(callOf(CallKind::UseWeights, a));
      runModule = a.module;
      runBackward = bwd;
      waitSends(1);
      out.push_back(callOf(bwd ? CallKind::Backward : CallKind::Forward, a));
      for (auto &s : sending)
        ++s.second;
      if (!bwd)
        break;
      if (zeroLevel >= 2 && open.insert(a.module).second)
        for (; scatters.size() > 1; scatters.pop_front())
          wait(scatters.front());
      out.push_back(callOf(CallKind::Accumulate, a));
      break;
    }
    case ActionKind::Send:
      out.push_back(callOf(CallKind::Send, a));
      sending.push_back({out.back(), 0});
      break;
    case ActionKind::Recv:
      if (next[i] >= 0)
        out.push_back(callOf(CallKind::PostRecv, list[size_t(next[i])]));
      out.push_back(callOf(CallKind::Recv, a));
      break;
    case ActionKind::AllGather:
      if (zeroLevel == 1 || zeroLevel == 2)
        gathered.push_back(a.module);
      out.push_back(callOf(CallKind::AllGather, a));
      break;
    case ActionKind::ReduceScatter:
      if (zeroLevel >= 2) {
        scatters.push_back(a.module);
        open.erase(a.module);
      } else {
        reductions.insert(a.module);
      }
      out.push_back(callOf(CallKind::ReduceScatter, a));
      break;
    case ActionKind::AllReduce:
      reductions.insert(a.module);
      out.push_back(callOf(CallKind::AllReduce, a));
      break;
    case ActionKind::OptimizerStep:
      for (int module : reductions)
        wait(module);
      reductions.clear();
      for (; !scatters.empty(); scatters.pop_front())
        wait(scatters.front());
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
  waitSends(0);
  for (int module : gathered)
    wait(module, CallKind::WaitWeights);
  bool optimizes = std::any_of(list.begin(), list.end(), [](const Action &a) {
    return a.kind == ActionKind::OptimizerStep;
  });
  if (optimizes)
    for (const SharedParam &p : shared)
      if (p.gathers)
        named(CallKind::WaitSharedGather, p.name);
  return out;
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
