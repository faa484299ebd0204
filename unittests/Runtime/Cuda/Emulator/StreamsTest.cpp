//===- StreamsTest.cpp - the kernel emulator's streams and events ---------===//
//
// Streams.h's rules against CUDA's: queued work runs when something needs
// it, events and stream waits order streams, the legacy stream orders
// blocking streams only, copies from pageable memory are taken when issued,
// a stream capture records work that each graph launch runs again.
// Each test's work is a host function queued like a kernel.
//
//===----------------------------------------------------------------------===//

#include "Streams.h"

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <vector>

namespace emu = lamina::cuda_emulator;

namespace {

struct Buffer {
  int *p = nullptr;
  Buffer() {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void **>(&p), sizeof(int)),
              cudaSuccess);
    *p = 0;
  }
  ~Buffer() { cudaFree(p); }
};

cudaStream_t stream(unsigned flags) {
  cudaStream_t s = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&s, flags), cudaSuccess);
  return s;
}

TEST(CudaEmulatorStreams, WorkRunsWhenTheHostNeedsIt) {
  Buffer b;
  cudaStream_t s = stream(cudaStreamNonBlocking);
  int *p = b.p;
  emu::submit(s, [p] { *p = 1; });
  // Not yet: a host read of device memory without a synchronisation sees
  // what a GPU that had not got there yet would hold.
  EXPECT_EQ(*b.p, 0);
  EXPECT_EQ(cudaStreamQuery(s), cudaSuccess); // runs what it can
  EXPECT_EQ(*b.p, 1);
  emu::submit(s, [p] { *p = 2; });
  int host = 0;
  // A copy to pageable memory returns once done: the work before it ran.
  EXPECT_EQ(cudaMemcpyAsync(&host, b.p, sizeof host, cudaMemcpyDeviceToHost, s),
            cudaSuccess);
  EXPECT_EQ(host, 2);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST(CudaEmulatorStreams, EventsOrderStreams) {
  Buffer b;
  cudaStream_t a = stream(cudaStreamNonBlocking),
               c = stream(cudaStreamNonBlocking);
  cudaEvent_t e;
  ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
  int *p = b.p, seen = -1, unordered = -1;
  emu::submit(a, [p] { *p = 7; });
  ASSERT_EQ(cudaEventRecord(e, a), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(c, e, 0), cudaSuccess);
  emu::submit(c, [p, &seen] { seen = *p; });
  ASSERT_EQ(cudaStreamSynchronize(c), cudaSuccess);
  EXPECT_EQ(seen, 7); // the wait ran a's work first
  // Without the wait, c's work does not see a's.
  emu::submit(a, [p] { *p = 8; });
  emu::submit(c, [p, &unordered] { unordered = *p; });
  ASSERT_EQ(cudaStreamSynchronize(c), cudaSuccess);
  EXPECT_EQ(unordered, 7);
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  EXPECT_EQ(*b.p, 8);
  cudaEventDestroy(e);
  cudaStreamDestroy(a);
  cudaStreamDestroy(c);
}

TEST(CudaEmulatorStreams, LegacyStreamOrdersBlockingStreamsOnly) {
  Buffer b;
  cudaStream_t blocking = stream(cudaStreamDefault),
               nonBlocking = stream(cudaStreamNonBlocking);
  int *p = b.p, blockingSaw = -1, nonBlockingSaw = -1;
  // cudaMemset on device memory returns at once, queued on the legacy
  // stream: a blocking stream's later work waits for it, a non-blocking
  // stream's does not.
  ASSERT_EQ(cudaMemset(b.p, 0x01, sizeof(int)), cudaSuccess);
  emu::submit(nonBlocking, [p, &nonBlockingSaw] { nonBlockingSaw = *p; });
  ASSERT_EQ(cudaStreamSynchronize(nonBlocking), cudaSuccess);
  emu::submit(blocking, [p, &blockingSaw] { blockingSaw = *p; });
  ASSERT_EQ(cudaStreamSynchronize(blocking), cudaSuccess);
  EXPECT_EQ(nonBlockingSaw, 0);
  EXPECT_EQ(blockingSaw, 0x01010101);
  cudaStreamDestroy(blocking);
  cudaStreamDestroy(nonBlocking);
}

TEST(CudaEmulatorStreams, PageableCopiesAreTakenWhenIssued) {
  Buffer b;
  cudaStream_t s = stream(cudaStreamNonBlocking);
  std::vector<int> host = {5};
  ASSERT_EQ(
      cudaMemcpyAsync(b.p, host.data(), sizeof(int), cudaMemcpyHostToDevice, s),
      cudaSuccess);
  host[0] = 6; // allowed: the source was pageable
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(*b.p, 5);
  cudaStreamDestroy(s);
}

TEST(CudaEmulatorStreams, AFailedTaskHangsItsStreamAndItsWaiters) {
  cudaStream_t comm = stream(cudaStreamNonBlocking),
               compute = stream(cudaStreamNonBlocking);
  cudaEvent_t e;
  ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
  emu::enqueue(
      comm, [] { return false; }, "test");
  ASSERT_EQ(cudaEventRecord(e, comm), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(compute, e, 0), cudaSuccess);
  bool ran = false;
  emu::submit(compute, [&ran] { ran = true; });
  // Polling says not ready, as on a GPU behind a kernel that never ends.
  EXPECT_EQ(cudaEventQuery(e), cudaErrorNotReady);
  EXPECT_EQ(cudaStreamQuery(compute), cudaErrorNotReady);
  EXPECT_NE(cudaStreamSynchronize(compute), cudaSuccess);
  EXPECT_FALSE(ran);
  cudaEventDestroy(e);
}

TEST(CudaEmulatorStreams, AGraphRunsTheCapturedWorkAtEachLaunch) {
  Buffer b;
  cudaStream_t s = stream(cudaStreamNonBlocking);
  int *p = b.p;
  int *scratch = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal),
            cudaSuccess);
  cudaStreamCaptureStatus status;
  ASSERT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  // Stream-ordered scratch inside the capture belongs to the graph: the
  // same address at every launch, alive after cudaFreeAsync.
  ASSERT_EQ(
      cudaMallocAsync(reinterpret_cast<void **>(&scratch), sizeof(int), s),
      cudaSuccess);
  emu::submit(s, [scratch] { *scratch = 10; });
  ASSERT_EQ(cudaMemsetAsync(p, 0, sizeof(int), s), cudaSuccess);
  emu::submit(s, [p, scratch] { *p += *scratch + 1; });
  ASSERT_EQ(cudaFreeAsync(scratch, s), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(*b.p, 0); // captured, not run
  size_t nodes = 0;
  ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
  EXPECT_EQ(nodes, 3u); // the work (a GPU's graph also has memory nodes)
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  *b.p = 5;
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  EXPECT_EQ(*b.p, 5); // queued, as a launch is
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(*b.p, 11);
  *scratch = 0;
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(cudaGraphExecDestroy(exec), cudaSuccess); // launched work stays
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(*b.p, 11);
  ASSERT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  cudaStreamDestroy(s);
}

TEST(CudaEmulatorStreams, WhatAGraphCannotHoldInvalidatesTheCapture) {
  Buffer b;
  cudaStream_t s = stream(cudaStreamNonBlocking),
               other = stream(cudaStreamNonBlocking);
  cudaEvent_t e;
  ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(e, other), cudaSuccess);
  int host = 3;
  cudaGraph_t graph = nullptr;
  // A wait for an event recorded outside the capture (CUDA: isolation),
  // a synchronisation, a copy from pageable memory: each fails the call
  // and the capture, which ends without a graph.
  auto failed = [&](auto &&call, cudaError_t expected) {
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal),
              cudaSuccess);
    EXPECT_EQ(call(), expected);
    cudaStreamCaptureStatus status;
    ASSERT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusInvalidated);
    EXPECT_EQ(cudaStreamEndCapture(s, &graph),
              cudaErrorStreamCaptureInvalidated);
    EXPECT_EQ(graph, nullptr);
  };
  failed([&] { return cudaStreamWaitEvent(s, e, 0); },
         cudaErrorStreamCaptureIsolation);
  failed([&] { return cudaStreamSynchronize(s); },
         cudaErrorStreamCaptureUnsupported);
  failed(
      [&] {
        return cudaMemcpyAsync(b.p, &host, sizeof host, cudaMemcpyHostToDevice,
                               s);
      },
      cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(*b.p, 0);
  // The stream works as before afterwards.
  ASSERT_EQ(cudaMemcpyAsync(b.p, &host, sizeof host, cudaMemcpyHostToDevice, s),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(*b.p, 3);
  EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorIllegalState);
  cudaEventDestroy(e);
  cudaStreamDestroy(s);
  cudaStreamDestroy(other);
}

} // namespace
