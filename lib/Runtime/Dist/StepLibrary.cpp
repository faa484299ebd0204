//===- StepLibrary.cpp - the calls of a compiled step ---------------------===//
//
// DistProgram.h, namespace step: what the step functions convert-dist-to-rt
// generates call, in schedule order. Each forwards to the rank's Executor
// and then tests the sends in flight (MPI's progress); the first
// error stops the step (StepState::status), which Executor::runStep
// returns.
//
//===----------------------------------------------------------------------===//

#include "Executor.h"

#include "lamina/Schedule/Schedule.h"

using namespace lamina::rt;
using namespace lamina::rt::dist;
using lamina::schedule::ActionKind;
using lamina::schedule::Payload;

namespace {

template <typename F> void run(StepState *s, F &&call) {
  if (!s->status.ok())
    return;
  Status st = call(s->ex);
  if (st.ok())
    st = s->ex.progressSends();
  s->status = std::move(st);
}

/// The executor's form of a transfer: its peer as a global rank of this
/// replica.
ActionSpec transfer(const Executor &ex, ActionKind kind, step::Payload what,
                    int boundary, int mb, int peer) {
  Payload payload = what == step::Payload::Gradient ? Payload::ActivationGrad
                                                    : Payload::Activation;
  return ActionSpec{uint8_t(kind), uint8_t(payload), boundary, mb,
                    ex.globalRank(ex.replica(), peer)};
}

ActionSpec collective(ActionKind kind, int module) {
  return ActionSpec{uint8_t(kind), uint8_t(Payload::None), module, -1, -1};
}

} // namespace

void step::forward(StepState *s, int module, int mb, int64_t in, int64_t res,
                   int64_t out) {
  run(s, [&](Executor &ex) { return ex.forward(module, mb, in, res, out); });
}

void step::backward(StepState *s, int module, int mb, int64_t in, int64_t res,
                    int64_t cot, int64_t out) {
  run(s,
      [&](Executor &ex) { return ex.backward(module, mb, in, res, cot, out); });
}

void step::accumulate(StepState *s, int module, int64_t into) {
  run(s, [&](Executor &ex) { return ex.accumulate(module, into); });
}

void step::waitGradients(StepState *s, int module) {
  run(s, [&](Executor &ex) { return ex.waitGradients(module); });
}

void step::send(StepState *s, step::Payload what, int boundary, int mb,
                int peer, int64_t at) {
  run(s, [&](Executor &ex) {
    return ex.send(transfer(ex, ActionKind::Send, what, boundary, mb, peer),
                   at);
  });
}

void step::waitSend(StepState *s, step::Payload what, int boundary, int mb,
                    int peer) {
  run(s, [&](Executor &ex) {
    return ex.waitSend(
        transfer(ex, ActionKind::Send, what, boundary, mb, peer));
  });
}

void step::postRecv(StepState *s, step::Payload what, int boundary, int mb,
                    int peer, int64_t at) {
  run(s, [&](Executor &ex) {
    return ex.postRecv(transfer(ex, ActionKind::Recv, what, boundary, mb, peer),
                       at);
  });
}

void step::recv(StepState *s, step::Payload what, int boundary, int mb,
                int peer, int64_t at) {
  run(s, [&](Executor &ex) {
    return ex.recv(transfer(ex, ActionKind::Recv, what, boundary, mb, peer),
                   at);
  });
}

void step::allGather(StepState *s, int module, int64_t at) {
  run(s, [&](Executor &ex) {
    return ex.collective(collective(ActionKind::AllGather, module), at);
  });
}

void step::reduceScatter(StepState *s, int module, int64_t full, int64_t part) {
  run(s, [&](Executor &ex) {
    return ex.collective(collective(ActionKind::ReduceScatter, module), full,
                         part);
  });
}

void step::allReduce(StepState *s, int module) {
  run(s, [&](Executor &ex) {
    return ex.collective(collective(ActionKind::AllReduce, module));
  });
}

void step::useWeights(StepState *s, int module) {
  run(s, [&](Executor &ex) { return ex.useWeights(module); });
}

void step::optimizer(StepState *s) {
  run(s, [&](Executor &ex) { return ex.optimizerStep(); });
}

void step::waitWeights(StepState *s, int module) {
  run(s, [&](Executor &ex) { return ex.waitWeights(module); });
}

void step::sumShared(StepState *s, const char *param) {
  run(s, [&](Executor &ex) { return ex.sumShared(param); });
}

void step::waitSharedSum(StepState *s, const char *param) {
  run(s, [&](Executor &ex) { return ex.waitSharedSum(param); });
}

void step::gatherShared(StepState *s, const char *param) {
  run(s, [&](Executor &ex) { return ex.startSharedGather(param); });
}

void step::waitSharedGather(StepState *s, const char *param) {
  run(s, [&](Executor &ex) { return ex.waitSharedGather(param); });
}
