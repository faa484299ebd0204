//===- MpiComm.h - the Communicator over MPI --------------------*- C++ -*-===//
//
// Communicator.h on Comm (MPI_COMM_WORLD and its splits). MPI moves host
// memory: on the host device the executor's buffers are used in place; on
// any other device (the staged host device, a GPU without NCCL) every
// operation goes through host copies -- the device's download before a
// send or reduction, its upload once a receive or reduction completed.
// Private to lamina_dist.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_DIST_MPICOMM_H
#define LAMINA_LIB_RUNTIME_DIST_MPICOMM_H

#include "Comm.h"
#include "Communicator.h"

#include <map>

namespace lamina::rt::dist {

class MpiCommunicator final : public Communicator {
public:
  MpiCommunicator(Comm &comm, Device &device);
  ~MpiCommunicator() override;

  int rank() const override { return comm.rank(); }
  int size() const override { return comm.size(); }
  const char *name() const override { return "mpi"; }
  Status split(int color, int key, int &group) override;
  int groupSize(int group) const override;
  Status connect(const std::vector<std::pair<int, int>> &) override {
    return Status::success(); // MPI matches by tag
  }
  ShardLayout shardLayout(int64_t total, int parts) const override {
    return evenShards(total, parts);
  }

  Status isend(const void *buf, size_t bytes, int peer, int tag,
               Request &out) override;
  Status irecv(void *buf, size_t bytes, int peer, int tag,
               Request &out) override;
  Status allReduce(float *buf, int64_t count, int group,
                   Request &out) override;
  Status allReduceMax(float *buf, int64_t count, int group,
                      Request &out) override;
  Status allReduceDouble(double *buf, int count, int group,
                         Request &out) override;
  Status reduceScatter(const float *send, float *recv,
                       const ShardLayout &layout, int group,
                       Request &out) override;
  Status allGather(void *buf, DType type, const ShardLayout &layout, int group,
                   Request &out) override;
  Status allToAll(const void *send, const std::vector<int> &sendBytes,
                  const std::vector<int> &sendOffsets, void *recv,
                  const std::vector<int> &recvBytes,
                  const std::vector<int> &recvOffsets, int group,
                  Request &out) override;
  Status waitForCompute(Request &r, const std::string &what,
                        const std::string &hint) override {
    return wait(r, what, hint);
  }
  Status wait(Request &r, const std::string &what,
              const std::string &hint) override;
  Status test(Request &r, bool &done) override;
  /// Every MPI operation completed on the host before the device used it.
  Status quiesce(const std::string &) override { return Status::success(); }
  [[noreturn]] void abort(const std::string &message) override {
    comm.abort(message);
  }

private:
  /// An MPI request and, when staged, its host copy and where the result
  /// goes on the device.
  struct Op {
    MPI_Request req = MPI_REQUEST_NULL;
    std::vector<char> host;
    void *deviceResult = nullptr;
    size_t resultOffset = 0, resultBytes = 0;
  };
  Request add(Op op);
  /// The in-place f32 all-reduce with `op` (MPI_SUM, MPI_MAX).
  Status reduce(float *buf, int64_t count, int group, MPI_Op op, Request &out);
  Status finish(std::map<int64_t, Op>::iterator it);
  /// Host memory MPI can use for `bytes` device bytes at `p`: `p` itself on
  /// the host device, else a copy in op.host.
  Status stage(Op &op, const void *p, size_t bytes, char *&host);
  /// stage() for an operation in place: the result is copied back to `p`
  /// when it completes.
  Status stageInPlace(Op &op, void *p, size_t bytes, char *&host);
  void counters() {
    p2pBytesSent = comm.p2pBytesSent;
    collectiveBytes = comm.collectiveBytes;
  }

  Comm &comm;
  Device &device;
  const bool staged;
  std::vector<MPI_Comm> groups;
  std::map<int64_t, Op> ops;
  int64_t nextId = 0;
};

} // namespace lamina::rt::dist

#endif // LAMINA_LIB_RUNTIME_DIST_MPICOMM_H
