//===- Scheduler.cpp - CUDA threads as fibers for the kernel emulator ------===//
//
// A block's threads are fibers (Context.h) on the launching OS thread, run
// round-robin; a fiber runs until it waits at a barrier or returns. A
// barrier opens when every live thread it names has arrived (threads that
// returned no longer count, as on the device). If no fiber can run while
// some are waiting, the launch failed: a barrier that not every live thread
// reaches, which the device would hang on or get wrong.
//
//===----------------------------------------------------------------------===//

#include "Emulator.h"
#include "Context.h"
#include "Internal.h"

#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace lamina::cuda_emulator {
namespace {
constexpr size_t kStackBytes = 256 * 1024;
constexpr int kMaxThreads = 1024;

struct Barrier {
  unsigned generation = 0;
  int arrived = 0;
  unsigned mask = 0; // warp barriers: the mask of this episode
};

struct Fiber {
  Context context;
  ThreadCoords coords;
  int linear = 0;
  bool done = false;
  const unsigned *waitOn = nullptr; // a barrier's generation, while waiting
  unsigned waitFor = 0;
};

struct Warp {
  Barrier barrier;
  unsigned existing = 0, live = 0; // lanes of the block / not yet returned
  uint64_t slots[32] = {};
  float staging[3 * 256] = {};
};

struct Block {
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  Barrier barrier;
  int live = 0;
  Context scheduler;
  Fiber *current = nullptr;
  const std::function<void()> *body = nullptr;
  std::vector<unsigned char> shared;
  std::string failure;
};

/// Fiber stacks, kept between launches (mapped on demand).
struct Stacks {
  std::vector<void *> stacks;
  void *get(int i) {
    while (int(stacks.size()) <= i) {
      void *p = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) {
        std::perror("lamina cuda emulator: mmap");
        std::abort();
      }
      stacks.push_back(p);
    }
    return stacks[size_t(i)];
  }
};

std::mutex launchMutex;
Stacks stacks;
Block *running = nullptr;

Fiber &me() { return *running->current; }
Warp &myWarp() { return running->warps[size_t(me().linear / 32)]; }

/// Waits until b's generation moves on (the caller has arrived).
void waitAt(Barrier &b, unsigned generation) {
  Fiber &f = me();
  f.waitOn = &b.generation;
  f.waitFor = generation;
  switchContext(f.context, running->scheduler);
  f.waitOn = nullptr;
}

void open(Barrier &b) {
  b.arrived = 0;
  b.mask = 0;
  ++b.generation;
}

/// Opens the barriers a returning thread was the last to hold back.
void releaseAfterExit(Block &blk, Warp &w) {
  if (blk.barrier.arrived > 0 && blk.barrier.arrived >= blk.live)
    open(blk.barrier);
  if (w.barrier.arrived > 0 &&
      w.barrier.arrived >= __builtin_popcount(w.barrier.mask & w.live))
    open(w.barrier);
}

void fail(const std::string &why) {
  if (running->failure.empty())
    running->failure = why;
}

void fiberMain() {
  Block &blk = *running;
  Fiber &f = *blk.current;
  (*blk.body)();
  f.done = true;
  --blk.live;
  Warp &w = blk.warps[size_t(f.linear / 32)];
  w.live &= ~(1u << (f.linear % 32));
  releaseAfterExit(blk, w);
  switchContext(f.context, blk.scheduler); // for the last time
  std::abort();
}

std::string where(const Fiber &f) {
  auto &c = f.coords;
  return "block (" + std::to_string(c.blockIdx.x) + "," +
         std::to_string(c.blockIdx.y) + "," + std::to_string(c.blockIdx.z) +
         ") thread (" + std::to_string(c.threadIdx.x) + "," +
         std::to_string(c.threadIdx.y) + "," + std::to_string(c.threadIdx.z) +
         ")";
}

/// Sets up thread t of the block at blockIdx b.
void prepare(Block &blk, int t, uint3 b, dim3 grid,
                               dim3 block) {
  Fiber &f = blk.fibers[size_t(t)];
  f.linear = t;
  f.done = false;
  f.waitOn = nullptr;
  f.coords.blockIdx = b;
  f.coords.threadIdx =
      uint3{unsigned(t) % block.x, unsigned(t) / block.x % block.y,
            unsigned(t) / (block.x * block.y)};
  f.coords.blockDim = block;
  f.coords.gridDim = grid;
  Warp &w = blk.warps[size_t(t / 32)];
  w.existing |= 1u << (t % 32);
  w.live = w.existing;
  makeContext(f.context, stacks.get(t), kStackBytes, fiberMain);
}

/// Whether the last thread of a block runs first (LAMINA_CUDA_EMULATOR_ORDER
/// =reverse) instead of the first.
bool reverseOrder() {
  static const bool reverse = [] {
    const char *e = std::getenv("LAMINA_CUDA_EMULATOR_ORDER");
    return e && std::string(e) == "reverse";
  }();
  return reverse;
}

/// The first thread, in scheduling order, that can run; null if none.
Fiber *nextRunnable(Block &blk) {
  int n = int(blk.fibers.size());
  bool reverse = reverseOrder();
  for (int i = 0; i < n; ++i) {
    Fiber &f = blk.fibers[size_t(reverse ? n - 1 - i : i)];
    if (!f.done && !(f.waitOn && *f.waitOn == f.waitFor))
      return &f;
  }
  return nullptr;
}

/// Runs one block to the end; false (with blk.failure) on a deadlock. After
/// every switch the first runnable thread runs again, so one warp races as
/// far ahead of the others as its barriers let it: a barrier the kernel
/// needs but lacks lets it overwrite or read shared memory the others have
/// not finished with or written, and the result is wrong.
bool runBlock(Block &blk) {
  while (Fiber *f = nextRunnable(blk)) {
    blk.current = f;
    switchContext(blk.scheduler, f->context);
    if (!blk.failure.empty())
      return false;
  }
  if (blk.live == 0)
    return true;
  for (Fiber &f : blk.fibers)
    if (!f.done) {
      bool atWarp = false;
      for (const Warp &w : blk.warps)
        atWarp = atWarp || f.waitOn == &w.barrier.generation;
      fail(std::string("deadlock: ") + where(f) + " waits at a " +
           (atWarp ? "warp" : "block") +
           " barrier that not every live thread reaches");
      break;
    }
  return false;
}
} // namespace

const ThreadCoords &self() { return me().coords; }
int lane() { return me().linear % 32; }
void *dynamicShared() { return running->shared.data(); }
float *warpStaging() { return myWarp().staging; }

void syncThreads() {
  Block &blk = *running;
  Barrier &b = blk.barrier;
  unsigned g = b.generation;
  if (++b.arrived >= blk.live) {
    open(b);
    return;
  }
  waitAt(b, g);
}

void syncWarp(unsigned mask) {
  Warp &w = myWarp();
  Barrier &b = w.barrier;
  unsigned bit = 1u << lane();
  if (!(mask & bit)) {
    fail("__syncwarp or a warp collective from " + where(me()) +
         " whose lane is not in its mask");
    switchContext(me().context, running->scheduler);
  }
  if (b.arrived == 0)
    b.mask = mask;
  else if (b.mask != mask) {
    fail("warp collectives with different masks meet at " + where(me()));
    switchContext(me().context, running->scheduler);
  }
  unsigned g = b.generation;
  if (++b.arrived >= __builtin_popcount(mask & w.live)) {
    open(b);
    return;
  }
  waitAt(b, g);
}

uint64_t exchange(unsigned mask, uint64_t value, int source) {
  Warp &w = myWarp();
  w.slots[lane()] = value;
  syncWarp(mask);
  uint64_t got = ~uint64_t(0);
  if (source >= 0 && source < 32 && (mask & w.live & (1u << source)))
    got = w.slots[source];
  syncWarp(mask); // every lane has read before the slots are reused
  return got;
}

bool checkLaunch(const void *kernel, dim3 grid, dim3 block,
                 size_t sharedBytes) {
  int threads = int(block.x * block.y * block.z);
  if (threads < 1 || threads > kMaxThreads || grid.x * grid.y * grid.z == 0 ||
      grid.y > 65535 || grid.z > 65535) {
    std::fprintf(stderr, "lamina cuda emulator: launch of %u x %u x %u "
                 "blocks of %d threads\n", grid.x, grid.y, grid.z, threads);
    setLaunchError(cudaErrorInvalidConfiguration, "bad launch dimensions");
    return false;
  }
  if (sharedBytes > sharedLimit(kernel)) {
    std::fprintf(stderr, "lamina cuda emulator: %zu bytes of dynamic shared "
                 "memory, %zu allowed (cudaFuncSetAttribute)\n", sharedBytes,
                 sharedLimit(kernel));
    setLaunchError(cudaErrorInvalidValue, "too much shared memory");
    return false;
  }
  return true;
}

void launch(const void *kernel, dim3 grid, dim3 block, size_t sharedBytes,
            const std::function<void()> &body) {
  if (!checkLaunch(kernel, grid, block, sharedBytes))
    return;
  std::lock_guard<std::mutex> lock(launchMutex);
  int threads = int(block.x * block.y * block.z);
  Block blk;
  blk.body = &body;
  blk.fibers.resize(size_t(threads));
  blk.warps.resize(size_t((threads + 31) / 32));
  // Never-written shared memory reads as NaN (all bits set), not zero.
  blk.shared.assign(sharedBytes ? sharedBytes : 1, 0xff);
  running = &blk;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        blk.live = threads;
        blk.barrier = Barrier();
        for (Warp &w : blk.warps) {
          w.barrier = Barrier();
          w.existing = w.live = 0;
        }
        for (int t = 0; t < threads; ++t)
          prepare(blk, t, uint3{bx, by, bz}, grid, block);
        if (!runBlock(blk)) {
          std::fprintf(stderr, "lamina cuda emulator: %s\n",
                       blk.failure.c_str());
          setLaunchError(cudaErrorLaunchFailure, blk.failure);
          running = nullptr;
          return;
        }
      }
  running = nullptr;
}
} // namespace lamina::cuda_emulator
