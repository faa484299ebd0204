//===- DistProgram.h - distributed training programs on GPUs ----*- C++ -*-===//
//
// `lamina compile --target cuda --mode train --pp P --dp D ...` emits the
// same SPMD program as the host backend (lamina/Runtime/DistProgram.h) with
// the module functions on the CUDA kernels; its `main` calls this instead of
// lamina::rt::distTrainMain. Library lamina_dist_nccl (CUDA and NCCL
// builds; docs/cuda.md, docs/distributed.md).
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_CUDA_DISTPROGRAM_H
#define LAMINA_RUNTIME_CUDA_DISTPROGRAM_H

#include "lamina/Runtime/DistProgram.h"

namespace lamina::rt::cuda {

/// distTrainMain on this process's GPU (its local rank under torchrun-style
/// launchers, mpirun or srun) with NCCL moving the activations, gradients
/// and weights between GPUs on communication streams; the host's few bytes
/// (agreements, statistics, the export, the NCCL unique id) go over MPI
/// under mpirun / srun --mpi, else over TCP to MASTER_ADDR (no MPI_Init).
int distTrainMain(int argc, char **argv, const DistSpec &spec);

} // namespace lamina::rt::cuda

#endif // LAMINA_RUNTIME_CUDA_DISTPROGRAM_H
