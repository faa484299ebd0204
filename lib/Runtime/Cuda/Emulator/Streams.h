//===- Streams.h - the emulator's streams and events ------------*- C++ -*-===//
//
// How lamina_cuda_emulated orders work (docs/cuda.md, "The kernel
// emulator"). A stream runs its work on the issuing thread, at once, until
// something queues work on it that must wait for another process (the NCCL
// emulator's operations, lib/Runtime/Nccl/Emulator): from then on the
// stream has a worker thread that runs its queue in order, and events
// recorded on it complete when the worker reaches them. Work the host
// issues to a stream with a queue (a kernel, a copy) waits until the queue
// has drained and then runs on the host, in stream order.
//
// cudaStreamWaitEvent on a stream without a worker waits on the host: the
// host issues the stream's next work only after the event, which is the
// order the device would run it in (the host runtime's executor waits the
// same way). A task that fails (a dead peer, an aborted communicator)
// leaves its stream hung, as a GPU stream behind a kernel that never ends:
// later work on it never runs, its events never complete, and a stream
// that waits for one of them hangs too -- so the caller's bounded polling
// (cudaEventQuery, cudaStreamQuery) reports the failure as on a GPU.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_CUDA_EMULATOR_STREAMS_H
#define LAMINA_LIB_RUNTIME_CUDA_EMULATOR_STREAMS_H

#include <cuda_runtime_api.h>

#include <functional>

namespace lamina::cuda_emulator {

/// Queues `task` on `stream`'s worker (started on first use) behind the
/// stream's earlier work. A task returning false hangs the stream.
void enqueue(cudaStream_t stream, std::function<bool()> task);

/// Waits until work the host issues to `stream` may run now: the stream's
/// queue has drained. False when the stream hangs (the work is dropped, as
/// the device would never reach it).
bool hostWorkMayRun(cudaStream_t stream);

} // namespace lamina::cuda_emulator

#endif // LAMINA_LIB_RUNTIME_CUDA_EMULATOR_STREAMS_H
