//===- World.cpp - the world communicator: bootstrap and device -----------===//
//
// ncclWorld: the device chosen from the local rank, then the unique id
// shared over MPI, the launcher's TCP rendezvous or the host control
// plane, and the world communicator made (docs/cuda.md, "Bootstrap").
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include "lamina/Runtime/Dist/Launch.h"

// The C API only (OpenMPI and MPICH otherwise pull in their C++ bindings).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>

namespace lamina::rt::dist::nccl {

using namespace detail;

namespace {

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
  std::string what = "ncclCommInitRank (rank " + std::to_string(rank) + " of " +
                     std::to_string(size) + ")";
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
  info.localRankVariable = "the rank's index on its node, MPI_COMM_TYPE_SHARED";

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
  Status local = selectDevice(info.localRank, o.device, info.localRankVariable,
                              info.device);
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
Status worldOverHost(const WorldOptions &o, double deadline, ncclComm_t &world,
                     WorldInfo &info) {
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
    if ((initialized && !finalized) || (underMpirun && !envSet("MASTER_ADDR")))
      b = Bootstrap::Mpi;
    else {
      b = Bootstrap::Env;
      single = !envSet("RANK") && !envSet("OMPI_COMM_WORLD_RANK") &&
               !envSet("SLURM_PROCID");
    }
  }
  if (b == Bootstrap::Host)
    return worldOverHost(o, deadline, world, info);
  Status s = b == Bootstrap::Mpi
                 ? worldOverMpi(o, deadline, world, info)
                 : worldOverEnv(o, single, deadline, world, info);
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

} // namespace lamina::rt::dist::nccl
