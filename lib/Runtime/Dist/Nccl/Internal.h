//===- Internal.h - what lamina_nccl's files share -------------*- C++ -*-===//
//
// Private to lib/Runtime/Dist/Nccl: the polling helpers every part waits
// with (a non-blocking communicator, an MPI request, a stream) and the
// names of types. Bootstrap (World.cpp), groups (Groups.cpp) and the stream
// protocol (Streams.cpp) each include it.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_DIST_NCCL_INTERNAL_H
#define LAMINA_LIB_RUNTIME_DIST_NCCL_INTERNAL_H

#include "lamina/Runtime/Dist/Nccl.h"
#include "lamina/Runtime/Dist/Transport.h"

#include <string>

namespace lamina::rt::dist::nccl::detail {

/// "3 s": a timeout in messages.
using transport::secondsText;
/// Sleeps a little: short at first, longer the longer a wait has lasted,
/// so a poll neither burns a core for long nor adds much latency.
void backoff(unsigned spins);
/// Every communicator is non-blocking (ncclConfig_t.blocking = 0).
ncclConfig_t nonBlockingConfig();
/// Polls ncclCommGetAsyncError(comm) until the communicator leaves
/// ncclInProgress or the deadline passes. `what` names the operation.
Status waitReady(ncclComm_t comm, double deadline, double timeout,
                 const std::string &what);
ncclDataType_t ncclType(DType t);

} // namespace lamina::rt::dist::nccl::detail

#endif // LAMINA_LIB_RUNTIME_DIST_NCCL_INTERNAL_H
