//===- StepCalls.cpp - one rank's actions as its compiled step's calls ----===//

#include "lamina/Schedule/StepCalls.h"

#include <map>

namespace lamina::schedule {

const char *callKindName(CallKind kind) {
  switch (kind) {
  case CallKind::Forward:
    return "forward";
  case CallKind::Backward:
    return "backward";
  case CallKind::Send:
    return "send";
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
  case CallKind::OptimizerStep:
    return "optimizer_step";
  }
  return "?";
}

static StepCall callOf(CallKind kind, const Action &a) {
  return {kind, a.payload, a.module, a.microBatch, a.peer};
}

std::vector<StepCall> lowerStep(const std::vector<Action> &list,
                                int zeroLevel) {
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
      out.push_back(callOf(bwd ? CallKind::Backward : CallKind::Forward, a));
      break;
    }
    case ActionKind::Send:
      out.push_back(callOf(CallKind::Send, a));
      break;
    case ActionKind::Recv:
      if (next[i] >= 0)
        out.push_back(callOf(CallKind::PostRecv, list[size_t(next[i])]));
      out.push_back(callOf(CallKind::Recv, a));
      break;
    case ActionKind::AllGather:
      out.push_back(callOf(CallKind::AllGather, a));
      break;
    case ActionKind::ReduceScatter:
      out.push_back(callOf(CallKind::ReduceScatter, a));
      break;
    case ActionKind::AllReduce:
      out.push_back(callOf(CallKind::AllReduce, a));
      break;
    case ActionKind::OptimizerStep:
      runModule = -1;
      out.push_back(callOf(CallKind::OptimizerStep, a));
      break;
    }
  }
  return out;
}

} // namespace lamina::schedule
