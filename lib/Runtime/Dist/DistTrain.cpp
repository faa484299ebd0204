//===- DistTrain.cpp - the driver of a distributed training program -------===//
//
// distTrainMain (DistProgram.h): the control plane's start-up (MPI or TCP,
// chooseControl), the flags of trainMain plus
// --trace/--stats/--comm-timeout, the step loop with rank 0's log,
// checkpoints, the per-rank statistics, the Chrome trace and the export.
// distTrain (DistTrain.h) is the same on any Device and Communicator.
// docs/distributed.md.
//
//===----------------------------------------------------------------------===//

#include "DistTrain.h"

#include "Comm.h"
#include "DistCheckpoint.h"
#include "Executor.h"
#include "MpiComm.h"

#include "lamina/Runtime/DistProgram.h"
#include "lamina/Runtime/Kernels.h"
#include "lamina/Support/Json.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

using namespace lamina::rt;
using namespace lamina::rt::dist;
using lamina::Expected;
namespace json = lamina::json;

namespace {

/// LAMINA_FAULT_INJECT=G:N: rank G kills itself (SIGKILL) when it starts
/// step N (1-based, as logged). For tests of the fault behaviour.
void maybeInjectFault(int rank, int64_t step) {
  const char *env = std::getenv("LAMINA_FAULT_INJECT");
  if (!env)
    return;
  int r = -1;
  long long s = -1;
  if (std::sscanf(env, "%d:%lld", &r, &s) == 2 && r == rank && s == step) {
    std::fprintf(stderr, "rank %d: LAMINA_FAULT_INJECT: killing myself at "
                         "step %lld\n", rank, s);
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
}

Status writeText(const std::string &path, const std::string &text) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    return Status::error("cannot write '" + path + "': " + std::strerror(errno));
  bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  ok &= std::fclose(f) == 0;
  return ok ? Status::success()
            : Status::error("cannot write '" + path + "'");
}

/// Per-rank statistics: printed by rank 0, and as JSON with --stats.
Status reportStats(Executor &ex, int64_t steps, double wall) {
  ControlPlane &control = ex.control;
  Communicator &net = ex.net;
  double n = steps > 0 ? double(steps) : 1.0;
  // The module functions' tensor-parallel collectives in training (the
  // communicator counts them among its collectives too).
  double tpBytes = ex.tpGroup ? ex.tpGroup->bytes - ex.evalTpBytes : 0;
  // The expert-parallel all-to-alls' rows and counts sent to the others
  // (not among the communicator's collectives).
  double epBytes = ex.epGroup ? ex.epGroup->bytes - ex.evalEpBytes : 0;
  double idle = wall > 0 ? std::max(0.0, 1.0 - ex.busySeconds / wall) : 0;
  // One line of JSON per rank; rank 0 reads them back and copies them into
  // the --stats file as they are.
  std::string line;
  json::Writer(line, json::Layout::Inline)
      .beginObject()
      .field("rank", ex.rank)
      .field("pp", ex.pp)
      .field("dp", ex.dp)
      .key("p2p_bytes_per_step")
      .fixedValue(double(net.p2pBytesSent - ex.evalP2pBytes) / n, 0)
      .key("collective_bytes_per_step")
      .fixedValue((net.collectiveBytes - ex.evalCollectiveBytes -
                   ex.copyGatherBytes - tpBytes) /
                      n,
                  0)
      .key("compute_seconds")
      .fixedValue(ex.busySeconds, 6)
      .key("wall_seconds")
      .fixedValue(wall, 6)
      .key("idle_fraction")
      .fixedValue(idle, 4)
      .field("arena_bytes", ex.arenaBytes)
      .field("step_buffer_bytes", size_t(ex.spec.stepBufferBytes[ex.pp]))
      .field("peak_gradient_bytes", ex.peakGradBytes)
      .field("state_bytes", ex.stateBytes())
      .field("tp", ex.tpIndex)
      .key("tensor_parallel_bytes_per_step")
      .fixedValue(tpBytes / n, 0)
      .key("expert_parallel_bytes_per_step")
      .fixedValue(epBytes / n, 0)
      .endObject();
  std::vector<std::string> all = control.gather(line);
  if (control.rank() != 0)
    return Status::success();
  for (int r = 0; r < control.size(); ++r) {
    int pp = r / ex.spec.tp % ex.spec.pp, dp = r / ex.spec.tp / ex.spec.pp;
    Expected<json::Value> stats = json::parse(all[size_t(r)]);
    if (!stats.ok())
      return Status::error("rank " + std::to_string(r) +
                           "'s statistics: " + stats.error());
    auto get = [&](const char *key) { return stats->numberOr(key, 0); };
    double p2p = get("p2p_bytes_per_step");
    double coll = get("collective_bytes_per_step");
    double busy = get("compute_seconds"), idleF = get("idle_fraction");
    auto bytes = [&](const char *key) {
      return static_cast<unsigned long long>(get(key));
    };
    unsigned long long arena = bytes("arena_bytes"),
                       peak = bytes("step_buffer_bytes"),
                       gradPeak = bytes("peak_gradient_bytes"),
                       state = bytes("state_bytes");
    double tpBytes = get("tensor_parallel_bytes_per_step");
    double epBytes = get("expert_parallel_bytes_per_step");
    bool tensorParallel = ex.spec.tp > 1;
    std::string tp =
        tensorParallel ? ", tp " + std::to_string(r % ex.spec.tp) : "";
    std::string tpTraffic =
        tensorParallel ? ", tensor-parallel " +
                             std::to_string((long long)tpBytes) + " B/step"
                       : "";
    if (ex.epGroup)
      tpTraffic +=
          ", expert-parallel " + std::to_string((long long)epBytes) + " B/step";
    std::printf("stats: rank %d (pp %d, dp %d%s): p2p %.0f B/step, collective "
                "%.0f B/step%s, compute %.3f s, idle %.1f%%, arena %llu B, "
                "step buffer %llu B, peak gradients %llu B, state %llu B\n",
                r, pp, dp, tp.c_str(), p2p, coll, tpTraffic.c_str(), busy,
                100 * idleF, arena, peak, gradPeak, state);
  }
  std::fflush(stdout);
  if (ex.o.stats.empty())
    return Status::success();
  // {"config": ..., "steps": N, "ranks": [ one rank a line ]}
  std::string text;
  json::Writer w(text, json::Layout::Inline);
  w.beginObject()
      .field("config", configLine(ex.spec))
      .field("steps", steps)
      .key("ranks")
      .beginArray(json::Layout::Indented);
  for (const std::string &rank : all)
    w.rawValue(rank);
  w.endArray().endObject();
  return writeText(ex.o.stats, text + "\n");
}

/// Chrome trace: rank 0 gathers every rank's events (pid = rank).
Status writeTrace(Executor &ex) {
  // Every rank writes its events as one array; rank 0 parses them and
  // writes them all into traceEvents, one event a line.
  std::string mine;
  json::Writer w(mine, json::Layout::Compact);
  w.beginArray();
  w.beginObject(json::Layout::Inline)
      .field("name", "process_name")
      .field("ph", "M")
      .field("pid", ex.rank)
      .key("args")
      .beginObject()
      .field("name", "rank " + std::to_string(ex.rank) + " (pp " +
                         std::to_string(ex.pp) + ", dp " +
                         std::to_string(ex.dp) + ")")
      .endObject()
      .endObject();
  for (const TraceEvent &e : ex.events)
    w.beginObject(json::Layout::Inline)
        .field("name", e.name)
        .field("cat", e.cat)
        .field("ph", "X")
        .field("pid", ex.rank)
        .field("tid", 0)
        .key("ts")
        .fixedValue(e.start * 1e6, 3)
        .key("dur")
        .fixedValue(e.dur * 1e6, 3)
        .endObject();
  w.endArray();
  std::vector<std::string> all = ex.control.gather(mine);
  if (ex.rank != 0)
    return Status::success();
  std::string text;
  json::Writer out(text, json::Layout::Inline);
  out.beginObject()
      .field("displayTimeUnit", "ms")
      .key("traceEvents")
      .beginArray(json::Layout::Indented);
  for (size_t r = 0; r < all.size(); ++r) {
    Expected<json::Value> events = json::parse(all[r]);
    if (!events.ok())
      return Status::error("rank " + std::to_string(r) +
                           "'s trace: " + events.error());
    for (const json::Value &e : events->array)
      out.value(e, json::Layout::Inline);
  }
  out.endArray().endObject();
  return writeText(ex.o.trace, text + "\n");
}

int run(int argc, char **argv, const DistSpec &spec, ControlPlane &control,
        Comm *mpi, Device &device, const MakeCommunicator &makeNet) {
  TrainOptions o;
  bool root = control.rank() == 0;
  if (std::string err = parseTrainOptions(argc, argv, o, true); !err.empty()) {
    if (root)
      std::fprintf(stderr, "error: %s\n%s", err.c_str(),
                   trainUsage(true).c_str());
    return 2;
  }
  if (o.help) {
    if (root)
      std::fputs(trainUsage(true).c_str(), stdout);
    return 0;
  }
  if (o.kernels)
    return root ? printKernels(device, o.threads) : 0;
  // Before the rendezvous: every rank knows the world size already.
  if (control.size() != spec.numRanks) {
    if (root) {
      std::string why;
      // A host program under torchrun-style variables alone: MPI_Init made
      // a world of one.
      const char *ws = std::getenv("WORLD_SIZE");
      if (mpi && std::strcmp(control.name(), "mpi") == 0 &&
          std::getenv("RANK") && ws && std::strcmp(ws, "1") != 0)
        why = " (RANK and WORLD_SIZE are set, but this program moves its "
              "data over MPI: only --target cuda programs start under "
              "torchrun-style launchers)";
      std::string tp =
          spec.tp > 1 ? "tp " + std::to_string(spec.tp) + " x " : "";
      std::fprintf(stderr,
                   "error: the program was compiled for %d ranks (%spp %d x "
                   "dp %d) but runs on %d%s; %s\n",
                   spec.numRanks, tp.c_str(), spec.pp, spec.dp, control.size(),
                   why.c_str(), control.launchHint(spec.numRanks).c_str());
    }
    return 1;
  }
  if (Status s = control.connect(o.commTimeout); !s.ok()) {
    std::fprintf(stderr, "error: rank %d: %s\n", control.rank(),
                 s.message().c_str());
    return 1;
  }
  control.timeout = o.commTimeout;
  if (mpi)
    mpi->timeout = o.commTimeout;
  if (o.threads > 0)
    if (!agree(control, device.setThreads(int(o.threads))).ok())
      return 1;

  std::unique_ptr<Communicator> net;
  if (!agree(control, makeNet(control, mpi, device, o.commTimeout, net)).ok())
    return 1;
  net->timeout = o.commTimeout;
  Executor ex(spec, o, control, *net, device);
  if (!agree(control, ex.setup()).ok())
    return 1;
  // The model's own loss is a mean per micro-batch: weighing them by their
  // counted labels is exact for a token-mean cross-entropy only. Say so.
  if (root && spec.loss == LossKind::Output && ex.counted >= 0 &&
      spec.microBatches * spec.dp > 1)
    std::printf("loss: the model's own; micro-batches weighted by their "
                "labels other than %lld (exact for a token-mean "
                "cross-entropy with that ignore index, as Transformers "
                "computes)\n",
                static_cast<long long>(spec.ignoreIndex));
  if (!o.checkpointDir.empty()) {
    Status s = root ? makeDirs(o.checkpointDir) : Status::success();
    if (!s.ok())
      s = Status::error("--checkpoint-dir: " + s.message());
    if (!agree(control, s).ok())
      return 1;
  }
  int64_t step = 0;
  if (o.resume) {
    bool found = false;
    if (!resumeDistCheckpoint(ex, step, found).ok())
      return 1;
    if (root) {
      if (found)
        std::printf("resumed from step %lld\n", (long long)step);
      else
        std::printf("no checkpoint in '%s': starting from step 0\n",
                    o.checkpointDir.c_str());
      std::fflush(stdout);
    }
  }

  control.barrier();
  ex.tracing = !o.trace.empty();
  ex.traceStart = now();
  double start = ex.traceStart;
  int64_t firstStep = step, lastCkpt = step;
  int64_t tokensPerStep = ex.globalBatch * ex.seq;
  // Validation as in the single-process driver (Train.cpp).
  EvalSchedule evals(o);
  auto evaluate = [&](int64_t at) {
    double t0 = now(), loss = 0;
    if (Status s = ex.evaluate(loss); !s.ok())
      control.abort(s.message());
    evals.record(at, loss, now() - t0, root);
  };
  if (evals.atStart(step))
    evaluate(0);
  for (; step < o.steps; ++step) {
    maybeInjectFault(control.rank(), step + 1);
    double loss = 0;
    if (Status s = ex.step(step, loss); !s.ok())
      control.abort(s.message());
    if (!std::isfinite(loss)) {
      if (root)
        std::fprintf(stderr, "error: the loss is %s at step %lld\n",
                     std::to_string(loss).c_str(), (long long)(step + 1));
      return 1;
    }
    int64_t done = step + 1;
    if (root && (done % o.logEvery == 0 || done == o.steps || done == 1)) {
      double elapsed = now() - start, training = elapsed - evals.seconds;
      double perStep = training / double(done - firstStep);
      double tps = training > 0
                       ? double(tokensPerStep * (done - firstStep)) / training
                       : 0;
      std::printf("step %lld loss %.6f lr %.6g tokens/s %.0f elapsed %.1fs "
                  "eta %.1fs\n",
                  (long long)done, loss, ex.sched.at(step), tps, elapsed,
                  perStep * double(o.steps - done));
      std::fflush(stdout);
    }
    if (evals.after(done))
      evaluate(done);
    if (o.checkpointEvery > 0 && done % o.checkpointEvery == 0) {
      if (!saveDistCheckpoint(ex, done).ok())
        return 1;
      lastCkpt = done;
    }
  }
  if (evals.atEnd(step))
    evaluate(step);
  double wall = now() - start - evals.seconds;
  if (!o.checkpointDir.empty() && lastCkpt != step)
    if (!saveDistCheckpoint(ex, step).ok())
      return 1;
  if (!agree(control, reportStats(ex, step - firstStep, wall)).ok())
    return 1;
  if (!o.trace.empty() && !agree(control, writeTrace(ex)).ok())
    return 1;
  if (!o.exportPath.empty()) {
    if (!exportDist(ex, o.exportPath).ok())
      return 1;
    if (root)
      std::printf("exported the trained model to %s\n", o.exportPath.c_str());
  }
  return 0;
}

bool envSet(const char *name) {
  const char *v = std::getenv(name);
  return v && *v;
}

} // namespace

Status lamina::rt::dist::chooseControl(bool dataNeedsMpi, std::string &kind) {
  if (const char *forced = std::getenv("LAMINA_CONTROL"); forced && *forced) {
    if (std::strcmp(forced, "mpi") != 0 && std::strcmp(forced, "tcp") != 0)
      return Status::error(std::string("LAMINA_CONTROL=") + forced +
                           " is not 'mpi' or 'tcp'");
    kind = forced;
    return Status::success();
  }
  // ncclWorld's rule (docs/cuda.md, "Bootstrap: ncclWorld").
  bool underMpirun = envSet("OMPI_COMM_WORLD_SIZE") || envSet("PMIX_RANK") ||
                     envSet("PMI_SIZE");
  bool launcher = envSet("RANK") || envSet("OMPI_COMM_WORLD_RANK") ||
                  envSet("SLURM_PROCID");
  if (dataNeedsMpi || (underMpirun && !envSet("MASTER_ADDR")))
    kind = "mpi";
  else if (launcher)
    kind = "tcp";
  else
    kind = "single";
  return Status::success();
}

int lamina::rt::dist::distTrain(int argc, char **argv, const DistSpec &spec,
                                 Device &device,
                                 const MakeCommunicator &makeNet,
                                 bool dataNeedsMpi) {
  std::string kind;
  if (Status s = chooseControl(dataNeedsMpi, kind); !s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.message().c_str());
    return 1;
  }
  // MPI only when something uses it: a torchrun-style launch of a GPU
  // program never calls MPI_Init.
  bool useMpi = dataNeedsMpi || kind == "mpi";
  if (useMpi) {
    int provided = 0, initialised = 0;
    MPI_Initialized(&initialised);
    if (!initialised)
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  }
  int rc = 1;
  {
    std::unique_ptr<Comm> mpi = useMpi ? std::make_unique<Comm>() : nullptr;
    std::unique_ptr<ControlPlane> control;
    Status s = Status::success();
    if (kind == "mpi") {
      control = makeMpiControl(*mpi);
    } else {
      LaunchEnv env; // "single": rank 0 of 1, no sockets
      int port = 0;
      if (kind == "tcp")
        s = readLaunchEnv(env);
      if (s.ok() && kind == "tcp")
        s = rendezvousPort(env, port); // Launch.h: MASTER_PORT + 1
      if (s.ok() && mpi &&
          (env.rank != mpi->rank() || env.worldSize != mpi->size()))
        s = Status::error(
            "the launcher's variables say rank " + std::to_string(env.rank) +
            " of " + std::to_string(env.worldSize) + " (" + env.launcher +
            "), MPI says rank " + std::to_string(mpi->rank()) + " of " +
            std::to_string(mpi->size()));
      if (s.ok())
        control = makeTcpControl(env, port, [useMpi] {
          if (useMpi)
            MPI_Abort(MPI_COMM_WORLD, 1);
        });
    }
    if (s.ok())
      rc = run(argc, argv, spec, *control, mpi.get(), device, makeNet);
    else
      std::fprintf(stderr, "error: the TCP control plane: %s\n",
                   s.message().c_str());
  }
  // Every rank gets here (errors are agreed; other failures abort the job).
  std::fflush(stdout);
  if (useMpi)
    MPI_Finalize();
  return rc;
}

Status lamina::rt::dist::makeMpiCommunicator(ControlPlane &, Comm *mpi,
                                            Device &device, double,
                                            std::unique_ptr<Communicator> &out) {
  if (!mpi)
    return Status::error("the MPI data plane needs MPI, which this launch "
                         "did not initialise");
  out = std::make_unique<MpiCommunicator>(*mpi, device);
  return Status::success();
}

int lamina::rt::distTrainMain(int argc, char **argv, const DistSpec &spec,
                              Device &device) {
  return dist::distTrain(argc, argv, spec, device, dist::makeMpiCommunicator,
                         /*dataNeedsMpi=*/true);
}

int lamina::rt::distTrainMain(int argc, char **argv, const DistSpec &spec) {
  return distTrainMain(argc, argv, spec, hostDevice());
}
