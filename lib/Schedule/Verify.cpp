//===- Verify.cpp - verify a schedule by simulating it --------------------===//
//
// Three phases, each stopping at its first problem:
//  1. shape: config, placement and every action's fields (ranges, the module
//     placed on this rank, the peer owning the other side of the boundary,
//     collectives allowed by the sharding level);
//  2. matching: every Send has exactly one Recv with the same payload,
//     boundary and micro-batch on its peer, and every data-parallel group's
//     members issue the same number of collectives;
//  3. simulation: ranks run their lists in order. A Send completes at once
//     (into the receiver's mailbox); a Recv blocks until its Send has run; a
//     collective blocks until every member of its group has reached its
//     call with the same index. Running an action checks its local
//     dependencies. When no rank can move, the schedule deadlocks and every
//     blocked rank is reported with what it waits on, plus the wait cycle.
// Each round of the simulation advances at least one action, so it ends.
//
//===----------------------------------------------------------------------===//

#include "Analysis.h"

#include "lamina/Schedule/Simulate.h"

#include <array>
#include <deque>
#include <map>

namespace lamina::schedule {
namespace detail {

Stream streamOf(const Action &a) {
  switch (a.kind) {
  case ActionKind::Send:
    return Stream::Send;
  case ActionKind::Recv:
    return Stream::Recv;
  case ActionKind::AllGather:
  case ActionKind::ReduceScatter:
  case ActionKind::AllReduce:
    return Stream::Collective;
  default:
    return Stream::Compute;
  }
}

std::string rankName(const Schedule &s, int g) {
  return "rank " + std::to_string(g) + " (pp " +
         std::to_string(s.pipelineRank(g)) + ", dp " +
         std::to_string(s.dataRank(g)) + ")";
}

namespace {

std::string str(int v) { return std::to_string(v); }

class Verifier {
public:
  explicit Verifier(const Schedule &schedule)
      : s(schedule), L(schedule.config.numModules),
        p(schedule.config.pipelineRanks), m(schedule.config.microBatches),
        d(schedule.config.dataParallel), level(schedule.config.zeroLevel) {}

  Expected<Analysis> run() {
    if (Status st = checkShape(); !st)
      return st;
    for (int g = 0; g < s.numRanks(); ++g)
      for (int i = 0; i < size(g); ++i)
        if (Status st = checkAction(g, i); !st)
          return st;
    an.deps.resize(s.numRanks());
    for (int g = 0; g < s.numRanks(); ++g)
      an.deps[g].resize(size(g));
    if (Status st = matchP2P(); !st)
      return st;
    if (Status st = countCollectives(); !st)
      return st;
    if (Status st = simulate(); !st)
      return st;
    if (Status st = checkComplete(); !st)
      return st;
    return std::move(an);
  }

private:
  struct RankState {
    int pc = 0;
    // Indexed by localOf[module] * m + mb: the action that provides it.
    std::vector<int> fwd, bwd;
    std::vector<int> act;  ///< input activation of the local module
    std::vector<int> grad; ///< gradient of the local module's output
    // Level 3, per local module: all-gathers not yet used by a run, and the
    // one the current or latest run uses.
    std::vector<std::deque<int>> unusedGathers;
    std::vector<int> gathered;
    std::vector<std::vector<int>> pending; ///< unreduced backwards, per local module
    std::vector<char> regathered;          ///< level 1/2: gathered after the step
    int lastCompute = -1;
    std::array<int, kNumStreams> lastOnStream{-1, -1, -1, -1};
    int optimizer = -1;
  };

  const Schedule &s;
  const int L, p, m, d, level;
  std::vector<int> localOf;                 ///< module -> index on its rank
  std::vector<std::vector<int>> modulesOf;  ///< pipeline rank -> modules
  std::vector<RankState> state;
  Analysis an;

  int size(int g) const { return static_cast<int>(s.ranks[g].size()); }
  const Action &act(int g, int i) const { return s.ranks[g][i]; }
  std::string at(int g, int i) const {
    return rankName(s, g) + " action #" + str(i) + " " +
           describeAction(act(g, i));
  }
  Status fail(int g, int i, const std::string &why) const {
    return Status::error(at(g, i) + ": " + why);
  }
  int owner(int l) const { return s.placement.rankOf[l]; }
  int slot(int l, int mb) const { return localOf[l] * m + mb; }

  Status checkShape() {
    const ScheduleConfig &c = s.config;
    if (L < 1 || p < 1 || m < 1 || d < 1)
      return Status::error("config needs L, p, m, d >= 1");
    if (level < 0 || level > 3)
      return Status::error("sharding level must be 0-3, got " + str(level));
    if (s.placement.numRanks != p || s.placement.numModules() != L)
      return Status::error("placement is for " + str(s.placement.numModules()) +
                           " modules on " + str(s.placement.numRanks) +
                           " ranks, config says L = " + str(L) + ", p = " +
                           str(p));
    if (static_cast<long long>(p) * d != s.numRanks())
      return Status::error("schedule has " + str(s.numRanks()) +
                           " rank lists, expected p * d = " +
                           str(c.pipelineRanks * c.dataParallel));
    localOf.assign(L, -1);
    modulesOf.assign(p, {});
    for (int l = 0; l < L; ++l) {
      int r = s.placement.rankOf[l];
      if (r < 0 || r >= p)
        return Status::error("placement puts module " + str(l) +
                             " on pipeline rank " + str(r) + " of " + str(p));
      localOf[l] = static_cast<int>(modulesOf[r].size());
      modulesOf[r].push_back(l);
    }
    return Status::success();
  }

  Status checkAction(int g, int i) const {
    const Action &a = act(g, i);
    const int pp = s.pipelineRank(g);
    auto inRange = [](int v, int n) { return v >= 0 && v < n; };
    if (s.config.forwardOnly &&
        (a.kind == ActionKind::Backward || a.kind == ActionKind::OptimizerStep ||
         a.kind == ActionKind::ReduceScatter ||
         a.kind == ActionKind::AllReduce ||
         (a.isP2P() && a.payload != Payload::Activation)))
      return fail(g, i, "a forward-only (evaluation) step has no backward, "
                        "gradient or optimizer action");
    if (a.isCompute() && a.kind != ActionKind::OptimizerStep) {
      if (!inRange(a.module, L) || !inRange(a.microBatch, m))
        return fail(g, i, "module or micro-batch out of range");
      if (a.payload != Payload::None || a.peer != -1)
        return fail(g, i, "compute actions carry no payload or peer");
      if (owner(a.module) != pp)
        return fail(g, i, "module " + str(a.module) +
                              " is placed on pipeline rank " +
                              str(owner(a.module)));
    } else if (a.isP2P()) {
      if (a.payload != Payload::Activation &&
          a.payload != Payload::ActivationGrad)
        return fail(g, i, "transfers carry an activation or its gradient");
      if (!inRange(a.module, L - 1) || !inRange(a.microBatch, m))
        return fail(g, i, "boundary or micro-batch out of range");
      if (!inRange(a.peer, s.numRanks()) || a.peer == g ||
          s.dataRank(a.peer) != s.dataRank(g))
        return fail(g, i, "peer must be another rank of the same "
                          "data-parallel replica");
      // Activations flow from module b to b + 1, gradients back.
      bool down = (a.kind == ActionKind::Send) ==
                  (a.payload == Payload::Activation);
      int self = down ? a.module : a.module + 1;
      int other = down ? a.module + 1 : a.module;
      if (owner(self) != pp || owner(other) != s.pipelineRank(a.peer))
        return fail(g, i, "boundary " + str(a.module) + " runs from pipeline "
                          "rank " + str(owner(a.module)) + " to " +
                          str(owner(a.module + 1)));
    } else if (a.isCollective()) {
      if (!inRange(a.module, L) || a.microBatch != -1 || a.peer != -1)
        return fail(g, i, "collectives name a module and nothing else");
      if (owner(a.module) != pp)
        return fail(g, i, "module " + str(a.module) +
                              " is placed on pipeline rank " +
                              str(owner(a.module)));
      Payload want = a.kind == ActionKind::AllGather ? Payload::Weights
                                                     : Payload::WeightGrads;
      if (a.payload != want)
        return fail(g, i, "wrong payload for this collective");
      if (s.config.forwardOnly && level != 3)
        return fail(g, i, "a forward-only step gathers weights only at "
                          "sharding level 3");
      if (!s.config.forwardOnly &&
          (a.kind == ActionKind::AllReduce) != (level == 0))
        return fail(g, i, "sharding level " + str(level) + " uses " +
                              (level == 0 ? "all-reduce" : "reduce-scatter") +
                              " for gradients" +
                              (level == 0 ? " and no all-gather" : ""));
    } else if (a.module != -1 || a.microBatch != -1 || a.peer != -1 ||
               a.payload != Payload::None) {
      return fail(g, i, "the optimizer step has no operands");
    }
    return Status::success();
  }

  Status matchP2P() {
    using Key = std::array<int, 5>; // from, to, payload, boundary, mb
    std::map<Key, std::pair<std::vector<int>, std::vector<int>>> byKey;
    for (int g = 0; g < s.numRanks(); ++g)
      for (int i = 0; i < size(g); ++i) {
        const Action &a = act(g, i);
        if (a.kind == ActionKind::Send)
          byKey[{g, a.peer, int(a.payload), a.module, a.microBatch}]
              .first.push_back(i);
        else if (a.kind == ActionKind::Recv)
          byKey[{a.peer, g, int(a.payload), a.module, a.microBatch}]
              .second.push_back(i);
      }
    std::vector<std::string> problems;
    for (const auto &[k, v] : byKey) {
      const auto &[sends, recvs] = v;
      if (sends.size() > 1)
        problems.push_back("duplicate send: " + at(k[0], sends[1]) +
                           " repeats action #" + str(sends[0]));
      else if (recvs.size() > 1)
        problems.push_back("duplicate receive: " + at(k[1], recvs[1]) +
                           " repeats action #" + str(recvs[0]));
      else if (recvs.empty())
        problems.push_back("unmatched send: " + at(k[0], sends[0]) +
                           " has no matching Recv on rank " + str(k[1]));
      else if (sends.empty())
        problems.push_back("unmatched receive: " + at(k[1], recvs[0]) +
                           " has no matching Send on rank " + str(k[0]));
      else {
        ActionDeps &dep = an.deps[k[1]][recvs[0]];
        dep.sendRank = k[0];
        dep.sendIndex = sends[0];
      }
    }
    if (problems.empty())
      return Status::success();
    std::string msg;
    for (size_t j = 0; j < problems.size() && j < 5; ++j)
      msg += (j ? "\n" : "") + problems[j];
    if (problems.size() > 5)
      msg += "\n... and " + str(static_cast<int>(problems.size() - 5)) +
             " more point-to-point problems";
    return Status::error(msg);
  }

  Status countCollectives() const {
    for (int pp = 0; pp < p; ++pp) {
      int first = -1;
      for (int dp = 0; dp < d; ++dp) {
        int g = s.globalRank(pp, dp), n = 0;
        for (const Action &a : s.ranks[g])
          n += a.isCollective();
        if (dp == 0)
          first = n;
        else if (n != first)
          return Status::error(
              "data-parallel group of pipeline rank " + str(pp) + ": " +
              rankName(s, s.globalRank(pp, 0)) + " issues " + str(first) +
              " collectives but " + rankName(s, g) + " issues " + str(n));
      }
    }
    return Status::success();
  }

  bool executed(int g, int i) const { return state[g].pc > i; }
  bool atCollective(int g) const {
    return state[g].pc < size(g) && act(g, state[g].pc).isCollective();
  }

  // Runs action i of rank g (its blocking condition already holds): checks
  // and records its local dependencies and updates the rank's state.
  Status execute(int g, int i) {
    RankState &r = state[g];
    const Action &a = act(g, i);
    ActionDeps &dep = an.deps[g][i];
    const bool sharded = level == 3 && d > 1;
    // A run (consecutive computes of one module in one direction) uses the
    // oldest all-gather of its module not used yet; without one it reuses
    // the previous run's weights. Prefetched gathers thus pair with the run
    // they were issued for.
    auto needGathered = [&](int l) -> Status {
      if (!sharded)
        return Status::success();
      int lc = localOf[l];
      bool newRun = r.lastCompute < 0 || act(g, r.lastCompute).module != l ||
                    act(g, r.lastCompute).kind != a.kind;
      if (newRun && !r.unusedGathers[lc].empty()) {
        r.gathered[lc] = r.unusedGathers[lc].front();
        r.unusedGathers[lc].pop_front();
      }
      if (r.gathered[lc] < 0)
        return fail(g, i, "module " + str(l) + "'s weights are never "
                          "all-gathered before it (sharding level 3)");
      dep.after.push_back(r.gathered[lc]);
      return Status::success();
    };
    if (!a.isCompute())
      dep.issueAfter = r.lastCompute;
    if (a.isCompute() && r.optimizer >= 0)
      return fail(g, i, "runs after the optimizer step (action #" +
                            str(r.optimizer) + ")");
    const int l = a.module, mb = a.microBatch;
    switch (a.kind) {
    case ActionKind::Forward: {
      if (r.fwd[slot(l, mb)] >= 0)
        return fail(g, i, "repeats action #" + str(r.fwd[slot(l, mb)]));
      if (l > 0) {
        int in = r.act[slot(l, mb)];
        if (in < 0)
          return fail(g, i, "its input, module " + str(l - 1) +
                                "'s activation for mb " + str(mb) +
                                ", is not available: no earlier Forward or "
                                "Recv provides it on this rank");
        dep.after.push_back(in);
      }
      if (Status e = needGathered(l); !e)
        return e;
      r.fwd[slot(l, mb)] = i;
      if (l + 1 < L && owner(l + 1) == s.pipelineRank(g))
        r.act[slot(l + 1, mb)] = i;
      break;
    }
    case ActionKind::Backward: {
      if (r.bwd[slot(l, mb)] >= 0)
        return fail(g, i, "repeats action #" + str(r.bwd[slot(l, mb)]));
      if (r.fwd[slot(l, mb)] < 0)
        return fail(g, i, "no earlier Forward(module " + str(l) + ", mb " +
                              str(mb) + ") on this rank");
      dep.after.push_back(r.fwd[slot(l, mb)]);
      if (l + 1 < L) {
        int in = r.grad[slot(l, mb)];
        if (in < 0)
          return fail(g, i, "the gradient of its output (from module " +
                                str(l + 1) + ", mb " + str(mb) +
                                ") is not available: no earlier Backward or "
                                "Recv provides it on this rank");
        dep.after.push_back(in);
      }
      if (Status e = needGathered(l); !e)
        return e;
      r.bwd[slot(l, mb)] = i;
      r.pending[localOf[l]].push_back(i);
      if (l > 0 && owner(l - 1) == s.pipelineRank(g))
        r.grad[slot(l - 1, mb)] = i;
      break;
    }
    case ActionKind::Send: {
      bool isAct = a.payload == Payload::Activation;
      int producer = isAct ? r.fwd[slot(l, mb)] : r.bwd[slot(l + 1, mb)];
      if (producer < 0)
        return fail(g, i, std::string("sends before ") +
                              (isAct ? "Forward(module " + str(l)
                                     : "Backward(module " + str(l + 1)) +
                              ", mb " + str(mb) + ") produced it");
      dep.after.push_back(producer);
      break;
    }
    case ActionKind::Recv:
      (a.payload == Payload::Activation ? r.act[slot(l + 1, mb)]
                                        : r.grad[slot(l, mb)]) = i;
      break;
    case ActionKind::AllGather:
      if (level == 3) {
        if (r.optimizer >= 0)
          return fail(g, i, "sharding level 3 keeps weights sharded after "
                            "the optimizer step");
        r.unusedGathers[localOf[l]].push_back(i);
      } else {
        if (r.optimizer < 0)
          return fail(g, i, "sharding level " + str(level) + " gathers "
                            "parameters only after the optimizer step");
        dep.after.push_back(r.optimizer);
        r.regathered[localOf[l]] = 1;
      }
      break;
    case ActionKind::ReduceScatter:
    case ActionKind::AllReduce: {
      std::vector<int> &pend = r.pending[localOf[l]];
      if (r.optimizer >= 0)
        return fail(g, i, "reduces gradients after the optimizer step");
      if (pend.empty())
        return fail(g, i, "no new gradient of module " + str(l) +
                              " since its last reduction");
      dep.after.insert(dep.after.end(), pend.begin(), pend.end());
      pend.clear();
      break;
    }
    case ActionKind::OptimizerStep:
      if (d > 1)
        for (int ml : modulesOf[s.pipelineRank(g)])
          if (!r.pending[localOf[ml]].empty())
            return fail(g, i, "the gradient of module " + str(ml) +
                                  " (Backward at action #" +
                                  str(r.pending[localOf[ml]].back()) +
                                  ") is not reduced across data-parallel "
                                  "ranks before the optimizer step");
      for (int last : r.lastOnStream)
        if (last >= 0)
          dep.after.push_back(last);
      r.optimizer = i;
      break;
    }
    if (a.isCompute())
      r.lastCompute = i;
    r.lastOnStream[int(streamOf(a))] = i;
    return Status::success();
  }

  // Every member of g's data-parallel group is at its next collective: check
  // they agree and run them together.
  Status runCollective(int g) {
    const Action &a = act(g, state[g].pc);
    const int pp = s.pipelineRank(g);
    std::vector<std::pair<int, int>> members;
    for (int dp = 0; dp < d; ++dp) {
      int h = s.globalRank(pp, dp);
      const Action &b = act(h, state[h].pc);
      if (b.kind != a.kind || b.module != a.module || b.payload != a.payload)
        return Status::error(
            "collective mismatch in the data-parallel group of pipeline rank " +
            str(pp) + ": " + at(g, state[g].pc) + " meets " + at(h, state[h].pc));
      members.push_back({h, state[h].pc});
    }
    int id = static_cast<int>(an.collectives.size());
    for (auto [h, i] : members) {
      if (Status e = execute(h, i); !e)
        return e;
      an.deps[h][i].collective = id;
      ++state[h].pc;
    }
    an.collectives.push_back(std::move(members));
    return Status::success();
  }

  Status simulate() {
    state.assign(s.numRanks(), RankState());
    for (int g = 0; g < s.numRanks(); ++g) {
      RankState &r = state[g];
      size_t n = modulesOf[s.pipelineRank(g)].size();
      for (auto *v : {&r.fwd, &r.bwd, &r.act, &r.grad})
        v->assign(n * m, -1);
      r.unusedGathers.assign(n, {});
      r.gathered.assign(n, -1);
      r.pending.assign(n, {});
      r.regathered.assign(n, 0);
    }
    for (bool progress = true; progress;) {
      progress = false;
      for (int g = 0; g < s.numRanks(); ++g) {
        while (state[g].pc < size(g)) {
          const int i = state[g].pc;
          const Action &a = act(g, i);
          if (a.kind == ActionKind::Recv) {
            const ActionDeps &dep = an.deps[g][i];
            if (!executed(dep.sendRank, dep.sendIndex))
              break;
          } else if (a.isCollective()) {
            const int pp = s.pipelineRank(g);
            bool all = true;
            for (int dp = 0; dp < d && all; ++dp)
              all = atCollective(s.globalRank(pp, dp));
            if (!all)
              break;
            if (Status e = runCollective(g); !e)
              return e;
            progress = true;
            continue;
          }
          if (Status e = execute(g, i); !e)
            return e;
          ++state[g].pc;
          progress = true;
        }
      }
    }
    return deadlockReport();
  }

  std::string position(int h) const {
    return state[h].pc < size(h) ? "at action #" + str(state[h].pc) + " " +
                                    describeAction(act(h, state[h].pc))
                              : "finished";
  }

  Status deadlockReport() const {
    std::vector<int> waitsOn(s.numRanks(), -1);
    std::string lines;
    int blocked = 0;
    for (int g = 0; g < s.numRanks(); ++g) {
      if (state[g].pc >= size(g))
        continue;
      const int i = state[g].pc;
      std::string why;
      if (act(g, i).kind == ActionKind::Recv) {
        const ActionDeps &dep = an.deps[g][i];
        waitsOn[g] = dep.sendRank;
        why = "waits for rank " + str(dep.sendRank) + "'s action #" +
              str(dep.sendIndex) + "; that rank is " + position(dep.sendRank);
      } else {
        const int pp = s.pipelineRank(g);
        why = "waits in a data-parallel collective for";
        for (int dp = 0; dp < d; ++dp) {
          int h = s.globalRank(pp, dp);
          if (atCollective(h))
            continue;
          if (waitsOn[g] < 0)
            waitsOn[g] = h;
          why += " rank " + str(h) + " (" + position(h) + ")";
        }
      }
      if (blocked++ < 16)
        lines += "\n  " + at(g, i) + " " + why;
    }
    if (blocked == 0)
      return Status::success();
    if (blocked > 16)
      lines += "\n  ... and " + str(blocked - 16) + " more blocked ranks";
    // Follow the wait-for edges from the first blocked rank to a repeat.
    std::vector<int> seenAt(s.numRanks(), -1), path;
    int g = 0;
    while (g < s.numRanks() && state[g].pc >= size(g))
      ++g;
    for (; g >= 0 && seenAt[g] < 0; g = waitsOn[g]) {
      seenAt[g] = static_cast<int>(path.size());
      path.push_back(g);
    }
    std::string cycle;
    if (g >= 0) {
      for (size_t k = seenAt[g]; k < path.size(); ++k)
        cycle += "rank " + str(path[k]) + " -> ";
      cycle = "\n  wait cycle: " + cycle + "rank " + str(g);
    }
    return Status::error("deadlock: no rank can progress; " + str(blocked) +
                         " of " + str(s.numRanks()) + " ranks blocked:" +
                         lines + cycle);
  }

  Status checkComplete() const {
    for (int g = 0; g < s.numRanks(); ++g) {
      const RankState &r = state[g];
      for (int l : modulesOf[s.pipelineRank(g)])
        for (int mb = 0; mb < m; ++mb) {
          if (r.fwd[slot(l, mb)] < 0)
            return Status::error(rankName(s, g) + " never runs " +
                                 describeAction(Action::forward(l, mb)));
          if (!s.config.forwardOnly && r.bwd[slot(l, mb)] < 0)
            return Status::error(rankName(s, g) + " never runs " +
                                 describeAction(Action::backward(l, mb)));
        }
      if (s.config.forwardOnly)
        continue;
      if (r.optimizer < 0)
        return Status::error(rankName(s, g) + " never runs OptimizerStep");
      if (d > 1 && (level == 1 || level == 2))
        for (int l : modulesOf[s.pipelineRank(g)])
          if (!r.regathered[localOf[l]])
            return Status::error(
                rankName(s, g) + " never all-gathers module " + str(l) +
                "'s updated parameters after the optimizer step (sharding "
                "level " + str(level) + ")");
    }
    return Status::success();
  }
};

} // namespace

Expected<Analysis> analyzeSchedule(const Schedule &s) {
  return Verifier(s).run();
}

} // namespace detail

Status verifySchedule(const Schedule &schedule) {
  return detail::analyzeSchedule(schedule).status();
}

} // namespace lamina::schedule
