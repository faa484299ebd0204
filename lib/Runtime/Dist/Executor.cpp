//===- Executor.cpp - one rank of a distributed training step -------------===//
//
// Executor.h. Setup (spec checks, communicators, weights on the device,
// optimizer) and the host copies of the state; the step is ExecutorStep.cpp.
//
//===----------------------------------------------------------------------===//

#include "Executor.h"

#include "Comm.h" // MPI_TAG_UB

#include "lamina/Runtime/OnnxExport.h"
#include "lamina/Schedule/Schedule.h"
#include "lamina/Schedule/StepBuffers.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <set>

using namespace lamina::rt;
using namespace lamina::rt::dist;
using lamina::schedule::ActionKind;

void Packed::add(DType dtype, int rank, const int64_t *shape) {
  size_t n = size_t(numElements(shape, rank)) * dtypeSize(dtype);
  items.push_back({dtype, rank, shape, bytes, n});
  bytes += (n + 63) / 64 * 64;
}

namespace {
std::string str(int v) { return std::to_string(v); }
} // namespace

//===----------------------------------------------------------------------===//
// Setup
//===----------------------------------------------------------------------===//

Status Executor::setup() {
  if (spec.numModules < 1 || spec.microBatches < 1 || spec.pp < 1 ||
      spec.dp < 1 || spec.tp < 1 || spec.zero < 0 || spec.zero > 3)
    return Status::error("the program's distributed configuration is invalid");
  rank = control.rank();
  tpIndex = rank % spec.tp;
  pp = rank / spec.tp % spec.pp;
  dp = rank / spec.tp / spec.pp;
  zero = spec.dp > 1 ? spec.zero : 0;
  // A stage's replicas with this tensor-parallel index.
  if (Status s = net.split(pp * spec.tp + tpIndex, dp, dpGroup); !s.ok())
    return s;
  if (spec.tp > 1) {
    int group = -1;
    if (Status s = net.split(rank / spec.tp, tpIndex, group); !s.ok())
      return s;
    tpGroup =
        std::make_unique<CommTensorParallelGroup>(net, group, tpIndex, spec.tp);
    setTensorParallelGroup(tpGroup.get());
  }
  // Expert parallelism: groups of `experts` consecutive replicas hold the
  // experts in order (this rank block dp % experts); the replicas with
  // the same block (dp / experts orders them) are its holders
  // (Param::expert).
  for (int k = 0; k < spec.numModules; ++k)
    for (int i = 0; i < spec.modules[k].forward.numArgs; ++i)
      if (int e = spec.modules[k].forward.args[i].expertSplit; e > 0) {
        if ((experts && e != experts) || spec.dp % e != 0)
          return Status::error("the program is inconsistent: experts split "
                               "over " +
                               std::to_string(e) + " of " +
                               std::to_string(spec.dp) + " replicas");
        experts = e;
      }
  if (experts) {
    int stage = pp * spec.tp + tpIndex, groups = spec.dp / experts, group = -1;
    if (Status s =
            net.split(stage * groups + dp / experts, dp % experts, group);
        !s.ok())
      return s;
    epGroup = std::make_unique<CommExpertParallelGroup>(net, group,
                                                        dp % experts, experts);
    setExpertParallelGroup(epGroup.get());
    if (Status s = net.split(stage * experts + dp % experts, dp / experts,
                             expertHolders);
        !s.ok())
      return s;
  }
  modelPath = modelPathOf(o, spec.modelPath);

  // The inputs, over every module: one name, one type.
  for (int k = 0; k < spec.numModules; ++k) {
    const FunctionSpec &f = spec.modules[k].forward;
    for (int i = 0; i < f.numArgs; ++i) {
      const ArgSpec &a = f.args[i];
      if (a.kind != ArgKind::Input)
        continue;
      BatchSlot b{a.name, a.dtype,
                  std::vector<int64_t>(a.shape + (a.rank > 0),
                                       a.shape + a.rank)};
      auto it = slotIndex.find(a.name);
      if (it != slotIndex.end()) {
        const BatchSlot &seen = slots[size_t(it->second)];
        if (seen.dtype != b.dtype || seen.example != b.example)
          return Status::error("the program is inconsistent: modules read "
                               "input '" + b.name + "' with different types");
        continue;
      }
      if (a.rank < 1 || (!slots.empty() && a.shape[0] != microBatch))
        return Status::error("input '" + std::string(a.name) + "' is " +
                             describeType(a.dtype, a.shape, a.rank) +
                             "; every input is a micro-batch [batch, ...] "
                             "of the same size");
      microBatch = a.shape[0];
      slotIndex[b.name] = int(slots.size());
      slots.push_back(std::move(b));
    }
  }
  if (slots.empty())
    return Status::error("the program's modules read no input");
  globalBatch = microBatch * spec.microBatches * spec.dp;
  TrainSpec ts{spec.labelsInput, spec.vocab, nullptr, spec.loss,
               spec.ignoreIndex};
  LabelInfo labels = labelInfo(ts, slots);
  counted = countedSlot(slots, labels, skipFirst);
  const BatchSlot &perRow = slots[size_t(std::max(counted, 0))];
  seq = numElements(perRow.example.data(), int(perRow.example.size()));
  if (Status s = openBatches(o, false, slots, labels, data); !s.ok())
    return s;
  if (!o.evalData.empty())
    if (Status s = openBatches(o, true, slots, labels, evalData); !s.ok())
      return Status::error("--eval-data: " + s.message());
  batchHost.resize(slots.size());
  batchDevice.resize(slots.size());
  for (size_t k = 0; k < slots.size(); ++k) {
    std::vector<int64_t> shape = slots[k].example;
    shape.insert(shape.begin(), globalBatch);
    batchHost[k].allocate(slots[k].dtype, shape);
    batchViews.push_back(batchHost[k].view());
    if (Status s = batchDevice[k].allocate(device, batchHost[k].byteSize());
        !s.ok())
      return s;
  }
  int m = spec.microBatches;
  if (Status s = deviceLoss.allocate(device, size_t(m) * sizeof(float)); !s.ok())
    return s;
  if (Status s = deviceWeight.allocate(device, size_t(m) * sizeof(float));
      !s.ok())
    return s;
  if (Status s = deviceNorm.allocate(device, sizeof(double)); !s.ok())
    return s;

  // Tags matter to the MPI data plane only (NCCL matches in order; its
  // program may run without MPI initialised).
  int tagUb = 32767, *ub = nullptr, flag = 0;
  bool mpiData = std::strcmp(net.name(), "mpi") == 0;
  if (mpiData)
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  if (flag && ub)
    tagUb = *ub;
  if (mpiData && int64_t(spec.microBatches) * spec.numModules * 2 > tagUb)
    return Status::error("too many modules and micro-batches for MPI's tag "
                         "range (" + std::to_string(tagUb) + ")");
  if (Status s = setupModules(); !s.ok())
    return s;
  if (Status s = setupParams(); !s.ok())
    return s;
  if (Status s = setupCopies(); !s.ok())
    return s;
  setupSegments();
  if (Status s = setupOptimizer(); !s.ok())
    return s;
  if (Status s = connectTransfers(); !s.ok())
    return s;
  if (!o.evalData.empty() && !spec.evalSteps)
    return Status::error("--eval-data: the program has no evaluation step "
                         "(compiled without dist-schedule's eval)");
  return lrSchedule(o, sched);
}

Status Executor::setupOptimizer() {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  for (const Segment &seg : segments) {
    names.push_back(seg.name);
    shapes.push_back(seg.shape);
  }
  if (Status s = opt.init(optimizerConfig(o), names, shapes); !s.ok())
    return s;
  // The host device updates the Optimizer's own state in place; any other
  // gets zeroed device copies (stateToDevice refreshes them on resume).
  int slots = opt.numSlots();
  for (size_t i = 0; i < segments.size(); ++i)
    for (int k = 0; k < slots; ++k) {
      Tensor t = opt.state(int(i), k);
      if (!device.isHost()) {
        stateBuffers.emplace_back();
        if (Status s = stateBuffers.back().upload(device, t.data, t.byteSize());
            !s.ok())
          return s;
        t.data = stateBuffers.back().data();
      }
      deviceState.push_back(t);
    }
  return Status::success();
}

Status Executor::connectTransfers() {
  // The steps' pairs of pipeline ranks, in every replica.
  std::vector<std::pair<int, int>> edges;
  for (int d = 0; d < spec.dp; ++d)
    for (int e = 0; e < spec.numEdges; ++e)
      for (int t = 0; t < spec.tp; ++t)
        edges.push_back({(d * spec.pp + spec.edges[2 * e]) * spec.tp + t,
                         (d * spec.pp + spec.edges[2 * e + 1]) * spec.tp + t});
  return net.connect(edges);
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
  if (Status s = arena.allocate(device, arenaBytes); !s.ok())
    return Status::error("cannot allocate the " + std::to_string(arenaBytes) +
                         "-byte arena: " + s.message());
  if (!spec.stepBufferBytes)
    return Status::error("the program is inconsistent: no step buffer sizes");
  size_t stepBytes = size_t(spec.stepBufferBytes[pp]);
  if (spec.evalSteps && spec.evalStepBufferBytes)
    stepBytes = std::max(stepBytes, size_t(spec.evalStepBufferBytes[pp]));
  if (Status s = stepBuffer.allocate(device, std::max<size_t>(stepBytes, 1));
      !s.ok())
    return Status::error("cannot allocate the " + std::to_string(stepBytes) +
                         "-byte step buffer: " + s.message());
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
      p.expert = a.expertSplit > 0;
      p.shared = readers[a.name].size() > 1 || p.expert;
      if (p.expert && (!p.trainable || readers[a.name].size() > 1))
        return Status::error("the program is inconsistent: experts '" + p.name +
                             "' are not one module's trainables");
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
    // A split weight: this rank's block of it.
    if (p.arg->splitDim >= 0 && it != inits.end())
      if (Status s = takeBlock(*p.arg, spec.tp, tpIndex, it->second); !s.ok())
        return Status::error(s.message() + " in '" + modelPath + "'");
    // Experts: this replica's block of them.
    if (p.expert && it != inits.end())
      if (Status s = takeBlock(expertBlocks(*p.arg), experts, dp % experts,
                               it->second);
          !s.ok())
        return Status::error(s.message() + " in '" + modelPath + "'");
    if (Status s = checkInitializer(
            *p.arg, it == inits.end() ? nullptr : &it->second, modelPath);
        !s.ok())
      return s;
  }
  // Module buffers, by sharding level, uploaded from the initializers.
  int d = spec.dp;
  for (int k : localModules) {
    ModuleState &M = modules[size_t(k)];
    M.shards = net.shardLayout(M.size, d);
    // The compiler sized ZeRO's step-buffer slots from the same number of
    // parameters (the capacities are its formula: evenShards).
    if (!spec.flatParams || spec.flatParams[k] != M.size)
      return Status::error(
          "the program is inconsistent: module " + str(k) + " has " +
          std::to_string(M.size) + " parameters of its own, the compiler "
          "planned " +
          (spec.flatParams ? std::to_string(spec.flatParams[k]) : "none"));
    std::vector<float> full(size_t(M.shards.fullCapacity), 0.0f);
    for (int pi : M.params) {
      const Param &p = params[size_t(pi)];
      std::memcpy(full.data() + p.flatOffset, inits[p.name].data(),
                  size_t(p.size) * sizeof(float));
    }
    size_t fullBytes = full.size() * sizeof(float);
    size_t shardBytes = size_t(M.shards.shardCapacity) * sizeof(float);
    M.gathersCopies =
        (zero == 1 || zero == 2) && spec.modules[k].copiesOnly && M.size > 0;
    if (shardsParams(M)) {
      std::vector<float> shard(size_t(M.shards.shardCapacity), 0.0f);
      std::copy(full.begin() + M.shards.offsets[size_t(dp)],
                full.begin() + M.shards.offsets[size_t(dp)] +
                    M.shards.counts[size_t(dp)],
                shard.begin());
      if (Status s = M.shardParam.upload(device, shard.data(), shardBytes);
          !s.ok())
        return s;
    } else if (Status s = M.flatParam.upload(device, full.data(), fullBytes);
               !s.ok()) {
      return s;
    }
    // Levels 2-3 take the full gradient from the pool for each run.
    if (zero < 2)
      if (Status s = allocateZeroed(M.flatGrad, fullBytes); !s.ok())
        return s;
    if (zero == 1)
      M.gradShard = static_cast<float *>(M.flatGrad.data()) +
                    M.shards.offsets[size_t(dp)];
    if (zero >= 2) {
      if (Status s = allocateZeroed(M.shardGrad, shardBytes); !s.ok())
        return s;
      M.gradShard = static_cast<float *>(M.shardGrad.data());
    }
  }
  for (Param &p : params) {
    OwnedTensor &t = inits[p.name];
    if (!p.trainable)
      if (Status s = p.constant.upload(device, t.data(), t.byteSize()); !s.ok())
        return s;
  }
  // One communicator per distinct set of pipeline ranks holding a shared
  // trainable parameter (every rank takes part in every split, in order).
  std::map<std::vector<int>, int> holderGroups;
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
    holderGroups.emplace(sharedSets[name], -1);
  }
  for (auto &[set, g] : holderGroups) {
    // The holders with this tensor-parallel index (their blocks alike).
    bool member = std::binary_search(set.begin(), set.end(), pp);
    if (Status s = net.split(member ? tpIndex : -1, rank, g); !s.ok())
      return s;
  }
  for (Param &p : params)
    if (p.expert) {
      p.holders = expertHolders;
      if (Status s = setupShared(p, {pp}, readers[p.name], inits[p.name]);
          !s.ok())
        return s;
    } else if (p.trainable && p.shared) {
      const std::vector<int> &set = sharedSets[p.name];
      p.holders = holderGroups[set];
      if (Status s = setupShared(p, set, readers[p.name], inits[p.name]);
          !s.ok())
        return s;
    }
  return Status::success();
}

Status Executor::setupShared(Param &p, const std::vector<int> &set,
                             const std::vector<int> &readers,
                             const OwnedTensor &init) {
  int n = net.groupSize(p.holders);
  p.shardsOwn = zero >= 1 && n > 1;
  int64_t capacity = p.size;
  const float *value = static_cast<const float *>(init.data());
  if (p.shardsOwn) {
    p.holderShards = net.shardLayout(p.size, n);
    capacity = p.holderShards.fullCapacity;
    // The holders group ranks its members by global rank (dp * pp + pp);
    // an expert block's holders by replica.
    p.holderIndex = p.expert
                        ? dp / experts
                        : dp * int(set.size()) +
                              int(std::lower_bound(set.begin(), set.end(), pp) -
                                  set.begin());
    p.ownCopiesOnly = true;
    for (int k : readers)
      p.ownCopiesOnly = p.ownCopiesOnly && spec.modules[k].copiesOnly;
    int64_t offset = p.holderShards.offsets[size_t(p.holderIndex)];
    p.partLen = p.holderShards.counts[size_t(p.holderIndex)];
    size_t partBytes = size_t(p.holderShards.shardCapacity) * sizeof(float);
    if (p.ownCopiesOnly) {
      std::vector<float> part(size_t(p.holderShards.shardCapacity), 0.0f);
      std::copy(value + offset, value + offset + p.partLen, part.begin());
      if (Status s = p.ownShard.upload(device, part.data(), partBytes); !s.ok())
        return s;
    }
  }
  // Every holder counts the whole gradient's norm once: all its parts, or
  // the first holder of replica 0 the whole.
  // A weight every tensor-parallel member holds whole counts on member 0.
  p.countsForNorm = (p.shardsOwn || (dp == 0 && pp == set.front())) &&
                    (p.arg->splitDim >= 0 || tpIndex == 0);
  // An expert block: on each holder (its part) or the first replica.
  if (p.expert)
    p.countsForNorm = (p.shardsOwn || dp / experts == 0) && tpIndex == 0;
  size_t bytes = size_t(capacity) * sizeof(float);
  if (!p.ownCopiesOnly) {
    std::vector<float> whole(value, value + p.size);
    whole.resize(size_t(capacity), 0.0f);
    if (Status s = p.own.upload(device, whole.data(), bytes); !s.ok())
      return s;
  }
  if (Status s = allocateZeroed(p.ownGrad, bytes); !s.ok())
    return s;
  if (p.shardsOwn)
    p.partGrad = static_cast<float *>(p.ownGrad.data()) +
                 p.holderShards.offsets[size_t(p.holderIndex)];
  return Status::success();
}

Status Executor::setupCopies() {
  for (int k : localModules)
    for (const FunctionSpec *f :
         {&spec.modules[k].forward, &spec.modules[k].backward})
      for (int i = 0; i < f->numArgs; ++i) {
        const ArgSpec &a = f->args[i];
        if (a.kind != ArgKind::ParamCopy)
          continue;
        auto it = paramIndex.find(a.name);
        // Level 3 gathers for each run what the functions read: copies
        // only if that is all they read.
        if (it == paramIndex.end() || !params[size_t(it->second)].trainable ||
            !(a.dtype == DType::BF16 || a.dtype == DType::F16) ||
            (copyType != DType::F32 && a.dtype != copyType) ||
            (zero == 3 && !spec.modules[k].copiesOnly))
          return Status::error(
              "the program is inconsistent: " + std::string(f->name) +
              " reads a copy of '" + a.name + "' this rank cannot keep");
        copyType = a.dtype;
        Param &p = params[size_t(it->second)];
        size_t bytes =
            size_t(p.shardsOwn ? p.holderShards.fullCapacity : p.size) *
            dtypeSize(copyType);
        if (p.shared && !p.ownCopy.data())
          if (Status s = p.ownCopy.allocate(device, bytes); !s.ok())
            return s;
        ModuleState &M = modules[size_t(k)];
        DeviceBuffer &copy = zero == 3 ? M.shardCopy : M.flatCopy;
        int64_t count = zero == 3 ? M.shards.shardCapacity : M.size;
        if (!p.shared && !copy.data())
          if (Status s =
                  copy.allocate(device, size_t(count) * dtypeSize(copyType));
              !s.ok())
            return s;
      }
  for (const Param &p : params)
    if (p.ownCopiesOnly && !p.ownCopy.data())
      return Status::error("the program is inconsistent: its modules read "
                           "only the copy of '" +
                           p.name + "', but not as a copy");
  return refreshCopies();
}

Status Executor::gatherCopies(int k) {
  ModuleState &M = modules[size_t(k)];
  const int64_t count = M.shards.counts[size_t(dp)];
  if (Status s = castPart(M.shardParam, count, M.flatCopy,
                          M.shards.offsets[size_t(dp)]);
      !s.ok())
    return s;
  Request r;
  double before = net.collectiveBytes;
  if (Status s =
          net.allGather(M.flatCopy.data(), copyType, M.shards, dpGroup, r);
      !s.ok())
    return s;
  copyGatherBytes += net.collectiveBytes - before;
  return net.waitForCompute(r,
                            "the all-gather of module " + str(k) +
                                "'s weight copies did not complete",
                            "; a rank of data-parallel group " + str(pp) +
                                " may have died");
}

Status Executor::castCopy(const DeviceBuffer &from, DeviceBuffer &to,
                          const int64_t &count) {
  if (!to.data())
    return Status::success();
  return device.cast(Tensor{from.data(), DType::F32, 1, &count},
                     Tensor{to.data(), copyType, 1, &count});
}

Status Executor::refreshCopies() {
  for (int k : localModules) {
    ModuleState &M = modules[size_t(k)];
    if (M.gathersCopies) { // this rank's part, then everyone's
      if (Status s = gatherCopies(k); !s.ok())
        return s;
      continue;
    }
    if (Status s = castCopy(M.flatParam, M.flatCopy, M.size); !s.ok())
      return s;
    // (The padding past this rank's count is gathered, never read.)
    if (Status s =
            castCopy(M.shardParam, M.shardCopy, M.shards.counts[size_t(dp)]);
        !s.ok())
      return s;
  }
  for (Param *p : sharedByName()) {
    if (!p->ownCopiesOnly) {
      if (Status s = castCopy(p->own, p->ownCopy, p->size); !s.ok())
        return s;
      continue;
    }
    // This holder's part, then everyone's (collective over the holders).
    if (Status s = castPart(p->ownShard, p->partLen, p->ownCopy,
                            p->holderShards.offsets[size_t(p->holderIndex)]);
        !s.ok())
      return s;
    double before = net.collectiveBytes;
    if (Status s = gatherShared(*p); !s.ok())
      return s;
    if (Status s = waitShared(*p); !s.ok())
      return s;
    copyGatherBytes += net.collectiveBytes - before;
  }
  return Status::success();
}

std::vector<Param *> Executor::sharedByName() {
  // params follow the local modules' order, which differs between holders:
  // the holders' collectives go by name.
  std::vector<Param *> out;
  for (Param &p : params)
    if (p.trainable && p.shared)
      out.push_back(&p);
  std::sort(out.begin(), out.end(),
            [](Param *a, Param *b) { return a->name < b->name; });
  return out;
}

Status Executor::castPart(const DeviceBuffer &part, int64_t count,
                          DeviceBuffer &copy, int64_t offset) {
  return device.cast(Tensor{part.data(), DType::F32, 1, &count},
                     Tensor{static_cast<char *>(copy.data()) +
                                size_t(offset) * dtypeSize(copyType),
                            copyType, 1, &count});
}

Status Executor::gatherShared(Param &p) {
  return p.ownCopiesOnly
             ? net.allGather(p.ownCopy.data(), copyType, p.holderShards,
                             p.holders, p.ownGatherReq)
             : net.allGather(p.own.data(), DType::F32, p.holderShards,
                             p.holders, p.ownGatherReq);
}

Status Executor::waitShared(Param &p) {
  if (Status s = net.waitForCompute(p.ownGatherReq,
                                    "the all-gather of shared parameter '" +
                                        p.name + "' did not complete",
                                    "; a rank holding it may have died");
      !s.ok())
    return s;
  return p.ownCopiesOnly ? Status::success()
                         : castCopy(p.own, p.ownCopy, p.size);
}

void Executor::setupSegments() {
  for (int k : localModules) {
    ModuleState &M = modules[size_t(k)];
    int64_t lo = zero > 0 ? M.shards.offsets[size_t(dp)] : 0;
    int64_t hi = zero > 0 ? lo + M.shards.counts[size_t(dp)] : M.size;
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
      float *flatParam = static_cast<float *>(M.flatParam.data());
      if (zero == 0) {
        seg.param = flatParam + a;
        seg.grad = static_cast<float *>(M.flatGrad.data()) + a;
        if (M.flatCopy.data())
          seg.copy = static_cast<char *>(M.flatCopy.data()) +
                     size_t(a) * dtypeSize(copyType);
      } else {
        seg.param = shardsParams(M)
                        ? static_cast<float *>(M.shardParam.data()) + (a - lo)
                        : flatParam + a;
        seg.grad = M.gradShard + (a - lo);
        if (M.shardCopy.data())
          seg.copy = static_cast<char *>(M.shardCopy.data()) +
                     size_t(a - lo) * dtypeSize(copyType);
        if (M.gathersCopies)
          seg.copy = static_cast<char *>(M.flatCopy.data()) +
                     size_t(a) * dtypeSize(copyType);
      }
      seg.countsForNorm =
          (zero > 0 || dp == 0) && (p.arg->splitDim >= 0 || tpIndex == 0);
      seg.rank = p.arg->rank;
      segments.push_back(std::move(seg));
    }
  }
  for (Param &p : params)
    if (p.trainable && p.shared) {
      Segment seg;
      seg.name = p.name;
      seg.shape.assign(p.arg->shape, p.arg->shape + p.arg->rank);
      seg.param = static_cast<float *>(p.own.data());
      seg.grad = static_cast<float *>(p.ownGrad.data());
      seg.copy = p.ownCopy.data();
      seg.countsForNorm = p.countsForNorm;
      seg.rank = p.arg->rank;
      if (p.shardsOwn) { // this holder's part
        int64_t lo = p.holderShards.offsets[size_t(p.holderIndex)];
        int64_t count = p.partLen;
        if (count == 0)
          continue;
        if (count < p.size) {
          seg.name +=
              "[" + std::to_string(lo) + ":" + std::to_string(lo + count) + "]";
          seg.shape = {count};
        }
        seg.param = p.ownCopiesOnly ? static_cast<float *>(p.ownShard.data())
                                    : seg.param + lo;
        seg.grad = p.partGrad;
        // The gathered f32 parameter is cast after the gather instead.
        seg.copy = p.ownCopiesOnly ? static_cast<char *>(p.ownCopy.data()) +
                                         size_t(lo) * dtypeSize(copyType)
                                   : nullptr;
      }
      segments.push_back(std::move(seg));
    }
}

std::vector<NamedView> Executor::stateViews() {
  std::vector<NamedView> views;
  for (int k : localModules) {
    ModuleState &M = modules[size_t(k)];
    if (shardsParams(M)) {
      M.hostParam.resize(size_t(M.shardLen));
      views.push_back({"shard." + str(k),
                       Tensor{M.hostParam.data(), DType::F32, 1, &M.shardLen}});
      continue;
    }
    M.hostParam.resize(size_t(M.size));
    for (int pi : M.params) {
      const Param &p = params[size_t(pi)];
      views.push_back({p.name, Tensor{M.hostParam.data() + p.flatOffset,
                                      DType::F32, p.arg->rank, p.arg->shape}});
    }
  }
  for (Param &p : params)
    if (p.trainable && p.shared) {
      if (p.ownCopiesOnly) { // this holder's part
        p.hostOwn.resize(size_t(p.partLen));
        views.push_back({"shard." + p.name,
                         Tensor{p.hostOwn.data(), DType::F32, 1, &p.partLen}});
        continue;
      }
      p.hostOwn.resize(size_t(p.size));
      views.push_back({p.name, Tensor{p.hostOwn.data(), DType::F32,
                                      p.arg->rank, p.arg->shape}});
    }
  for (NamedView &v : optimizerState(opt))
    views.push_back(v);
  return views;
}

// The host copies stateViews() made room for (call it first), in one
// direction or the other.
Status Executor::transferState(bool toHost) {
  auto transfer = [&](void *host, void *dev, size_t bytes) {
    return toHost ? device.download(host, dev, bytes)
                  : device.upload(dev, host, bytes);
  };
  for (int k : localModules) {
    ModuleState &M = modules[size_t(k)];
    DeviceBuffer &dev = shardsParams(M) ? M.shardParam : M.flatParam;
    if (Status s = transfer(M.hostParam.data(), dev.data(),
                            M.hostParam.size() * sizeof(float));
        !s.ok())
      return s;
  }
  for (Param &p : params)
    if (p.trainable && p.shared)
      if (Status s = transfer(p.hostOwn.data(),
                              (p.ownCopiesOnly ? p.ownShard : p.own).data(),
                              p.hostOwn.size() * sizeof(float));
          !s.ok())
        return s;
  if (!device.isHost())
    for (size_t i = 0; i < segments.size(); ++i)
      for (int k = 0; k < opt.numSlots(); ++k) {
        Tensor host = opt.state(int(i), k);
        const Tensor &dev = deviceState[i * size_t(opt.numSlots()) + size_t(k)];
        if (Status s = transfer(host.data, dev.data, host.byteSize()); !s.ok())
          return s;
      }
  // Restored parameters: their copies follow.
  return toHost ? Status::success() : refreshCopies();
}

size_t Executor::stateBytes() const {
  size_t bytes = 0;
  for (int k : localModules) {
    const ModuleState &M = modules[size_t(k)];
    for (const DeviceBuffer *b : {&M.flatParam, &M.flatGrad, &M.shardParam,
                                  &M.shardGrad, &M.flatCopy, &M.shardCopy})
      bytes += b->bytes();
  }
  for (const Param &p : params)
    for (const DeviceBuffer *b : {&p.own, &p.ownGrad, &p.ownCopy, &p.ownShard})
      bytes += b->bytes();
  for (const Tensor &t : deviceState)
    bytes += t.byteSize();
  return bytes;
}

Status Executor::gatherToHost(const DeviceBuffer &part,
                              const ShardLayout &layout, int index, int group,
                              std::vector<float> &out) {
  DeviceBuffer g;
  size_t bytes = size_t(layout.fullCapacity) * sizeof(float);
  Status s = g.allocate(device, bytes);
  if (s.ok())
    s = device.fillZero(g.data(), bytes);
  if (s.ok())
    s = device.copy(
        static_cast<float *>(g.data()) + layout.offsets[size_t(index)],
        part.data(), size_t(layout.counts[size_t(index)]) * sizeof(float));
  Request r;
  if (s.ok())
    s = net.allGather(g.data(), DType::F32, layout, group, r);
  if (s.ok())
    s = net.wait(r, "the export's all-gather did not complete",
                 "; a rank may have died");
  out.resize(size_t(layout.fullCapacity));
  if (s.ok())
    s = device.download(out.data(), g.data(), bytes);
  return s;
}

Status Executor::parameterToHost(const Param &p, float *out) {
  size_t bytes = size_t(p.size) * sizeof(float);
  if (p.ownCopiesOnly)
    return Status::error("internal: shared parameters held as parts are "
                         "gathered by gatherToHost");
  if (p.shared)
    return device.download(out, p.own.data(), bytes);
  const ModuleState &M = modules[size_t(p.module)];
  if (!shardsParams(M))
    return device.download(
        out, static_cast<const float *>(M.flatParam.data()) + p.flatOffset,
        bytes);
  return Status::error("internal: sharded parameters are gathered by module");
}
