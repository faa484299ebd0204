//===- DistTrain.cpp - the driver of a distributed training program -------===//
//
// distTrainMain (DistProgram.h): MPI start-up, the flags of trainMain plus
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

/// Gathers every rank's string to rank 0 (collective).
std::vector<std::string> gatherStrings(const std::string &mine, int size,
                                       int rank) {
  int len = int(mine.size());
  std::vector<int> lens(static_cast<size_t>(size)),
      displs(static_cast<size_t>(size));
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string all;
  if (rank == 0) {
    int at = 0;
    for (int i = 0; i < size; ++i) {
      displs[size_t(i)] = at;
      at += lens[size_t(i)];
    }
    all.resize(size_t(at));
  }
  MPI_Gatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(),
              displs.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  std::vector<std::string> out;
  if (rank == 0)
    for (int i = 0; i < size; ++i)
      out.push_back(all.substr(size_t(displs[size_t(i)]), size_t(lens[size_t(i)])));
  return out;
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

std::string jsonEscape(const std::string &s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out;
}

/// Per-rank statistics: printed by rank 0, and as JSON with --stats.
Status reportStats(Executor &ex, int64_t steps, double wall) {
  Comm &comm = ex.comm;
  Communicator &net = ex.net;
  double n = steps > 0 ? double(steps) : 1.0;
  char line[512];
  double idle = wall > 0 ? std::max(0.0, 1.0 - ex.busySeconds / wall) : 0;
  std::snprintf(line, sizeof line,
                "{\"rank\": %d, \"pp\": %d, \"dp\": %d, "
                "\"p2p_bytes_per_step\": %.0f, "
                "\"collective_bytes_per_step\": %.0f, "
                "\"compute_seconds\": %.6f, \"wall_seconds\": %.6f, "
                "\"idle_fraction\": %.4f, \"arena_bytes\": %zu, "
                "\"peak_activation_bytes\": %zu}",
                ex.rank, ex.pp, ex.dp, double(net.p2pBytesSent) / n,
                net.collectiveBytes / n, ex.busySeconds, wall, idle,
                ex.arenaBytes, ex.peakHeldBytes);
  std::vector<std::string> all = gatherStrings(line, comm.size(), comm.rank());
  if (comm.rank() != 0)
    return Status::success();
  for (int r = 0; r < comm.size(); ++r) {
    int pp = r % ex.spec.pp, dp = r / ex.spec.pp;
    double p2p = 0, coll = 0, busy = 0, idleF = 0;
    unsigned long long arena = 0, peak = 0;
    const char *j = all[size_t(r)].c_str();
    std::sscanf(std::strstr(j, "\"p2p_bytes_per_step\""),
                "\"p2p_bytes_per_step\": %lf", &p2p);
    std::sscanf(std::strstr(j, "\"collective_bytes_per_step\""),
                "\"collective_bytes_per_step\": %lf", &coll);
    std::sscanf(std::strstr(j, "\"compute_seconds\""),
                "\"compute_seconds\": %lf", &busy);
    std::sscanf(std::strstr(j, "\"idle_fraction\""), "\"idle_fraction\": %lf",
                &idleF);
    std::sscanf(std::strstr(j, "\"arena_bytes\""), "\"arena_bytes\": %llu",
                &arena);
    std::sscanf(std::strstr(j, "\"peak_activation_bytes\""),
                "\"peak_activation_bytes\": %llu", &peak);
    std::printf("stats: rank %d (pp %d, dp %d): p2p %.0f B/step, collective "
                "%.0f B/step, compute %.3f s, idle %.1f%%, arena %llu B, peak "
                "activations %llu B\n",
                r, pp, dp, p2p, coll, busy, 100 * idleF, arena, peak);
  }
  std::fflush(stdout);
  if (ex.o.stats.empty())
    return Status::success();
  std::string json = "{\"config\": \"" + jsonEscape(configLine(ex.spec)) +
                     "\", \"steps\": " + std::to_string(steps) +
                     ", \"ranks\": [\n";
  for (size_t r = 0; r < all.size(); ++r)
    json += "  " + all[r] + (r + 1 < all.size() ? ",\n" : "\n");
  json += "]}\n";
  return writeText(ex.o.stats, json);
}

/// Chrome trace: rank 0 gathers every rank's events (pid = rank).
Status writeTrace(Executor &ex) {
  std::string mine;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, "
                "\"args\": {\"name\": \"rank %d (pp %d, dp %d)\"}}",
                ex.rank, ex.rank, ex.pp, ex.dp);
  mine += buf;
  for (const TraceEvent &e : ex.events) {
    std::snprintf(buf, sizeof buf,
                  ",\n{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", "
                  "\"pid\": %d, \"tid\": 0, \"ts\": %.3f, \"dur\": %.3f}",
                  e.name.c_str(), e.cat, ex.rank, e.start * 1e6, e.dur * 1e6);
    mine += buf;
  }
  std::vector<std::string> all =
      gatherStrings(mine, ex.comm.size(), ex.comm.rank());
  if (ex.rank != 0)
    return Status::success();
  std::string json = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  for (size_t r = 0; r < all.size(); ++r)
    json += all[r] + (r + 1 < all.size() ? ",\n" : "\n");
  json += "]}\n";
  return writeText(ex.o.trace, json);
}

int run(int argc, char **argv, const DistSpec &spec, Comm &comm,
        Device &device, const MakeCommunicator &makeNet) {
  TrainOptions o;
  bool root = comm.rank() == 0;
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
  if (comm.size() != spec.numRanks) {
    if (root)
      std::fprintf(stderr,
                   "error: the program was compiled for %d ranks (pp %d x dp "
                   "%d) but runs on %d; launch it with mpirun -np %d\n",
                   spec.numRanks, spec.pp, spec.dp, comm.size(),
                   spec.numRanks);
    return 1;
  }
  comm.timeout = o.commTimeout;
  if (o.threads > 0)
    if (!agree(comm, device.setThreads(int(o.threads))).ok())
      return 1;

  std::unique_ptr<Communicator> net;
  if (!agree(comm, makeNet(comm, device, o.commTimeout, net)).ok())
    return 1;
  net->timeout = o.commTimeout;
  Executor ex(spec, o, comm, *net, device);
  if (!agree(comm, ex.setup()).ok())
    return 1;
  if (!o.checkpointDir.empty()) {
    Status s = root ? makeDirs(o.checkpointDir) : Status::success();
    if (!s.ok())
      s = Status::error("--checkpoint-dir: " + s.message());
    if (!agree(comm, s).ok())
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

  MPI_Barrier(MPI_COMM_WORLD);
  ex.tracing = !o.trace.empty();
  ex.traceStart = now();
  double start = ex.traceStart;
  int64_t firstStep = step, lastCkpt = step;
  int64_t tokensPerStep = ex.globalBatch * ex.seq;
  for (; step < o.steps; ++step) {
    maybeInjectFault(comm.rank(), step + 1);
    double loss = 0;
    if (Status s = ex.step(step, loss); !s.ok())
      comm.abort(s.message());
    if (!std::isfinite(loss)) {
      if (root)
        std::fprintf(stderr, "error: the loss is %s at step %lld\n",
                     std::to_string(loss).c_str(), (long long)(step + 1));
      return 1;
    }
    int64_t done = step + 1;
    if (root && (done % o.logEvery == 0 || done == o.steps || done == 1)) {
      double elapsed = now() - start;
      double perStep = elapsed / double(done - firstStep);
      double tps = elapsed > 0
                       ? double(tokensPerStep * (done - firstStep)) / elapsed
                       : 0;
      std::printf("step %lld loss %.6f lr %.6g tokens/s %.0f elapsed %.1fs "
                  "eta %.1fs\n",
                  (long long)done, loss, ex.sched.at(step), tps, elapsed,
                  perStep * double(o.steps - done));
      std::fflush(stdout);
    }
    if (o.checkpointEvery > 0 && done % o.checkpointEvery == 0) {
      if (!saveDistCheckpoint(ex, done).ok())
        return 1;
      lastCkpt = done;
    }
  }
  double wall = now() - start;
  if (!o.checkpointDir.empty() && lastCkpt != step)
    if (!saveDistCheckpoint(ex, step).ok())
      return 1;
  if (!agree(comm, reportStats(ex, step - firstStep, wall)).ok())
    return 1;
  if (!o.trace.empty() && !agree(comm, writeTrace(ex)).ok())
    return 1;
  if (!o.exportPath.empty()) {
    if (!exportDist(ex, o.exportPath).ok())
      return 1;
    if (root)
      std::printf("exported the trained model to %s\n", o.exportPath.c_str());
  }
  return 0;
}

} // namespace

int lamina::rt::dist::distTrain(int argc, char **argv, const DistSpec &spec,
                                 Device &device,
                                 const MakeCommunicator &makeNet) {
  int provided = 0;
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised)
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  int rc;
  {
    Comm comm;
    rc = run(argc, argv, spec, comm, device, makeNet);
  }
  // Every rank gets here (errors are agreed; other failures abort the job).
  std::fflush(stdout);
  MPI_Finalize();
  return rc;
}

Status lamina::rt::dist::makeMpiCommunicator(Comm &comm, Device &device,
                                            double,
                                            std::unique_ptr<Communicator> &out) {
  out = std::make_unique<MpiCommunicator>(comm, device);
  return Status::success();
}

int lamina::rt::distTrainMain(int argc, char **argv, const DistSpec &spec,
                              Device &device) {
  return dist::distTrain(argc, argv, spec, device, dist::makeMpiCommunicator);
}

int lamina::rt::distTrainMain(int argc, char **argv, const DistSpec &spec) {
  return distTrainMain(argc, argv, spec, hostDevice());
}
