//===- Launch.h - launcher variables and the TCP rendezvous -----*- C++ -*-===//
//
// What a multi-process program needs before it can build NCCL communicators
// (docs/cuda.md, "Launch and NCCL bootstrap"): its rank, the world size and
// its local rank from whichever launcher started it (torchrun-style, mpirun,
// Slurm srun), and a way to give every rank the same bytes -- the 128-byte
// ncclUniqueId rank 0 creates -- over plain TCP to MASTER_ADDR at
// MASTER_PORT + 1 (or LAMINA_CONTROL_PORT; torchrun's store has MASTER_PORT).
// The same star of connections (every rank to rank 0) carries the host
// control plane of distributed programs launched without MPI
// (lib/Runtime/Dist/TcpControl.cpp, docs/distributed.md "Launching").
//
// Over lamina_transport's sockets (lamina/Runtime/Dist/Transport.h); no
// CUDA, NCCL or MPI dependency (library lamina_launch).
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_DIST_LAUNCH_H
#define LAMINA_RUNTIME_DIST_LAUNCH_H

#include "lamina/Runtime/Dist/Transport.h"
#include "lamina/Runtime/Status.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lamina::rt::dist {

struct LaunchEnv {
  int rank = 0;
  int worldSize = 1;
  int localRank = 0;
  /// "torchrun", "mpirun" or "slurm": which variables were read.
  std::string launcher;
  /// Rank 0's rendezvous address and port (MASTER_ADDR, MASTER_PORT).
  std::string masterAddr;
  int masterPort = 0;
};

/// Fills `out` from the environment. Rank, world size and local rank come
/// from RANK/WORLD_SIZE/LOCAL_RANK when RANK is set (torchrun), else from
/// OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK when OMPI_COMM_WORLD_RANK is set
/// (mpirun), else from SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID when
/// SLURM_PROCID is set (srun). MASTER_ADDR and MASTER_PORT are required with
/// every launcher (mpirun and srun do not set them: users export them).
/// A missing or malformed variable is an error naming it; `out` is
/// unchanged then.
Status readLaunchEnv(LaunchEnv &out);

/// What a rank says it joins for (the hello's last field): a broadcast of
/// `n` bytes is `n` itself; this value, with the top bit set, is the host
/// control plane of distributed programs (lib/Runtime/Dist/TcpControl.cpp).
constexpr uint64_t kControlPlanePurpose = (1ull << 63) | 0x4354524cull;

/// Connects every rank with rank 0 (a star) on MASTER_ADDR:`port`: rank 0
/// listens, accepts the other worldSize-1 ranks and checks each one's hello
/// (magic, rank, `purpose`), then closes the listener; the others connect
/// (retrying while rank 0 is not up yet) and send their hello. On rank 0
/// links[r] is the socket to rank r (links[0] is empty); on the others
/// links[0] is the socket to rank 0. Bounded by `timeoutSeconds`, with the
/// errors of broadcastBytes below. With worldSize 1 `links` holds one
/// empty socket. The sockets are Transport.h's: frames and whole
/// transfers on them are bounded by a deadline too.
Status connectStar(const LaunchEnv &env, int port, uint64_t purpose,
                   double timeoutSeconds,
                   std::vector<transport::Socket> &links);

/// The port rank 0 listens on for Lamina's own rendezvous (broadcastBytes,
/// the TCP control plane): LAMINA_CONTROL_PORT when set, else MASTER_PORT
/// + 1, because torchrun's agent keeps its own store on MASTER_PORT. A
/// malformed value (or MASTER_PORT 65535 without LAMINA_CONTROL_PORT) is an
/// error naming the variable.
Status rendezvousPort(const LaunchEnv &env, int &port);

/// Gives every rank rank 0's `n` bytes at `data`. Rank 0 listens on
/// MASTER_ADDR:rendezvousPort(), waits for the other worldSize-1 ranks to
/// connect and introduce themselves (magic, rank, n), then sends the bytes
/// to each; the others connect (retrying while rank 0 is not up yet), send
/// their introduction and read the bytes into `data`. Everything is bounded
/// by `timeoutSeconds` from the call: a rank that never arrives, a refused
/// connection, a stranger, a duplicate rank, a different `n` or a peer that
/// closes early is an error naming the peer or address, never a hang.
/// With worldSize 1 it does nothing.
Status broadcastBytes(const LaunchEnv &env, void *data, size_t n,
                      double timeoutSeconds);

/// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0 and
/// released), or 0: for tests that start ranks on one machine.
int freeLoopbackPort();

} // namespace lamina::rt::dist

#endif // LAMINA_RUNTIME_DIST_LAUNCH_H
