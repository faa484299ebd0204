//===- DistTrain.h - the distributed driver on any transport ----*- C++ -*-===//
//
// distTrainMain's body with the Device and the Communicator as parameters:
// lamina_dist's entry points pass the MPI communicator, lamina_dist_nccl's
// (lamina::rt::cuda::distTrainMain) the NCCL one; the host control plane
// (ControlPlane.h) is MPI or TCP by the launch. Private to the distributed
// runtime libraries.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_DIST_DISTTRAIN_H
#define LAMINA_LIB_RUNTIME_DIST_DISTTRAIN_H

#include "Communicator.h"
#include "ControlPlane.h"

#include "lamina/Runtime/DistProgram.h"

#include <functional>
#include <memory>
#include <string>

namespace lamina::rt::dist {

class Comm;

/// Creates the data-plane communicator once the control plane is up and
/// the flags are read (collective over the world; timeoutSeconds:
/// --comm-timeout). `mpi` is null when this launch did not initialise MPI.
using MakeCommunicator = std::function<Status(
    ControlPlane &control, Comm *mpi, Device &device, double timeoutSeconds,
    std::unique_ptr<Communicator> &out)>;

Status makeMpiCommunicator(ControlPlane &control, Comm *mpi, Device &device,
                           double timeoutSeconds,
                           std::unique_ptr<Communicator> &out);

/// Which control plane this launch gets: "mpi", "tcp" or "single" (a
/// world of one, no launcher). LAMINA_CONTROL=mpi|tcp forces it; else MPI
/// when the data plane needs MPI (`dataNeedsMpi`), or when mpirun or srun
/// --mpi started the process (OMPI_COMM_WORLD_SIZE, PMIX_RANK or PMI_SIZE)
/// and MASTER_ADDR is not set; else TCP when a launcher's rank variable is
/// set (RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID). A bad LAMINA_CONTROL is
/// an error naming it.
Status chooseControl(bool dataNeedsMpi, std::string &kind);

/// The control plane's start-up (MPI_Init only when MPI is chosen or the
/// data plane needs it), the run, MPI_Finalize when MPI was used.
int distTrain(int argc, char **argv, const DistSpec &spec, Device &device,
              const MakeCommunicator &makeNet, bool dataNeedsMpi);

} // namespace lamina::rt::dist

#endif // LAMINA_LIB_RUNTIME_DIST_DISTTRAIN_H
