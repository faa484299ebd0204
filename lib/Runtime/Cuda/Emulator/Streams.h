//===- Streams.h - the emulator's streams and events ------------*- C++ -*-===//
//
// How lamina_cuda_emulated orders device work (docs/cuda.md, "The kernel
// emulator"). As on a GPU, issuing work to a stream only queues it: a
// kernel, a copy, a GEMM or a communication runs later, in its stream's
// order, after the events its stream waits for. The emulator runs queued
// work as late as it can -- when the host must see it (a synchronisation,
// a copy to pageable memory, a completed event), or when communication on
// another stream needs it -- so a host read, a stream or an event the
// program forgot to wait for sees stale data here just as it would on a
// GPU that had not got there yet. Streams that carry communication (the
// NCCL emulator's, lib/Runtime/Dist/Nccl/Emulator) have a worker thread that
// runs their queue at once, so operations progress while the host runs
// ahead, as NCCL's kernels do.
//
// Each device's legacy default stream synchronises with its blocking
// streams (created without cudaStreamNonBlocking) both ways, as CUDA's
// does; the current device is per host thread (cudaSetDevice). A
// task that fails (a dead peer) hangs its stream, as a GPU stream behind a
// kernel that never ends: its later work never runs, its events never
// complete, and a stream waiting for one of them hangs too, so the
// caller's bounded polling (cudaEventQuery, cudaStreamQuery) reports it.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_CUDA_EMULATOR_STREAMS_H
#define LAMINA_LIB_RUNTIME_CUDA_EMULATOR_STREAMS_H

#include <cuda_runtime_api.h>

#include <functional>

namespace lamina::cuda_emulator {

/// Queues device work (a kernel's threads, a copy, a GEMM) on `stream`.
void submit(cudaStream_t stream, std::function<void()> work);

/// Queues a communication task on `stream` and starts the stream's worker
/// (once), which runs its queue as soon as it can. A task returning false
/// hangs the stream. `kind` ("all-gather", ...) names it in the overlap
/// report.
void enqueue(cudaStream_t stream, std::function<bool()> task, const char *kind);

/// With LAMINA_CUDA_EMULATOR_OVERLAP set, the process prints at exit, per
/// kind of communication, how much device work was issued between each
/// operation and the first wait of a compute stream for it: the work a GPU
/// can run while the operation is in flight (the schedule's intended
/// overlap, counted; not timed).

/// Device memory and page-locked host memory (cudaMalloc, cudaMallocHost):
/// what an asynchronous copy reads or writes when it runs. Other host
/// memory is pageable: a copy from it is taken when issued, one to it
/// waits for the stream (CUDA's rules).
void noteAllocation(const void *p, size_t bytes);
void forgetAllocation(const void *p);
bool isAllocated(const void *p);

/// Runs everything queued on the current device's streams (cudaFree's
/// implicit synchronisation); false if a stream hung. A stream capture in
/// progress is invalidated, as on a GPU.
bool drainAll();

/// Stream capture (Streams.cpp, Capture): whether `stream` is capturing;
/// failing its capture for `why` (returns the error for the caller); an
/// allocation (cudaMallocAsync) the capture's graph owns, and a
/// cudaFreeAsync of one (both false when not capturing).
bool capturing(cudaStream_t stream);
cudaError_t invalidateCapture(cudaStream_t stream, const char *why);
bool captureAllocation(cudaStream_t stream, void *p);
bool capturedFree(cudaStream_t stream, void *p);

} // namespace lamina::cuda_emulator

#endif // LAMINA_LIB_RUNTIME_CUDA_EMULATOR_STREAMS_H
