//===- Executor.cpp - one rank of a distributed training step -------------===//
//
// Executor.h. Setup (spec checks, communicators, weights, optimizer) and the
// action interpreter.
//
//===----------------------------------------------------------------------===//

#include "Executor.h"

#include "lamina/Runtime/OnnxExport.h"
#include "lamina/Schedule/Schedule.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <set>

using namespace lamina::rt;
using namespace lamina::rt::dist;
using lamina::schedule::ActionKind;
using lamina::schedule::Payload;

Buffer Buffer::make(size_t bytes) {
  Buffer b;
  size_t rounded = (bytes + 63) / 64 * 64;
  b.data.reset(static_cast<char *>(std::aligned_alloc(64, rounded ? rounded : 64)));
  b.bytes = bytes;
  return b;
}

void Packed::add(DType dtype, int rank, const int64_t *shape) {
  size_t n = size_t(numElements(shape, rank)) * dtypeSize(dtype);
  items.push_back({dtype, rank, shape, bytes, n});
  bytes += (n + 63) / 64 * 64;
}

namespace {
std::string str(int v) { return std::to_string(v); }

/// "F3.1", "Sa2.0>1", "AG4", ... (Schedule.h).
std::string actionName(const ActionSpec &a) {
  return lamina::schedule::formatAction(lamina::schedule::Action{
      ActionKind(a.kind), Payload(a.payload), a.module, a.microBatch, a.peer});
}
} // namespace

//===----------------------------------------------------------------------===//
// Setup
//===----------------------------------------------------------------------===//

Status Executor::setup() {
  rank = comm.rank();
  pp = rank % spec.pp;
  dp = rank / spec.pp;
  zero = spec.dp > 1 ? spec.zero : 0;
  MPI_Comm_split(MPI_COMM_WORLD, pp, dp, &dpComm);
  modelPath = modelPathOf(o, spec.modelPath);
  if (spec.numModules < 1 || spec.microBatches < 1 || spec.pp < 1 ||
      spec.dp < 1 || spec.zero < 0 || spec.zero > 3)
    return Status::error("the program's distributed configuration is invalid");

  // The token input fixes the micro-batch and sequence length.
  const ArgSpec *tok = nullptr;
  for (int k = 0; k < spec.numModules && !tok; ++k) {
    const FunctionSpec &f = spec.modules[k].forward;
    for (int i = 0; i < f.numArgs; ++i) {
      const ArgSpec &a = f.args[i];
      if (a.kind != ArgKind::Input)
        continue;
      bool isLabels = spec.labelsInput && !std::strcmp(a.name, spec.labelsInput);
      bool isTokens = spec.tokensInput ? !std::strcmp(a.name, spec.tokensInput)
                                       : !isLabels;
      if (isTokens) {
        tok = &a;
        break;
      }
    }
  }
  if (!tok)
    return Status::error("the program's modules read no token input");
  if (tok->rank != 2 || (tok->dtype != DType::I64 && tok->dtype != DType::I32))
    return Status::error("input '" + std::string(tok->name) + "' is " +
                         describeType(tok->dtype, tok->shape, tok->rank) +
                         "; token batches are [batch, seq] of i64 or i32");
  tokenType = tok->dtype;
  microBatch = tok->shape[0];
  seq = tok->shape[1];
  globalBatch = microBatch * spec.microBatches * spec.dp;
  vocab = tokenVocab(spec.vocab, tokenType);
  if (Status s = openTokenData(o, data, seq, vocab); !s.ok())
    return s;
  tokens.allocate(tokenType, {globalBatch, seq});
  labels.allocate(tokenType, {globalBatch, seq});
  rng = SplitMix64(uint64_t(o.seed));

  int tagUb = 32767, *ub = nullptr, flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  if (flag && ub)
    tagUb = *ub;
  if (int64_t(spec.microBatches) * spec.numModules * 2 > tagUb)
    return Status::error("too many modules and micro-batches for MPI's tag "
                         "range (" + std::to_string(tagUb) + ")");
  if (Status s = setupModules(); !s.ok())
    return s;
  if (Status s = setupParams(); !s.ok())
    return s;
  setupSegments();
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  for (const Segment &seg : segments) {
    names.push_back(seg.name);
    shapes.push_back(seg.shape);
  }
  if (Status s = opt.init(optimizerConfig(o), names, shapes); !s.ok())
    return s;
  return lrSchedule(o, sched);
}

Status Executor::setupModules() {
  int L = spec.numModules;
  modules.resize(size_t(L));
  actLayout.resize(size_t(L));
  gradLayout.resize(size_t(L));
  for (int k = 0; k < L; ++k) {
    const ModuleSpec &m = spec.modules[k];
    std::string where = "module " + str(k) + " (" + (m.name ? m.name : "") + ")";
    modules[size_t(k)].index = k;
    int numRes = m.numResiduals;
    if (m.forward.numOutputs != m.numOut + numRes ||
        m.backward.numArgs != m.forward.numArgs + numRes + m.numOut ||
        (k == 0) != (m.numIn == 0) ||
        (k == L - 1 && m.numOut != 1))
      return Status::error("the program is inconsistent: " + where +
                           "'s functions do not match its boundaries");
    if (spec.moduleRank[k] < 0 || spec.moduleRank[k] >= spec.pp)
      return Status::error("the program is inconsistent: " + where +
                           " is placed on pipeline rank " +
                           str(spec.moduleRank[k]));
    if (k < L - 1) {
      for (int i = 0; i < m.numOut; ++i) {
        const OutputSpec &out = m.forward.outputs[i];
        actLayout[size_t(k)].add(out.dtype, out.rank, out.shape);
        const ArgSpec &cot =
            m.backward.args[m.forward.numArgs + numRes + i];
        gradLayout[size_t(k)].add(cot.dtype, cot.rank, cot.shape);
      }
    } else {
      const OutputSpec &loss = m.forward.outputs[0];
      if (loss.dtype != DType::F32 || numElements(loss.shape, loss.rank) != 1)
        return Status::error("the program's loss is not an f32 scalar");
    }
    if (spec.moduleRank[k] != pp)
      continue;
    localModules.push_back(k);
    for (const FunctionSpec *f : {&m.forward, &m.backward}) {
      arenaBytes = std::max(arenaBytes, f->arenaBytes);
      for (int i = 0; i < f->numOutputs; ++i) {
        const OutputSpec &out = f->outputs[i];
        size_t bytes = size_t(numElements(out.shape, out.rank)) *
                       dtypeSize(out.dtype);
        if (out.offset > f->arenaBytes || bytes > f->arenaBytes - out.offset)
          return Status::error("the program is inconsistent: output '" +
                               std::string(out.name) + "' of " + f->name +
                               " lies outside its arena");
      }
    }
    int trainables = 0;
    for (int i = 0; i < m.forward.numArgs; ++i)
      trainables += m.forward.args[i].kind == ArgKind::Trainable;
    if (m.backward.numOutputs != m.numIn + trainables)
      return Status::error("the program is inconsistent: " + where +
                           "'s backward has " + str(m.backward.numOutputs) +
                           " results for " + str(m.numIn) + " boundaries and " +
                           str(trainables) + " trainable parameters");
  }
  if (localModules.empty())
    return Status::error("pipeline rank " + str(pp) + " holds no module");
  arena = Buffer::make(arenaBytes);
  if (!arena.get())
    return Status::error("cannot allocate the " + std::to_string(arenaBytes) +
                         "-byte arena");
  for (int k : localModules) {
    const ModuleSpec &m = spec.modules[k];
    Packed res;
    for (int i = 0; i < m.numResiduals; ++i) {
      const OutputSpec &out = m.forward.outputs[m.numOut + i];
      res.add(out.dtype, out.rank, out.shape);
    }
    resLayout.emplace(k, std::move(res));
  }
  return Status::success();
}

Status Executor::setupParams() {
  // Which modules read each initializer (every module, not only local).
  std::map<std::string, std::vector<int>> readers;
  for (int k = 0; k < spec.numModules; ++k) {
    const FunctionSpec &f = spec.modules[k].forward;
    for (int i = 0; i < f.numArgs; ++i) {
      const ArgSpec &a = f.args[i];
      if (a.kind != ArgKind::Trainable && a.kind != ArgKind::Constant)
        continue;
      std::vector<int> &r = readers[a.name];
      if (r.empty() || r.back() != k)
        r.push_back(k);
    }
  }
  std::set<std::string> wanted;
  for (int k : localModules) {
    const FunctionSpec &f = spec.modules[k].forward;
    for (int i = 0; i < f.numArgs; ++i) {
      const ArgSpec &a = f.args[i];
      if (a.kind != ArgKind::Trainable && a.kind != ArgKind::Constant)
        continue;
      wanted.insert(a.name);
      auto [it, fresh] = paramIndex.emplace(a.name, int(params.size()));
      if (!fresh) {
        const Param &p = params[size_t(it->second)];
        if (p.arg->kind != a.kind || p.arg->dtype != a.dtype ||
            p.arg->rank != a.rank ||
            !std::equal(a.shape, a.shape + a.rank, p.arg->shape))
          return Status::error("the program is inconsistent: modules read '" +
                               std::string(a.name) + "' differently");
        continue;
      }
      Param p;
      p.name = a.name;
      p.arg = &a;
      p.trainable = a.kind == ArgKind::Trainable;
      p.shared = readers[a.name].size() > 1;
      p.size = numElements(a.shape, a.rank);
      if (p.trainable && a.dtype != DType::F32)
        return Status::error("trainable parameter '" + p.name +
                             "' is not f32 (only f32 training is supported)");
      if (p.trainable && !p.shared) {
        ModuleState &M = modules[size_t(k)];
        p.module = k;
        p.flatOffset = M.size;
        M.size += p.size;
        M.params.push_back(int(params.size()));
      }
      params.push_back(std::move(p));
    }
  }
  std::map<std::string, OwnedTensor> inits;
  if (Status s = readInitializers(modelPath, inits, &wanted); !s.ok())
    return Status::error("cannot read the weights: " + s.message());
  for (Param &p : params) {
    auto it = inits.find(p.name);
    if (Status s = checkInitializer(
            *p.arg, it == inits.end() ? nullptr : &it->second, modelPath);
        !s.ok())
      return s;
  }
  // Module buffers, by sharding level.
  int d = spec.dp;
  for (int k : localModules) {
    ModuleState &M = modules[size_t(k)];
    splitCounts(M.size, d, M.counts, M.offsets);
    std::vector<float> full(size_t(M.size));
    for (int pi : M.params) {
      const Param &p = params[size_t(pi)];
      std::memcpy(full.data() + p.flatOffset, inits[p.name].data(),
                  size_t(p.size) * sizeof(float));
    }
    if (zero == 3) {
      M.shardParam.assign(full.begin() + M.offsets[size_t(dp)],
                          full.begin() + M.offsets[size_t(dp)] +
                              M.counts[size_t(dp)]);
      M.shardGrad.assign(M.shardParam.size(), 0.0f);
    } else {
      M.flatParam = std::move(full);
      M.flatGrad.assign(size_t(M.size), 0.0f);
      if (zero > 0)
        M.shardGrad.assign(size_t(M.counts[size_t(dp)]), 0.0f);
    }
  }
  for (Param &p : params) {
    OwnedTensor &t = inits[p.name];
    if (!p.trainable) {
      p.constant = std::move(t);
    } else if (p.shared) {
      p.own.assign(static_cast<float *>(t.data()),
                   static_cast<float *>(t.data()) + p.size);
      p.ownGrad.assign(size_t(p.size), 0.0f);
    }
  }
  // One communicator per distinct set of pipeline ranks holding a shared
  // trainable parameter (every rank takes part in every split, in order).
  std::map<std::vector<int>, MPI_Comm> holderComms;
  std::map<std::string, std::vector<int>> sharedSets;
  for (auto &[name, mods] : readers) {
    if (mods.size() < 2)
      continue;
    bool trainable = false;
    for (int k = 0; k < spec.numModules && !trainable; ++k) {
      const FunctionSpec &f = spec.modules[k].forward;
      for (int i = 0; i < f.numArgs; ++i)
        if (f.args[i].kind == ArgKind::Trainable && name == f.args[i].name)
          trainable = true;
    }
    if (!trainable)
      continue;
    std::set<int> ranks;
    for (int k : mods)
      ranks.insert(spec.moduleRank[k]);
    sharedSets[name] = std::vector<int>(ranks.begin(), ranks.end());
    holderComms.emplace(sharedSets[name], MPI_COMM_NULL);
  }
  for (auto &[set, c] : holderComms) {
    bool member = std::binary_search(set.begin(), set.end(), pp);
    MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, rank, &c);
  }
  for (Param &p : params)
    if (p.trainable && p.shared) {
      const std::vector<int> &set = sharedSets[p.name];
      p.holders = holderComms[set];
      p.countsForNorm = dp == 0 && pp == set.front();
    }
  return Status::success();
}

void Executor::setupSegments() {
  for (int k : localModules) {
    ModuleState &M = modules[size_t(k)];
    int64_t lo = zero > 0 ? M.offsets[size_t(dp)] : 0;
    int64_t hi = zero > 0 ? lo + M.counts[size_t(dp)] : M.size;
    M.shardLen = hi - lo;
    for (int pi : M.params) {
      const Param &p = params[size_t(pi)];
      int64_t a = std::max(lo, p.flatOffset),
              b = std::min(hi, p.flatOffset + p.size);
      if (a >= b)
        continue;
      Segment seg;
      if (a == p.flatOffset && b == p.flatOffset + p.size) {
        seg.name = p.name;
        seg.shape.assign(p.arg->shape, p.arg->shape + p.arg->rank);
      } else {
        seg.name = p.name + "[" + std::to_string(a - p.flatOffset) + ":" +
                   std::to_string(b - p.flatOffset) + "]";
        seg.shape = {b - a};
      }
      if (zero == 0) {
        seg.param = M.flatParam.data() + a;
        seg.grad = M.flatGrad.data() + a;
      } else {
        seg.param = (zero == 3 ? M.shardParam.data() - lo
                               : M.flatParam.data()) + a;
        seg.grad = M.shardGrad.data() + (a - lo);
      }
      seg.countsForNorm = zero > 0 || dp == 0;
      segments.push_back(std::move(seg));
    }
  }
  for (Param &p : params)
    if (p.trainable && p.shared) {
      Segment seg;
      seg.name = p.name;
      seg.shape.assign(p.arg->shape, p.arg->shape + p.arg->rank);
      seg.param = p.own.data();
      seg.grad = p.ownGrad.data();
      seg.countsForNorm = p.countsForNorm;
      segments.push_back(std::move(seg));
    }
}

std::vector<NamedView> Executor::stateViews() {
  std::vector<NamedView> views;
  for (int k : localModules) {
    ModuleState &M = modules[size_t(k)];
    if (zero == 3) {
      views.push_back({"shard." + str(k),
                       Tensor{M.shardParam.data(), DType::F32, 1, &M.shardLen}});
      continue;
    }
    for (int pi : M.params) {
      const Param &p = params[size_t(pi)];
      views.push_back({p.name, Tensor{M.flatParam.data() + p.flatOffset,
                                      DType::F32, p.arg->rank, p.arg->shape}});
    }
  }
  for (Param &p : params)
    if (p.trainable && p.shared)
      views.push_back(
          {p.name, Tensor{p.own.data(), DType::F32, p.arg->rank, p.arg->shape}});
  for (NamedView &v : optimizerState(opt))
    views.push_back(v);
  return views;
}

//===----------------------------------------------------------------------===//
// The step
//===----------------------------------------------------------------------===//

void Executor::bindForwardArgs(int k, int j, std::vector<Tensor> &args) {
  const FunctionSpec &f = spec.modules[k].forward;
  args.clear();
  int boundary = 0;
  for (int i = 0; i < f.numArgs; ++i) {
    const ArgSpec &a = f.args[i];
    switch (a.kind) {
    case ArgKind::Boundary: {
      auto it = acts.find({k - 1, j});
      if (it == acts.end())
        comm.abort("the action list runs module " + str(k) + ", micro-batch " +
                   str(j) + " before its input arrived");
      args.push_back(actLayout[size_t(k - 1)].view(it->second, size_t(boundary++)));
      break;
    }
    case ArgKind::Input: {
      bool isLabels = spec.labelsInput && !std::strcmp(a.name, spec.labelsInput);
      const OwnedTensor &src = isLabels ? labels : tokens;
      int64_t row = (int64_t(dp) * spec.microBatches + j) * microBatch;
      char *base = static_cast<char *>(const_cast<void *>(src.data()));
      args.push_back(Tensor{base + size_t(row * seq) * dtypeSize(tokenType),
                            a.dtype, a.rank, a.shape});
      break;
    }
    case ArgKind::Trainable: {
      Param &p = params[size_t(paramIndex.at(a.name))];
      float *v;
      if (p.shared)
        v = p.own.data();
      else {
        ModuleState &M = modules[size_t(p.module)];
        v = (zero == 3 ? M.active.data() : M.flatParam.data()) + p.flatOffset;
      }
      args.push_back(Tensor{v, DType::F32, a.rank, a.shape});
      break;
    }
    case ArgKind::Constant: {
      Param &p = params[size_t(paramIndex.at(a.name))];
      args.push_back(Tensor{p.constant.data(), a.dtype, a.rank, a.shape});
      break;
    }
    default:
      comm.abort("the program is inconsistent: forward " + std::string(f.name) +
                 " has an argument of kind " + str(int(a.kind)));
    }
  }
}

void Executor::runFunction(const FunctionSpec &f, std::vector<Tensor> &args,
                           const char *cat, std::string name) {
  double t0 = now();
  f.entry(args.data(), arena.get());
  double t1 = now();
  busySeconds += t1 - t0;
  record(cat, std::move(name), t0, t1);
}

void Executor::forward(int k, int j) {
  const ModuleSpec &m = spec.modules[k];
  std::vector<Tensor> args;
  bindForwardArgs(k, j, args);
  runFunction(m.forward, args, "forward", "F" + str(k) + "." + str(j));
  const char *base = arena.get();
  if (k == spec.numModules - 1) {
    std::memcpy(&lossOf[size_t(j)], base + m.forward.outputs[0].offset,
                sizeof(float));
  } else {
    const Packed &lay = actLayout[size_t(k)];
    Buffer b = Buffer::make(lay.bytes);
    for (int i = 0; i < m.numOut; ++i)
      std::memcpy(b.get() + lay.items[size_t(i)].offset,
                  base + m.forward.outputs[i].offset, lay.items[size_t(i)].bytes);
    hold(b);
    acts[{k, j}] = std::move(b);
  }
  if (m.numResiduals > 0) {
    const Packed &lay = resLayout.at(k);
    Buffer b = Buffer::make(lay.bytes);
    for (int i = 0; i < m.numResiduals; ++i)
      std::memcpy(b.get() + lay.items[size_t(i)].offset,
                  base + m.forward.outputs[m.numOut + i].offset,
                  lay.items[size_t(i)].bytes);
    hold(b);
    residuals[{k, j}] = std::move(b);
  }
}

void Executor::backward(int k, int j) {
  const ModuleSpec &m = spec.modules[k];
  bool last = k == spec.numModules - 1;
  std::vector<Tensor> args;
  bindForwardArgs(k, j, args);
  auto res = residuals.find({k, j});
  if (m.numResiduals > 0) {
    if (res == residuals.end())
      comm.abort("the action list runs the backward of module " + str(k) +
                 ", micro-batch " + str(j) + " before its forward");
    for (int i = 0; i < m.numResiduals; ++i)
      args.push_back(resLayout.at(k).view(res->second, size_t(i)));
  }
  float weight = weightOf[size_t(j)];
  auto cot = grads.find({k, j});
  if (last) {
    const ArgSpec &a = m.backward.args[m.backward.numArgs - 1];
    args.push_back(Tensor{&weight, DType::F32, a.rank, a.shape});
  } else {
    if (cot == grads.end())
      comm.abort("the action list runs the backward of module " + str(k) +
                 ", micro-batch " + str(j) + " before its gradient arrived");
    for (int i = 0; i < m.numOut; ++i)
      args.push_back(gradLayout[size_t(k)].view(cot->second, size_t(i)));
  }
  runFunction(m.backward, args, "backward", "B" + str(k) + "." + str(j));
  const char *base = arena.get();
  if (k > 0) {
    const Packed &lay = gradLayout[size_t(k - 1)];
    Buffer b = Buffer::make(lay.bytes);
    for (int i = 0; i < m.numIn; ++i)
      std::memcpy(b.get() + lay.items[size_t(i)].offset,
                  base + m.backward.outputs[i].offset,
                  lay.items[size_t(i)].bytes);
    hold(b);
    grads[{k - 1, j}] = std::move(b);
  }
  // Parameter gradients accumulate.
  int out = m.numIn;
  for (int i = 0; i < m.forward.numArgs; ++i) {
    const ArgSpec &a = m.forward.args[i];
    if (a.kind != ArgKind::Trainable)
      continue;
    Param &p = params[size_t(paramIndex.at(a.name))];
    const float *g =
        reinterpret_cast<const float *>(base + m.backward.outputs[out++].offset);
    float *dst;
    if (p.shared)
      dst = p.ownGrad.data();
    else {
      ModuleState &M = modules[size_t(p.module)];
      if (M.flatGrad.empty())
        M.flatGrad.assign(size_t(M.size), 0.0f);
      dst = M.flatGrad.data() + p.flatOffset;
    }
    for (int64_t e = 0; e < p.size; ++e)
      dst[e] += g[e];
  }
  auto drop = [&](std::map<std::pair<int, int>, Buffer> &map,
                  std::pair<int, int> key) {
    auto it = map.find(key);
    if (it != map.end()) {
      release(it->second);
      map.erase(it);
    }
  };
  drop(residuals, {k, j});
  drop(acts, {k - 1, j});
  if (!last)
    drop(grads, {k, j});
}

void Executor::endRun() {
  if (runModule >= 0 && zero == 3) {
    ModuleState &M = modules[size_t(runModule)];
    std::vector<float>().swap(M.active);
  }
  runModule = -1;
}

void Executor::ensureRun(int k, bool bwd) {
  if (runModule == k && runBackward == bwd)
    return;
  endRun();
  runModule = k;
  runBackward = bwd;
  if (zero != 3)
    return;
  ModuleState &M = modules[size_t(k)];
  if (M.gathers.empty())
    comm.abort("the action list runs module " + str(k) +
               " without gathering its weights first");
  double t0 = now();
  comm.waitOrAbort(M.gathers.front().req,
                   "the all-gather of module " + str(k) +
                       "'s weights did not complete",
                   "; a rank of data-parallel group " + str(pp) +
                       " may have died");
  record("collective-wait", "AG" + str(k), t0, now());
  M.active = std::move(M.gathers.front().full);
  M.gathers.pop_front();
}

static std::string payloadWord(const ActionSpec &a) {
  return Payload(a.payload) == Payload::Activation ? "activation"
                                                   : "activation gradient";
}

static int tagOf(const ActionSpec &a, int numModules) {
  return (a.microBatch * numModules + a.module) * 2 +
         (Payload(a.payload) == Payload::ActivationGrad ? 1 : 0);
}

void Executor::send(const ActionSpec &a) {
  bool act = Payload(a.payload) == Payload::Activation;
  auto &map = act ? acts : grads;
  auto it = map.find({a.module, a.microBatch});
  if (it == map.end())
    comm.abort("the action list sends the " + payloadWord(a) + " of boundary " +
               str(a.module) + ", micro-batch " + str(a.microBatch) +
               " before computing it");
  SendRecord r{std::move(it->second), MPI_REQUEST_NULL,
               "the send of the " + payloadWord(a) + " of boundary " +
                   str(a.module) + ", micro-batch " + str(a.microBatch) +
                   " to rank " + str(a.peer) + " did not complete"};
  map.erase(it);
  const Packed &lay = (act ? actLayout : gradLayout)[size_t(a.module)];
  r.req = comm.isend(r.buffer.get(), lay.wireBytes(), a.peer,
                     tagOf(a, spec.numModules));
  r.peer = a.peer;
  sends.push_back(std::move(r));
}

void Executor::recv(const ActionSpec &a) {
  bool act = Payload(a.payload) == Payload::Activation;
  const Packed &lay = (act ? actLayout : gradLayout)[size_t(a.module)];
  Buffer b = Buffer::make(lay.bytes);
  double t0 = now();
  MPI_Request r =
      comm.irecv(b.get(), lay.wireBytes(), a.peer, tagOf(a, spec.numModules));
  comm.waitOrAbort(r,
                   "no " + payloadWord(a) + " of boundary " + str(a.module) +
                       ", micro-batch " + str(a.microBatch) + " from rank " +
                       str(a.peer),
                   "; rank " + str(a.peer) + " may have died");
  record("recv-wait", actionName(a), t0, now());
  hold(b);
  (act ? acts : grads)[{a.module, a.microBatch}] = std::move(b);
}

void Executor::collective(const ActionSpec &a) {
  ModuleState &M = modules[size_t(a.module)];
  if (spec.moduleRank[a.module] != pp)
    comm.abort("the action list has a collective of module " + str(a.module) +
               ", which pipeline rank " + str(pp) + " does not hold");
  switch (ActionKind(a.kind)) {
  case ActionKind::AllReduce:
    M.gradReq = comm.iallreduce(M.flatGrad.data(), M.size, dpComm);
    break;
  case ActionKind::ReduceScatter:
    if (zero == 3) {
      ModuleState::Scatter s;
      s.full = std::move(M.flatGrad);
      M.flatGrad.clear();
      if (s.full.empty())
        s.full.assign(size_t(M.size), 0.0f);
      s.part.assign(size_t(M.counts[size_t(dp)]), 0.0f);
      s.req = comm.ireduceScatter(s.full.data(), s.part.data(), M.counts, dpComm);
      M.scatters.push_back(std::move(s));
    } else {
      M.gradReq = comm.ireduceScatter(M.flatGrad.data(), M.shardGrad.data(),
                                      M.counts, dpComm);
    }
    break;
  case ActionKind::AllGather:
    if (zero == 3) {
      ModuleState::Gather g;
      g.full.assign(size_t(M.size), 0.0f);
      std::copy(M.shardParam.begin(), M.shardParam.end(),
                g.full.begin() + M.offsets[size_t(dp)]);
      g.req = comm.iallgather(g.full.data(), M.counts, M.offsets, dpComm);
      M.gathers.push_back(std::move(g));
    } else {
      M.paramReq =
          comm.iallgather(M.flatParam.data(), M.counts, M.offsets, dpComm);
    }
    break;
  default:
    break;
  }
}

void Executor::progressSends(bool wait) {
  size_t keep = 0;
  for (size_t i = 0; i < sends.size(); ++i) {
    SendRecord &r = sends[i];
    bool done;
    if (wait) {
      comm.waitOrAbort(r.req, r.what,
                       "; rank " + str(r.peer) + " may have died");
      done = true;
    } else {
      int flag = 0;
      MPI_Test(&r.req, &flag, MPI_STATUS_IGNORE);
      done = flag != 0;
    }
    if (done)
      release(r.buffer);
    else
      sends[keep++] = std::move(r);
  }
  sends.resize(keep);
}

Status Executor::optimizerStep(int64_t stepIndex) {
  endRun();
  double t0 = now();
  std::string group = "; a rank of data-parallel group " + str(pp) +
                      " may have died";
  for (int k : localModules) {
    ModuleState &M = modules[size_t(k)];
    if (M.gradReq != MPI_REQUEST_NULL)
      comm.waitOrAbort(M.gradReq,
                       "the reduction of module " + str(k) +
                           "'s gradients did not complete",
                       group);
    for (ModuleState::Scatter &s : M.scatters) {
      comm.waitOrAbort(s.req,
                       "the reduce-scatter of module " + str(k) +
                           "'s gradients did not complete",
                       group);
      for (size_t e = 0; e < s.part.size(); ++e)
        M.shardGrad[e] += s.part[e];
    }
    M.scatters.clear();
    if (zero == 3)
      std::vector<float>().swap(M.flatGrad);
  }
  // Shared parameters: one sum over all holders (sorted by name: params
  // were created in module order, so order them explicitly).
  std::vector<Param *> shared;
  for (Param &p : params)
    if (p.trainable && p.shared && commSize(p.holders) > 1)
      shared.push_back(&p);
  std::sort(shared.begin(), shared.end(),
            [](Param *a, Param *b) { return a->name < b->name; });
  std::vector<MPI_Request> reqs;
  for (Param *p : shared)
    reqs.push_back(comm.iallreduce(p->ownGrad.data(), p->size, p->holders));
  for (size_t i = 0; i < reqs.size(); ++i)
    comm.waitOrAbort(reqs[i],
                     "the gradient sum of shared parameter '" + shared[i]->name +
                         "' did not complete",
                     "; a rank holding it may have died");
  record("collective-wait", "grad-sync", t0, now());
  double t1 = now();
  if (o.clip > 0) {
    double sumSq = 0;
    for (const Segment &s : segments) {
      if (!s.countsForNorm)
        continue;
      for (int64_t e = 0, n = numElements(s.shape.data(), int(s.shape.size()));
           e < n; ++e)
        sumSq += double(s.grad[e]) * double(s.grad[e]);
    }
    MPI_Request r = comm.iallreduceDouble(&sumSq, 1, MPI_COMM_WORLD);
    comm.waitOrAbort(r, "the gradient norm's all-reduce did not complete",
                     "; a rank may have died");
    double norm = std::sqrt(sumSq);
    if (!std::isfinite(norm))
      return Status::error("the gradient norm is not finite at step " +
                           std::to_string(stepIndex + 1));
    double coef = o.clip / (norm + 1e-6);
    if (coef < 1.0) {
      const float c = float(coef);
      for (const Segment &s : segments)
        for (int64_t e = 0, n = numElements(s.shape.data(), int(s.shape.size()));
             e < n; ++e)
          s.grad[e] *= c;
    }
  }
  std::vector<Tensor> ps, gs;
  for (const Segment &s : segments) {
    ps.push_back(Tensor{s.param, DType::F32, int(s.shape.size()), s.shape.data()});
    gs.push_back(Tensor{s.grad, DType::F32, int(s.shape.size()), s.shape.data()});
  }
  Status s = opt.step(float(sched.at(stepIndex)), ps.data(), gs.data(),
                      int(ps.size()));
  double t2 = now();
  busySeconds += t2 - t1;
  record("optimizer", "OPT", t1, t2);
  return s;
}

void Executor::zeroGrads() {
  for (int k : localModules) {
    ModuleState &M = modules[size_t(k)];
    std::fill(M.flatGrad.begin(), M.flatGrad.end(), 0.0f);
    std::fill(M.shardGrad.begin(), M.shardGrad.end(), 0.0f);
  }
  for (Param &p : params)
    std::fill(p.ownGrad.begin(), p.ownGrad.end(), 0.0f);
}

Status Executor::step(int64_t stepIndex, double &loss) {
  int m = spec.microBatches;
  if (Status s = data.sample(rng, vocab, tokens.view(), labels.view()); !s.ok())
    return s;
  // Loss weights: count_j / count_total over the whole global batch.
  lossOf.assign(size_t(m), 0.0f);
  weightOf.assign(size_t(m), 0.0f);
  if (spec.loss == LossKind::Output) {
    for (int j = 0; j < m; ++j)
      weightOf[size_t(j)] = float(1.0 / double(m * spec.dp));
  } else {
    bool causal = spec.loss == LossKind::CausalLM;
    const OwnedTensor &lab = causal ? tokens : labels;
    std::vector<int64_t> counts(size_t(m) * size_t(spec.dp), 0);
    int64_t total = 0;
    for (int64_t row = 0; row < globalBatch; ++row) {
      int64_t c = 0;
      for (int64_t col = causal ? 1 : 0; col < seq; ++col) {
        int64_t v = tokenType == DType::I64
                        ? static_cast<const int64_t *>(lab.data())[row * seq + col]
                        : static_cast<const int32_t *>(lab.data())[row * seq + col];
        c += v != spec.ignoreIndex;
      }
      counts[size_t(row / microBatch)] += c;
      total += c;
    }
    for (int j = 0; j < m; ++j)
      weightOf[size_t(j)] =
          total > 0 ? float(double(counts[size_t(dp * m + j)]) / double(total))
                    : 0.0f;
  }
  if (zero != 3)
    zeroGrads();
  else
    for (int k : localModules)
      std::fill(modules[size_t(k)].shardGrad.begin(),
                modules[size_t(k)].shardGrad.end(), 0.0f);
  for (Param &p : params)
    std::fill(p.ownGrad.begin(), p.ownGrad.end(), 0.0f);

  const ActionSpec *begin = spec.actions + spec.actionBegin[rank],
                   *end = spec.actions + spec.actionBegin[rank + 1];
  for (const ActionSpec *a = begin; a != end; ++a) {
    switch (ActionKind(a->kind)) {
    case ActionKind::Forward:
      ensureRun(a->module, false);
      forward(a->module, a->microBatch);
      break;
    case ActionKind::Backward:
      ensureRun(a->module, true);
      backward(a->module, a->microBatch);
      break;
    case ActionKind::Send: {
      double t0 = now();
      send(*a);
      record("send", actionName(*a), t0, now());
      break;
    }
    case ActionKind::Recv:
      recv(*a);
      break;
    case ActionKind::AllGather:
    case ActionKind::ReduceScatter:
    case ActionKind::AllReduce:
      collective(*a);
      break;
    case ActionKind::OptimizerStep:
      if (Status s = optimizerStep(stepIndex); !s.ok())
        return s;
      break;
    }
    progressSends(false);
  }
  endRun();
  double t0 = now();
  progressSends(true);
  for (int k : localModules) {
    ModuleState &M = modules[size_t(k)];
    if (M.paramReq != MPI_REQUEST_NULL)
      comm.waitOrAbort(M.paramReq,
                       "the all-gather of module " + str(k) +
                           "'s weights did not complete",
                       "; a rank of data-parallel group " + str(pp) +
                           " may have died");
  }
  record("collective-wait", "step-end", t0, now());
  if (!acts.empty() || !grads.empty() || !residuals.empty())
    return Status::error("the action list leaves activations behind at the "
                         "end of the step");
  double sum = 0;
  if (spec.moduleRank[spec.numModules - 1] == pp)
    for (int j = 0; j < m; ++j)
      sum += double(lossOf[size_t(j)]) * double(weightOf[size_t(j)]);
  MPI_Request r = comm.iallreduceDouble(&sum, 1, MPI_COMM_WORLD);
  comm.waitOrAbort(r, "the loss all-reduce did not complete",
                   "; a rank may have died");
  loss = sum;
  return Status::success();
}
