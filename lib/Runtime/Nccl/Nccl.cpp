//===- Nccl.cpp - NCCL communicators and communication streams ------------===//
//
// See include/lamina/Runtime/Cuda/Nccl.h and docs/cuda.md, "NCCL and
// streams". Every communicator is non-blocking (ncclConfig_t.blocking = 0):
// a call may return ncclInProgress, and then ncclCommGetAsyncError is polled
// until the communicator is ready, bounded by the deadline, before anything
// else is done with it (NCCL's rule for non-blocking communicators).
//
//===----------------------------------------------------------------------===//

#include "lamina/Runtime/Cuda/Nccl.h"

#include "lamina/Runtime/Launch.h"

// The C API only (OpenMPI and MPICH otherwise pull in their C++ bindings).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <chrono>
#include <climits>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>

namespace lamina::rt::nccl {

double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

std::string secondsText(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

/// Sleeps a little: short at first, longer the longer a wait has lasted,
/// so a poll neither burns a core for long nor adds much latency.
void backoff(unsigned spins) {
  if (spins < 100)
    return;
  struct timespec ts = {0, spins < 2000 ? 20000 : 500000};
  nanosleep(&ts, nullptr);
}

ncclConfig_t nonBlockingConfig() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

/// Polls ncclCommGetAsyncError(comm) until the communicator leaves
/// ncclInProgress or the deadline passes. `what` names the operation.
Status waitReady(ncclComm_t comm, double deadline, double timeout,
                 const std::string &what) {
  for (unsigned spins = 0;; ++spins) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess)
      return Status::error(what + ": " +
                           ncclText("ncclCommGetAsyncError", r, comm));
    if (state == ncclSuccess)
      return Status::success();
    if (state != ncclInProgress)
      return Status::error(what + ": " +
                           ncclText("ncclCommGetAsyncError", state, comm));
    if (now() > deadline)
      return Status::error(what + " did not complete within " +
                           secondsText(timeout) +
                           " (a rank may have failed, died or not started)");
    backoff(spins);
  }
}

ncclDataType_t ncclType(DType t) {
  switch (t) {
  case DType::F32:
    return ncclFloat32;
  case DType::F16:
    return ncclFloat16;
  case DType::BF16:
    return ncclBfloat16;
  case DType::F64:
    return ncclFloat64;
  }
  return ncclFloat32;
}

//===----------------------------------------------------------------------===//
// MPI helpers
//===----------------------------------------------------------------------===//

std::string mpiText(const char *call, int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
    len = std::snprintf(text, sizeof text, "MPI error %d", rc);
  return std::string(call) + ": " + std::string(text, size_t(len));
}

/// Polls `req` (MPI_Test) until it completes or the deadline passes.
Status mpiWait(MPI_Request &req, double deadline, double timeout,
               const std::string &what) {
  for (unsigned spins = 0;; ++spins) {
    int done = 0;
    int rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
      return Status::error(what + ": " + mpiText("MPI_Test", rc));
    if (done)
      return Status::success();
    if (now() > deadline)
      return Status::error(what + " did not complete within " +
                           secondsText(timeout) +
                           " (a rank may have failed or died)");
    backoff(spins);
  }
}

//===----------------------------------------------------------------------===//
// Device selection
//===----------------------------------------------------------------------===//

/// cudaGetDeviceCount, then cudaSetDevice(device) (the local rank unless
/// `requested` >= 0). `variable` names where the local rank came from.
Status selectDevice(int localRank, int requested, const std::string &variable,
                    int &device) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::error(
        cudaText("cudaGetDeviceCount", e) +
        " (no usable CUDA driver or device on this machine; NCCL needs one "
        "GPU per rank)");
  }
  if (count == 0)
    return Status::error("cudaGetDeviceCount: no CUDA device is visible");
  if (requested >= 0) {
    if (requested >= count)
      return Status::error("device " + std::to_string(requested) +
                           " (--device) is not below the " +
                           std::to_string(count) +
                           " CUDA devices visible (cudaGetDeviceCount)");
    device = requested;
  } else {
    if (localRank >= count)
      return Status::error(
          "local rank " + std::to_string(localRank) + " (" + variable +
          ") is not below the " + std::to_string(count) +
          " CUDA devices visible (cudaGetDeviceCount): start at most one rank "
          "per GPU on each node, or check CUDA_VISIBLE_DEVICES");
    device = localRank;
  }
  e = cudaSetDevice(device);
  if (e != cudaSuccess)
    return Status::error(cudaText("cudaSetDevice", e) + " (device " +
                         std::to_string(device) + ")");
  // cudaFree(0) creates the context now, so a broken device shows here
  // rather than inside NCCL.
  e = cudaFree(nullptr);
  if (e != cudaSuccess)
    return Status::error(cudaText("cudaFree(0) (context creation)", e) +
                         " (device " + std::to_string(device) + ")");
  return Status::success();
}

/// The message rank 0 broadcasts: a flag (1: the id follows) and the id.
struct IdMessage {
  unsigned char ok = 0;
  ncclUniqueId id;
};
constexpr size_t kIdMessageSize = 1 + sizeof(ncclUniqueId);

void pack(const IdMessage &m, unsigned char *buf) {
  buf[0] = m.ok;
  std::memcpy(buf + 1, &m.id, sizeof m.id);
}
void unpack(const unsigned char *buf, IdMessage &m) {
  m.ok = buf[0];
  std::memcpy(&m.id, buf + 1, sizeof m.id);
}

/// Rank 0's half: ncclGetUniqueId when `local` is ok.
Status makeId(const Status &local, IdMessage &m) {
  std::memset(&m.id, 0, sizeof m.id);
  m.ok = 0;
  if (!local.ok())
    return local;
  ncclResult_t r = ncclGetUniqueId(&m.id);
  if (r != ncclSuccess)
    return Status::error(ncclText("ncclGetUniqueId", r, nullptr));
  m.ok = 1;
  return Status::success();
}

Status initComm(const IdMessage &m, int size, int rank, double deadline,
                double timeout, ncclComm_t &world) {
  ncclConfig_t config = nonBlockingConfig();
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, m.id, rank, &config);
  std::string what = "ncclCommInitRank (rank " + std::to_string(rank) +
                     " of " + std::to_string(size) + ")";
  if (r != ncclSuccess && r != ncclInProgress) {
    std::string text = ncclText("ncclCommInitRankConfig", r, comm);
    if (comm)
      (void)ncclCommAbort(comm);
    return Status::error(text);
  }
  if (!comm)
    return Status::error(what + ": NCCL returned no communicator");
  if (Status s = waitReady(comm, deadline, timeout, what); !s.ok()) {
    (void)ncclCommAbort(comm);
    return s;
  }
  world = comm;
  return Status::success();
}

bool envSet(const char *name) {
  const char *v = std::getenv(name);
  return v && *v;
}

std::string localVariableOf(const std::string &launcher) {
  if (launcher == "torchrun")
    return "LOCAL_RANK";
  if (launcher == "mpirun")
    return "OMPI_COMM_WORLD_LOCAL_RANK";
  if (launcher == "slurm")
    return "SLURM_LOCALID";
  return "local rank";
}

/// What every collective bootstrap does once rank, size and local rank are
/// known: each rank selects its device, all agree (`agree`: the lowest
/// failed rank, INT_MAX when none) so one rank's failure does not leave
/// the others waiting for the id, rank 0 makes the id and `broadcast`s it,
/// and the communicator is initialised.
Status selectAndInit(
    const WorldOptions &o, double deadline, WorldInfo &info,
    const std::function<Status(bool ok, int &firstFailed)> &agree,
    const std::function<Status(unsigned char *buf, size_t n)> &broadcast,
    ncclComm_t &world) {
  Status local = selectDevice(info.localRank, o.device, info.localRankVariable,
                              info.device);
  int failed = INT_MAX;
  if (Status s = agree(local.ok(), failed); !s.ok())
    return s;
  if (!local.ok())
    return local;
  if (failed != INT_MAX)
    return Status::error("rank " + std::to_string(failed) +
                         " could not select its CUDA device (see its "
                         "message); not creating the NCCL communicator");
  IdMessage m;
  Status made = info.rank == 0 ? makeId(local, m) : Status::success();
  unsigned char buf[kIdMessageSize];
  pack(m, buf);
  if (Status s = broadcast(buf, kIdMessageSize); !s.ok())
    return s;
  if (!made.ok())
    return made;
  unpack(buf, m);
  if (!m.ok)
    return Status::error("rank 0 could not create the NCCL unique id (see "
                         "its message)");
  return initComm(m, info.size, info.rank, deadline, o.timeoutSeconds, world);
}

Status worldOverMpi(const WorldOptions &o, double deadline, ncclComm_t &world,
                    WorldInfo &info) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized)
    return Status::error("the MPI bootstrap needs MPI, which was already "
                         "finalized (MPI_Finalized)");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int rc = MPI_Init(nullptr, nullptr);
    if (rc != MPI_SUCCESS)
      return Status::error(mpiText("MPI_Init", rc));
    info.mpiInitialisedHere = true;
  }
  int rc = MPI_Comm_rank(MPI_COMM_WORLD, &info.rank);
  if (rc == MPI_SUCCESS)
    rc = MPI_Comm_size(MPI_COMM_WORLD, &info.size);
  if (rc != MPI_SUCCESS)
    return Status::error(mpiText("MPI_Comm_rank/MPI_Comm_size", rc));
  // The local rank: this rank's index among the ranks on its node.
  MPI_Comm node = MPI_COMM_NULL;
  rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, info.rank,
                           MPI_INFO_NULL, &node);
  if (rc != MPI_SUCCESS)
    return Status::error(mpiText("MPI_Comm_split_type", rc));
  rc = MPI_Comm_rank(node, &info.localRank);
  MPI_Comm_free(&node);
  if (rc != MPI_SUCCESS)
    return Status::error(mpiText("MPI_Comm_rank (node)", rc));
  info.bootstrap = "mpi";
  info.launcher = "mpi";
  info.localRankVariable =
      "the rank's index on its node, MPI_COMM_TYPE_SHARED";

  auto agree = [&](bool ok, int &firstFailed) -> Status {
    int mine = ok ? INT_MAX : info.rank;
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = MPI_Iallreduce(&mine, &firstFailed, 1, MPI_INT, MPI_MIN,
                            MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS)
      return Status::error(mpiText("MPI_Iallreduce", rc));
    return mpiWait(req, deadline, o.timeoutSeconds,
                   "agreeing on device selection (MPI_Iallreduce)");
  };
  auto broadcast = [&](unsigned char *buf, size_t n) -> Status {
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = MPI_Ibcast(buf, int(n), MPI_BYTE, 0, MPI_COMM_WORLD, &req);
    if (rc != MPI_SUCCESS)
      return Status::error(mpiText("MPI_Ibcast", rc));
    return mpiWait(req, deadline, o.timeoutSeconds,
                   "broadcasting the NCCL unique id (MPI_Ibcast)");
  };
  return selectAndInit(o, deadline, info, agree, broadcast, world);
}

Status worldOverEnv(const WorldOptions &o, bool single, double deadline,
                    ncclComm_t &world, WorldInfo &info) {
  LaunchEnv env;
  if (single) {
    info.bootstrap = "single";
    info.launcher = "none";
    info.localRankVariable = "local rank of a single process";
  } else {
    if (Status s = readLaunchEnv(env); !s.ok())
      return s;
    info.rank = env.rank;
    info.size = env.worldSize;
    info.localRank = env.localRank;
    info.bootstrap = env.worldSize > 1 ? "tcp" : "single";
    info.launcher = env.launcher;
    info.localRankVariable = localVariableOf(env.launcher);
  }
  Status local = selectDevice(info.localRank, o.device,
                              info.localRankVariable, info.device);
  // A rank other than 0 that failed stops here (rank 0 then times out
  // waiting for it); rank 0 still tells the others it failed.
  if (!local.ok() && info.rank != 0)
    return local;
  IdMessage m;
  Status made = info.rank == 0 ? makeId(local, m) : Status::success();
  if (!single && info.size > 1) {
    unsigned char buf[kIdMessageSize];
    pack(m, buf);
    double left = deadline - now();
    if (left < 1)
      left = 1;
    if (Status s = broadcastBytes(env, buf, kIdMessageSize, left); !s.ok())
      return made.ok() ? Status::error("broadcasting the NCCL unique id: " +
                                       s.message())
                       : made;
    unpack(buf, m);
  }
  if (!made.ok())
    return made;
  if (!m.ok)
    return Status::error("rank 0 could not create the NCCL unique id (see "
                         "its message)");
  return initComm(m, info.size, info.rank, deadline, o.timeoutSeconds, world);
}

/// Bootstrap::Host: as over MPI (every rank agrees that every rank has its
/// device before rank 0 broadcasts the id), on the caller's collectives.
Status worldOverHost(const WorldOptions &o, double deadline,
                     ncclComm_t &world, WorldInfo &info) {
  const HostBootstrap &h = o.host;
  if (!h.firstFailed || !h.broadcast)
    return Status::error("Bootstrap::Host needs the caller's collectives");
  info.rank = h.rank;
  info.size = h.size;
  info.localRank = h.localRank;
  info.bootstrap = "host";
  info.launcher = h.launcher;
  info.localRankVariable = h.localRankVariable;
  auto agree = [&](bool ok, int &firstFailed) {
    firstFailed = h.firstFailed(ok);
    return Status::success();
  };
  auto broadcast = [&](unsigned char *buf, size_t n) {
    h.broadcast(buf, n);
    return Status::success();
  };
  return selectAndInit(o, deadline, info, agree, broadcast, world);
}

} // namespace

//===----------------------------------------------------------------------===//
// Messages
//===----------------------------------------------------------------------===//

std::string ncclText(const char *call, ncclResult_t r, ncclComm_t comm) {
  std::string text = std::string(call) + ": " + ncclGetErrorString(r);
  const char *last = ncclGetLastError(comm);
  if (last && *last)
    text += std::string(" (") + last + ")";
  return text;
}

std::string cudaText(const char *call, cudaError_t e) {
  return std::string(call) + ": " + cudaGetErrorString(e) + " (" +
         cudaGetErrorName(e) + ")";
}

bool parseBootstrap(const std::string &text, Bootstrap &out) {
  if (text == "auto")
    out = Bootstrap::Auto;
  else if (text == "mpi")
    out = Bootstrap::Mpi;
  else if (text == "env")
    out = Bootstrap::Env;
  else
    return false;
  return true;
}

const char *bootstrapName(Bootstrap b) {
  switch (b) {
  case Bootstrap::Auto:
    return "auto";
  case Bootstrap::Mpi:
    return "mpi";
  case Bootstrap::Env:
    return "env";
  case Bootstrap::Host:
    return "host";
  }
  return "?";
}

size_t dtypeSize(DType t) {
  return t == DType::F64 ? 8 : t == DType::F32 ? 4 : 2;
}

const char *dtypeName(DType t) {
  switch (t) {
  case DType::F32:
    return "f32";
  case DType::F16:
    return "f16";
  case DType::BF16:
    return "bf16";
  case DType::F64:
    return "f64";
  }
  return "?";
}

//===----------------------------------------------------------------------===//
// World
//===----------------------------------------------------------------------===//

Status ncclWorld(const WorldOptions &o, ncclComm_t &world, WorldInfo &info) {
  world = nullptr;
  info = WorldInfo();
  if (!(o.timeoutSeconds > 0))
    return Status::error("the communication timeout must be positive");
  double deadline = now() + o.timeoutSeconds;

  Bootstrap b = o.bootstrap;
  bool single = false;
  if (b == Bootstrap::Auto) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    bool underMpirun = envSet("OMPI_COMM_WORLD_SIZE") || envSet("PMIX_RANK") ||
                       envSet("PMI_SIZE");
    if ((initialized && !finalized) ||
        (underMpirun && !envSet("MASTER_ADDR")))
      b = Bootstrap::Mpi;
    else {
      b = Bootstrap::Env;
      single = !envSet("RANK") && !envSet("OMPI_COMM_WORLD_RANK") &&
               !envSet("SLURM_PROCID");
    }
  }
  if (b == Bootstrap::Host)
    return worldOverHost(o, deadline, world, info);
  Status s = b == Bootstrap::Mpi ? worldOverMpi(o, deadline, world, info)
                                 : worldOverEnv(o, single, deadline, world,
                                                info);
  return s;
}

void finalizeBootstrap(WorldInfo &info) {
  if (!info.mpiInitialisedHere)
    return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
  info.mpiInitialisedHere = false;
}

//===----------------------------------------------------------------------===//
// Groups
//===----------------------------------------------------------------------===//

namespace {

Status commShape(Channel &ch) {
  ncclResult_t r = ncclCommCount(ch.comm, &ch.size);
  if (r != ncclSuccess)
    return Status::error(ch.name + ": " +
                         ncclText("ncclCommCount", r, ch.comm));
  r = ncclCommUserRank(ch.comm, &ch.rank);
  if (r != ncclSuccess)
    return Status::error(ch.name + ": " +
                         ncclText("ncclCommUserRank", r, ch.comm));
  return Status::success();
}

/// ncclCommSplit of `parent`, waited for; `out` stays null for NOCOLOR.
/// A non-blocking split fills the new communicator only when the parent
/// leaves ncclInProgress (NVIDIA/nccl#1472, as of NCCL 2.23 to 2.28): the
/// parent is waited for first, then the child.
Status split(Channel &parent, int color, int key, double timeout,
             const std::string &name, Channel &out) {
  ncclConfig_t config = nonBlockingConfig();
  // NCCL's set-up thread stores the child here when it is done, so the
  // slot must outlive a wait that gave up: it is leaked then.
  auto slot = std::make_unique<ncclComm_t>(nullptr);
  ncclResult_t r = ncclCommSplit(parent.comm, color, key, slot.get(), &config);
  std::string what = "ncclCommSplit (" + name + ")";
  auto child = [&slot] { return __atomic_load_n(slot.get(), __ATOMIC_ACQUIRE); };
  if (r != ncclSuccess && r != ncclInProgress) {
    std::string text = ncclText("ncclCommSplit", r, parent.comm);
    if (child())
      (void)ncclCommAbort(child());
    (void)slot.release();
    return Status::error(name + ": " + text);
  }
  double deadline = now() + timeout;
  if (Status s = waitReady(parent.comm, deadline, timeout,
                           what + " on the parent " + parent.name);
      !s.ok()) {
    if (child())
      (void)ncclCommAbort(child());
    (void)slot.release();
    return s;
  }
  ncclComm_t comm = child();
  if (comm) {
    if (Status s = waitReady(comm, deadline, timeout, what); !s.ok()) {
      (void)ncclCommAbort(comm);
      return s;
    }
  } else if (color != NCCL_SPLIT_NOCOLOR) {
    return Status::error(what + ": NCCL returned no communicator");
  }
  out.name = name;
  out.comm = comm;
  if (comm)
    return commShape(out);
  return Status::success();
}

} // namespace

namespace {

/// Polls cudaStreamQuery until `stream` is idle or the deadline passes.
Status waitStream(cudaStream_t stream, double timeout, const std::string &what) {
  double deadline = now() + timeout;
  for (unsigned spins = 0;; ++spins) {
    cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess)
      return Status::success();
    if (e != cudaErrorNotReady)
      return Status::error(what + ": " + cudaText("cudaStreamQuery", e));
    if (now() > deadline)
      return Status::error(what + " did not complete within " +
                           secondsText(timeout) +
                           " (a rank may have failed or died)");
    backoff(spins);
  }
}

/// One byte each way on every pipeline pair, so that NCCL sets up the
/// point-to-point connections now: the first send/recv between two ranks
/// waits (on the host) for the peer to issue its side, which in a pipeline
/// schedule could otherwise tie the host order of operations on different
/// communicators together. Stage s does its previous pair, then its next
/// one, so the chain 0-1, 1-2, ... completes in order.
Status warmUpPairs(NcclGroups &g) {
  if (!g.pipePrev.valid() && !g.pipeNext.valid())
    return Status::success();
  void *buf = nullptr;
  cudaError_t e = cudaMalloc(&buf, 2);
  if (e != cudaSuccess)
    return Status::error(cudaText("cudaMalloc (pipeline warm-up)", e));
  Status result = Status::success();
  for (Channel *ch : {&g.pipePrev, &g.pipeNext}) {
    if (!ch->valid() || !result.ok())
      continue;
    std::string what = "connecting " + ch->name + " (a one-byte send/recv)";
    int peer = NcclGroups::peerRank(*ch);
    unsigned char *bytes = static_cast<unsigned char *>(buf);
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) {
      result = Status::error(what + ": " + ncclText("ncclGroupStart", r,
                                                    ch->comm));
      continue;
    }
    ncclResult_t rs = ncclSend(bytes, 1, ncclUint8, peer, ch->comm,
                               ch->stream);
    ncclResult_t rr = ncclSuccess;
    if (rs == ncclSuccess || rs == ncclInProgress)
      rr = ncclRecv(bytes + 1, 1, ncclUint8, peer, ch->comm, ch->stream);
    r = ncclGroupEnd();
    if (rs != ncclSuccess && rs != ncclInProgress)
      result = Status::error(what + ": " + ncclText("ncclSend", rs, ch->comm));
    else if (rr != ncclSuccess && rr != ncclInProgress)
      result = Status::error(what + ": " + ncclText("ncclRecv", rr, ch->comm));
    else if (r != ncclSuccess && r != ncclInProgress)
      result =
          Status::error(what + ": " + ncclText("ncclGroupEnd", r, ch->comm));
    else if (r == ncclInProgress)
      result = waitReady(ch->comm, now() + g.timeout(), g.timeout(), what);
    if (result.ok())
      result = waitStream(ch->stream, g.timeout(), what);
  }
  if (!result.ok())
    g.abortAll();
  e = cudaFree(buf);
  if (result.ok() && e != cudaSuccess)
    result = Status::error(cudaText("cudaFree (pipeline warm-up)", e));
  return result;
}

} // namespace

GridPlace gridPlace(int worldRank, int pp) {
  GridPlace p;
  p.stage = worldRank % pp;
  p.replica = worldRank / pp;
  p.dpColor = p.stage;
  p.dpKey = p.replica;
  for (int parity = 0; parity < 2; ++parity) {
    int edge = -1;
    if (p.stage % 2 == parity && p.stage + 1 < pp)
      edge = p.stage; // with the next stage
    else if (p.stage % 2 != parity && p.stage >= 1)
      edge = p.stage - 1; // with the previous stage
    p.edge[parity] = edge;
    p.edgeColor[parity] = edge < 0 ? -1 : p.replica * pp + edge;
  }
  return p;
}

int pipelineSplits(int pp) { return pp <= 1 ? 0 : pp == 2 ? 1 : 2; }

Status NcclGroups::create(ncclComm_t worldComm, int pp, int dp,
                          double timeoutSeconds, NcclGroups &g) {
  if (g.world.valid() || g.aborted_)
    return Status::error("NcclGroups::create: the object is already in use");
  g.timeout_ = timeoutSeconds > 0 ? timeoutSeconds : 60;
  g.world.name = "world";
  g.world.comm = worldComm;
  if (!worldComm)
    return Status::error("NcclGroups::create: no world communicator");
  if (Status s = commShape(g.world); !s.ok())
    return s;
  if (pp < 1 || dp < 1 || (long long)pp * dp != g.world.size)
    return Status::error("the grid pp " + std::to_string(pp) + " x dp " +
                         std::to_string(dp) + " does not match the world of " +
                         std::to_string(g.world.size) + " ranks");
  const GridPlace place = gridPlace(g.world.rank, pp);
  g.pp = pp;
  g.dp = dp;
  g.stage = place.stage;
  g.replica = place.replica;

  // The replicas of this stage (MPI_Comm_split(world, stage, replica) in
  // lib/Runtime/Dist).
  if (Status s = split(g.world, place.dpColor, place.dpKey, g.timeout_, "dp",
                       g.dpGroup);
      !s.ok())
    return s;

  // The pipeline pairs: one split per edge parity that exists (every rank
  // computes the same count, so all take part in each split).
  for (int parity = 0; parity < pipelineSplits(pp); ++parity) {
    int edge = place.edge[parity];
    int color = edge < 0 ? NCCL_SPLIT_NOCOLOR : place.edgeColor[parity];
    Channel pair;
    std::string name = edge == g.stage ? "pipe-next" : "pipe-prev";
    if (Status s = split(g.world, color, place.stage, g.timeout_,
                         edge < 0 ? "pipeline (none)" : name, pair);
        !s.ok())
      return s;
    if (edge < 0)
      continue;
    if (pair.size != 2) {
      (void)ncclCommAbort(pair.comm);
      return Status::error(name + ": ncclCommSplit made a communicator of " +
                           std::to_string(pair.size) + " ranks, not 2");
    }
    (edge == g.stage ? g.pipeNext : g.pipePrev) = pair;
  }

  // A stream per communicator, with the greatest priority: its work is
  // scheduled ahead of compute blocks waiting for an SM.
  int least = 0, greatest = 0;
  cudaError_t e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
  if (e != cudaSuccess)
    return Status::error(cudaText("cudaDeviceGetStreamPriorityRange", e));
  for (Channel *ch : g.channels()) {
    e = cudaStreamCreateWithPriority(&ch->stream, cudaStreamNonBlocking,
                                     greatest);
    if (e != cudaSuccess) {
      ch->stream = nullptr;
      return Status::error(ch->name + ": " +
                           cudaText("cudaStreamCreateWithPriority", e));
    }
  }
  return warmUpPairs(g);
}

std::vector<Channel *> NcclGroups::all() {
  std::vector<Channel *> out = {&pipePrev, &pipeNext, &dpGroup, &world};
  for (auto &ch : extra_)
    out.push_back(ch.get());
  return out;
}

std::vector<Channel *> NcclGroups::channels() {
  std::vector<Channel *> valid;
  for (Channel *ch : all())
    if (ch->valid())
      valid.push_back(ch);
  return valid;
}

Status NcclGroups::addChannel(int color, int key, const std::string &name,
                              Channel *&out) {
  out = nullptr;
  if (!world.valid())
    return Status::error(name + ": the world communicator is gone");
  auto ch = std::make_unique<Channel>();
  if (Status s = split(world, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key,
                       timeout_, name, *ch);
      !s.ok())
    return s;
  if (!ch->valid())
    return Status::success();
  int least = 0, greatest = 0;
  cudaError_t e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
  if (e == cudaSuccess)
    e = cudaStreamCreateWithPriority(&ch->stream, cudaStreamNonBlocking,
                                     greatest);
  if (e != cudaSuccess) {
    (void)ncclCommAbort(ch->comm);
    return Status::error(name + ": " +
                         cudaText("cudaStreamCreateWithPriority", e));
  }
  out = ch.get();
  extra_.push_back(std::move(ch));
  return Status::success();
}

void NcclGroups::abortAll() {
  for (Channel *ch : all())
    if (ch->comm) {
      (void)ncclCommAbort(ch->comm);
      ch->comm = nullptr;
    }
  aborted_ = true;
}

std::string NcclGroups::asyncErrors() {
  std::string all;
  for (Channel *ch : channels()) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(ch->comm, &state);
    std::string text;
    if (r != ncclSuccess)
      text = ncclText("ncclCommGetAsyncError", r, ch->comm);
    else if (state != ncclSuccess && state != ncclInProgress)
      text = ncclText("ncclCommGetAsyncError", state, ch->comm);
    if (!text.empty())
      all += (all.empty() ? "" : "; ") + ch->name + ": " + text;
  }
  return all;
}

Status NcclGroups::destroy() {
  std::string errors;
  auto note = [&](const std::string &text) {
    errors += (errors.empty() ? "" : "; ") + text;
  };
  // The added channels first: they were split from the world.
  std::vector<Channel *> order = all();
  std::reverse(order.begin() + 4, order.end());
  std::rotate(order.begin(), order.begin() + 4, order.end());
  for (Channel *ch : order) {
    if (ch->comm) {
      ncclResult_t r = ncclCommFinalize(ch->comm);
      Status s = Status::success();
      if (r != ncclSuccess && r != ncclInProgress)
        s = Status::error(ncclText("ncclCommFinalize", r, ch->comm));
      else
        s = waitReady(ch->comm, now() + timeout_, timeout_,
                      "ncclCommFinalize");
      if (s.ok()) {
        r = ncclCommDestroy(ch->comm);
        if (r != ncclSuccess)
          note(ch->name + ": " + ncclText("ncclCommDestroy", r, nullptr));
      } else {
        note(ch->name + ": " + s.message() + "; aborted");
        (void)ncclCommAbort(ch->comm);
      }
      ch->comm = nullptr;
    }
    if (ch->stream) {
      cudaError_t e = cudaStreamDestroy(ch->stream);
      if (e != cudaSuccess)
        note(ch->name + ": " + cudaText("cudaStreamDestroy", e));
      ch->stream = nullptr;
    }
  }
  if (!errors.empty())
    return Status::error(errors);
  return Status::success();
}

NcclGroups::~NcclGroups() { (void)destroy(); }

//===----------------------------------------------------------------------===//
// CommStreams
//===----------------------------------------------------------------------===//

CommStreams::CommStreams(NcclGroups &groups, double timeoutSeconds)
    : timeout(timeoutSeconds), groups_(groups) {}

CommStreams::~CommStreams() {
  // Destroying an event whose work is pending is allowed: CUDA releases it
  // once the work completes.
  for (Slot &s : slots_) {
    if (s.start)
      (void)cudaEventDestroy(s.start);
    if (s.done)
      (void)cudaEventDestroy(s.done);
  }
}

int CommStreams::outstanding() const {
  int n = 0;
  for (const Slot &s : slots_)
    n += s.busy ? 1 : 0;
  return n;
}

Status CommStreams::acquire(int &slot) {
  if (free_.empty()) {
    Slot s;
    cudaError_t e = cudaEventCreateWithFlags(&s.start, cudaEventDisableTiming);
    if (e != cudaSuccess)
      return Status::error(cudaText("cudaEventCreateWithFlags", e));
    e = cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming);
    if (e != cudaSuccess) {
      (void)cudaEventDestroy(s.start);
      return Status::error(cudaText("cudaEventCreateWithFlags", e));
    }
    slots_.push_back(s);
    free_.push_back(int(slots_.size()) - 1);
  }
  slot = free_.back();
  free_.pop_back();
  Slot &s = slots_[size_t(slot)];
  s.busy = true;
  s.serial = nextSerial_++;
  s.firstPolledAt = -1;
  return Status::success();
}

void CommStreams::release(int slot) {
  Slot &s = slots_[size_t(slot)];
  s.busy = false;
  s.channel = nullptr;
  s.what.clear();
  free_.push_back(slot);
}

Status CommStreams::usable(Channel &ch, const char *op) {
  if (groups_.aborted())
    return Status::error(std::string(op) + " on " + ch.name +
                         ": the NCCL communicators were aborted after an "
                         "earlier error");
  if (!ch.valid())
    return Status::error(std::string(op) + ": communicator " +
                         (ch.name.empty() ? "(unnamed)" : ch.name) +
                         " does not exist on this rank");
  if (!ch.stream)
    return Status::error(std::string(op) + " on " + ch.name +
                         ": the communicator has no stream");
  return Status::success();
}

Status CommStreams::begin(Channel &ch, cudaStream_t compute,
                          const std::string &what, int &slot) {
  if (Status s = acquire(slot); !s.ok())
    return Status::error(what + ": " + s.message());
  Slot &s = slots_[size_t(slot)];
  s.channel = &ch;
  s.what = what;
  // The communication starts after everything already enqueued on the
  // compute stream (which produced the buffers).
  cudaError_t e = cudaEventRecord(s.start, compute);
  if (e != cudaSuccess) {
    release(slot);
    return Status::error(what + ": " +
                         cudaText("cudaEventRecord (compute stream)", e));
  }
  e = cudaStreamWaitEvent(ch.stream, s.start, 0);
  if (e != cudaSuccess) {
    release(slot);
    return Status::error(what + ": " + cudaText("cudaStreamWaitEvent", e) +
                         " (" + ch.name + " stream)");
  }
  return Status::success();
}

Status CommStreams::enqueued(Channel &ch, ncclResult_t r, const char *call,
                             const std::string &what) {
  if (r == ncclSuccess)
    return Status::success();
  if (r != ncclInProgress)
    return Status::error(what + ": " + ncclText(call, r, ch.comm));
  // Non-blocking communicator: the operation is enqueued once the
  // communicator is ready again (connections may be set up first).
  Status s = waitReady(ch.comm, now() + timeout, timeout,
                       what + " (" + call + ")");
  if (!s.ok()) {
    std::string async = groups_.asyncErrors();
    groups_.abortAll();
    return Status::error(s.message() + "; NCCL communicators aborted" +
                         (async.empty() ? "" : " (" + async + ")"));
  }
  return Status::success();
}

Status CommStreams::finish(Channel &ch, int slot, ncclResult_t r,
                           const char *call, CommHandle &out) {
  Slot &s = slots_[size_t(slot)];
  if (Status st = enqueued(ch, r, call, s.what); !st.ok()) {
    release(slot);
    return st;
  }
  cudaError_t e = cudaEventRecord(s.done, ch.stream);
  if (e != cudaSuccess) {
    std::string what = s.what;
    release(slot);
    return Status::error(what + ": " + cudaText("cudaEventRecord", e) + " (" +
                         ch.name + " stream)");
  }
  out.slot = slot;
  out.serial = s.serial;
  return Status::success();
}

Status CommStreams::sendRecv(Channel &ch, const void *sendBuf,
                             size_t sendBytes, int sendPeer, void *recvBuf,
                             size_t recvBytes, int recvPeer,
                             cudaStream_t compute, CommHandle &out) {
  out = CommHandle();
  if (Status s = usable(ch, "send/recv"); !s.ok())
    return s;
  if (sendPeer < -1 || sendPeer >= ch.size || recvPeer < -1 ||
      recvPeer >= ch.size)
    return Status::error("send/recv on " + ch.name + ": peer " +
                         std::to_string(sendPeer < -1 || sendPeer >= ch.size
                                            ? sendPeer
                                            : recvPeer) +
                         " is not a rank of the " + std::to_string(ch.size) +
                         "-rank communicator");
  if (sendPeer < 0 && recvPeer < 0)
    return Status::error("send/recv on " + ch.name + ": neither a send nor a "
                         "receive");
  if ((sendPeer >= 0 && sendBytes && !sendBuf) ||
      (recvPeer >= 0 && recvBytes && !recvBuf))
    return Status::error("send/recv on " + ch.name + ": a null buffer");
  std::string what;
  if (sendPeer >= 0)
    what = "send of " + std::to_string(sendBytes) + " bytes to rank " +
           std::to_string(sendPeer);
  if (recvPeer >= 0)
    what += std::string(what.empty() ? "" : " and ") + "receive of " +
            std::to_string(recvBytes) + " bytes from rank " +
            std::to_string(recvPeer);
  what += " on " + ch.name + " (rank " + std::to_string(ch.rank) + " of " +
          std::to_string(ch.size) + ")";
  int slot;
  if (Status s = begin(ch, compute, what, slot); !s.ok())
    return s;
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) {
    release(slot);
    return Status::error(what + ": " + ncclText("ncclGroupStart", r, ch.comm));
  }
  const char *failed = nullptr;
  ncclResult_t first = ncclSuccess;
  if (sendPeer >= 0) {
    r = ncclSend(sendBuf, sendBytes, ncclUint8, sendPeer, ch.comm, ch.stream);
    if (r != ncclSuccess && r != ncclInProgress) {
      failed = "ncclSend";
      first = r;
    }
  }
  if (recvPeer >= 0 && !failed) {
    r = ncclRecv(recvBuf, recvBytes, ncclUint8, recvPeer, ch.comm, ch.stream);
    if (r != ncclSuccess && r != ncclInProgress) {
      failed = "ncclRecv";
      first = r;
    }
  }
  // The group is always closed, even after a failed call inside it.
  r = ncclGroupEnd();
  if (failed) {
    release(slot);
    return Status::error(what + ": " + ncclText(failed, first, ch.comm));
  }
  Status st = finish(ch, slot, r, "ncclGroupEnd", out);
  if (st.ok() && sendPeer >= 0)
    ch.p2pBytesSent += sendBytes;
  return st;
}

Status CommStreams::allToAll(Channel &ch, const void *send,
                             const std::vector<size_t> &sendBytes,
                             const std::vector<size_t> &sendOffsets,
                             void *recv, const std::vector<size_t> &recvBytes,
                             const std::vector<size_t> &recvOffsets,
                             cudaStream_t compute, CommHandle &out) {
  out = CommHandle();
  if (Status s = usable(ch, "all-to-all"); !s.ok())
    return s;
  const size_t n = size_t(ch.size);
  if (sendBytes.size() != n || sendOffsets.size() != n ||
      recvBytes.size() != n || recvOffsets.size() != n)
    return Status::error("all-to-all on " + ch.name + ": counts for " +
                         std::to_string(sendBytes.size()) + " ranks, not " +
                         std::to_string(n));
  size_t sent = 0, got = 0;
  for (size_t q = 0; q < n; ++q)
    sent += sendBytes[q], got += recvBytes[q];
  if ((sent && !send) || (got && !recv))
    return Status::error("all-to-all on " + ch.name + ": a null buffer");
  std::string what = "all-to-all of " + std::to_string(sent) + " bytes out, " +
                     std::to_string(got) + " in on " + ch.name + " (rank " +
                     std::to_string(ch.rank) + " of " +
                     std::to_string(ch.size) + ")";
  int slot;
  if (Status s = begin(ch, compute, what, slot); !s.ok())
    return s;
  ncclResult_t r = ncclGroupStart();
  if (r != ncclSuccess) {
    release(slot);
    return Status::error(what + ": " + ncclText("ncclGroupStart", r, ch.comm));
  }
  const char *failed = nullptr;
  ncclResult_t first = ncclSuccess;
  for (size_t q = 0; q < n && !failed; ++q) {
    if (sendBytes[q]) {
      r = ncclSend(static_cast<const char *>(send) + sendOffsets[q],
                   sendBytes[q], ncclUint8, int(q), ch.comm, ch.stream);
      if (r != ncclSuccess && r != ncclInProgress)
        failed = "ncclSend", first = r;
    }
    if (recvBytes[q] && !failed) {
      r = ncclRecv(static_cast<char *>(recv) + recvOffsets[q], recvBytes[q],
                   ncclUint8, int(q), ch.comm, ch.stream);
      if (r != ncclSuccess && r != ncclInProgress)
        failed = "ncclRecv", first = r;
    }
  }
  // The group is always closed, even after a failed call inside it.
  r = ncclGroupEnd();
  if (failed) {
    release(slot);
    return Status::error(what + ": " + ncclText(failed, first, ch.comm));
  }
  return finish(ch, slot, r, "ncclGroupEnd", out);
}

Status CommStreams::allReduce(Channel &ch, const void *send, void *recv,
                              size_t count, DType type, cudaStream_t compute,
                              CommHandle &out, bool maximum) {
  out = CommHandle();
  if (Status s = usable(ch, "all-reduce"); !s.ok())
    return s;
  if (count && (!send || !recv))
    return Status::error("all-reduce on " + ch.name + ": a null buffer");
  std::string what = std::string("all-reduce (") + (maximum ? "max" : "sum") +
                     ") of " + std::to_string(count) + " " + dtypeName(type) +
                     " on " + ch.name + " (rank " + std::to_string(ch.rank) +
                     " of " + std::to_string(ch.size) + ")";
  int slot;
  if (Status s = begin(ch, compute, what, slot); !s.ok())
    return s;
  ncclResult_t r =
      ncclAllReduce(send, recv, count, ncclType(type),
                    maximum ? ncclMax : ncclSum, ch.comm, ch.stream);
  Status st = finish(ch, slot, r, "ncclAllReduce", out);
  if (st.ok())
    ch.collectiveBytes += 2.0 * (ch.size - 1) / ch.size * double(count) *
                          double(dtypeSize(type));
  return st;
}

Status CommStreams::reduceScatter(Channel &ch, const void *send, void *recv,
                                  size_t countPerRank, DType type,
                                  cudaStream_t compute, CommHandle &out) {
  out = CommHandle();
  if (Status s = usable(ch, "reduce-scatter"); !s.ok())
    return s;
  if (countPerRank && (!send || !recv))
    return Status::error("reduce-scatter on " + ch.name + ": a null buffer");
  std::string what = "reduce-scatter (sum) of " +
                     std::to_string(countPerRank) + " x " +
                     std::to_string(ch.size) + " " + dtypeName(type) + " on " +
                     ch.name + " (rank " + std::to_string(ch.rank) + " of " +
                     std::to_string(ch.size) + ")";
  int slot;
  if (Status s = begin(ch, compute, what, slot); !s.ok())
    return s;
  ncclResult_t r = ncclReduceScatter(send, recv, countPerRank, ncclType(type),
                                     ncclSum, ch.comm, ch.stream);
  Status st = finish(ch, slot, r, "ncclReduceScatter", out);
  if (st.ok())
    ch.collectiveBytes += double(ch.size - 1) * double(countPerRank) *
                          double(dtypeSize(type));
  return st;
}

Status CommStreams::allGather(Channel &ch, const void *send, void *recv,
                              size_t countPerRank, DType type,
                              cudaStream_t compute, CommHandle &out) {
  out = CommHandle();
  if (Status s = usable(ch, "all-gather"); !s.ok())
    return s;
  if (countPerRank && (!send || !recv))
    return Status::error("all-gather on " + ch.name + ": a null buffer");
  std::string what = "all-gather of " + std::to_string(countPerRank) + " x " +
                     std::to_string(ch.size) + " " + dtypeName(type) + " on " +
                     ch.name + " (rank " + std::to_string(ch.rank) + " of " +
                     std::to_string(ch.size) + ")";
  int slot;
  if (Status s = begin(ch, compute, what, slot); !s.ok())
    return s;
  ncclResult_t r = ncclAllGather(send, recv, countPerRank, ncclType(type),
                                 ch.comm, ch.stream);
  Status st = finish(ch, slot, r, "ncclAllGather", out);
  if (st.ok())
    ch.collectiveBytes += double(ch.size - 1) * double(countPerRank) *
                          double(dtypeSize(type));
  return st;
}

Status CommStreams::check(const CommHandle &h, Slot *&s) {
  if (h.slot < 0 || size_t(h.slot) >= slots_.size() ||
      !slots_[size_t(h.slot)].busy ||
      slots_[size_t(h.slot)].serial != h.serial)
    return Status::error("invalid communication handle (already waited for, "
                         "completed, or never issued)");
  s = &slots_[size_t(h.slot)];
  return Status::success();
}

Status CommStreams::wait(CommHandle &h, cudaStream_t compute) {
  Slot *s;
  if (Status st = check(h, s); !st.ok())
    return st;
  // The wait captures the event's current record: the slot can be reused
  // (and its event recorded again) right after.
  cudaError_t e = cudaStreamWaitEvent(compute, s->done, 0);
  std::string what = s->what;
  release(h.slot);
  h = CommHandle();
  if (e != cudaSuccess)
    return Status::error(what + ": " +
                         cudaText("cudaStreamWaitEvent (compute stream)", e));
  return Status::success();
}

Status CommStreams::timeoutError(const std::string &what, double waited) {
  std::string async = groups_.asyncErrors();
  groups_.abortAll();
  return Status::error(
      what + " did not complete within " + secondsText(waited) +
      " (--comm-timeout); a peer may have died or not issued the matching "
      "operation; NCCL communicators aborted" +
      (async.empty() ? "" : " (ncclCommGetAsyncError: " + async + ")"));
}

Status CommStreams::test(CommHandle &h, bool &done) {
  done = false;
  Slot *s;
  if (Status st = check(h, s); !st.ok())
    return st;
  double t = now();
  if (s->firstPolledAt < 0)
    s->firstPolledAt = t;
  cudaError_t e = cudaEventQuery(s->done);
  if (e == cudaSuccess) {
    release(h.slot);
    h = CommHandle();
    done = true;
    return Status::success();
  }
  if (e != cudaErrorNotReady) {
    std::string what = s->what;
    release(h.slot);
    h = CommHandle();
    return Status::error(what + ": " + cudaText("cudaEventQuery", e));
  }
  // Not done: has the communicator failed (a peer's network error)?
  if (groups_.aborted() || !s->channel || !s->channel->comm) {
    std::string what = s->what;
    release(h.slot);
    h = CommHandle();
    return Status::error(what + ": the NCCL communicators were aborted");
  }
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(s->channel->comm, &state);
  if (r != ncclSuccess || (state != ncclSuccess && state != ncclInProgress)) {
    std::string what = s->what;
    std::string text =
        r != ncclSuccess
            ? ncclText("ncclCommGetAsyncError", r, s->channel->comm)
            : ncclText("ncclCommGetAsyncError", state, s->channel->comm);
    release(h.slot);
    h = CommHandle();
    groups_.abortAll();
    return Status::error(what + ": " + text + "; NCCL communicators aborted");
  }
  if (t - s->firstPolledAt > timeout) {
    std::string what = s->what;
    release(h.slot);
    h = CommHandle();
    return timeoutError(what, timeout);
  }
  return Status::success();
}

Status CommStreams::waitHost(CommHandle &h) {
  for (unsigned spins = 0;; ++spins) {
    bool done = false;
    if (Status s = test(h, done); !s.ok())
      return s;
    if (done)
      return Status::success();
    backoff(spins);
  }
}

Status CommStreams::syncStream(cudaStream_t stream, const std::string &what) {
  int slot;
  if (Status s = acquire(slot); !s.ok())
    return Status::error(what + ": " + s.message());
  Slot &s = slots_[size_t(slot)];
  cudaError_t e = cudaEventRecord(s.done, stream);
  if (e != cudaSuccess) {
    release(slot);
    return Status::error(what + ": " + cudaText("cudaEventRecord", e));
  }
  double start = now();
  for (unsigned spins = 0;; ++spins) {
    e = cudaEventQuery(slots_[size_t(slot)].done);
    if (e == cudaSuccess) {
      release(slot);
      return Status::success();
    }
    if (e != cudaErrorNotReady) {
      release(slot);
      return Status::error(what + ": " + cudaText("cudaEventQuery", e));
    }
    std::string async = groups_.aborted() ? "" : groups_.asyncErrors();
    if (!async.empty()) {
      release(slot);
      groups_.abortAll();
      return Status::error(what + ": " + async +
                           "; NCCL communicators aborted");
    }
    if (now() - start > timeout) {
      release(slot);
      // The stream waits for communication that does not finish.
      return timeoutError(what + " (stream synchronisation)", timeout);
    }
    backoff(spins);
  }
}

} // namespace lamina::rt::nccl
