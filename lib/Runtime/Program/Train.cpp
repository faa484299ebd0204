//===- Train.cpp - the driver of a generated training program -------------===//
//
// trainMain: parse the flags, load the weights (trainable ones into owned
// f32 buffers the optimizer updates in place), open the token data, resume
// from the newest checkpoint when asked, then per step: draw a batch, run
// the train-step entry, read the loss and gradients from the arena, clip,
// update, log, checkpoint. --export writes the model with the trained
// weights at the end. docs/training.md ("Training executable").
//
//===----------------------------------------------------------------------===//

#include "Batches.h"
#include "TrainCommon.h"

#include "lamina/Runtime/Checkpoint.h"
#include "lamina/Runtime/Device.h"
#include "lamina/Runtime/Kernels.h"
#include "lamina/Runtime/OnnxExport.h"
#include "lamina/Runtime/Optimizer.h"
#include "lamina/Runtime/Program.h"
#include "lamina/Runtime/TensorIO.h"
#include "lamina/Runtime/TokenData.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

using namespace lamina::rt;

namespace {

/// Host tensors and their device copies: one DeviceBuffer per tensor, none
/// when the device is the host (the host tensor is used in place).
class Mirror {
public:
  explicit Mirror(Device &device) : device(device) {}
  /// The device view of `host` (a copy of its contents).
  Status add(const Tensor &host, Tensor &deviceView) {
    deviceView = host;
    if (device.isHost())
      return Status::success();
    buffers.emplace_back();
    if (Status s = buffers.back().upload(device, host.data, host.byteSize());
        !s.ok())
      return s;
    deviceView.data = buffers.back().data();
    return Status::success();
  }
  Status toDevice(const Tensor &host, const Tensor &deviceView) {
    return device.isHost() ? Status::success()
                           : device.upload(deviceView.data, host.data,
                                           host.byteSize());
  }
  Status toHost(const Tensor &host, const Tensor &deviceView) {
    return device.isHost() ? Status::success()
                           : device.download(host.data, deviceView.data,
                                             host.byteSize());
  }

private:
  Device &device;
  std::vector<DeviceBuffer> buffers;
};

/// The evaluation entry takes the train step's arguments and returns one
/// f32 scalar, the loss, inside its arena.
Status checkEvalEntry(const ProgramSpec &spec, const ProgramSpec &eval) {
  bool same = eval.numArgs == spec.numArgs;
  for (int i = 0; same && i < spec.numArgs; ++i) {
    const ArgSpec &a = spec.args[i], &e = eval.args[i];
    same = std::strcmp(a.name, e.name) == 0 && a.kind == e.kind &&
           a.dtype == e.dtype && a.rank == e.rank &&
           std::equal(a.shape, a.shape + a.rank, e.shape);
  }
  if (!same)
    return Status::error("the program is inconsistent: its evaluation entry "
                         "does not take the train step's arguments");
  if (eval.numOutputs != 1 || eval.outputs[0].dtype != DType::F32 ||
      numElements(eval.outputs[0].shape, eval.outputs[0].rank) != 1 ||
      eval.outputs[0].offset + sizeof(float) > eval.arenaBytes)
    return Status::error("the program is inconsistent: its evaluation entry "
                         "does not return an f32 loss in its arena");
  return Status::success();
}

Status train(const ProgramSpec &spec, const TrainSpec &ts,
             const TrainOptions &o, Device &device) {
  // The signature: inputs, trainable parameters (gradient i+1 each), the
  // parameters' low-precision copies (graph-hoist-param-casts).
  std::vector<int> inputArgs, trainArgs, copyArgs;
  for (int i = 0; i < spec.numArgs; ++i) {
    if (spec.args[i].kind == ArgKind::Input)
      inputArgs.push_back(i);
    else if (spec.args[i].kind == ArgKind::Trainable)
      trainArgs.push_back(i);
    else if (spec.args[i].kind == ArgKind::ParamCopy)
      copyArgs.push_back(i);
  }
  // Each copy's parameter (its index in trainArgs): same name and shape.
  std::vector<size_t> copyOf;
  for (int i : copyArgs) {
    const ArgSpec &c = spec.args[i];
    auto it = std::find_if(trainArgs.begin(), trainArgs.end(), [&](int t) {
      return std::strcmp(spec.args[t].name, c.name) == 0;
    });
    if (it == trainArgs.end() ||
        (c.dtype != DType::BF16 && c.dtype != DType::F16) ||
        c.rank != spec.args[*it].rank ||
        !std::equal(c.shape, c.shape + c.rank, spec.args[*it].shape))
      return Status::error("the program is inconsistent: its copy of '" +
                           std::string(c.name) +
                           "' does not match a trainable parameter");
    copyOf.push_back(size_t(it - trainArgs.begin()));
  }
  // After the loss and the gradients: the model's own outputs
  // ("output:NAME", graph-autodiff keep-outputs), for --dump-outputs.
  int kept = 0;
  while (int(trainArgs.size()) + 1 + kept < spec.numOutputs &&
         std::strncmp(spec.outputs[trainArgs.size() + 1 + kept].name,
                      "output:", 7) == 0)
    ++kept;
  if (spec.numOutputs != int(trainArgs.size()) + 1 + kept ||
      spec.numOutputs < 1)
    return Status::error("the program is not a train step: " +
                         std::to_string(spec.numOutputs) + " results for " +
                         std::to_string(trainArgs.size()) +
                         " trainable parameters");
  const OutputSpec &lossOut = spec.outputs[0];
  if (lossOut.dtype != DType::F32 || numElements(lossOut.shape, lossOut.rank) != 1)
    return Status::error("the program's loss is not an f32 scalar");
  for (size_t k = 0; k < trainArgs.size(); ++k) {
    const ArgSpec &a = spec.args[trainArgs[k]];
    const OutputSpec &g = spec.outputs[k + 1];
    if (a.dtype != DType::F32)
      return Status::error("trainable parameter '" + std::string(a.name) +
                           "' is not f32 (only f32 training is supported)");
    if (g.dtype != a.dtype || g.rank != a.rank ||
        numElements(g.shape, g.rank) != numElements(a.shape, a.rank))
      return Status::error("the program is inconsistent: gradient " +
                           std::to_string(k + 1) + " does not match '" +
                           a.name + "'");
  }
  for (int i = 0; i < spec.numOutputs; ++i) {
    const OutputSpec &out = spec.outputs[i];
    size_t bytes = size_t(numElements(out.shape, out.rank)) * dtypeSize(out.dtype);
    if (out.offset > spec.arenaBytes || bytes > spec.arenaBytes - out.offset)
      return Status::error("the program is inconsistent: output '" +
                           std::string(out.name) + "' lies outside the arena");
  }
  // The inputs every batch fills (Batches.h), in argument order; all
  // share the batch dim.
  std::vector<BatchSlot> feeds;
  int64_t batch = 0;
  for (int i : inputArgs) {
    const ArgSpec &a = spec.args[i];
    if (a.rank < 1 || (!feeds.empty() && a.shape[0] != batch))
      return Status::error("input '" + std::string(a.name) + "' is " +
                           describeType(a.dtype, a.shape, a.rank) +
                           "; every input is a batch [batch, ...] of the "
                           "same batch size");
    batch = a.shape[0];
    feeds.push_back(
        BatchSlot{a.name, a.dtype, std::vector<int64_t>(a.shape + 1,
                                                        a.shape + a.rank)});
  }
  if (feeds.empty())
    return Status::error("the model has no input to feed");
  LabelInfo labelsOf = labelInfo(ts, feeds);
  if (ts.labelsInput &&
      std::none_of(feeds.begin(), feeds.end(), [&](const BatchSlot &b) {
        return b.name == ts.labelsInput;
      }))
    return Status::error("the program has no labels input '" +
                         std::string(ts.labelsInput) + "'");
  bool skipFirst = false;
  int counted = countedSlot(feeds, labelsOf, skipFirst);
  // Throughput counts the counted input's positions (tokens), else
  // examples.
  const BatchSlot &perRow = feeds[size_t(std::max(counted, 0))];
  int64_t seq = numElements(perRow.example.data(), int(perRow.example.size()));

  // Data.
  std::unique_ptr<BatchSource> data, evalData;
  if (Status s = openBatches(o, false, feeds, labelsOf, data); !s.ok())
    return s;
  const ProgramSpec *eval = ts.eval;
  if (!o.evalData.empty()) {
    if (!eval)
      return Status::error("--eval-data: the program has no evaluation entry "
                           "(recompile it with this lamina)");
    if (Status s = checkEvalEntry(spec, *eval); !s.ok())
      return s;
    if (Status s = openBatches(o, true, feeds, labelsOf, evalData); !s.ok())
      return Status::error("--eval-data: " + s.message());
  }

  // Weights.
  std::string modelPath = modelPathOf(o, spec.modelPath);
  std::map<std::string, OwnedTensor> inits;
  if (Status s = readInitializers(modelPath, inits); !s.ok())
    return Status::error("cannot read the weights: " + s.message());
  std::vector<Tensor> values(size_t(spec.numArgs));
  // One batch of every input (inputs[k]: slot k, argument inputArgs[k]).
  std::vector<OwnedTensor> inputs(feeds.size());
  std::vector<Tensor> inputViews;
  for (size_t k = 0; k < feeds.size(); ++k) {
    const ArgSpec &a = spec.args[inputArgs[k]];
    inputs[k].allocate(a.dtype, std::vector<int64_t>(a.shape, a.shape + a.rank));
    inputViews.push_back(inputs[k].view());
    values[size_t(inputArgs[k])] = inputViews.back();
  }
  for (int i = 0; i < spec.numArgs; ++i) {
    const ArgSpec &a = spec.args[i];
    if (a.kind == ArgKind::Input)
      continue;
    if (a.kind == ArgKind::ParamCopy)
      continue; // made on the device from the parameter, below
    auto it = inits.find(a.name);
    if (Status st = checkInitializer(
            a, it == inits.end() ? nullptr : &it->second, modelPath);
        !st.ok())
      return st;
    values[size_t(i)] = Tensor{it->second.data(), a.dtype, a.rank, a.shape};
  }

  // Optimizer.
  OptimizerConfig cfg = optimizerConfig(o);
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<Tensor> params, grads;
  std::vector<NamedView> paramViews;
  for (int i : trainArgs) {
    const ArgSpec &a = spec.args[i];
    names.push_back(a.name);
    shapes.emplace_back(a.shape, a.shape + a.rank);
    paramViews.push_back(NamedView{a.name, values[size_t(i)]});
  }
  Optimizer opt;
  if (Status s = opt.init(cfg, names, shapes); !s.ok())
    return s;
  std::vector<OptimizerConfig> cfgs; // per parameter (--no-decay-vectors)
  for (const auto &shape : shapes)
    cfgs.push_back(optimizerConfigFor(o, int(shape.size())));
  LrSchedule sched;
  if (Status s = lrSchedule(o, sched); !s.ok())
    return s;
  uint64_t fingerprint =
      modelFingerprint(paramViews.data(), int(paramViews.size()));
  std::vector<NamedView> state = paramViews;
  for (NamedView &v : optimizerState(opt))
    state.push_back(v);

  // Device copies: every argument the entry reads, the optimizer state.
  Mirror mirror(device);
  std::vector<Tensor> deviceValues(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    if (spec.args[i].kind != ArgKind::ParamCopy)
      if (Status s = mirror.add(values[i], deviceValues[i]); !s.ok())
        return Status::error("argument '" + std::string(spec.args[i].name) +
                             "': " + s.message());
  // The parameters' low-precision copies live on the device only: cast
  // from the parameters once they are loaded or resumed (below), stored by
  // each optimizer update after.
  std::vector<DeviceBuffer> copyBuffers(copyArgs.size());
  std::vector<const Tensor *> copyFor(trainArgs.size(), nullptr);
  for (size_t j = 0; j < copyArgs.size(); ++j) {
    const ArgSpec &a = spec.args[copyArgs[j]];
    Tensor &t = deviceValues[size_t(copyArgs[j])];
    t = Tensor{nullptr, a.dtype, a.rank, a.shape};
    if (Status s = copyBuffers[j].allocate(device, t.byteSize()); !s.ok())
      return Status::error("the copy of '" + std::string(a.name) +
                           "': " + s.message());
    t.data = copyBuffers[j].data();
    if (copyFor[copyOf[j]])
      return Status::error("the program is inconsistent: two copies of '" +
                           std::string(a.name) + "'");
    copyFor[copyOf[j]] = &t;
  }
  const int slots = opt.numSlots();
  std::vector<Tensor> hostState, deviceState; // [param * slots + slot]
  for (size_t k = 0; k < trainArgs.size(); ++k) {
    params.push_back(deviceValues[size_t(trainArgs[k])]);
    for (int j = 0; j < slots; ++j) {
      hostState.push_back(opt.state(int(k), j));
      deviceState.emplace_back();
      if (Status s = mirror.add(hostState.back(), deviceState.back()); !s.ok())
        return s;
    }
  }
  // The host copies checkpoints and exports read, made current (toHost),
  // or made the device's state (after a resume).
  auto sync = [&](bool toHost) -> Status {
    auto one = [&](const Tensor &host, const Tensor &dev) {
      return toHost ? mirror.toHost(host, dev) : mirror.toDevice(host, dev);
    };
    for (size_t k = 0; k < trainArgs.size(); ++k)
      if (Status s = one(values[size_t(trainArgs[k])], params[k]); !s.ok())
        return s;
    for (size_t k = 0; k < hostState.size(); ++k)
      if (Status s = one(hostState[k], deviceState[k]); !s.ok())
        return s;
    return Status::success();
  };

  if (!o.checkpointDir.empty())
    if (Status s = makeDirs(o.checkpointDir); !s.ok())
      return Status::error("--checkpoint-dir: " + s.message());

  // Resume.
  int64_t step = 0;
  if (o.resume) {
    Checkpoint ck;
    bool found = false;
    std::vector<std::string> warnings;
    Status s = loadLatestCheckpoint(o.checkpointDir, fingerprint, ck, found,
                                    &warnings);
    for (const std::string &w : warnings)
      std::fprintf(stderr, "warning: %s\n", w.c_str());
    if (!s.ok())
      return s;
    if (found) {
      if (Status r = data->restore(ck.rng); !r.ok())
        return Status::error("checkpoint in '" + o.checkpointDir +
                             "': " + r.message());
      if (Status r = restoreTensors(ck, state.data(), int(state.size()));
          !r.ok())
        return r;
      step = int64_t(ck.step);
      if (Status u = sync(false); !u.ok())
        return u;
      std::printf("resumed from step %lld\n", (long long)step);
    } else {
      std::printf("no checkpoint in '%s': starting from step 0\n",
                  o.checkpointDir.c_str());
    }
  }
  // The copies from the parameters as they now are (resumed or not).
  for (size_t k = 0; k < params.size(); ++k)
    if (copyFor[k])
      if (Status s = device.cast(params[k], *copyFor[k]); !s.ok())
        return Status::error("the copy of '" +
                             std::string(spec.args[trainArgs[k]].name) +
                             "': " + s.message());
  auto save = [&](int64_t at) -> Status {
    if (Status s = sync(true); !s.ok())
      return s;
    return saveCheckpoint(o.checkpointDir, 2, uint64_t(at), fingerprint,
                          data->state(),
                          state.data(), int(state.size()));
  };

  // Arena: the train step's and the evaluation's, which run in turn.
  size_t arenaBytes = spec.arenaBytes;
  if (!o.evalData.empty())
    arenaBytes = std::max(arenaBytes, eval->arenaBytes);
  DeviceBuffer arena;
  if (Status s = arena.allocate(device, arenaBytes); !s.ok())
    return Status::error("cannot allocate the " + std::to_string(arenaBytes) +
                         "-byte arena: " + s.message());
  char *base = static_cast<char *>(arena.data());
  for (size_t k = 0; k < trainArgs.size(); ++k) {
    const OutputSpec &g = spec.outputs[k + 1];
    grads.push_back(Tensor{base + g.offset, DType::F32, g.rank, g.shape});
  }
  if (o.threads > 0)
    if (Status s = device.setThreads(int(o.threads)); !s.ok())
      return s;
  // --grad-accum N: the N batches' gradients, weighted by their labels'
  // share, sum into these (on the device) and the update reads them.
  const int64_t accum = o.gradAccum;
  std::vector<DeviceBuffer> accumBuffers;
  std::vector<Tensor> updateGrads = grads;
  std::vector<OwnedTensor> all(feeds.size()); // accum batches at once
  std::vector<Tensor> allViews;
  if (accum > 1) {
    for (size_t k = 0; k < feeds.size(); ++k) {
      std::vector<int64_t> shape = inputs[k].shape;
      shape[0] *= accum;
      all[k].allocate(inputs[k].dtype, shape);
      allViews.push_back(all[k].view());
    }
    accumBuffers.resize(grads.size());
    for (size_t k = 0; k < grads.size(); ++k) {
      if (Status s = accumBuffers[k].allocate(device, grads[k].byteSize());
          !s.ok())
        return Status::error("--grad-accum: " + s.message());
      updateGrads[k].data = accumBuffers[k].data();
    }
  }
  // A batch: drawn on the host, copied to the device.
  auto toDeviceBatch = [&]() -> Status {
    for (size_t k = 0; k < feeds.size(); ++k)
      if (Status s = mirror.toDevice(inputViews[k],
                                     deviceValues[size_t(inputArgs[k])]);
          !s.ok())
        return s;
    return Status::success();
  };
  auto nextBatch = [&]() -> Status {
    if (Status s = data->next(inputViews); !s.ok())
      return s;
    return toDeviceBatch();
  };

  // Validation: the mean loss of --eval-batches batches of --eval-data,
  // the same windows each time, no gradients, no update.
  EvalSchedule evals(o);
  auto evaluate = [&](int64_t at) -> Status {
    auto begin = std::chrono::steady_clock::now();
    evalData->rewind();
    double sum = 0;
    for (int64_t k = 0; k < o.evalBatches; ++k) {
      if (Status s = evalData->next(inputViews); !s.ok())
        return Status::error("--eval-data: " + s.message());
      if (Status s = toDeviceBatch(); !s.ok())
        return s;
      if (Status s = device.run(eval->entry, deviceValues.data(), spec.numArgs,
                                arena.data());
          !s.ok())
        return Status::error("evaluation at step " + std::to_string(at) + ": " +
                             s.message());
      float loss;
      if (Status s = device.download(&loss, base + eval->outputs[0].offset,
                                     sizeof(float));
          !s.ok())
        return s;
      sum += double(loss);
    }
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begin)
            .count();
    evals.record(at, sum / double(o.evalBatches), seconds, true);
    return Status::success();
  };

  auto start = std::chrono::steady_clock::now();
  int64_t firstStep = step, lastCkpt = step;
  bool tty = ::isatty(STDOUT_FILENO);
  if (evals.atStart(step))
    if (Status s = evaluate(0); !s.ok())
      return s;
  // One batch through the train step: its loss.
  auto runStep = [&](float &loss) -> Status {
    if (Status s = device.run(spec.entry, deviceValues.data(), spec.numArgs,
                              arena.data());
        !s.ok())
      return Status::error("step " + std::to_string(step + 1) + ": " +
                           s.message());
    return device.download(&loss, base + lossOut.offset, sizeof(float));
  };
  // --grad-accum: the N batches drawn as one of N times the rows (the
  // same windows, in order), each run in turn.
  auto accumulateStep = [&](float &loss) -> Status {
    if (Status s = data->next(allViews); !s.ok())
      return s;
    std::vector<float> weights =
        lossWeights(ts.loss, allViews[size_t(std::max(counted, 0))],
                    skipFirst, batch, ts.ignoreIndex, counted >= 0);
    double sum = 0;
    for (int64_t j = 0; j < accum; ++j) {
      for (size_t k = 0; k < feeds.size(); ++k) {
        size_t part = inputs[k].byteSize();
        std::memcpy(inputs[k].data(),
                    static_cast<const char *>(all[k].data()) + size_t(j) * part,
                    part);
      }
      if (Status s = toDeviceBatch(); !s.ok())
        return s;
      float one;
      if (Status s = runStep(one); !s.ok())
        return s;
      sum += double(weights[size_t(j)]) * double(one);
      // The sums start from the first batch's gradients (as from zeros).
      std::vector<GradientSum> sums;
      for (size_t k = 0; k < grads.size(); ++k)
        sums.push_back({static_cast<float *>(updateGrads[k].data),
                        static_cast<const float *>(grads[k].data),
                        grads[k].numElements(), j == 0, weights[size_t(j)]});
      if (Status s = device.accumulateMany(sums.data(), int(sums.size()));
          !s.ok())
        return s;
    }
    loss = float(sum);
    return Status::success();
  };
  for (; step < o.steps; ++step) {
    float loss;
    if (accum > 1) {
      if (Status s = accumulateStep(loss); !s.ok())
        return s;
    } else {
      if (Status s = nextBatch(); !s.ok())
        return s;
      if (Status s = runStep(loss); !s.ok())
        return s;
    }
    if (!std::isfinite(loss))
      return Status::error("the loss is " + std::to_string(loss) +
                           " at step " + std::to_string(step + 1));
    if (o.clip > 0) {
      double norm = 0;
      if (Status s = device.clipGradNorm(
              updateGrads.data(), int(updateGrads.size()), float(o.clip), norm);
          !s.ok())
        return s;
      if (!std::isfinite(norm))
        return Status::error("the gradient norm is not finite at step " +
                             std::to_string(step + 1));
    }
    double lr = sched.at(step);
    opt.setStepCount(opt.stepCount() + 1);
    std::vector<ParamUpdate> updates(params.size());
    for (size_t k = 0; k < params.size(); ++k)
      updates[k] = {&cfgs[k], params[k], updateGrads[k],
                    slots ? &deviceState[k * size_t(slots)] : nullptr,
                    copyFor[k]};
    if (Status s = device.optimizerUpdates(float(lr), opt.stepCount(),
                                           updates.data(), int(updates.size()));
        !s.ok())
      return s;
    int64_t done = step + 1;
    if (done % o.logEvery == 0 || done == o.steps || done == 1) {
      double elapsed = std::chrono::duration<double>(
                           std::chrono::steady_clock::now() - start)
                           .count();
      // Throughput and the estimate count training time only.
      double training = elapsed - evals.seconds;
      double perStep = training / double(done - firstStep);
      double tokensPerSec =
          training > 0
              ? double(accum * batch * seq * (done - firstStep)) / training
              : 0;
      std::printf("step %lld loss %.6f lr %.6g tokens/s %.0f elapsed %.1fs "
                  "eta %.1fs\n",
                  (long long)done, double(loss), lr, tokensPerSec, elapsed,
                  perStep * double(o.steps - done));
      std::fflush(stdout);
    } else if (tty) {
      std::fprintf(stderr, "\rstep %lld/%lld loss %.4f ", (long long)done,
                   (long long)o.steps, double(loss));
    }
    if (evals.after(done))
      if (Status s = evaluate(done); !s.ok())
        return s;
    if (o.checkpointEvery > 0 && done % o.checkpointEvery == 0) {
      if (Status s = save(done); !s.ok())
        return s;
      lastCkpt = done;
    }
  }
  if (evals.atEnd(step))
    if (Status s = evaluate(step); !s.ok())
      return s;
  if (!o.checkpointDir.empty() && lastCkpt != step)
    if (Status s = save(step); !s.ok())
      return s;
  if (!o.dumpOutputs.empty()) {
    // One more batch with the trained weights, no update: its token ids and
    // the model's outputs, to check an export against (docs/training.md).
    if (kept == 0)
      return Status::error("--dump-outputs: the program keeps no model "
                           "outputs");
    if (Status s = makeDirs(o.dumpOutputs); !s.ok())
      return s;
    if (Status s = nextBatch(); !s.ok())
      return s;
    if (Status s = device.run(spec.entry, deviceValues.data(), spec.numArgs,
                                  arena.data());
        !s.ok())
      return s;
    std::string dir = o.dumpOutputs + "/";
    for (size_t k = 0; k < feeds.size(); ++k)
      if (Status s = writeNpy(dir + outputFileName(feeds[k].name.c_str()),
                              inputViews[k]);
          !s.ok())
        return s;
    for (int i = spec.numOutputs - kept; i < spec.numOutputs; ++i) {
      const OutputSpec &out = spec.outputs[i];
      OwnedTensor t;
      t.allocate(out.dtype, std::vector<int64_t>(out.shape, out.shape + out.rank));
      if (Status s = device.download(t.data(), base + out.offset, t.byteSize());
          !s.ok())
        return s;
      // Logits a mixed-precision step stores in bf16/f16
      // (graph-fuse-epilogues) are written as the model's f32.
      if (out.dtype == DType::BF16 || out.dtype == DType::F16) {
        OwnedTensor wide;
        wide.allocate(DType::F32, t.shape);
        if (Status s = cast(t.view(), wide.view()); !s.ok())
          return s;
        t = std::move(wide);
      }
      if (Status s = writeNpy(dir + outputFileName(out.name + 7), t.view());
          !s.ok())
        return s;
    }
    std::printf("wrote the next batch's inputs and outputs to %s\n",
                o.dumpOutputs.c_str());
  }
  if (!o.exportPath.empty()) {
    if (Status s = sync(true); !s.ok())
      return s;
    if (Status s = exportOnnx(modelPath, o.exportPath, paramViews.data(),
                              int(paramViews.size()));
        !s.ok())
      return Status::error("--export: " + s.message());
    std::printf("exported the trained model to %s\n", o.exportPath.c_str());
  }
  return Status::success();
}

} // namespace

int lamina::rt::trainMain(int argc, char **argv, const ProgramSpec &spec,
                          const TrainSpec &train) {
  return trainMain(argc, argv, spec, train, hostDevice());
}

int lamina::rt::trainMain(int argc, char **argv, const ProgramSpec &spec,
                          const TrainSpec &train, Device &device) {
  TrainOptions options;
  if (std::string err = parseTrainOptions(argc, argv, options, false);
      !err.empty()) {
    std::fprintf(stderr, "error: %s\n%s", err.c_str(),
                 trainUsage(false).c_str());
    return 2;
  }
  if (options.help) {
    std::fputs(trainUsage(false).c_str(), stdout);
    return 0;
  }
  if (options.kernels)
    return printKernels(device, options.threads);
  if (Status s = ::train(spec, train, options, device); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}
