//===- CommTest.cpp - checks of lamina_dist's MPI layer under mpirun ------===//
//
// `mpirun -np N lamina-dist-comm-test` checks uneven splits, point-to-point
// transfers and their byte counters, the non-blocking collectives (uneven
// reduce-scatter and all-gather counts) and their ring volumes, and a
// receive that times out. `--hang T`: rank 1 never sends and rank 0 waits
// with a T-second deadline: the error and MPI_Abort path
// (test/Runtime/Dist/dist-comm.test).
//
//===----------------------------------------------------------------------===//

#include "Comm.h"
#include "MpiComm.h"

#include "lamina/Runtime/Device.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

using namespace lamina::rt::dist;

static int failures = 0;
#define CHECK(cond)                                                           \
  do {                                                                        \
    if (!(cond)) {                                                            \
      std::fprintf(stderr, "rank %d: check failed at line %d: %s\n", rank,    \
                   __LINE__, #cond);                                          \
      ++failures;                                                             \
    }                                                                         \
  } while (0)

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  Comm comm;
  comm.timeout = 30;

  if (argc == 3 && std::strcmp(argv[1], "--hang") == 0) {
    comm.timeout = std::atof(argv[2]);
    if (rank == 1) {
      sleep(60); // alive, but never sends
    } else if (rank == 0) {
      float x;
      MPI_Request r = comm.irecv(&x, sizeof x, 1, 7);
      comm.waitOrAbort(r, "no activation of boundary 0, micro-batch 0 from rank 1",
                       "; rank 1 may have died");
    }
    MPI_Finalize();
    return 0;
  }

  // Even splits.
  std::vector<int> counts, offsets;
  splitCounts(10, 4, counts, offsets);
  CHECK((counts == std::vector<int>{3, 3, 2, 2}));
  CHECK((offsets == std::vector<int>{0, 3, 6, 8}));
  splitCounts(2, 3, counts, offsets);
  CHECK((counts == std::vector<int>{1, 1, 0}));

  // A receive nobody answers times out; cancel it.
  {
    int x = 0;
    MPI_Request r = comm.irecv(&x, sizeof x, (rank + 1) % n, 12345);
    double t0 = now();
    bool done = comm.waitFor(r, 0.2);
    double waited = now() - t0;
    CHECK(!done);
    CHECK(waited >= 0.2 && waited < 5);
    MPI_Cancel(&r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  // Ring transfer; byte counters.
  {
    std::vector<double> out(100, rank + 0.5), in(100, -1);
    int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    MPI_Request rr = comm.irecv(in.data(), in.size() * 8, prev, 1);
    MPI_Request sr = comm.isend(out.data(), out.size() * 8, next, 1);
    comm.waitOrAbort(rr, "ring receive");
    comm.waitOrAbort(sr, "ring send");
    CHECK(in[0] == prev + 0.5 && in[99] == prev + 0.5);
    CHECK(comm.p2pBytesSent == 800);
  }

  // All-reduce, in place.
  double expectBytes = 0;
  {
    std::vector<float> v(7);
    for (int i = 0; i < 7; ++i)
      v[size_t(i)] = float(rank * 10 + i);
    MPI_Request r = comm.iallreduce(v.data(), 7, MPI_COMM_WORLD);
    comm.waitOrAbort(r, "all-reduce");
    for (int i = 0; i < 7; ++i)
      CHECK(v[size_t(i)] == float(10 * n * (n - 1) / 2 + n * i));
    expectBytes += 2.0 * (n - 1) / n * 7 * 4;
    CHECK(std::fabs(comm.collectiveBytes - expectBytes) < 1e-6);
  }

  // Reduce-scatter with uneven counts (11 elements).
  {
    int S = 11;
    splitCounts(S, n, counts, offsets);
    std::vector<float> full(static_cast<size_t>(S)),
        part(static_cast<size_t>(counts[size_t(rank)]), -1);
    for (int i = 0; i < S; ++i)
      full[size_t(i)] = float(i + rank);
    MPI_Request r = comm.ireduceScatter(full.data(), part.data(), counts,
                                        MPI_COMM_WORLD);
    comm.waitOrAbort(r, "reduce-scatter");
    for (int i = 0; i < counts[size_t(rank)]; ++i)
      CHECK(part[size_t(i)] ==
            float(n * (offsets[size_t(rank)] + i) + n * (n - 1) / 2));
    expectBytes += double(n - 1) / n * S * 4;
    CHECK(std::fabs(comm.collectiveBytes - expectBytes) < 1e-6);

    // All-gather in place, uneven.
    std::vector<float> g(size_t(S), -1);
    for (int i = 0; i < counts[size_t(rank)]; ++i)
      g[size_t(offsets[size_t(rank)] + i)] = float(1000 * rank + i);
    r = comm.iallgather(g.data(), MPI_FLOAT, 4, counts, offsets,
                        MPI_COMM_WORLD);
    comm.waitOrAbort(r, "all-gather");
    for (int q = 0; q < n; ++q)
      for (int i = 0; i < counts[size_t(q)]; ++i)
        CHECK(g[size_t(offsets[size_t(q)] + i)] == float(1000 * q + i));
    expectBytes += double(n - 1) / n * S * 4;
    CHECK(std::fabs(comm.collectiveBytes - expectBytes) < 1e-6);
  }

  // The Communicator over MPI: a reduce-scatter in place (the shard's
  // destination is the member's own part of the input, NCCL's convention,
  // as ZeRO 1 and the tied parameters' parts use it) leaves the shard a
  // separate destination gets, and the rest of the input as it was. MPI's
  // buffers may not overlap, so on the host the shard goes through a copy.
  {
    MpiCommunicator net(comm, lamina::rt::hostDevice());
    ShardLayout l = net.shardLayout(11, n);
    std::vector<float> full(11), inPlace(11), part(size_t(l.shardCapacity));
    for (int i = 0; i < 11; ++i)
      full[size_t(i)] = inPlace[size_t(i)] = float(i * (rank + 1));
    Request a, b;
    CHECK(net.reduceScatter(full.data(), part.data(), l, 0, a).ok());
    CHECK(net.wait(a, "reduce-scatter", "").ok());
    float *mine = inPlace.data() + l.offsets[size_t(rank)];
    CHECK(net.reduceScatter(inPlace.data(), mine, l, 0, b).ok());
    CHECK(net.wait(b, "reduce-scatter in place", "").ok());
    for (int i = 0; i < 11; ++i) {
      int k = i - l.offsets[size_t(rank)];
      bool own = k >= 0 && k < l.counts[size_t(rank)];
      CHECK(inPlace[size_t(i)] == (own ? part[size_t(k)] : full[size_t(i)]));
      if (own)
        CHECK(part[size_t(k)] == float(i * n * (n + 1) / 2));
    }
  }

  // Doubles (norms, losses).
  {
    double d[2] = {rank * 0.25, 1.0};
    MPI_Request r = comm.iallreduceDouble(d, 2, MPI_COMM_WORLD);
    comm.waitOrAbort(r, "double all-reduce");
    CHECK(d[0] == 0.25 * n * (n - 1) / 2 && d[1] == n);
  }

  // Two outstanding collectives on split communicators at once.
  {
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    std::vector<float> a(5, 1.0f), b(3, 2.0f);
    MPI_Request ra = comm.iallreduce(a.data(), 5, half);
    MPI_Request rb = comm.iallreduce(b.data(), 3, MPI_COMM_WORLD);
    comm.waitOrAbort(rb, "world all-reduce");
    comm.waitOrAbort(ra, "half all-reduce");
    CHECK(a[4] == float(commSize(half)) && b[2] == float(2 * n));
    MPI_Comm_free(&half);
  }

  int total = 0;
  MPI_Reduce(&failures, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0)
    std::printf(total == 0 ? "comm: all ok (%d ranks)\n"
                           : "comm: FAILED (%d ranks)\n",
                n);
  MPI_Finalize();
  return total == 0 && failures == 0 ? 0 : 1;
}
