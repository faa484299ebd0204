//===- DeviceCode.h - CUDA's device-side names, for the CPU -------*- C++ -*-===//
//
// Force-included (-include) into lib/Runtime/Cuda's .cu files by
// lamina_cuda_emulated: the built-in variables, intrinsics and qualifiers a
// kernel uses, mapped onto the fiber scheduler (Emulator.h).
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_CUDA_EMULATOR_DEVICECODE_H
#define LAMINA_LIB_RUNTIME_CUDA_EMULATOR_DEVICECODE_H

#include "Emulator.h"

/// Common.h's device helpers and launchKernel take their emulator form.
#define LAMINA_CUDA_EMULATOR 1

// The device's integer and float min/max overloads.
#define LAMINA_EMULATOR_MINMAX(T)                                              \
  inline T min(T a, T b) { return b < a ? b : a; }                             \
  inline T max(T a, T b) { return a < b ? b : a; }
LAMINA_EMULATOR_MINMAX(int)
LAMINA_EMULATOR_MINMAX(unsigned)
LAMINA_EMULATOR_MINMAX(long)
LAMINA_EMULATOR_MINMAX(long long)
LAMINA_EMULATOR_MINMAX(unsigned long)
LAMINA_EMULATOR_MINMAX(unsigned long long)
#undef LAMINA_EMULATOR_MINMAX

// Kernel and variable qualifiers: a kernel is a plain function; a block's
// __shared__ variables are function statics (blocks run one at a time, and
// launches are serialised).
#undef __shared__
#define __shared__ static
#undef __launch_bounds__
#define __launch_bounds__(...)

#define threadIdx (::lamina::cuda_emulator::self().threadIdx)
#define blockIdx (::lamina::cuda_emulator::self().blockIdx)
#define blockDim (::lamina::cuda_emulator::self().blockDim)
#define gridDim (::lamina::cuda_emulator::self().gridDim)

#define __syncthreads() ::lamina::cuda_emulator::syncThreads()
#define __syncwarp(...) ::lamina::cuda_emulator::syncWarp(__VA_ARGS__)
#define __shfl_xor_sync(...) ::lamina::cuda_emulator::shflXor(__VA_ARGS__)
#define __shfl_sync(...) ::lamina::cuda_emulator::shfl(__VA_ARGS__)
#define __shfl_down_sync(...) ::lamina::cuda_emulator::shflDown(__VA_ARGS__)
#define __shfl_up_sync(...) ::lamina::cuda_emulator::shflUp(__VA_ARGS__)
#define atomicAdd(...) ::lamina::cuda_emulator::atomicAddImpl(__VA_ARGS__)
#define atomicMax(...) ::lamina::cuda_emulator::atomicMaxImpl(__VA_ARGS__)
#define atomicMin(...) ::lamina::cuda_emulator::atomicMinImpl(__VA_ARGS__)
#define atomicCAS(...) ::lamina::cuda_emulator::atomicCASImpl(__VA_ARGS__)
#define atomicExch(...) ::lamina::cuda_emulator::atomicExchImpl(__VA_ARGS__)

// Device math under host names. The device's fast approximations (__expf)
// are computed exactly: tests compare within tolerances that cover both.
#define __expf(x) ::expf(x)
#define __logf(x) ::logf(x)
#define __fdividef(x, y) ((x) / (y))
#define __fmul_rn(x, y) ((x) * (y))
#define __fadd_rn(x, y) ((x) + (y))
#define __frcp_rn(x) (1.0f / (x))
#define __saturatef(x) ::fminf(::fmaxf((x), 0.0f), 1.0f)
#define __uint_as_float(u) ::lamina::cuda_emulator::uintAsFloat(u)
#define __float_as_uint(f) ::lamina::cuda_emulator::floatAsUint(f)
#define __half_as_ushort(h) ::lamina::cuda_emulator::halfAsUshort(h)
#define __bfloat16_as_ushort(h) ::lamina::cuda_emulator::bf16AsUshort(h)

#endif // LAMINA_LIB_RUNTIME_CUDA_EMULATOR_DEVICECODE_H
