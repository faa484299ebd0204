//===- MpiControl.cpp - the host control plane over MPI -------------------===//
//
// ControlPlane.h on Comm (MPI_COMM_WORLD): every operation non-blocking and
// polled under the --comm-timeout (Comm::waitOrAbort: the message, then
// MPI_Abort, which mpirun turns into the end of every rank).
//
//===----------------------------------------------------------------------===//

#include "Comm.h"
#include "ControlPlane.h"

#include <climits>

using namespace lamina::rt;
using namespace lamina::rt::dist;

namespace {

class MpiControl final : public ControlPlane {
public:
  /// Collective: duplicates the world for the host transfers.
  explicit MpiControl(Comm &comm) : comm(comm) {
    MPI_Comm_dup(MPI_COMM_WORLD, &hostComm);
  }
  ~MpiControl() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized)
      MPI_Comm_free(&hostComm);
  }

  int rank() const override { return comm.rank(); }
  int size() const override { return comm.size(); }
  const char *name() const override { return "mpi"; }
  std::string launchHint(int n) const override {
    return "launch it with mpirun -np " + std::to_string(n);
  }
  Status connect(double) override { return Status::success(); }

  int allMin(int v, const std::string &what,
             const std::string &hint) override {
    int out = v;
    MPI_Request r;
    MPI_Iallreduce(&v, &out, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &r);
    wait(r, what, hint);
    return out;
  }

  double allSum(double v, const std::string &what,
                const std::string &hint) override {
    MPI_Request r = comm.iallreduceDouble(&v, 1, MPI_COMM_WORLD);
    wait(r, what, hint);
    return v;
  }

  std::vector<std::string> gather(const std::string &mine) override {
    const std::string what = "gathering the ranks' reports to rank 0 did not "
                             "complete";
    const std::string hint = "; a rank may have died";
    const int n = comm.size(), me = comm.rank();
    int len = int(mine.size());
    std::vector<int> lens(static_cast<size_t>(n)),
        displs(static_cast<size_t>(n));
    MPI_Request r;
    MPI_Igather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD,
                &r);
    wait(r, what, hint);
    std::string all;
    if (me == 0) {
      int at = 0;
      for (int i = 0; i < n; ++i) {
        displs[size_t(i)] = at;
        at += lens[size_t(i)];
      }
      all.resize(size_t(at));
    }
    MPI_Igatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(),
                 displs.data(), MPI_CHAR, 0, MPI_COMM_WORLD, &r);
    wait(r, what, hint);
    std::vector<std::string> out;
    if (me == 0)
      for (int i = 0; i < n; ++i)
        out.push_back(
            all.substr(size_t(displs[size_t(i)]), size_t(lens[size_t(i)])));
    return out;
  }

  void broadcast(void *data, size_t n, const std::string &what) override {
    if (n > size_t(INT_MAX))
      abort(what + ": " + std::to_string(n) +
            " bytes is larger than MPI's count limit");
    MPI_Request r;
    MPI_Ibcast(data, int(n), MPI_BYTE, 0, MPI_COMM_WORLD, &r);
    wait(r, what, "; a rank may have died");
  }

  void send(int to, int tag, const void *data, size_t n,
            const std::string &what) override {
    MPI_Request r = transfer(data, n, to, tag, what, true);
    wait(r, what, "; rank " + std::to_string(to) + " may have died");
  }
  void recv(int from, int tag, void *data, size_t n,
            const std::string &what) override {
    MPI_Request r = transfer(data, n, from, tag, what, false);
    wait(r, what, "; rank " + std::to_string(from) + " may have died");
  }

  void barrier() override {
    MPI_Request r;
    MPI_Ibarrier(MPI_COMM_WORLD, &r);
    wait(r, "the barrier did not complete", "; a rank may have died");
  }

  [[noreturn]] void abort(const std::string &message) override {
    comm.abort(message);
  }

private:
  void wait(MPI_Request &r, const std::string &what, const std::string &hint) {
    comm.timeout = timeout;
    comm.waitOrAbort(r, what, hint);
  }
  /// On a duplicate of the world, so host transfers never match the data
  /// plane's tags.
  MPI_Request transfer(const void *data, size_t n, int peer, int tag,
                       const std::string &what, bool sending) {
    if (n > size_t(INT_MAX))
      abort(what + ": " + std::to_string(n) +
            " bytes is larger than MPI's count limit");
    MPI_Request r;
    if (sending)
      MPI_Isend(data, int(n), MPI_BYTE, peer, tag, hostComm, &r);
    else
      MPI_Irecv(const_cast<void *>(data), int(n), MPI_BYTE, peer, tag,
                hostComm, &r);
    return r;
  }

  Comm &comm;
  MPI_Comm hostComm = MPI_COMM_NULL;
};

} // namespace

std::unique_ptr<ControlPlane> lamina::rt::dist::makeMpiControl(Comm &comm) {
  return std::make_unique<MpiControl>(comm);
}
