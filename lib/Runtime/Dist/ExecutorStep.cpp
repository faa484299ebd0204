//===- ExecutorStep.cpp - what one rank's step calls do -------------------===//
//
// Executor.h: the calls of a compiled step (StepLibrary.cpp). Functions run
// on the device (launch: no wait), their outputs are copied out of the arena
// into the step buffer at the offsets the compiler planned (as are ZeRO's
// gathered weights and full gradients), transfers and collectives go
// through the Communicator, whose waits make the device's later work see
// the data (waitForCompute); the step posts each receive ahead of its wait,
// so its transfer overlaps the work in between. The host waits where the
// compiled step says (gradient reductions, sends) and at the end of the
// step (the losses).
//
//===----------------------------------------------------------------------===//

#include "Executor.h"

#include <algorithm>
#include <cmath>
#include <cstring>

using namespace lamina::rt;
using namespace lamina::rt::dist;
using lamina::schedule::ActionKind;
using lamina::schedule::Payload;

namespace {
std::string str(int v) { return std::to_string(v); }

/// "F3.1", "Sa2.0>1", "AG4", ... (Schedule.h).
std::string actionName(const ActionSpec &a) {
  return lamina::schedule::formatAction(lamina::schedule::Action{
      ActionKind(a.kind), Payload(a.payload), a.module, a.microBatch, a.peer});
}

std::string payloadWord(const ActionSpec &a) {
  return Payload(a.payload) == Payload::Activation ? "activation"
                                                   : "activation gradient";
}

float *floats(const DeviceBuffer &b) { return static_cast<float *>(b.data()); }
} // namespace

Status Executor::bindForwardArgs(int k, int j, int64_t in,
                                 std::vector<Tensor> &args) {
  const FunctionSpec &f = spec.modules[k].forward;
  args.clear();
  int boundary = 0;
  for (int i = 0; i < f.numArgs; ++i) {
    const ArgSpec &a = f.args[i];
    switch (a.kind) {
    case ArgKind::Boundary:
      args.push_back(actLayout[size_t(k - 1)].view(
          stepAt(in, actLayout[size_t(k - 1)], "input of module ", k),
          size_t(boundary++)));
      break;
    case ArgKind::Input: {
      int k = slotIndex.at(a.name);
      int64_t row = (int64_t(dp) * spec.microBatches + j) * microBatch;
      size_t rowBytes = batchHost[size_t(k)].byteSize() / size_t(globalBatch);
      char *base = static_cast<char *>(batchDevice[size_t(k)].data());
      args.push_back(Tensor{base + size_t(row) * rowBytes, a.dtype, a.rank,
                            a.shape});
      break;
    }
    case ArgKind::Trainable: {
      Param &p = params[size_t(paramIndex.at(a.name))];
      float *v = nullptr; // unread where the copies are gathered
      if (p.shared)
        v = floats(p.own);
      else {
        ModuleState &M = modules[size_t(p.module)];
        if (!shardsParams(M))
          v = floats(M.flatParam) + p.flatOffset;
        else if (zero == 3 && !M.shardCopy.data()) // the gathered f32
          v = static_cast<float *>(M.active) + p.flatOffset;
      }
      args.push_back(Tensor{v, DType::F32, a.rank, a.shape});
      break;
    }
    case ArgKind::Constant: {
      Param &p = params[size_t(paramIndex.at(a.name))];
      args.push_back(Tensor{p.constant.data(), a.dtype, a.rank, a.shape});
      break;
    }
    case ArgKind::ParamCopy: { // setupCopies made it
      Param &p = params[size_t(paramIndex.at(a.name))];
      void *v = p.ownCopy.data();
      if (!p.shared) { // ZeRO 3: the gathered copies
        ModuleState &M = modules[size_t(p.module)];
        v = static_cast<char *>(zero == 3 ? M.active : M.flatCopy.data()) +
            size_t(p.flatOffset) * dtypeSize(a.dtype);
      }
      args.push_back(Tensor{v, a.dtype, a.rank, a.shape});
      break;
    }
    default:
      control.abort("the program is inconsistent: forward " + std::string(f.name) +
                 " has an argument of kind " + str(int(a.kind)));
    }
  }
  return Status::success();
}

Status Executor::runFunction(const FunctionSpec &f, std::vector<Tensor> &args,
                             const char *cat, std::string name) {
  double t0 = now();
  Status s = device.launch(f.entry, args.data(), int(args.size()), arena.data());
  double t1 = now();
  busySeconds += t1 - t0;
  record(cat, std::move(name), t0, t1);
  if (!s.ok())
    return Status::error(std::string(f.name) + ": " + s.message());
  return Status::success();
}

char *Executor::stepAt(int64_t offset, size_t bytes, const char *what,
                       int index) {
  if (bytes == 0) // nothing to hold: the compiler placed nothing
    return nullptr;
  if (offset < 0 || size_t(offset) > stepBuffer.bytes() ||
      bytes > stepBuffer.bytes() - size_t(offset))
    control.abort("the program is inconsistent: the step places the " +
                  std::string(what) + str(index) + " at " +
                  std::to_string(offset) + ", outside its " +
                  std::to_string(stepBuffer.bytes()) + "-byte step buffer");
  return static_cast<char *>(stepBuffer.data()) + offset;
}

Status Executor::packOutputs(const FunctionSpec &f, int first,
                             const Packed &lay, char *out) {
  const char *base = static_cast<const char *>(arena.data());
  for (size_t i = 0; i < lay.items.size(); ++i)
    if (Status s = device.copy(out + lay.items[i].offset,
                               base + f.outputs[first + int(i)].offset,
                               lay.items[i].bytes);
        !s.ok())
      return s;
  return Status::success();
}

Status Executor::forward(int k, int j, int64_t in, int64_t res, int64_t out) {
  const ModuleSpec &m = spec.modules[k];
  checkRun(k);
  std::vector<Tensor> args;
  if (Status s = bindForwardArgs(k, j, in, args); !s.ok())
    return s;
  if (Status s = runFunction(m.forward, args, "forward",
                             "F" + str(k) + "." + str(j));
      !s.ok())
    return s;
  if (k == spec.numModules - 1) {
    // Read back at the end of the step.
    if (Status s = device.copy(floats(deviceLoss) + j,
                               static_cast<const char *>(arena.data()) +
                                   m.forward.outputs[0].offset,
                               sizeof(float));
        !s.ok())
      return s;
  } else {
    const Packed &lay = actLayout[size_t(k)];
    if (Status s = packOutputs(m.forward, 0, lay,
                               stepAt(out, lay, "output of module ", k));
        !s.ok())
      return s;
  }
  // Evaluating, no backward follows: the residuals are not kept.
  if (!evaluating && m.numResiduals > 0) {
    const Packed &lay = resLayout.at(k);
    if (Status s = packOutputs(m.forward, m.numOut, lay,
                               stepAt(res, lay, "residuals of module ", k));
        !s.ok())
      return s;
  }
  return Status::success();
}

Status Executor::backward(int k, int j, int64_t in, int64_t res, int64_t cot,
                          int64_t out) {
  const ModuleSpec &m = spec.modules[k];
  checkRun(k);
  bool last = k == spec.numModules - 1;
  std::vector<Tensor> args;
  if (Status s = bindForwardArgs(k, j, in, args); !s.ok())
    return s;
  if (m.numResiduals > 0) {
    const Packed &lay = resLayout.at(k);
    char *at = stepAt(res, lay, "residuals of module ", k);
    for (int i = 0; i < m.numResiduals; ++i)
      args.push_back(lay.view(at, size_t(i)));
  }
  if (last) {
    const ArgSpec &a = m.backward.args[m.backward.numArgs - 1];
    args.push_back(Tensor{floats(deviceWeight) + j, DType::F32, a.rank, a.shape});
  } else {
    const Packed &lay = gradLayout[size_t(k)];
    char *at = stepAt(cot, lay, "output gradient of module ", k);
    for (int i = 0; i < m.numOut; ++i)
      args.push_back(lay.view(at, size_t(i)));
  }
  if (Status s = runFunction(m.backward, args, "backward",
                             "B" + str(k) + "." + str(j));
      !s.ok())
    return s;
  if (k > 0) {
    const Packed &lay = gradLayout[size_t(k - 1)];
    if (Status s =
            packOutputs(m.backward, 0, lay,
                        stepAt(out, lay, "input gradient of module ", k));
        !s.ok())
      return s;
  }
  // The parameter gradients stay in the arena for accumulate(k).
  accumulatePending = k;
  return Status::success();
}

Status Executor::accumulate(int k, int64_t into) {
  if (accumulatePending != k)
    control.abort("the step accumulates module " + str(k) +
                  "'s gradients without its backward right before");
  accumulatePending = -1;
  const ModuleSpec &m = spec.modules[k];
  // Parameter gradients accumulate, in one call for the module.
  const char *base = static_cast<const char *>(arena.data());
  int out = m.numIn;
  std::vector<GradientSum> sums;
  for (int i = 0; i < m.forward.numArgs; ++i) {
    const ArgSpec &a = m.forward.args[i];
    if (a.kind != ArgKind::Trainable)
      continue;
    Param &p = params[size_t(paramIndex.at(a.name))];
    const float *g =
        reinterpret_cast<const float *>(base + m.backward.outputs[out++].offset);
    float *dst;
    if (p.shared)
      dst = floats(p.ownGrad);
    else {
      ModuleState &M = modules[size_t(p.module)];
      // Levels 2-3: a run's first backward starts a new gradient (the
      // step waited for the older reduce-scatters before this:
      // waitGradients).
      if (zero >= 2 && !M.runGrad)
        if (Status s = takeRunGradient(M, into); !s.ok())
          return s;
      dst = (zero >= 2 ? M.runGrad : floats(M.flatGrad)) + p.flatOffset;
    }
    // The step's first gradient of p is written as onto zeros, without
    // a fill or a read of the buffer.
    sums.push_back({dst, g, p.size, !p.gradWritten});
    p.gradWritten = true;
  }
  return device.accumulateMany(sums.data(), int(sums.size()));
}

Status Executor::waitGradients(int k) {
  ModuleState &M = modules[size_t(k)];
  double t0 = now();
  Status s = Status::success();
  if (zero < 2) {
    if (!M.gradReq.valid())
      control.abort("the step waits for module " + str(k) +
                    "'s gradient reduction, which it did not start");
    s = net.waitForCompute(M.gradReq,
                           "the reduction of module " + str(k) +
                               "'s gradients did not complete",
                           "; a rank of data-parallel group " + str(pp) +
                               " may have died");
  } else {
    if (scatters.empty() || scatters.front().module != k)
      control.abort("the step waits for module " + str(k) +
                    "'s reduce-scatter, which is not the oldest in flight");
    s = retireScatters(scatters.size() - 1);
  }
  record("collective-wait", "grads" + str(k), t0, now());
  return s;
}

void Executor::checkRun(int k) {
  if (zero == 3 && runModule != k)
    control.abort("the step runs module " + str(k) +
                  " without its gathered weights (no useWeights before it)");
}

void Executor::endRun() {
  // Its gathered weights' bytes are the step buffer's again.
  if (runModule >= 0 && zero == 3)
    modules[size_t(runModule)].active = nullptr;
  runModule = -1;
}

Status Executor::waitForWeights(Request &req, int k) {
  return net.waitForCompute(req,
                            "the all-gather of module " + str(k) +
                                "'s weights did not complete",
                            "; a rank of data-parallel group " + str(pp) +
                                " may have died");
}

Status Executor::useWeights(int k) {
  endRun();
  runModule = k;
  if (zero != 3)
    return Status::success();
  ModuleState &M = modules[size_t(k)];
  if (M.gathers.empty())
    control.abort("the step uses module " + str(k) +
                  "'s weights without gathering them first");
  double t0 = now();
  if (Status s = waitForWeights(M.gathers.front().req, k); !s.ok())
    return s;
  record("collective-wait", "AG" + str(k), t0, now());
  M.active = M.gathers.front().full;
  M.gathers.pop_front();
  return Status::success();
}

Status Executor::send(const ActionSpec &a, int64_t at) {
  double t0 = now();
  const Packed &lay = (Payload(a.payload) == Payload::Activation
                           ? actLayout
                           : gradLayout)[size_t(a.module)];
  std::string what = "the " + payloadWord(a) + " of boundary " + str(a.module) +
                     ", micro-batch " + str(a.microBatch);
  char *buffer = stepAt(at, lay,
                        Payload(a.payload) == Payload::Activation
                            ? "activations sent of boundary "
                            : "gradient sent of boundary ",
                        a.module);
  SendRecord r{Request{},
               "the send of " + what + " to rank " + str(a.peer) +
                   " did not complete",
               a.peer};
  if (Status s = net.isend(buffer, lay.wireBytes(), a.peer, tagOf(a), r.req);
      !s.ok())
    return s;
  if (!sends.emplace(std::make_pair(a.peer, tagOf(a)), std::move(r)).second)
    control.abort("the step sends " + what + " twice");
  record("send", actionName(a), t0, now());
  return Status::success();
}

Status Executor::waitSend(const ActionSpec &a) {
  double t0 = now();
  auto it = sends.find({a.peer, tagOf(a)});
  if (it == sends.end())
    control.abort("the step waits for a send of the " + payloadWord(a) +
                  " of boundary " + str(a.module) + ", micro-batch " +
                  str(a.microBatch) + " that it did not start");
  SendRecord r = std::move(it->second);
  sends.erase(it);
  if (r.req.valid())
    if (Status s =
            net.wait(r.req, r.what, "; rank " + str(r.peer) + " may have died");
        !s.ok())
      return s;
  record("send-wait", actionName(a), t0, now());
  return Status::success();
}

Status Executor::postRecv(const ActionSpec &a, int64_t at) {
  bool act = Payload(a.payload) == Payload::Activation;
  const Packed &lay = (act ? actLayout : gradLayout)[size_t(a.module)];
  PostedRecv p;
  p.offset = at;
  char *buffer = stepAt(at, lay,
                        act ? "activations received of boundary "
                            : "gradient received of boundary ",
                        a.module);
  if (Status s = net.irecv(buffer, lay.wireBytes(), a.peer, tagOf(a), p.req);
      !s.ok())
    return s;
  if (!postedRecvs.emplace(std::make_pair(a.peer, tagOf(a)), p).second)
    control.abort("the step posts the receive of the " + payloadWord(a) +
                  " of boundary " + str(a.module) + ", micro-batch " +
                  str(a.microBatch) + " twice");
  return Status::success();
}

Status Executor::recv(const ActionSpec &a, int64_t at) {
  double t0 = now();
  std::pair<int, int> key{a.peer, tagOf(a)};
  auto it = postedRecvs.find(key);
  if (it == postedRecvs.end()) {
    if (Status s = postRecv(a, at); !s.ok())
      return s;
    it = postedRecvs.find(key);
  }
  PostedRecv p = it->second;
  postedRecvs.erase(it);
  if (p.offset != at)
    control.abort("the step waits for the " + payloadWord(a) + " of boundary " +
                  str(a.module) + ", micro-batch " + str(a.microBatch) +
                  " at " + std::to_string(at) + ", posted at " +
                  std::to_string(p.offset));
  if (Status s = net.waitForCompute(p.req,
                                    "no " + payloadWord(a) + " of boundary " +
                                        str(a.module) + ", micro-batch " +
                                        str(a.microBatch) + " from rank " +
                                        str(a.peer),
                                    "; rank " + str(a.peer) + " may have died");
      !s.ok())
    return s;
  record("recv-wait", actionName(a), t0, now());
  return Status::success();
}

Status Executor::collective(const ActionSpec &a, int64_t at, int64_t part) {
  ModuleState &M = modules[size_t(a.module)];
  if (spec.moduleRank[a.module] != pp)
    control.abort("the step has a collective of module " + str(a.module) +
               ", which pipeline rank " + str(pp) + " does not hold");
  size_t fullBytes = size_t(M.shards.fullCapacity) * sizeof(float);
  switch (ActionKind(a.kind)) {
  case ActionKind::AllReduce:
    return net.allReduce(floats(M.flatGrad), M.size, dpGroup, M.gradReq);
  case ActionKind::ReduceScatter:
    if (zero >= 2) {
      Scatter s;
      s.module = a.module;
      s.full = M.runGrad;
      M.runGrad = nullptr;
      s.counted = size_t(M.size) * sizeof(float);
      if (!s.full) { // no backward accumulated into one: zeros
        s.full = reinterpret_cast<float *>(
            stepAt(at, fullBytes, "full gradient of module ", a.module));
        if (Status st = device.fillZero(s.full, fullBytes); !st.ok())
          return st;
        countGrad(s.counted);
      } else if (s.full !=
                 reinterpret_cast<float *>(stepAt(
                     at, fullBytes, "full gradient of module ", a.module))) {
        control.abort("the program is inconsistent: module " + str(a.module) +
                      "'s reduce-scatter reads another full gradient than "
                      "its run accumulated into");
      }
      // The step's first reduce-scatter of M writes its shard gradient
      // (the same bits as 0 + part); later ones need a part to add.
      float *into = floats(M.shardGrad);
      if (M.scatteredThisStep) {
        s.part = reinterpret_cast<float *>(
            stepAt(part, size_t(M.shards.shardCapacity) * sizeof(float),
                   "reduce-scattered part of module ", a.module));
        size_t partBytes = size_t(M.shards.counts[size_t(dp)]) * sizeof(float);
        countGrad(partBytes);
        s.counted += partBytes;
        into = s.part;
      }
      M.scatteredThisStep = true;
      if (Status st = net.reduceScatter(s.full, into, M.shards, dpGroup, s.req);
          !st.ok())
        return st;
      scatters.push_back(std::move(s));
      return Status::success();
    }
    // In place: the shard lands over this rank's part of flatGrad.
    return net.reduceScatter(floats(M.flatGrad), M.gradShard, M.shards, dpGroup,
                             M.gradReq);
  case ActionKind::AllGather:
    if (zero == 3) {
      // The weights the functions read: their copies when that is all
      // (ModuleSpec::copiesOnly), else the f32 weights.
      bool copies = M.shardCopy.data() != nullptr;
      DType type = copies ? copyType : DType::F32;
      size_t width = dtypeSize(type);
      ModuleState::Gather g;
      size_t bytes = size_t(M.shards.fullCapacity) * width;
      g.full = stepAt(at, bytes, "gathered weights of module ", a.module);
      if (Status s = device.fillZero(g.full, bytes); !s.ok())
        return s;
      if (Status s =
              device.copy(g.full + size_t(M.shards.offsets[size_t(dp)]) * width,
                          copies ? M.shardCopy.data() : M.shardParam.data(),
                          size_t(M.shards.counts[size_t(dp)]) * width);
          !s.ok())
        return s;
      if (Status s = net.allGather(g.full, type, M.shards, dpGroup, g.req);
          !s.ok())
        return s;
      M.gathers.push_back(g);
      return Status::success();
    }
    if (M.gathersCopies)
      return net.allGather(M.flatCopy.data(), copyType, M.shards, dpGroup,
                           M.paramReq);
    return net.allGather(M.flatParam.data(), DType::F32, M.shards, dpGroup,
                         M.paramReq);
  default:
    return Status::success();
  }
}

Status Executor::takeRunGradient(ModuleState &M, int64_t into) {
  // No fill: this backward writes each of M's parameters' gradients as
  // onto zeros; only the padding the reduce-scatter reads is zeroed.
  size_t bytes = size_t(M.shards.fullCapacity) * sizeof(float);
  char *at = stepAt(into, bytes, "full gradient of module ", M.index);
  M.runGrad = reinterpret_cast<float *>(at);
  size_t used = size_t(M.size) * sizeof(float);
  if (bytes > used)
    if (Status s = device.fillZero(at + used, bytes - used); !s.ok())
      return s;
  for (int pi : M.params)
    params[size_t(pi)].gradWritten = false;
  countGrad(used);
  return Status::success();
}

Status Executor::retireScatters(size_t keep) {
  while (scatters.size() > keep) {
    Scatter &sc = scatters.front();
    int k = sc.module;
    ModuleState &M = modules[size_t(k)];
    if (Status s = net.waitForCompute(sc.req,
                                      "the reduce-scatter of module " + str(k) +
                                          "'s gradients did not complete",
                                      "; a rank of data-parallel group " +
                                          str(pp) + " may have died");
        !s.ok())
      return s;
    if (sc.part)
      if (Status s = device.accumulate(floats(M.shardGrad), sc.part,
                                       M.shards.counts[size_t(dp)]);
          !s.ok())
        return s;
    // Later device work (and transfers, ordered after it) may reuse their
    // bytes of the step buffer.
    gradBytes -= sc.counted;
    scatters.pop_front();
  }
  return Status::success();
}

Status Executor::progressSends() {
  // MPI moves a transfer along only inside its calls: test each send in
  // flight (their buffers stay the step's until waitSend).
  for (auto &[key, r] : sends) {
    if (!r.req.valid())
      continue;
    bool done = false;
    if (Status s = net.test(r.req, done); !s.ok())
      return s;
  }
  return Status::success();
}

Status Executor::optimizerStep() {
  endRun();
  // The step waited for every gradient reduction (waitGradients).
  if (!scatters.empty())
    control.abort("the step runs the optimizer before waiting for module " +
                  str(scatters.front().module) + "'s reduce-scatter");
  for (int k : localModules) {
    ModuleState &M = modules[size_t(k)];
    if (M.gradReq.valid())
      control.abort("the step runs the optimizer before waiting for module " +
                    str(k) + "'s gradient reduction");
    // Levels 2-3: the step's first reduce-scatter wrote the shard
    // gradient (zeroGrads leaves it as the last step left it).
    if (zero >= 2 && (M.runGrad || (M.size > 0 && !M.scatteredThisStep)))
      return Status::error("internal: module " + str(k) +
                           "'s gradient was never reduce-scattered");
  }
  // Shared parameters: summed over all holders before this, whole (ZeRO
  // 0) or each holder's part (Param::shardsOwn; sumShared).
  for (Param *p : sharedByName())
    if (net.groupSize(p->holders) > 1 && !p->summed)
      control.abort("the step runs the optimizer before summing shared "
                    "parameter '" + p->name + "''s gradient");
  double t1 = now();
  std::vector<Tensor> ps, gs, counted;
  for (const Segment &s : segments) {
    ps.push_back(s.paramView());
    gs.push_back(s.gradView());
    if (s.countsForNorm)
      counted.push_back(s.gradView());
  }
  if (o.clip > 0) {
    // The global norm: every rank's sum of squares, summed on the device.
    double *norm = static_cast<double *>(deviceNorm.data());
    if (Status s = device.sumOfSquares(counted.data(), int(counted.size()), norm);
        !s.ok())
      return s;
    Request r;
    if (Status s = net.allReduceDouble(norm, 1, 0, r); !s.ok())
      return s;
    if (Status s = net.waitForCompute(
            r, "the gradient norm's all-reduce did not complete",
            "; a rank may have died");
        !s.ok())
      return s;
    if (Status s = device.clipByNorm(gs.data(), int(gs.size()), norm, o.clip);
        !s.ok())
      return s;
  }
  float lr = float(sched.at(stepIndex));
  opt.setStepCount(opt.stepCount() + 1);
  int slots = opt.numSlots();
  std::vector<OptimizerConfig> cfgs;
  std::vector<Tensor> copies;
  std::vector<ParamUpdate> updates(segments.size());
  for (const Segment &seg : segments) {
    cfgs.push_back(optimizerConfigFor(o, seg.rank));
    copies.push_back(seg.copyView(copyType));
  }
  for (size_t i = 0; i < segments.size(); ++i)
    updates[i] = {&cfgs[i], ps[i], gs[i],
                  slots ? &deviceState[i * size_t(slots)] : nullptr,
                  segments[i].copy ? &copies[i] : nullptr};
  if (Status s = device.optimizerUpdates(lr, opt.stepCount(), updates.data(),
                                         int(updates.size()));
      !s.ok())
    return s;
  // The updated parts of the shared parameters go to every holder in
  // the step's gatherShared calls.
  double t2 = now();
  busySeconds += t2 - t1;
  record("optimizer", "OPT", t1, t2);
  return Status::success();
}

Status Executor::waitWeights(int k) {
  ModuleState &M = modules[size_t(k)];
  if (!M.paramReq.valid())
    control.abort("the step waits for module " + str(k) +
                  "'s parameter all-gather, which it did not start");
  if (Status s = waitForWeights(M.paramReq, k); !s.ok())
    return s;
  // Levels 1-2: the gathered parameters' copy, one cast a step (unless
  // the copies themselves were gathered).
  if (!M.gathersCopies)
    return castCopy(M.flatParam, M.flatCopy, M.size);
  return Status::success();
}

Param &Executor::sharedParam(const std::string &name) {
  auto it = paramIndex.find(name);
  if (it == paramIndex.end() || !params[size_t(it->second)].shared ||
      !params[size_t(it->second)].trainable)
    control.abort("the step names '" + name +
                  "', which is no shared parameter of this rank");
  return params[size_t(it->second)];
}

Status Executor::sumShared(const std::string &name) {
  Param &p = sharedParam(name);
  return p.shardsOwn ? net.reduceScatter(floats(p.ownGrad), p.partGrad,
                                         p.holderShards, p.holders, p.sumReq)
                     : net.allReduce(floats(p.ownGrad), p.size, p.holders,
                                     p.sumReq);
}

Status Executor::waitSharedSum(const std::string &name) {
  Param &p = sharedParam(name);
  if (!p.sumReq.valid())
    control.abort("the step waits for shared parameter '" + name +
                  "''s gradient sum, which it did not start");
  double t0 = now();
  if (Status s = net.waitForCompute(p.sumReq,
                                    "the gradient sum of shared parameter '" +
                                        name + "' did not complete",
                                    "; a rank holding it may have died");
      !s.ok())
    return s;
  record("collective-wait", "sum " + name, t0, now());
  p.summed = true;
  return Status::success();
}

Status Executor::startSharedGather(const std::string &name) {
  Param &p = sharedParam(name);
  if (!p.shardsOwn)
    control.abort("the step gathers shared parameter '" + name +
                  "', which is not sharded over its holders");
  return gatherShared(p);
}

Status Executor::waitSharedGather(const std::string &name) {
  Param &p = sharedParam(name);
  if (!p.ownGatherReq.valid())
    control.abort("the step waits for shared parameter '" + name +
                  "''s all-gather, which it did not start");
  return waitShared(p);
}

Status Executor::zeroGrads() {
  // The parameters' gradients need no fill: each one's first backward of
  // the step writes it (Param::gradWritten). A flat buffer's padding past
  // the parameters stays as allocated, zero.
  for (Param &p : params)
    p.gradWritten = false;
  // Nor do the shard gradients: each step's first reduce-scatter of a
  // module writes its shard (levels 2-3), or lands in place (level 1).
  for (int k : localModules)
    modules[size_t(k)].scatteredThisStep = false;
  return Status::success();
}

Status Executor::loadBatch(BatchSource &from) {
  int m = spec.microBatches;
  if (Status s = from.next(batchViews); !s.ok())
    return s;
  for (size_t k = 0; k < slots.size(); ++k)
    if (Status s = device.upload(batchDevice[k].data(), batchHost[k].data(),
                                 batchHost[k].byteSize());
        !s.ok())
      return s;
  // Loss weights: count_j / count_total over the whole global batch; this
  // replica's micro-batches.
  std::vector<float> all =
      lossWeights(spec.loss, batchViews[size_t(std::max(counted, 0))],
                  skipFirst, microBatch, spec.ignoreIndex, counted >= 0);
  lossOf.assign(size_t(m), 0.0f);
  weightOf.assign(all.begin() + size_t(dp) * size_t(m),
                  all.begin() + size_t(dp + 1) * size_t(m));
  return device.upload(deviceWeight.data(), weightOf.data(),
                       size_t(m) * sizeof(float));
}

Status Executor::step(int64_t stepIndex, double &loss) {
  if (Status s = loadBatch(*data); !s.ok())
    return s;
  if (Status s = zeroGrads(); !s.ok())
    return s;
  return runStep(spec.steps[pp], stepIndex, loss);
}

Status Executor::evaluate(double &loss) {
  evalData->rewind();
  // Not the training's compute time, bytes or memory (--stats).
  double busy = busySeconds;
  auto p2p = net.p2pBytesSent;
  auto collective = net.collectiveBytes;
  double tpBefore = tpGroup ? tpGroup->bytes : 0;
  double epBefore = epGroup ? epGroup->bytes : 0;
  evaluating = true;
  double sum = 0;
  for (int64_t b = 0; b < o.evalBatches; ++b) {
    double one = 0;
    Status s = loadBatch(*evalData);
    if (s.ok())
      s = runStep(spec.evalSteps[pp], -1, one);
    if (!s.ok()) {
      evaluating = false;
      return Status::error("evaluation: " + s.message());
    }
    sum += one;
  }
  evaluating = false;
  busySeconds = busy;
  evalP2pBytes += net.p2pBytesSent - p2p;
  evalCollectiveBytes += net.collectiveBytes - collective;
  if (tpGroup)
    evalTpBytes += tpGroup->bytes - tpBefore;
  if (epGroup)
    evalEpBytes += epGroup->bytes - epBefore;
  loss = sum / double(o.evalBatches);
  return Status::success();
}

Status Executor::runStep(StepFn fn, int64_t index, double &loss) {
  int m = spec.microBatches;
  stepIndex = index;
  StepState state{*this};
  fn(&state);
  if (!state.status.ok())
    return state.status;
  endRun();
  double t0 = now();
  // The step waited for the gathers it started (waitWeights,
  // waitSharedGather).
  for (int k : localModules)
    if (modules[size_t(k)].paramReq.valid())
      control.abort("the step ends before waiting for module " + str(k) +
                    "'s parameter all-gather");
  for (Param *p : sharedByName()) {
    if (p->ownGatherReq.valid() || p->sumReq.valid())
      control.abort("the step ends with a collective of shared parameter '" +
                    p->name + "' in flight");
    p->summed = false;
  }
  record("collective-wait", "step-end", t0, now());
  if (!sends.empty() || !postedRecvs.empty())
    return Status::error("the step ends with a transfer of boundary values "
                         "not waited for");
  // The one read-back of the step (it waits for the device).
  std::string what = evaluating ? std::string("the evaluation")
                                : "step " + std::to_string(stepIndex + 1);
  if (Status s = net.quiesce(what); !s.ok())
    return s;
  if (Status s = device.synchronize(); !s.ok())
    return Status::error(what + ": " + s.message());
  // (A tensor-parallel group's members all hold the loss; member 0 counts
  // it.)
  bool lastStage = spec.moduleRank[spec.numModules - 1] == pp;
  bool countsLoss = lastStage && tpIndex == 0;
  if (lastStage)
    if (Status s = device.download(lossOf.data(), deviceLoss.data(),
                                   size_t(m) * sizeof(float));
        !s.ok())
      return s;
  if (o.clip > 0 && !evaluating) {
    double norm = 0;
    if (Status s = device.download(&norm, deviceNorm.data(), sizeof norm);
        !s.ok())
      return s;
    if (!std::isfinite(norm))
      return Status::error("the gradient norm is not finite at step " +
                           std::to_string(stepIndex + 1));
  }
  double sum = 0;
  if (countsLoss)
    for (int j = 0; j < m; ++j)
      sum += double(lossOf[size_t(j)]) * double(weightOf[size_t(j)]);
  loss = control.allSum(sum, "the loss all-reduce did not complete",
                        "; a rank may have died");
  return Status::success();
}
