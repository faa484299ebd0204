//===- Context.cpp - stack switching for the emulator's fibers -------------===//

#include "Context.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
// lamina_emulator_switch(void **save, void *load): pushes the System V
// callee-saved registers and MXCSR / the x87 control word, stores the stack
// pointer in *save, loads `load` and pops the same frame from it.
extern "C" void lamina_emulator_switch(void **save, void *load);
asm(R"(
  .text
  .globl lamina_emulator_switch
  .type lamina_emulator_switch, @function
lamina_emulator_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size lamina_emulator_switch, .-lamina_emulator_switch
)");

void lamina::cuda_emulator::switchContext(Context &from, Context &to) {
  lamina_emulator_switch(&from.sp, to.sp);
}

void lamina::cuda_emulator::makeContext(Context &c, void *stack, size_t bytes,
                                        void (*entry)()) {
  // The frame lamina_emulator_switch pops, under a null return address for
  // entry, so entry starts with the stack aligned as after a call.
  auto top = (reinterpret_cast<uintptr_t>(stack) + bytes) & ~uintptr_t(15);
  auto *slot = reinterpret_cast<uint64_t *>(top);
  *--slot = 0;                                  // entry's return address
  *--slot = reinterpret_cast<uint64_t>(entry);  // popped by ret
  for (int r = 0; r < 6; ++r)                   // rbp rbx r12 r13 r14 r15
    *--slot = 0;
  uint32_t mxcsr;
  uint16_t fpcw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpcw));
  --slot;
  std::memcpy(reinterpret_cast<char *>(slot), &mxcsr, 4);
  std::memcpy(reinterpret_cast<char *>(slot) + 4, &fpcw, 2);
  c.sp = slot;
}
#else
void lamina::cuda_emulator::switchContext(Context &from, Context &to) {
  swapcontext(&from.uc, &to.uc);
}

void lamina::cuda_emulator::makeContext(Context &c, void *stack, size_t bytes,
                                        void (*entry)()) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
}
#endif
