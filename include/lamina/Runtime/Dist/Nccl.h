//===- Nccl.h - NCCL communicators and communication streams ----*- C++ -*-===//
//
// The device-side communication layer of the CUDA backend (library
// `lamina_nccl`, built when CUDA is enabled and NCCL is found;
// docs/cuda.md, "NCCL and streams"):
//
// * ncclWorld: the world communicator. Rank 0 makes the ncclUniqueId and
//   gives it to every rank through MPI (under mpirun) or lamina_launch's TCP
//   rendezvous (torchrun-style variables, or mpirun/srun variables with
//   MASTER_ADDR/MASTER_PORT exported); each rank selects its GPU (its local
//   rank) before ncclCommInitRank.
// * NcclGroups: the pp x dp grid of the distributed runtime (global rank
//   g = replica * pp + stage, as lib/Runtime/Dist) as communicators split
//   from the world: the data-parallel group of this stage, and one
//   two-rank communicator per pipeline neighbour. Each communicator has its
//   own CUDA stream (non-blocking, higher priority than compute).
// * CommStreams: every operation takes the caller's compute stream, orders
//   itself after the work already enqueued there (an event), runs on the
//   communicator's stream and returns a CommHandle whose completion event
//   the compute stream can wait for (wait: no host synchronisation) or the
//   host can poll under the --comm-timeout deadline (test / waitHost: a
//   dead peer becomes an error naming the operation; the communicators are
//   aborted).
//
// Every NCCL and CUDA call is checked; a failure is an error Status naming
// the call. Communicators are created non-blocking (ncclConfig_t.blocking
// = 0) so that initialisation, splits and enqueues are bounded by the
// deadline too.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_DIST_NCCL_H
#define LAMINA_RUNTIME_DIST_NCCL_H

#include "lamina/Runtime/Status.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace lamina::rt::dist::nccl {

//===----------------------------------------------------------------------===//
// Bootstrap
//===----------------------------------------------------------------------===//

/// How the ncclUniqueId reaches every rank.
enum class Bootstrap {
  /// MPI when MPI is already initialised, or when mpirun started the
  /// process (OMPI_COMM_WORLD_SIZE or PMI_SIZE/PMIX_RANK set) and
  /// MASTER_ADDR is not set; the TCP rendezvous when a launcher variable is
  /// set (RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID); a single process
  /// (world size 1, device 0) when none is.
  Auto,
  /// MPI_Ibcast over MPI_COMM_WORLD (MPI_Init here if nobody has).
  Mpi,
  /// readLaunchEnv + broadcastBytes (lamina/Runtime/Dist/Launch.h).
  Env,
  /// The caller's own host channel (WorldOptions::host): a distributed
  /// program's TCP control plane, so that it needs no second rendezvous.
  Host,
};

/// Bootstrap::Host: what the caller already knows and its collectives.
struct HostBootstrap {
  int rank = 0, size = 1, localRank = 0;
  /// For messages: "torchrun", ...; and where the local rank came from.
  std::string launcher, localRankVariable;
  /// Collective: the lowest rank whose `ok` is false, INT_MAX when none.
  std::function<int(bool ok)> firstFailed;
  /// Collective: rank 0's `n` bytes at `data` on every rank.
  std::function<void(void *data, size_t n)> broadcast;
};

/// Parses "auto", "mpi", "env"; false otherwise.
bool parseBootstrap(const std::string &text, Bootstrap &out);
const char *bootstrapName(Bootstrap b);

struct WorldOptions {
  Bootstrap bootstrap = Bootstrap::Auto;
  /// Bounds every wait of the bootstrap (MPI, the TCP rendezvous,
  /// ncclCommInitRank), in seconds. Operations have their own bound
  /// (CommStreams::timeout, --comm-timeout).
  double timeoutSeconds = 60;
  /// The CUDA device; -1: the local rank.
  int device = -1;
  /// Bootstrap::Host only.
  HostBootstrap host;
};

/// What ncclWorld decided.
struct WorldInfo {
  int rank = 0, size = 1, localRank = 0, device = 0;
  /// "mpi", "tcp", "host" or "single".
  std::string bootstrap;
  /// The launcher whose variables were read ("torchrun", "mpirun",
  /// "slurm", "mpi" for MPI_Comm_rank, "none").
  std::string launcher;
  /// The variable the local rank came from (for messages).
  std::string localRankVariable;
  /// MPI_Init was called by ncclWorld: finalizeBootstrap() calls
  /// MPI_Finalize.
  bool mpiInitialisedHere = false;
};

/// Creates the world communicator (non-blocking config) on this process's
/// device: reads the launcher (rule above; a missing or malformed variable
/// is an error naming it, before any CUDA call), checks the device count
/// (cudaGetDeviceCount failing, e.g. no driver, is an error naming it; so
/// is a local rank not below the count, naming the variable), cudaSetDevice,
/// ncclGetUniqueId on rank 0, the broadcast, ncclCommInitRankConfig, and
/// waits for it under the deadline (ncclCommAbort and an error on timeout).
/// On error `world` is null; `info.bootstrap` is empty when the failure
/// came before the rank was known.
Status ncclWorld(const WorldOptions &options, ncclComm_t &world,
                 WorldInfo &info);

/// MPI_Finalize when ncclWorld initialised MPI (call after destroying the
/// communicators).
void finalizeBootstrap(WorldInfo &info);

/// "ncclAllReduce: unhandled cuda error ..." plus ncclGetLastError's text.
std::string ncclText(const char *call, ncclResult_t r, ncclComm_t comm);
/// "cudaMalloc: out of memory (cudaErrorMemoryAllocation)".
std::string cudaText(const char *call, cudaError_t e);

//===----------------------------------------------------------------------===//
// Groups
//===----------------------------------------------------------------------===//

/// One communicator with its own stream and byte counters.
struct Channel {
  std::string name; ///< "world", "dp", "pipe-prev", "pipe-next"
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  int rank = 0, size = 1; ///< in this communicator
  /// Point-to-point bytes this rank sent; collective ring volumes
  /// (all-reduce 2(n-1)/n*S, reduce-scatter and all-gather (n-1)/n*S of
  /// the whole vector's S bytes), as lib/Runtime/Dist/Comm.
  uint64_t p2pBytesSent = 0;
  double collectiveBytes = 0;
  bool valid() const { return comm != nullptr; }
};

/// Where world rank g sits in a pp x dp grid (g = replica * pp + stage) and
/// the ncclCommSplit colors and keys NcclGroups uses (pure arithmetic, no
/// device). The dp group of a stage: color stage, key replica (as
/// lib/Runtime/Dist's MPI_Comm_split). Pipeline edge e joins stages e and
/// e+1 of one replica; a stage is in at most one even and one odd edge, so
/// the pairs come from two splits, edge[0] (even) and edge[1] (odd): the
/// edge this rank is in (-1: none) and its color replica * pp + e; the key
/// is the stage, so the lower stage is rank 0 of its pair.
struct GridPlace {
  int stage = 0, replica = 0;
  int dpColor = 0, dpKey = 0;
  int edge[2] = {-1, -1};
  int edgeColor[2] = {-1, -1};
};
GridPlace gridPlace(int worldRank, int pp);
/// How many pipeline splits there are: 0 (pp 1), 1 (pp 2: no odd edge) or 2.
int pipelineSplits(int pp);

/// The pp x dp grid: world rank g = replica * pp + stage.
class NcclGroups {
public:
  NcclGroups() = default;
  NcclGroups(const NcclGroups &) = delete;
  NcclGroups &operator=(const NcclGroups &) = delete;
  /// Destroys the communicators (ncclCommFinalize + ncclCommDestroy, or
  /// ncclCommAbort after an abort or a failed finalize) and the streams.
  ~NcclGroups();

  /// Takes ownership of `world` (destroyed with this object, also when
  /// create fails), splits
  /// it (ncclCommSplit, collective over every world rank) into the dp group
  /// (color stage, key replica) and the pipeline neighbour pairs, creates a
  /// stream per communicator (cudaStreamNonBlocking, the greatest
  /// priority), and exchanges one byte on each pipeline pair so that the
  /// point-to-point connections exist before the first real transfer.
  /// pp * dp must be the world size. Every wait is bounded by
  /// timeoutSeconds; a failure after the splits aborts the communicators.
  static Status create(ncclComm_t world, int pp, int dp, double timeoutSeconds,
                       NcclGroups &out);

  int pp = 1, dp = 1, stage = 0, replica = 0;
  Channel world;
  /// The replicas of this stage; its rank is the replica index.
  Channel dpGroup;
  /// Two-rank communicators with stage-1 and stage+1 of this replica (not
  /// valid at the first / last stage); the peer's rank in them is
  /// `peerRank()`.
  Channel pipePrev, pipeNext;
  static int peerRank(const Channel &pair) { return 1 - pair.rank; }

  /// ncclCommAbort on every communicator (after a timeout or a peer's
  /// error); the handles become null. Safe to call twice.
  void abortAll();
  bool aborted() const { return aborted_; }
  /// The bound of create's and destroy's waits.
  double timeout() const { return timeout_; }
  /// "world: ncclSystemError (...)" for each communicator with an
  /// asynchronous error (ncclCommGetAsyncError), empty if none.
  std::string asyncErrors();

  /// The valid communicators, the pipeline pairs and the dp group before
  /// the world, then those of addChannel.
  std::vector<Channel *> channels();

  /// One more split of the world (collective over every world rank, in the
  /// same order everywhere) with its own stream, owned, aborted and
  /// destroyed with the others: the distributed runtime's groups of shared
  /// parameters and its directed point-to-point pairs. `out` is null for
  /// color -1.
  Status addChannel(int color, int key, const std::string &name, Channel *&out);

  /// What the destructor does, with its errors (ncclCommFinalize bounded by
  /// the timeout, then ncclCommDestroy; ncclCommAbort when finalizing
  /// fails). Safe to call twice.
  Status destroy();

private:
  bool aborted_ = false;
  double timeout_ = 60;
  std::vector<std::unique_ptr<Channel>> extra_;
  /// Every channel object, valid or not.
  std::vector<Channel *> all();
};

//===----------------------------------------------------------------------===//
// Operations
//===----------------------------------------------------------------------===//

enum class DType { F32, F16, BF16, F64 };
size_t dtypeSize(DType t);
const char *dtypeName(DType t);

/// An enqueued operation: a slot of CommStreams' event pool. Consumed by
/// wait() or by test()/waitHost() returning done; invalid afterwards.
struct CommHandle {
  int slot = -1;
  uint64_t serial = 0;
  bool valid() const { return slot >= 0; }
};

class CommStreams {
public:
  /// `groups` must outlive this object. timeoutSeconds: --comm-timeout.
  CommStreams(NcclGroups &groups, double timeoutSeconds);
  ~CommStreams();
  CommStreams(const CommStreams &) = delete;
  CommStreams &operator=(const CommStreams &) = delete;

  double timeout;

  /// Point-to-point: `sendBytes` from `sendBuf` to `sendPeer` and
  /// `recvBytes` into `recvBuf` from `recvPeer` (ranks in `ch`; -1 skips a
  /// side; a peer may be this rank) in one ncclGroupStart/End.
  Status sendRecv(Channel &ch, const void *sendBuf, size_t sendBytes,
                  int sendPeer, void *recvBuf, size_t recvBytes, int recvPeer,
                  cudaStream_t compute, CommHandle &out);
  Status send(Channel &ch, const void *buf, size_t bytes, int peer,
              cudaStream_t compute, CommHandle &out) {
    return sendRecv(ch, buf, bytes, peer, nullptr, 0, -1, compute, out);
  }
  Status recv(Channel &ch, void *buf, size_t bytes, int peer,
              cudaStream_t compute, CommHandle &out) {
    return sendRecv(ch, nullptr, 0, -1, buf, bytes, peer, compute, out);
  }

  /// All-to-all of bytes: sendBytes[q] from send + sendOffsets[q] to rank
  /// q, recvBytes[p] from rank p into recv + recvOffsets[p] (a zero count
  /// skips that peer; each side knows its counts), as one group of sends
  /// and receives. Expert parallelism's exchange.
  Status allToAll(Channel &ch, const void *send,
                  const std::vector<size_t> &sendBytes,
                  const std::vector<size_t> &sendOffsets, void *recv,
                  const std::vector<size_t> &recvBytes,
                  const std::vector<size_t> &recvOffsets, cudaStream_t compute,
                  CommHandle &out);

  /// Sum (or, with `maximum`, the maximum) of `count` elements over `ch`;
  /// in place when send == recv.
  Status allReduce(Channel &ch, const void *send, void *recv, size_t count,
                   DType type, cudaStream_t compute, CommHandle &out,
                   bool maximum = false);
  /// `send` holds size * countPerRank elements; this rank gets the sum of
  /// chunk `rank` in `recv` (countPerRank elements). Equal chunks only:
  /// pad the vector to a multiple of the group size.
  Status reduceScatter(Channel &ch, const void *send, void *recv,
                       size_t countPerRank, DType type, cudaStream_t compute,
                       CommHandle &out);
  /// `send` (countPerRank elements) lands at recv + rank * countPerRank;
  /// in place when send is that address. Equal chunks only.
  Status allGather(Channel &ch, const void *send, void *recv,
                   size_t countPerRank, DType type, cudaStream_t compute,
                   CommHandle &out);

  /// Makes `compute` wait for the operation (cudaStreamWaitEvent; no host
  /// synchronisation) and releases the handle.
  Status wait(CommHandle &h, cudaStream_t compute);
  /// Polls once (cudaEventQuery, ncclCommGetAsyncError): done is true when
  /// the operation completed (the handle is released). An error when the
  /// communicator reports one, or when `timeout` seconds have passed since
  /// the first test() of this handle: then every communicator is aborted
  /// and the message names the operation.
  Status test(CommHandle &h, bool &done);
  /// Polls with test() until done or the deadline (an error as above).
  Status waitHost(CommHandle &h);
  /// Synchronises `stream` under the deadline (an event polled with
  /// cudaEventQuery, checking every communicator for errors): the bounded
  /// replacement for cudaStreamSynchronize on a stream that waits for
  /// communication. `what` names it in the message.
  Status syncStream(cudaStream_t stream, const std::string &what);

  /// Operations enqueued and not yet waited for or completed.
  int outstanding() const;

private:
  struct Slot {
    cudaEvent_t start = nullptr, done = nullptr;
    bool busy = false;
    uint64_t serial = 0;
    Channel *channel = nullptr;
    std::string what;
    double firstPolledAt = -1;
  };
  NcclGroups &groups_;
  std::vector<Slot> slots_;
  std::vector<int> free_;
  uint64_t nextSerial_ = 1;

  Status acquire(int &slot);
  Status begin(Channel &ch, cudaStream_t compute, const std::string &what,
               int &slot);
  /// One point-to-point transfer of a group.
  struct Transfer {
    bool send;
    void *buf;
    size_t bytes;
    int peer;
  };
  /// The transfers in one ncclGroupStart/End on `ch`, after begin().
  Status group(Channel &ch, const std::vector<Transfer> &transfers,
               cudaStream_t compute, const std::string &what, CommHandle &out);
  Status finish(Channel &ch, int slot, ncclResult_t r, const char *call,
                CommHandle &out);
  Status enqueued(Channel &ch, ncclResult_t r, const char *call,
                  const std::string &what);
  Status check(const CommHandle &h, Slot *&s);
  void release(int slot);
  Status timeoutError(const std::string &what, double waited);
  Status usable(Channel &ch, const char *op);
};

/// Seconds on a monotonic clock.
double now();

} // namespace lamina::rt::dist::nccl

#endif // LAMINA_RUNTIME_DIST_NCCL_H
