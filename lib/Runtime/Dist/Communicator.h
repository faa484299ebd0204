//===- Communicator.h - the data plane of a distributed program -*- C++ -*-===//
//
// What the executor needs from the network, on buffers in the memory of its
// Device: point-to-point transfers, the three collectives of data
// parallelism, waits bounded by --comm-timeout, and byte counters for the
// per-rank statistics. Two implementations: MpiCommunicator (MpiComm.cpp,
// over Comm: host memory, staged through host copies when the device is not
// the host) and, in CUDA builds, lamina_dist_nccl's NCCL one (communication
// streams ordered against the device's compute stream by events).
//
// The host control plane (agreements on errors, gathering statistics and
// traces to rank 0, the export's transfers, checkpoint agreement, the loss)
// is separate (ControlPlane.h: MPI, or TCP for launches without MPI): it
// moves a few bytes of host memory per step at most.
//
// Private to lamina_dist (and lamina_dist_nccl).
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_DIST_COMMUNICATOR_H
#define LAMINA_LIB_RUNTIME_DIST_COMMUNICATOR_H

#include "lamina/Runtime/Device.h"
#include "lamina/Runtime/Status.h"

#include <stddef.h>
#include <stdint.h>
#include <string>
#include <utility>
#include <vector>

namespace lamina::rt::dist {

/// An outstanding operation; the communicator owns its state.
struct Request {
  int64_t id = -1;
  bool valid() const { return id >= 0; }
};

/// How a flat f32 vector is cut into one shard per member of a group.
struct ShardLayout {
  std::vector<int> counts, offsets;
  /// Elements the full buffers hold (>= the vector's size; the padding is
  /// zero) and each shard buffer holds (>= its count).
  int64_t fullCapacity = 0, shardCapacity = 0;
};

/// The types Communicator::allGather moves: f32 parameters, f16/bf16
/// copies; anything else is an internal error.
inline Status gatherable(DType type) {
  if (type == DType::F32 || type == DType::BF16 || type == DType::F16)
    return Status::success();
  return Status::error("internal: an all-gather of " +
                       std::string(dtypeName(type)));
}

class Communicator {
public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "mpi" or "nccl", for the log.
  virtual const char *name() const = 0;

  /// Seconds a wait may take before it is an error (--comm-timeout).
  double timeout = 60;

  /// Group 0 is the world. Collective over the world: the ranks passing the
  /// same color (>= 0) form a group, ranked by key; `group` is its id, or -1
  /// for a rank passing color -1.
  virtual Status split(int color, int key, int &group) = 0;
  virtual int groupSize(int group) const = 0;

  /// Collective: the directed (from, to) pairs of global ranks that
  /// transfer in a step, the same list on every rank, before the first
  /// transfer (a transport with one connection per pair makes them here).
  /// The compiler has checked that each pair's transfers are received in
  /// the order they are sent (NCCL matches them in order).
  virtual Status connect(const std::vector<std::pair<int, int>> &edges) = 0;

  /// The cut of `total` elements over `parts` this transport's
  /// reduce-scatter and all-gather use.
  virtual ShardLayout shardLayout(int64_t total, int parts) const = 0;

  // Operations on device memory. Each returns a request that wait() or
  // waitForCompute() consumes, or test() finds done. Buffers must stay
  // alive (and, for sends, unchanged) until then.
  virtual Status isend(const void *buf, size_t bytes, int peer, int tag,
                       Request &out) = 0;
  virtual Status irecv(void *buf, size_t bytes, int peer, int tag,
                       Request &out) = 0;
  /// In-place f32 sum over `group`.
  virtual Status allReduce(float *buf, int64_t count, int group,
                           Request &out) = 0;
  /// In-place f32 maximum over `group` (a tensor-parallel cross-entropy's
  /// row maxima); a transport without it refuses.
  virtual Status allReduceMax(float *buf, int64_t count, int group,
                              Request &out) {
    (void)buf, (void)count, (void)group, (void)out;
    return Status::error(std::string("the ") + name() +
                         " transport has no all-reduce maximum");
  }
  /// In-place f64 sum over `group` (scalars: the gradient norm, the loss);
  /// not counted in the statistics.
  virtual Status allReduceDouble(double *buf, int count, int group,
                                 Request &out) = 0;
  /// `send` (layout.fullCapacity elements) summed over `group`; this
  /// member's shard lands in `recv`, which may be in place: `send` at the
  /// member's offset (NCCL's convention for an in-place reduce-scatter).
  virtual Status reduceScatter(const float *send, float *recv,
                               const ShardLayout &layout, int group,
                               Request &out) = 0;
  /// In place: this member's shard of `buf` (at its offset) is sent, the
  /// rest received. `layout` counts elements of `type` (F32, BF16 or F16:
  /// ZeRO gathers the weights' copies; gatherable()).
  virtual Status allGather(void *buf, DType type, const ShardLayout &layout,
                           int group, Request &out) = 0;

  /// All-to-all of bytes over `group`: member q gets sendBytes[q] bytes
  /// from `send + sendOffsets[q]`; member p's recvBytes[p] land at `recv +
  /// recvOffsets[p]` (the expert-parallel exchange; host memory over MPI,
  /// device memory over NCCL). A transport without it refuses.
  virtual Status allToAll(const void *send, const std::vector<int> &sendBytes,
                          const std::vector<int> &sendOffsets, void *recv,
                          const std::vector<int> &recvBytes,
                          const std::vector<int> &recvOffsets, int group,
                          Request &out) {
    (void)send, (void)sendBytes, (void)sendOffsets, (void)recv, (void)recvBytes,
        (void)recvOffsets, (void)group, (void)out;
    return Status::error(std::string("the ") + name() +
                         " transport has no all-to-all (expert "
                         "parallelism's exchange)");
  }

  /// The device work enqueued after this call sees the operation's result
  /// (a stream wait on a GPU; on the host, a wait with the deadline).
  /// `what` and `hint` name it in the timeout error.
  virtual Status waitForCompute(Request &r, const std::string &what,
                                const std::string &hint) = 0;
  /// The host waits until the operation is complete (with the deadline).
  virtual Status wait(Request &r, const std::string &what,
                      const std::string &hint) = 0;
  /// Polls once: done when complete (the request is consumed).
  virtual Status test(Request &r, bool &done) = 0;
  /// The host waits, with the deadline, until the device's work enqueued so
  /// far is done: the bounded replacement for a device synchronisation
  /// when that work may wait for communication (a dead peer then is an
  /// error, not a hang). `what` names the work.
  virtual Status quiesce(const std::string &what) = 0;

  /// Prints "error: rank G: message" and ends every rank.
  [[noreturn]] virtual void abort(const std::string &message) = 0;

  // Statistics: point-to-point bytes sent; collective ring volumes
  // (all-reduce 2(n-1)/n*S, reduce-scatter and all-gather (n-1)/n*S of the
  // unpadded size S).
  uint64_t p2pBytesSent = 0;
  double collectiveBytes = 0;
};

/// The counts of an even cut (the first total % parts get one more), as
/// MPI's v-collectives take them.
ShardLayout evenShards(int64_t total, int parts);
/// Equal chunks of ceil(total / parts), the tail padded (NCCL's collectives
/// take equal counts); counts are the unpadded parts.
ShardLayout paddedShards(int64_t total, int parts);

} // namespace lamina::rt::dist

#endif // LAMINA_LIB_RUNTIME_DIST_COMMUNICATOR_H
