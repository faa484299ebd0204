//===- Launch.h - launcher variables and the TCP rendezvous -----*- C++ -*-===//
//
// What a multi-process program needs before it can build NCCL communicators
// (docs/cuda.md, "Launch and NCCL bootstrap"): its rank, the world size and
// its local rank from whichever launcher started it (torchrun-style, mpirun,
// Slurm srun), and a way to give every rank the same bytes -- the 128-byte
// ncclUniqueId rank 0 creates -- over plain TCP to MASTER_ADDR:MASTER_PORT.
//
// Plain POSIX sockets and C++17: no CUDA, NCCL or MPI dependency
// (library lamina_launch).
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_LAUNCH_H
#define LAMINA_RUNTIME_LAUNCH_H

#include "lamina/Runtime/Status.h"

#include <cstddef>
#include <string>

namespace lamina::rt {

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

/// Gives every rank rank 0's `n` bytes at `data`. Rank 0 listens on
/// MASTER_ADDR:MASTER_PORT, waits for the other worldSize-1 ranks to
/// connect and introduce themselves (magic, rank, n), then sends the bytes
/// to each; the others connect (retrying while rank 0 is not up yet), send
/// their introduction and read the bytes into `data`. Everything is bounded
/// by `timeoutSeconds` from the call: a rank that never arrives, a refused
/// connection, a stranger, a duplicate rank, a different `n` or a peer that
/// closes early is an error naming the peer or address, never a hang.
/// With worldSize 1 it does nothing.
Status broadcastBytes(const LaunchEnv &env, void *data, size_t n,
                      double timeoutSeconds);

} // namespace lamina::rt

#endif // LAMINA_RUNTIME_LAUNCH_H
