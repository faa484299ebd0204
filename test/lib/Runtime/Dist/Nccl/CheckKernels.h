//===- CheckKernels.h - the dummy compute kernel of lamina-nccl-check -----===//

#ifndef LAMINA_LIB_RUNTIME_NCCL_CHECKKERNELS_H
#define LAMINA_LIB_RUNTIME_NCCL_CHECKKERNELS_H

#include <cuda_runtime_api.h>

#include <cstddef>

namespace lamina::rt::dist::nccl::check {

/// Enqueues `iterations` multiply-adds on each of `n` floats at `data` on
/// `stream` (one thread per element); returns the launch error.
cudaError_t launchSpin(float *data, size_t n, int iterations,
                       cudaStream_t stream);

} // namespace lamina::rt::dist::nccl::check

#endif // LAMINA_LIB_RUNTIME_NCCL_CHECKKERNELS_H
