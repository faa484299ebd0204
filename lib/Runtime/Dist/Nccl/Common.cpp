//===- Common.cpp - polling, messages and names of lamina_nccl -----------===//
//
// See include/lamina/Runtime/Dist/Nccl.h and docs/cuda.md, "NCCL and
// streams". Every communicator is non-blocking (ncclConfig_t.blocking = 0):
// a call may return ncclInProgress, and then ncclCommGetAsyncError is polled
// until the communicator is ready, bounded by the deadline, before anything
// else is done with it (NCCL's rule for non-blocking communicators).
//
//===----------------------------------------------------------------------===//

#include "Internal.h"

#include <chrono>
#include <ctime>

namespace lamina::rt::dist::nccl {

double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace detail {

/// Sleeps a little: short at first, longer the longer a wait has lasted,
/// so a poll neither burns a core for long nor adds much latency.
void backoff(unsigned spins) {
  if (spins < 100)
    return;
  struct timespec ts = {0, spins < 2000 ? 20000 : 500000};
  nanosleep(&ts, nullptr);
}

ncclConfig_t nonBlockingConfig() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

/// Polls ncclCommGetAsyncError(comm) until the communicator leaves
/// ncclInProgress or the deadline passes. `what` names the operation.
Status waitReady(ncclComm_t comm, double deadline, double timeout,
                 const std::string &what) {
  for (unsigned spins = 0;; ++spins) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess)
      return Status::error(what + ": " +
                           ncclText("ncclCommGetAsyncError", r, comm));
    if (state == ncclSuccess)
      return Status::success();
    if (state != ncclInProgress)
      return Status::error(what + ": " +
                           ncclText("ncclCommGetAsyncError", state, comm));
    if (now() > deadline)
      return Status::error(what + " did not complete within " +
                           secondsText(timeout) +
                           " (a rank may have failed, died or not started)");
    backoff(spins);
  }
}

ncclDataType_t ncclType(DType t) {
  switch (t) {
  case DType::F32:
    return ncclFloat32;
  case DType::F16:
    return ncclFloat16;
  case DType::BF16:
    return ncclBfloat16;
  case DType::F64:
    return ncclFloat64;
  }
  return ncclFloat32;
}

} // namespace detail

//===----------------------------------------------------------------------===//
// Messages
//===----------------------------------------------------------------------===//

std::string ncclText(const char *call, ncclResult_t r, ncclComm_t comm) {
  std::string text = std::string(call) + ": " + ncclGetErrorString(r);
  const char *last = ncclGetLastError(comm);
  if (last && *last)
    text += std::string(" (") + last + ")";
  return text;
}

std::string cudaText(const char *call, cudaError_t e) {
  return std::string(call) + ": " + cudaGetErrorString(e) + " (" +
         cudaGetErrorName(e) + ")";
}

bool parseBootstrap(const std::string &text, Bootstrap &out) {
  if (text == "auto")
    out = Bootstrap::Auto;
  else if (text == "mpi")
    out = Bootstrap::Mpi;
  else if (text == "env")
    out = Bootstrap::Env;
  else
    return false;
  return true;
}

const char *bootstrapName(Bootstrap b) {
  switch (b) {
  case Bootstrap::Auto:
    return "auto";
  case Bootstrap::Mpi:
    return "mpi";
  case Bootstrap::Env:
    return "env";
  case Bootstrap::Host:
    return "host";
  }
  return "?";
}

size_t dtypeSize(DType t) {
  return t == DType::F64 ? 8 : t == DType::F32 ? 4 : 2;
}

const char *dtypeName(DType t) {
  switch (t) {
  case DType::F32:
    return "f32";
  case DType::F16:
    return "f16";
  case DType::BF16:
    return "bf16";
  case DType::F64:
    return "f64";
  }
  return "?";
}

} // namespace lamina::rt::dist::nccl
