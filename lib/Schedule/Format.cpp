//===- Format.cpp - printing actions and schedules ------------------------===//

#include "lamina/Schedule/Schedule.h"

namespace lamina::schedule {

namespace {
std::string str(int v) { return std::to_string(v); }

const char *payloadName(Payload p) {
  switch (p) {
  case Payload::None:
    return "none";
  case Payload::Activation:
    return "activation";
  case Payload::ActivationGrad:
    return "gradient";
  case Payload::Weights:
    return "weights";
  case Payload::WeightGrads:
    return "weight gradients";
  }
  return "?";
}
} // namespace

std::string formatAction(const Action &a) {
  auto p2p = [&](const char *dir, char arrow) {
    char what = a.payload == Payload::Activation       ? 'a'
                : a.payload == Payload::ActivationGrad ? 'g'
                                                       : '?';
    return std::string(dir) + what + str(a.module) + "." + str(a.microBatch) +
           arrow + str(a.peer);
  };
  switch (a.kind) {
  case ActionKind::Forward:
    return "F" + str(a.module) + "." + str(a.microBatch);
  case ActionKind::Backward:
    return "B" + str(a.module) + "." + str(a.microBatch);
  case ActionKind::Send:
    return p2p("S", '>');
  case ActionKind::Recv:
    return p2p("R", '<');
  case ActionKind::AllGather:
    return "AG" + str(a.module);
  case ActionKind::ReduceScatter:
    return "RS" + str(a.module);
  case ActionKind::AllReduce:
    return "AR" + str(a.module);
  case ActionKind::OptimizerStep:
    return "OPT";
  }
  return "?";
}

std::string describeAction(const Action &a) {
  std::string mb = ", mb " + str(a.microBatch);
  switch (a.kind) {
  case ActionKind::Forward:
    return "Forward(module " + str(a.module) + mb + ")";
  case ActionKind::Backward:
    return "Backward(module " + str(a.module) + mb + ")";
  case ActionKind::Send:
    return std::string("Send(") + payloadName(a.payload) + ", boundary " +
           str(a.module) + mb + ", to rank " + str(a.peer) + ")";
  case ActionKind::Recv:
    return std::string("Recv(") + payloadName(a.payload) + ", boundary " +
           str(a.module) + mb + ", from rank " + str(a.peer) + ")";
  case ActionKind::AllGather:
    return std::string("AllGather(") + payloadName(a.payload) + ", module " +
           str(a.module) + ")";
  case ActionKind::ReduceScatter:
    return std::string("ReduceScatter(") + payloadName(a.payload) +
           ", module " + str(a.module) + ")";
  case ActionKind::AllReduce:
    return std::string("AllReduce(") + payloadName(a.payload) + ", module " +
           str(a.module) + ")";
  case ActionKind::OptimizerStep:
    return "OptimizerStep";
  }
  return "?";
}

std::string formatSchedule(const Schedule &s, int width) {
  const ScheduleConfig &c = s.config;
  std::string out = std::string(scheduleKindName(c.kind)) +
                    ": L=" + str(c.numModules) + " p=" + str(c.pipelineRanks) +
                    " m=" + str(c.microBatches) + " d=" + str(c.dataParallel) +
                    " zero=" + str(c.zeroLevel) + "\n";
  for (int g = 0; g < s.numRanks(); ++g) {
    std::string line = "rank " + str(g) + " (pp " + str(s.pipelineRank(g)) +
                       ", dp " + str(s.dataRank(g)) + "):";
    const size_t indent = 4;
    for (const Action &a : s.ranks[g]) {
      std::string tok = formatAction(a);
      if (line.size() + 1 + tok.size() > static_cast<size_t>(width) &&
          line.size() > indent) {
        out += line + "\n";
        line = std::string(indent - 1, ' ');
      }
      line += " " + tok;
    }
    out += line + "\n";
  }
  return out;
}

} // namespace lamina::schedule
