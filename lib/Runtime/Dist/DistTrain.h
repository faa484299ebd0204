//===- DistTrain.h - the distributed driver on any transport ----*- C++ -*-===//
//
// distTrainMain's body with the Device and the Communicator as parameters:
// lamina_dist's entry points pass the MPI communicator, lamina_dist_nccl's
// (lamina::rt::cuda::distTrainMain) the NCCL one. Private to the
// distributed runtime libraries.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_DIST_DISTTRAIN_H
#define LAMINA_LIB_RUNTIME_DIST_DISTTRAIN_H

#include "Comm.h"
#include "Communicator.h"

#include "lamina/Runtime/DistProgram.h"

#include <functional>
#include <memory>

namespace lamina::rt::dist {

/// Creates the data-plane communicator once MPI is up and the flags are
/// read (collective over the world; timeoutSeconds: --comm-timeout).
using MakeCommunicator = std::function<Status(
    Comm &comm, Device &device, double timeoutSeconds,
    std::unique_ptr<Communicator> &out)>;

Status makeMpiCommunicator(Comm &comm, Device &device, double timeoutSeconds,
                           std::unique_ptr<Communicator> &out);

/// MPI start-up (unless MPI is already initialised), the run, MPI_Finalize.
int distTrain(int argc, char **argv, const DistSpec &spec, Device &device,
              const MakeCommunicator &makeNet);

} // namespace lamina::rt::dist

#endif // LAMINA_LIB_RUNTIME_DIST_DISTTRAIN_H
