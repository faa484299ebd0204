//===- Context.h - stack switching for the emulator's fibers ------*- C++ -*-===//
//
// A fiber's saved stack pointer and the switch between two. On x86-64 the
// switch saves the callee-saved registers and the FP control words and
// moves the stack pointer (no system call; swapcontext's signal-mask calls
// were most of the emulator's time); elsewhere it is ucontext.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_LIB_RUNTIME_CUDA_EMULATOR_CONTEXT_H
#define LAMINA_LIB_RUNTIME_CUDA_EMULATOR_CONTEXT_H

#include <cstddef>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace lamina::cuda_emulator {
struct Context {
#if defined(__x86_64__)
  void *sp = nullptr;
#else
  ucontext_t uc;
#endif
};

/// Saves the running context in `from` and resumes `to`.
void switchContext(Context &from, Context &to);
/// Makes `c` start `entry` on [stack, stack + bytes) when switched to.
/// entry must never return (it switches away for the last time).
void makeContext(Context &c, void *stack, size_t bytes, void (*entry)());
} // namespace lamina::cuda_emulator

#endif // LAMINA_LIB_RUNTIME_CUDA_EMULATOR_CONTEXT_H
