//===- Comm.cpp - the MPI layer of distributed training programs ----------===//

#include "Comm.h"

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <ctime>

using namespace lamina::rt::dist;

void lamina::rt::dist::splitCounts(int64_t total, int parts,
                                   std::vector<int> &counts,
                                   std::vector<int> &offsets) {
  counts.assign(size_t(parts), 0);
  offsets.assign(size_t(parts), 0);
  int64_t base = total / parts, extra = total % parts, at = 0;
  for (int i = 0; i < parts; ++i) {
    counts[size_t(i)] = int(base + (i < extra ? 1 : 0));
    offsets[size_t(i)] = int(at);
    at += counts[size_t(i)];
  }
}

int lamina::rt::dist::commSize(MPI_Comm comm) {
  int n = 1;
  MPI_Comm_size(comm, &n);
  return n;
}

int lamina::rt::dist::commRank(MPI_Comm comm) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}

Comm::Comm() {
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MPI_Request Comm::isend(const void *buf, size_t bytes, int peer, int tag) {
  MPI_Request r;
  if (bytes > size_t(INT_MAX))
    abort("a message of " + std::to_string(bytes) +
          " bytes is larger than MPI's count limit");
  MPI_Isend(buf, int(bytes), MPI_BYTE, peer, tag, MPI_COMM_WORLD, &r);
  p2pBytesSent += bytes;
  return r;
}

MPI_Request Comm::irecv(void *buf, size_t bytes, int peer, int tag) {
  MPI_Request r;
  if (bytes > size_t(INT_MAX))
    abort("a message of " + std::to_string(bytes) +
          " bytes is larger than MPI's count limit");
  MPI_Irecv(buf, int(bytes), MPI_BYTE, peer, tag, MPI_COMM_WORLD, &r);
  return r;
}

MPI_Request Comm::iallreduce(float *buf, int64_t count, MPI_Comm comm,
                             MPI_Op op) {
  MPI_Request r;
  int n = commSize(comm);
  MPI_Iallreduce(MPI_IN_PLACE, buf, int(count), MPI_FLOAT, op, comm, &r);
  collectiveBytes += 2.0 * (n - 1) / n * double(count) * sizeof(float);
  return r;
}

MPI_Request Comm::iallreduceDouble(double *buf, int count, MPI_Comm comm) {
  MPI_Request r;
  MPI_Iallreduce(MPI_IN_PLACE, buf, count, MPI_DOUBLE, MPI_SUM, comm, &r);
  return r;
}

MPI_Request Comm::ireduceScatter(const float *send, float *recv,
                                 const std::vector<int> &counts,
                                 MPI_Comm comm) {
  MPI_Request r;
  int n = commSize(comm);
  int64_t total = 0;
  for (int c : counts)
    total += c;
  MPI_Ireduce_scatter(send, recv, counts.data(), MPI_FLOAT, MPI_SUM, comm, &r);
  collectiveBytes += double(n - 1) / n * double(total) * sizeof(float);
  return r;
}

MPI_Request Comm::iallgather(void *buf, MPI_Datatype type, int elementBytes,
                             const std::vector<int> &counts,
                             const std::vector<int> &offsets, MPI_Comm comm) {
  MPI_Request r;
  int n = commSize(comm);
  int64_t total = 0;
  for (int c : counts)
    total += c;
  MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts.data(),
                  offsets.data(), type, comm, &r);
  collectiveBytes += double(n - 1) / n * double(total) * elementBytes;
  return r;
}

bool Comm::waitFor(MPI_Request &req, double timeoutSeconds) {
  double deadline = now() + timeoutSeconds;
  for (unsigned spins = 0;; ++spins) {
    int done = 0;
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done)
      return true;
    if (now() > deadline)
      return false;
    // Spin briefly, then back off so an oversubscribed peer gets the core.
    if (spins > 1000) {
      struct timespec ts = {0, spins > 100000 ? 1000000 : 20000};
      nanosleep(&ts, nullptr);
    }
  }
}

void Comm::waitOrAbort(MPI_Request &req, const std::string &what,
                       const std::string &hint) {
  if (!waitFor(req, timeout)) {
    char secs[32];
    std::snprintf(secs, sizeof secs, "%g", timeout);
    abort(what + " after " + secs + " s" + hint);
  }
}

bool Comm::testAll(std::vector<MPI_Request> &reqs) {
  bool all = true;
  for (MPI_Request &r : reqs) {
    if (r == MPI_REQUEST_NULL)
      continue;
    int done = 0;
    MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    all &= done != 0;
  }
  return all;
}

void Comm::abort(const std::string &message) const {
  std::fflush(stdout);
  std::fprintf(stderr, "error: rank %d: %s\n", rank_, message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}
