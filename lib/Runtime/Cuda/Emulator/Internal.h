//===- Internal.h - private to the kernel emulator ----------------*- C++ -*-===//

#ifndef LAMINA_LIB_RUNTIME_CUDA_EMULATOR_INTERNAL_H
#define LAMINA_LIB_RUNTIME_CUDA_EMULATOR_INTERNAL_H

#include <cuda_runtime.h>

#include <string>

namespace lamina::cuda_emulator {
/// Records a failed launch for cudaGetLastError (the first one wins until
/// it is read).
void setLaunchError(cudaError_t err, const std::string &why);
/// The dynamic shared memory a launch of `kernel` may use: 48 KiB unless
/// cudaFuncSetAttribute raised it.
size_t sharedLimit(const void *kernel);
/// This host thread's current device (cudaSetDevice).
int currentDeviceId();
} // namespace lamina::cuda_emulator

#endif // LAMINA_LIB_RUNTIME_CUDA_EMULATOR_INTERNAL_H
