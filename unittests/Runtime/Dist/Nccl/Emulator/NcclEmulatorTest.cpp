//===- NcclEmulatorTest.cpp - the NCCL emulator's own semantics -----------===//
//
// lib/Runtime/Dist/Nccl/Emulator against NCCL's documented behaviour, with
// the ranks as threads of this process (each its communicator and stream; the
// emulator's connections go through this process's own listener):
// reductions of every type and operation in rank order, reduce-scatter and
// all-gather in place, splits ordered by key, grouped point-to-point with
// a send to itself, a size mismatch as the communicator's error, and an
// abort ending a receive that no peer will match.
//
//===----------------------------------------------------------------------===//

#include "lamina/Runtime/Math.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace {

using Body = std::function<void(int rank, ncclComm_t &, cudaStream_t)>;

/// `n` ranks as threads, each with a device, a communicator (blocking
/// set-up) and a non-blocking stream, running `body`; then the stream is
/// destroyed, and the communicator too unless `body` aborted or destroyed
/// it (and set it to null).
void ranks(int n, const Body &body) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      // One device per rank, as NCCL wants (cudaFree synchronises only
      // the current device).
      ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
      ncclComm_t comm = nullptr;
      ASSERT_EQ(ncclCommInitRank(&comm, n, id, r), ncclSuccess);
      cudaStream_t s = nullptr;
      ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                cudaSuccess);
      body(r, comm, s);
      EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
      if (comm) {
        EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
      }
    });
  for (std::thread &t : threads)
    t.join();
}

template <typename T> T *deviceCopy(const std::vector<T> &v) {
  void *p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, v.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(
      cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice),
      cudaSuccess);
  return static_cast<T *>(p);
}

template <typename T> std::vector<T> hostCopy(const T *p, size_t n) {
  std::vector<T> v(n);
  EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost),
            cudaSuccess);
  return v;
}

float valueOf(int rank, int i) { return 0.1f * float(rank + 1) + float(i); }

TEST(NcclEmulator, ReductionsInRankOrderBitwiseOnEveryRank) {
  constexpr int n = 3, count = 5;
  const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  ranks(n, [&](int rank, ncclComm_t &comm, cudaStream_t s) {
    for (ncclRedOp_t op : ops) {
      std::vector<float> x(count);
      for (int i = 0; i < count; ++i)
        x[size_t(i)] = valueOf(rank, i);
      float *d = deviceCopy(x);
      ASSERT_EQ(ncclAllReduce(d, d, count, ncclFloat32, op, comm, s),
                ncclSuccess);
      ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
      std::vector<float> got = hostCopy(d, count);
      for (int i = 0; i < count; ++i) {
        float want = valueOf(0, i);
        for (int r = 1; r < n; ++r) {
          float v = valueOf(r, i);
          want = op == ncclProd  ? want * v
                 : op == ncclMax ? std::max(want, v)
                 : op == ncclMin ? std::min(want, v)
                                 : want + v;
        }
        if (op == ncclAvg)
          want /= float(n);
        EXPECT_EQ(got[size_t(i)], want) << "op " << op << " element " << i;
      }
      cudaFree(d);
    }
    // Integers, doubles, and bf16 summed in f32 and rounded once.
    std::vector<int32_t> xi = {rank, -rank, 1 << 20};
    int32_t *di = deviceCopy(xi);
    std::vector<double> xd = {0.1 * rank, 1e300};
    double *dd = deviceCopy(xd);
    using namespace lamina::rt::math;
    std::vector<uint16_t> xb = {floatToBf16(1.0f / 3.0f)};
    uint16_t *db = deviceCopy(xb);
    ASSERT_EQ(ncclAllReduce(di, di, 3, ncclInt32, ncclSum, comm, s),
              ncclSuccess);
    ASSERT_EQ(ncclAllReduce(dd, dd, 2, ncclFloat64, ncclMax, comm, s),
              ncclSuccess);
    ASSERT_EQ(ncclAllReduce(db, db, 1, ncclBfloat16, ncclSum, comm, s),
              ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(hostCopy(di, 3), (std::vector<int32_t>{3, -3, 3 << 20}));
    EXPECT_EQ(hostCopy(dd, 2), (std::vector<double>{0.2, 1e300}));
    float third = bf16ToFloat(floatToBf16(1.0f / 3.0f));
    EXPECT_EQ(hostCopy(db, 1)[0], floatToBf16(third * 3.0f));
    cudaFree(di);
    cudaFree(dd);
    cudaFree(db);
  });
}

TEST(NcclEmulator, ReduceScatterAndAllGatherInPlace) {
  constexpr int n = 3, chunk = 4;
  ranks(n, [&](int rank, ncclComm_t &comm, cudaStream_t s) {
    std::vector<float> x(n * chunk);
    for (int i = 0; i < n * chunk; ++i)
      x[size_t(i)] = float(rank * 100 + i);
    float *d = deviceCopy(x);
    // In place: this rank's chunk of the sum lands at its own offset.
    float *mine = d + rank * chunk;
    ASSERT_EQ(ncclReduceScatter(d, mine, chunk, ncclFloat32, ncclSum, comm, s),
              ncclSuccess);
    ASSERT_EQ(ncclAllGather(mine, d, chunk, ncclFloat32, comm, s), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    std::vector<float> got = hostCopy(d, n * chunk);
    for (int i = 0; i < n * chunk; ++i)
      EXPECT_EQ(got[size_t(i)], float(0 + 100 + 200 + 3 * i)) << i;
    cudaFree(d);
  });
}

TEST(NcclEmulator, SplitOrdersByKeyAndSkipsNoColor) {
  ranks(4, [&](int rank, ncclComm_t &comm, cudaStream_t s) {
    // Ranks 0 and 2 form one group, keyed in reverse; 1 is alone; 3 none.
    int color = rank == 3 ? NCCL_SPLIT_NOCOLOR : rank % 2;
    ncclComm_t part = nullptr;
    ASSERT_EQ(ncclCommSplit(comm, color, -rank, &part, nullptr), ncclSuccess);
    if (rank == 3) {
      EXPECT_EQ(part, nullptr);
      return;
    }
    ASSERT_NE(part, nullptr);
    int size = 0, me = -1;
    ASSERT_EQ(ncclCommCount(part, &size), ncclSuccess);
    ASSERT_EQ(ncclCommUserRank(part, &me), ncclSuccess);
    EXPECT_EQ(size, rank == 1 ? 1 : 2);
    EXPECT_EQ(me, rank == 0 ? 1 : 0);
    std::vector<float> one = {float(rank)};
    float *d = deviceCopy(one);
    ASSERT_EQ(ncclAllReduce(d, d, 1, ncclFloat32, ncclSum, part, s),
              ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(hostCopy(d, 1)[0], rank == 1 ? 1.0f : 2.0f);
    cudaFree(d);
    EXPECT_EQ(ncclCommDestroy(part), ncclSuccess);
  });
}

TEST(NcclEmulator, GroupedRingWithASendToItself) {
  constexpr int n = 3;
  ranks(n, [&](int rank, ncclComm_t &comm, cudaStream_t s) {
    std::vector<int32_t> out = {rank * 10, rank * 10 + 1};
    int32_t *send = deviceCopy(out), *fromPrev = deviceCopy(out),
            *fromSelf = deviceCopy(out);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    ASSERT_EQ(ncclSend(send, 2, ncclInt32, (rank + 1) % n, comm, s),
              ncclSuccess);
    ASSERT_EQ(ncclRecv(fromPrev, 2, ncclInt32, (rank + n - 1) % n, comm, s),
              ncclSuccess);
    ASSERT_EQ(ncclSend(send, 1, ncclInt32, rank, comm, s), ncclSuccess);
    ASSERT_EQ(ncclRecv(fromSelf + 1, 1, ncclInt32, rank, comm, s), ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    int prev = (rank + n - 1) % n;
    EXPECT_EQ(hostCopy(fromPrev, 2),
              (std::vector<int32_t>{prev * 10, prev * 10 + 1}));
    EXPECT_EQ(hostCopy(fromSelf, 2),
              (std::vector<int32_t>{rank * 10, rank * 10}));
    cudaFree(send);
    cudaFree(fromPrev);
    cudaFree(fromSelf);
  });
}

TEST(NcclEmulator, MismatchedSizesAreTheCommunicatorsError) {
  std::string error;
  ranks(2, [&](int rank, ncclComm_t &comm, cudaStream_t s) {
    std::vector<float> x(2, 1.0f);
    float *d = deviceCopy(x);
    if (rank == 0) {
      ASSERT_EQ(ncclSend(d, 2, ncclFloat32, 1, comm, s), ncclSuccess);
      EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    } else {
      ASSERT_EQ(ncclRecv(d, 1, ncclFloat32, 0, comm, s), ncclSuccess);
      ncclResult_t state = ncclSuccess;
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      do {
        ASSERT_EQ(ncclCommGetAsyncError(comm, &state), ncclSuccess);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      } while (state == ncclSuccess &&
               std::chrono::steady_clock::now() < until);
      EXPECT_EQ(state, ncclRemoteError);
      error = ncclGetLastError(comm);
      // The receive never completes: the stream hangs, as on a GPU.
      EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
      EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
      comm = nullptr;
    }
  });
  EXPECT_NE(error.find("sent 8 bytes where this rank receives 4"),
            std::string::npos)
      << error;
}

TEST(NcclEmulator, AbortEndsAnUnmatchedReceive) {
  double abortSeconds = -1;
  ranks(2, [&](int rank, ncclComm_t &comm, cudaStream_t s) {
    if (rank == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(400));
      return;
    }
    std::vector<float> x(1);
    float *d = deviceCopy(x);
    ASSERT_EQ(ncclRecv(d, 1, ncclFloat32, 0, comm, s), ncclSuccess);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
    comm = nullptr;
    abortSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
  });
  EXPECT_GE(abortSeconds, 0.0);
  EXPECT_LT(abortSeconds, 5.0); // bounded (50 ms polls), never a hang
}

} // namespace
