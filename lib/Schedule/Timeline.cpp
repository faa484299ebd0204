//===- Timeline.cpp - time a verified schedule ----------------------------===//
//
// Each rank has four in-order streams: compute (forward, backward, optimizer
// step), send, receive and collective. Like CUDA streams fed by a host that
// enqueues the whole list up front, an action starts as soon as
//   * the previous action on its stream has ended,
//   * the local actions it depends on have ended (its input, its forward,
//     its weights' all-gather, the backwards it reduces, ...),
//   * for a communication action, the compute action listed before it has
//     started (the list position bounds how early comm is issued, which is
//     what makes "prefetch the next module's weights" a placement choice),
// and, across ranks:
//   * a Recv ends when its Send has ended (sends are eager: the transfer
//     takes the Send's duration on the sender's send stream);
//   * a collective starts when every member can start it and ends after the
//     longest member duration.
// Every constraint is implied by the sequential order the verifier found, so
// the fixpoint below always schedules every action of a verified schedule.
//
//===----------------------------------------------------------------------===//

#include "Analysis.h"

#include "lamina/Schedule/Simulate.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <sstream>

namespace lamina::schedule {

using detail::kNumStreams;
using detail::Stream;
using detail::streamOf;

namespace {

class TimelineBuilder {
public:
  TimelineBuilder(const Schedule &schedule, const detail::Analysis &analysis,
                  std::vector<std::vector<double>> durations)
      : s(schedule), an(analysis), dur(std::move(durations)) {}

  Expected<Timeline> run() {
    const int P = s.numRanks();
    tl.times.resize(P);
    done.resize(P);
    queue.resize(P);
    head.assign(P, {});
    streamFree.assign(P, {});
    for (int g = 0; g < P; ++g) {
      tl.times[g].resize(s.ranks[g].size());
      done[g].assign(s.ranks[g].size(), 0);
      for (size_t i = 0; i < s.ranks[g].size(); ++i)
        queue[g][int(streamOf(s.ranks[g][i]))].push_back(static_cast<int>(i));
    }
    size_t remaining = 0;
    for (const auto &list : s.ranks)
      remaining += list.size();
    for (bool progress = true; progress && remaining;) {
      progress = false;
      for (int g = 0; g < P; ++g)
        for (int q = 0; q < kNumStreams; ++q)
          while (head[g][q] < queue[g][q].size()) {
            int i = queue[g][q][head[g][q]];
            size_t n = s.ranks[g][i].isCollective() ? tryCollective(g, i)
                                                    : tryLocal(g, i);
            if (!n)
              break;
            remaining -= n;
            progress = true;
          }
    }
    if (remaining)
      return Status::error("timeline simulation could not place " +
                           std::to_string(remaining) +
                           " actions (the schedule verified; this is a bug)");
    finish();
    return std::move(tl);
  }

private:
  const Schedule &s;
  const detail::Analysis &an;
  std::vector<std::vector<double>> dur;
  Timeline tl;
  std::vector<std::vector<char>> done;
  std::vector<std::array<std::vector<int>, kNumStreams>> queue;
  std::vector<std::array<size_t, kNumStreams>> head;
  std::vector<std::array<double, kNumStreams>> streamFree;

  // Earliest start from local constraints, or -1 when one is not yet known.
  double readyAt(int g, int i) const {
    const detail::ActionDeps &dep = an.deps[g][i];
    double t = streamFree[g][int(streamOf(s.ranks[g][i]))];
    for (int j : dep.after) {
      if (!done[g][j])
        return -1;
      t = std::max(t, tl.times[g][j].end);
    }
    if (dep.issueAfter >= 0) {
      if (!done[g][dep.issueAfter])
        return -1;
      t = std::max(t, tl.times[g][dep.issueAfter].start);
    }
    return t;
  }

  void place(int g, int i, double start, double end) {
    tl.times[g][i] = {start, end};
    done[g][i] = 1;
    int q = int(streamOf(s.ranks[g][i]));
    streamFree[g][q] = end;
    ++head[g][q];
  }

  size_t tryLocal(int g, int i) {
    double t = readyAt(g, i);
    if (t < 0)
      return 0;
    const detail::ActionDeps &dep = an.deps[g][i];
    if (s.ranks[g][i].kind == ActionKind::Recv) {
      if (!done[dep.sendRank][dep.sendIndex])
        return 0;
      place(g, i, t, std::max(t, tl.times[dep.sendRank][dep.sendIndex].end));
    } else {
      place(g, i, t, t + dur[g][i]);
    }
    return 1;
  }

  size_t tryCollective(int g, int i) {
    const auto &members = an.collectives[an.deps[g][i].collective];
    double start = 0, length = 0;
    for (auto [h, j] : members) {
      const auto &q = queue[h][int(Stream::Collective)];
      size_t k = head[h][int(Stream::Collective)];
      if (k >= q.size() || q[k] != j)
        return 0;
      double t = readyAt(h, j);
      if (t < 0)
        return 0;
      start = std::max(start, t);
      length = std::max(length, dur[h][j]);
    }
    for (auto [h, j] : members)
      place(h, j, start, start + length);
    return members.size();
  }

  void finish() {
    const int P = s.numRanks();
    tl.busy.assign(P, 0.0);
    tl.idle.assign(P, 0.0);
    for (int g = 0; g < P; ++g)
      for (size_t i = 0; i < s.ranks[g].size(); ++i) {
        const ActionTime &t = tl.times[g][i];
        tl.stepTime = std::max(tl.stepTime, t.end);
        if (s.ranks[g][i].isCompute())
          tl.busy[g] += t.end - t.start;
      }
    double idle = 0;
    for (int g = 0; g < P; ++g) {
      tl.idle[g] = tl.stepTime - tl.busy[g];
      idle += tl.idle[g];
    }
    tl.bubbleFraction = tl.stepTime > 0 ? idle / (P * tl.stepTime) : 0.0;
  }
};

} // namespace

Expected<Timeline> simulateTimeline(const Schedule &schedule,
                                    const DurationFn &duration) {
  Expected<detail::Analysis> an = detail::analyzeSchedule(schedule);
  if (!an)
    return an.status();
  std::vector<std::vector<double>> dur(schedule.numRanks());
  for (int g = 0; g < schedule.numRanks(); ++g)
    for (size_t i = 0; i < schedule.ranks[g].size(); ++i) {
      const Action &a = schedule.ranks[g][i];
      double t = duration ? duration(g, a) : 0.0;
      if (!std::isfinite(t) || t < 0)
        return Status::error("duration of " + detail::rankName(schedule, g) +
                             " action #" + std::to_string(i) + " " +
                             describeAction(a) + " is " + std::to_string(t) +
                             "; it must be finite and >= 0");
      dur[g].push_back(t);
    }
  return TimelineBuilder(schedule, *an, std::move(dur)).run();
}

Expected<Timeline> simulateTimeline(const Schedule &schedule,
                                    const CostModel &cost) {
  const size_t L = static_cast<size_t>(schedule.config.numModules);
  for (const auto *v : {&cost.forward, &cost.backward})
    if (v->size() != 1 && v->size() != L)
      return Status::error("cost model needs 1 or L = " + std::to_string(L) +
                           " forward and backward times, got " +
                           std::to_string(v->size()));
  auto perModule = [](const std::vector<double> &v, int l) {
    return v.size() == 1 ? v[0] : v[l];
  };
  return simulateTimeline(schedule, [&](int, const Action &a) {
    switch (a.kind) {
    case ActionKind::Forward:
      return perModule(cost.forward, a.module);
    case ActionKind::Backward:
      return perModule(cost.backward, a.module);
    case ActionKind::Send:
      return cost.p2p;
    case ActionKind::Recv:
      return 0.0;
    case ActionKind::AllGather:
      return cost.allGather;
    case ActionKind::ReduceScatter:
      return cost.reduceScatter;
    case ActionKind::AllReduce:
      return cost.allReduce;
    case ActionKind::OptimizerStep:
      return cost.optimizer;
    }
    return 0.0;
  });
}

namespace {
// The label of an action in the chart; communication gets short labels so it
// fits the compute column width.
std::string chartLabel(const Action &a) {
  if (a.kind == ActionKind::Send)
    return (a.payload == Payload::Activation ? "a" : "g") +
           std::to_string(a.module) + "." + std::to_string(a.microBatch);
  return formatAction(a);
}

std::string fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
} // namespace

std::string formatTimeline(const Schedule &s, const Timeline &tl,
                           double unit) {
  if (unit <= 0) {
    unit = 0;
    for (int g = 0; g < s.numRanks(); ++g)
      for (size_t i = 0; i < s.ranks[g].size(); ++i) {
        double len = tl.times[g][i].end - tl.times[g][i].start;
        if (s.ranks[g][i].isCompute() && len > 0 && (unit == 0 || len < unit))
          unit = len;
      }
    if (unit == 0)
      unit = tl.stepTime > 0 ? tl.stepTime : 1;
  }
  const int maxCols = 1000;
  int cols = static_cast<int>(std::ceil(tl.stepTime / unit - 1e-9));
  if (cols > maxCols) {
    unit = tl.stepTime / maxCols;
    cols = maxCols;
  }
  cols = std::max(cols, 1);
  size_t w = 4;
  for (const auto &list : s.ranks)
    for (const Action &a : list)
      if (!a.isP2P() || a.kind == ActionKind::Send)
        w = std::max(w, chartLabel(a).size() + 1);

  enum Row { Compute, Sends, Collectives };
  auto rowOf = [](const Action &a) {
    return a.isCompute() ? Compute
           : a.isCollective() ? Collectives
                              : Sends;
  };
  const char *rowName[] = {"", " p2p", " dp"};
  std::vector<std::pair<std::string, std::string>> rows;
  for (int g = 0; g < s.numRanks(); ++g)
    for (int row : {Compute, Sends, Collectives}) {
      std::string line(cols * w, ' ');
      if (row == Compute)
        for (int c = 0; c < cols; ++c)
          line[c * w] = '.';
      bool any = row == Compute;
      for (size_t i = 0; i < s.ranks[g].size(); ++i) {
        const Action &a = s.ranks[g][i];
        const ActionTime &t = tl.times[g][i];
        if (rowOf(a) != row || a.kind == ActionKind::Recv || t.end <= t.start)
          continue;
        int c0 = static_cast<int>(std::lround(t.start / unit));
        int c1 = std::max(c0 + 1, static_cast<int>(std::lround(t.end / unit)));
        c0 = std::min(c0, cols - 1);
        c1 = std::min(c1, cols);
        std::string cell = chartLabel(a);
        size_t span = (c1 - c0) * w;
        cell.resize(span - 1, '-');
        line.replace(c0 * w, span, cell + ' ');
        any = true;
      }
      if (any)
        rows.push_back({"r" + std::to_string(g) + rowName[row], line});
    }
  size_t nameWidth = 0;
  for (const auto &r : rows)
    nameWidth = std::max(nameWidth, r.first.size());
  std::string axis(cols * w, ' ');
  for (int c = 0; c < cols; ++c) {
    std::string tick = fmt(c * unit);
    if (c * w + tick.size() <= axis.size() &&
        (c == 0 || axis[c * w - 1] == ' '))
      axis.replace(c * w, tick.size(), tick);
  }
  auto trim = [](std::string x) {
    x.erase(x.find_last_not_of(' ') + 1);
    return x;
  };
  std::string out = trim(std::string(nameWidth, ' ') + " | " + axis) + "\n";
  for (const auto &[name, line] : rows)
    out += trim(name + std::string(nameWidth - name.size(), ' ') + " | " +
                line) +
           "\n";
  out += "step " + fmt(tl.stepTime) + ", bubble " +
         fmt(std::round(tl.bubbleFraction * 1000) / 10) + "%\n";
  return out;
}

} // namespace lamina::schedule
