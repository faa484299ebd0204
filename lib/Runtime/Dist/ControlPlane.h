//===- ControlPlane.h - the host control plane of distributed programs -*- C++ -*-===//
//
// The few host bytes the ranks of a distributed training program exchange
// besides the data plane (Communicator.h): agreeing on errors (a bounded
// all-min), the step's loss (an all-sum of one double), statistics and
// trace strings gathered to rank 0, --export's parameters sent to rank 0,
// the NCCL unique id broadcast, and an abort that ends every rank. Two
// implementations, chosen at start-up by distTrain (DistTrain.cpp,
// docs/distributed.md "Launching"):
//
// * MpiControl (MpiControl.cpp) over Comm: MPI_COMM_WORLD, for programs
//   started by mpirun or srun --mpi.
// * TcpControl (TcpControl.cpp) over a star of TCP connections to rank 0
//   (lamina_launch's connectStar on MASTER_ADDR): for torchrun-style
//   launchers, no MPI at all.
//
// Every operation is collective in program order (all ranks call the same
// operations in the same order) and bounded by `timeout` (--comm-timeout):
// a timeout or a dead peer prints "error: rank G: <what> ..." naming the
// peer and ends every rank (abort), never a hang.
//
// MPI-free (the TCP one must not need MPI); private to lamina_dist and
// lamina_dist_nccl.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_DIST_CONTROLPLANE_H
#define LAMINA_LIB_RUNTIME_DIST_CONTROLPLANE_H

#include "lamina/Runtime/Dist/Launch.h"
#include "lamina/Runtime/Status.h"

#include <chrono>
#include <functional>
#include <memory>
#include <stddef.h>
#include <string>
#include <vector>

namespace lamina::rt::dist {

/// Seconds since an arbitrary start (a monotonic clock; the same on every
/// control plane, usable before and without MPI).
inline double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class ControlPlane {
public:
  virtual ~ControlPlane() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "mpi" or "tcp", for messages.
  virtual const char *name() const = 0;
  /// How to start `n` ranks, for the world-size error ("launch it with
  /// mpirun -np 4").
  virtual std::string launchHint(int n) const = 0;

  /// Seconds any wait may take (--comm-timeout).
  double timeout = 60;

  /// Joins the other ranks (TCP: the rendezvous, bounded by
  /// `timeoutSeconds`); MPI: nothing. On error nothing else may be called.
  virtual Status connect(double timeoutSeconds) = 0;

  /// The minimum / sum of every rank's `v`, on every rank. `what` and
  /// `hint` make the abort message: "<what> after 60 s<hint>" or
  /// "<what>: rank 2 closed the connection; rank 2 may have died".
  virtual int allMin(int v, const std::string &what,
                     const std::string &hint) = 0;
  virtual double allSum(double v, const std::string &what,
                        const std::string &hint) = 0;
  /// Every rank's string on rank 0 (by rank); empty on the others.
  virtual std::vector<std::string> gather(const std::string &mine) = 0;
  /// Rank 0's `n` bytes at `data` on every rank.
  virtual void broadcast(void *data, size_t n, const std::string &what) = 0;
  /// Host bytes between two ranks (one of them rank 0 for TCP), matched in
  /// order per pair; `tag` is checked. Blocking, bounded.
  virtual void send(int to, int tag, const void *data, size_t n,
                    const std::string &what) = 0;
  virtual void recv(int from, int tag, void *data, size_t n,
                    const std::string &what) = 0;
  virtual void barrier() = 0;

  /// Prints "error: rank G: message" and ends every rank (exit code 1).
  [[noreturn]] virtual void abort(const std::string &message) = 0;
};

/// The control plane over MPI_COMM_WORLD (MPI must be initialised); defined
/// in MpiControl.cpp, which owns the Comm it wraps.
class Comm;
std::unique_ptr<ControlPlane> makeMpiControl(Comm &comm);

/// The control plane over TCP for the ranks `env` describes (readLaunchEnv):
/// rank 0 listens on MASTER_ADDR:`port` once connect() is called.
/// `beforeExit` runs in abort after the sockets are closed (MPI_Abort when
/// an MPI data plane runs beside it).
std::unique_ptr<ControlPlane> makeTcpControl(const LaunchEnv &env, int port,
                                             std::function<void()> beforeExit);


} // namespace lamina::rt::dist

#endif // LAMINA_LIB_RUNTIME_DIST_CONTROLPLANE_H
