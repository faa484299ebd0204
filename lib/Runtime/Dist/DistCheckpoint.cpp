//===- DistCheckpoint.cpp - checkpoints and export of a distributed run ---===//

#include "DistCheckpoint.h"

#include "../Program/FileUtil.h"

#include "lamina/Runtime/OnnxExport.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace lamina::rt;
using namespace lamina::rt::dist;

std::string lamina::rt::dist::configLine(const DistSpec &spec) {
  return "pp=" + std::to_string(spec.pp) + " dp=" + std::to_string(spec.dp) +
         " zero=" + std::to_string(spec.zero) +
         " schedule=" + (spec.schedule ? spec.schedule : "?") +
         " micro-batches=" + std::to_string(spec.microBatches) +
         " modules=" + std::to_string(spec.numModules) +
         (spec.tp > 1 ? " tp=" + std::to_string(spec.tp) : "");
}

static int allMin(ControlPlane &control, int v) {
  return control.allMin(v, "an agreement between the ranks did not complete",
                        "; a rank may have died");
}

Status lamina::rt::dist::agree(ControlPlane &control, const Status &s) {
  int first = allMin(control, s.ok() ? INT_MAX : control.rank());
  if (first == INT_MAX)
    return Status::success();
  if (first == control.rank()) {
    std::fprintf(stderr, "error: rank %d: %s\n", control.rank(),
                 s.message().c_str());
    std::fflush(stderr);
  }
  return Status::error("(reported by rank " + std::to_string(first) + ")");
}

static uint64_t fnv(const std::string &s, uint64_t h) {
  for (unsigned char c : s)
    h = (h ^ c) * 0x100000001b3ull;
  return h;
}

static std::string stepDir(const std::string &dir, int64_t step) {
  char name[40];
  std::snprintf(name, sizeof name, "step-%012lld", (long long)step);
  return dir + "/" + name;
}

/// Steps of the folders step-<digits> in `dir`, highest first.
static std::vector<int64_t> listSteps(const std::string &dir) {
  std::vector<int64_t> out;
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return out;
  while (struct dirent *e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.size() != 17 || name.compare(0, 5, "step-") != 0 ||
        name.find_first_not_of("0123456789", 5) != std::string::npos)
      continue;
    out.push_back(std::stoll(name.substr(5)));
  }
  ::closedir(d);
  std::sort(out.rbegin(), out.rend());
  return out;
}

static bool readSmallFile(const std::string &path, std::string &out) {
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f)
    return false;
  char buf[512];
  size_t n = std::fread(buf, 1, sizeof buf, f);
  std::fclose(f);
  out.assign(buf, n);
  return true;
}

static void removeTree(const std::string &dir) {
  if (DIR *d = ::opendir(dir.c_str())) {
    while (struct dirent *e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..")
        ::unlink((dir + "/" + name).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

static uint64_t fingerprintOf(Executor &ex, std::vector<NamedView> &views) {
  uint64_t h = modelFingerprint(views.data(), int(views.size()));
  return fnv(configLine(ex.spec) + " rank=" + std::to_string(ex.rank), h);
}

Status lamina::rt::dist::saveDistCheckpoint(Executor &ex, int64_t step) {
  std::string dir = stepDir(ex.o.checkpointDir, step);
  std::vector<NamedView> views = ex.stateViews();
  std::vector<uint8_t> rng = ex.data->state();
  Status s = ex.stateToHost();
  if (s.ok())
    s = makeDirs(dir);
  if (s.ok())
    s = writeCheckpoint(dir + "/rank-" + std::to_string(ex.rank) + ".ckpt",
                        uint64_t(step), fingerprintOf(ex, views), rng,
                        views.data(), int(views.size()));
  if (Status a = agree(ex.control, s); !a.ok())
    return a;
  if (ex.rank == 0) {
    AtomicWriter w;
    std::string line = configLine(ex.spec) + "\n";
    s = w.open(dir + "/COMPLETE");
    if (s.ok())
      s = w.write(line.data(), line.size());
    if (s.ok())
      s = w.commit();
    if (s.ok())
      s = syncDir(dir);
    if (s.ok()) {
      // Keep the newest two complete checkpoints.
      int complete = 0;
      for (int64_t st : listSteps(ex.o.checkpointDir)) {
        std::string d = stepDir(ex.o.checkpointDir, st);
        struct stat sb;
        bool isComplete = ::stat((d + "/COMPLETE").c_str(), &sb) == 0;
        if (st > step)
          continue;
        if (isComplete && ++complete <= 2)
          continue;
        if (complete >= 2)
          removeTree(d);
      }
    }
  }
  return agree(ex.control, s);
}

Status lamina::rt::dist::resumeDistCheckpoint(Executor &ex, int64_t &step,
                                              bool &found) {
  found = false;
  step = 0;
  std::string want = configLine(ex.spec);
  std::vector<NamedView> views = ex.stateViews();
  uint64_t fingerprint = fingerprintOf(ex, views);
  int candidates = 0;
  for (int64_t st : listSteps(ex.o.checkpointDir)) {
    std::string dir = stepDir(ex.o.checkpointDir, st), line;
    if (!readSmallFile(dir + "/COMPLETE", line))
      continue;
    ++candidates;
    if (!line.empty() && line.back() == '\n')
      line.pop_back();
    if (line != want)
      return agree(ex.control,
                   Status::error("checkpoint '" + dir +
                                 "' was written by a run with " + line +
                                 "; this run has " + want +
                                 " (a distributed checkpoint resumes only "
                                 "the configuration that wrote it)"));
    Checkpoint ck;
    std::string path = dir + "/rank-" + std::to_string(ex.rank) + ".ckpt";
    Status s = readCheckpoint(path, ck);
    int verdict = 2;
    if (!s.ok()) {
      std::fprintf(stderr, "warning: rank %d: %s; trying an older one\n",
                   ex.rank, s.message().c_str());
      verdict = 1;
    } else if (ck.fingerprint != fingerprint || ck.step != uint64_t(st)) {
      verdict = 0;
    }
    int all = allMin(ex.control, verdict);
    if (all == 0)
      return agree(ex.control,
                   verdict == 0
                       ? Status::error("checkpoint '" + path +
                                       "' belongs to another model: its "
                                       "parameters' names, types or shapes "
                                       "differ")
                       : Status::success());
    if (all == 1)
      continue;
    Status r = ex.data->restore(ck.rng);
    if (!r.ok())
      r = Status::error("checkpoint '" + path + "': " + r.message());
    if (r.ok())
      r = restoreTensors(ck, views.data(), int(views.size()));
    if (r.ok())
      r = ex.stateToDevice();
    if (Status a = agree(ex.control, r); !a.ok())
      return a;
    step = st;
    found = true;
    return Status::success();
  }
  if (candidates > 0)
    return agree(ex.control, Status::error("no valid checkpoint in '" +
                                        ex.o.checkpointDir + "': all " +
                                        std::to_string(candidates) +
                                        " complete checkpoints are damaged"));
  return Status::success();
}

Status lamina::rt::dist::exportDist(Executor &ex, const std::string &path) {
  const DistSpec &spec = ex.spec;
  ControlPlane &control = ex.control;
  // Sharded parameters (level 3, or levels 1-2 gathering the copies):
  // every replica gathers its modules' shards on the device, then reads
  // them back.
  std::map<int, std::vector<float>> full;
  for (int k : ex.localModules) {
    ModuleState &M = ex.modules[size_t(k)];
    if (ex.shardsParams(M))
      if (Status s = ex.gatherToHost(M.shardParam, M.shards, ex.dp, ex.dpGroup,
                                     full[k]);
          !s.ok())
        control.abort("--export: " + s.message());
  }
  // Shared parameters held as parts: every holder gathers them (by name).
  std::map<std::string, std::vector<float>> fullShared;
  for (Param *p : ex.sharedByName())
    if (p->ownCopiesOnly)
      if (Status s =
              ex.gatherToHost(p->ownShard, p->holderShards, p->holderIndex,
                              p->holders, fullShared[p->name]);
          !s.ok())
        control.abort("--export: " + s.message());
  // Every trainable parameter once, in module and argument order, with the
  // pipeline rank that owns it (the lowest holder).
  struct Item {
    const ArgSpec *arg;
    int owner;
  };
  std::vector<Item> items;
  std::map<std::string, size_t> seen;
  for (int k = 0; k < spec.numModules; ++k) {
    const FunctionSpec &f = spec.modules[k].forward;
    for (int i = 0; i < f.numArgs; ++i) {
      const ArgSpec &a = f.args[i];
      if (a.kind != ArgKind::Trainable)
        continue;
      auto [it, fresh] = seen.emplace(a.name, items.size());
      if (fresh)
        items.push_back({&a, spec.moduleRank[k]});
      else
        items[it->second].owner =
            std::min(items[it->second].owner, spec.moduleRank[k]);
    }
  }
  // Rank 0 receives the parameters in item order and every owner sends its
  // own in the same order, so the blocking transfers cannot deadlock.
  const std::string what =
      "the export's transfer of a parameter did not complete";
  std::vector<OwnedTensor> values(items.size());
  std::vector<float> owned; // the host copy this rank sends
  std::vector<NamedView> views;
  for (size_t t = 0; t < items.size(); ++t) {
    const ArgSpec &a = *items[t].arg;
    // The owner's tensor-parallel members each hold a block of a split
    // parameter (member 0 alone sends one held whole); its replicas each
    // hold a block of split experts.
    bool experts = a.expertSplit > 0;
    ArgSpec blocks = experts ? expertBlocks(a) : a;
    int members = experts ? a.expertSplit : a.splitDim >= 0 ? spec.tp : 1;
    // Global rank of member m: (pp owner, dp 0 or m, tp 0 or m).
    auto memberRank = [&](int m) {
      return experts ? (m * spec.pp + items[t].owner) * spec.tp
                     : items[t].owner * spec.tp + m;
    };
    int member = -1;
    for (int m = 0; m < members; ++m)
      if (memberRank(m) == ex.rank)
        member = m;
    bool sends = member >= 0;
    int tags = std::max(spec.tp, spec.dp);
    // Block m of split experts: replica m (of the first group) holds it.
    const float *src = nullptr;
    size_t bytes = size_t(numElements(a.shape, a.rank)) * sizeof(float);
    if (sends) {
      const Param &p = ex.params[size_t(ex.paramIndex.at(a.name))];
      if (!p.shared && ex.shardsParams(ex.modules[size_t(p.module)])) {
        src = full[p.module].data() + p.flatOffset;
      } else if (p.ownCopiesOnly) {
        src = fullShared[p.name].data();
      } else {
        owned.resize(size_t(p.size));
        if (Status s = ex.parameterToHost(p, owned.data()); !s.ok())
          control.abort("--export: " + s.message());
        src = owned.data();
      }
    }
    if (ex.rank == 0) {
      values[t].allocate(a.dtype, wholeShape(blocks, members));
      std::vector<char> block(bytes);
      for (int m = 0; m < members; ++m) {
        void *into = members > 1 ? block.data() : values[t].data();
        if (memberRank(m) == 0)
          std::memcpy(into, src, bytes);
        else
          control.recv(memberRank(m), int(t) * tags + m, into, bytes, what);
        if (members > 1)
          putBlock(blocks, members, m, into, values[t].data());
      }
      views.push_back({a.name, values[t].view()});
    } else if (sends) {
      control.send(0, int(t) * tags + member, src, bytes, what);
    }
  }
  Status s = Status::success();
  if (ex.rank == 0)
    s = exportOnnx(ex.modelPath, path, views.data(), int(views.size()));
  if (!s.ok())
    s = Status::error("--export: " + s.message());
  return agree(control, s);
}
