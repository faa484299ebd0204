//===- Comm.h - the MPI layer of distributed training programs --*- C++ -*-===//
//
// A thin wrapper over MPI for lamina_dist: non-blocking point-to-point
// transfers and collectives whose completion is polled (MPI_Test) under a
// deadline, so a dead peer is an error message rather than a hang, and
// byte counters for the per-rank statistics (point-to-point bytes sent;
// collective bytes as ring volumes: all-reduce 2(n-1)/n*S, reduce-scatter
// and all-gather (n-1)/n*S of the unpadded size S). docs/distributed.md.
//
// The data plane's transport (MpiComm.cpp) and the MPI control plane
// (MpiControl.cpp). Private to lamina_dist (and its unit test,
// test/Runtime/Dist/dist-comm.test).
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_DIST_COMM_H
#define LAMINA_LIB_RUNTIME_DIST_COMM_H

// The C API only (OpenMPI and MPICH otherwise pull in their C++ bindings).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include "ControlPlane.h" // now()

#include <stddef.h>
#include <stdint.h>
#include <string>
#include <vector>

namespace lamina::rt::dist {

/// Counts of an even split of `total` elements over `parts`: the first
/// total % parts get one more. Offsets are the prefix sums.
void splitCounts(int64_t total, int parts, std::vector<int> &counts,
                 std::vector<int> &offsets);

/// One outstanding non-blocking operation.
struct Pending {
  MPI_Request request = MPI_REQUEST_NULL;
  std::string what; ///< for the timeout message
};

class Comm {
public:
  /// Wraps MPI_COMM_WORLD (MPI must be initialised).
  Comm();

  int rank() const { return rank_; }
  int size() const { return size_; }

  /// Seconds a wait may take before it is an error (--comm-timeout).
  double timeout = 60;

  /// Non-blocking send/receive of `bytes` bytes on the world communicator.
  /// Counts sent bytes.
  MPI_Request isend(const void *buf, size_t bytes, int peer, int tag);
  MPI_Request irecv(void *buf, size_t bytes, int peer, int tag);

  /// Non-blocking f32 sum (or `op`) over `comm`, in place.
  MPI_Request iallreduce(float *buf, int64_t count, MPI_Comm comm,
                         MPI_Op op = MPI_SUM);
  /// Non-blocking f64 sum over `comm`, in place (no byte accounting).
  MPI_Request iallreduceDouble(double *buf, int count, MPI_Comm comm);
  /// Reduce-scatter of the f32 vector `send` (sum of counts elements) into
  /// `recv` (counts[rank in comm] elements).
  MPI_Request ireduceScatter(const float *send, float *recv,
                             const std::vector<int> &counts, MPI_Comm comm);
  /// All-gather in place: `buf` holds the whole vector, this member's part
  /// at offsets[r] is sent, the rest received.
  /// `type` is `elementBytes` wide; counts and offsets are elements.
  MPI_Request iallgather(void *buf, MPI_Datatype type, int elementBytes,
                         const std::vector<int> &counts,
                         const std::vector<int> &offsets, MPI_Comm comm);

  /// Polls `req` with MPI_Test until it completes (true) or `timeout`
  /// seconds pass (false; the request is left as it is).
  bool waitFor(MPI_Request &req, double timeoutSeconds);
  /// waitFor with the --comm-timeout; on timeout prints
  /// "error: rank G: <what> after T s<hint>" to stderr and aborts every
  /// rank (MPI_Abort, exit code 1).
  void waitOrAbort(MPI_Request &req, const std::string &what,
                   const std::string &hint = "");
  /// Calls MPI_Test on each request; true when all are complete.
  static bool testAll(std::vector<MPI_Request> &reqs);

  /// Prints "error: rank G: message" and aborts every rank.
  [[noreturn]] void abort(const std::string &message) const;

  // Statistics.
  uint64_t p2pBytesSent = 0;
  double collectiveBytes = 0; ///< ring volumes, see the header comment

private:
  int rank_ = 0, size_ = 1;
};

/// The size of `comm`.
int commSize(MPI_Comm comm);
int commRank(MPI_Comm comm);

} // namespace lamina::rt::dist

#endif // LAMINA_LIB_RUNTIME_DIST_COMM_H
