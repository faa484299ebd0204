//===- Support.cpp - threads, type names, messages ------------------------===//

#include "Internal.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

using namespace lamina::rt;
using namespace lamina::rt::detail;

const char *lamina::rt::dtypeName(DType t) {
  static const char *const names[] = {"f32",  "f64",  "f16", "bf16", "i1",
                                      "i8",   "i16",  "i32", "i64",  "ui8",
                                      "ui16", "ui32", "ui64"};
  return unsigned(t) < sizeof(names) / sizeof(names[0]) ? names[unsigned(t)]
                                                        : "?";
}

//===----------------------------------------------------------------------===//
// Threads
//===----------------------------------------------------------------------===//

static std::atomic<int> requestedThreads{0}; // 0: hardware concurrency
// Set inside parallelFor's workers so a nested split runs inline instead of
// multiplying threads.
static thread_local bool inParallelRegion = false;

int lamina::rt::getNumThreads() {
  int n = requestedThreads.load(std::memory_order_relaxed);
  if (n < 1)
    n = int(std::thread::hardware_concurrency());
  return n < 1 ? 1 : n;
}

void lamina::rt::setNumThreads(int n) {
  requestedThreads.store(n < 1 ? 0 : n, std::memory_order_relaxed);
}

namespace {
/// The persistent workers behind parallelFor. Starting threads per call cost
/// tens of microseconds each, more than most kernels of a small model take.
/// A job is published as a ticket (generation << 32 | chunks << 16 | next
/// chunk); workers claim chunks by compare-and-swap on it, so a late worker
/// can never claim a chunk of the next job with the previous job's
/// generation, and reads the job's fields only once it holds a chunk (the
/// publisher waits for every chunk, so they are stable then). Idle workers
/// spin for a few tens of microseconds (the gap between two kernels), then
/// sleep, so oversubscribed ranks do not burn each other's cores.
class ThreadPool {
public:
  /// Runs body over `chunks` chunks of [0, n) on the caller and up to
  /// chunks - 1 workers; returns false (running nothing) when the pool is
  /// busy with another caller's job.
  bool run(int chunks, int64_t n,
           const std::function<void(int64_t, int64_t)> &body) {
    std::unique_lock<std::mutex> busy(busyMutex, std::try_to_lock);
    if (!busy.owns_lock())
      return false;
    resize(getNumThreads() - 1);
    job = &body;
    jobN = n;
    pending.store(chunks, std::memory_order_relaxed);
    uint64_t gen = ((ticket.load(std::memory_order_relaxed) >> 32) + 1) &
                   0xffffffffu;
    ticket.store(gen << 32 | uint64_t(chunks) << 16,
                 std::memory_order_seq_cst);
    if (sleeping.load(std::memory_order_seq_cst) > 0) {
      { std::lock_guard<std::mutex> lock(sleepMutex); }
      wake.notify_all();
    }
    inParallelRegion = true;
    work(gen);
    inParallelRegion = false;
    // The chunks are even, so the wait is short; yield when it is not (a
    // worker descheduled by an oversubscribed machine).
    for (int spins = 0; pending.load(std::memory_order_acquire) != 0; ++spins)
      if (spins > 4096)
        std::this_thread::yield();
    return true;
  }

private:
  std::vector<std::thread> workers;
  std::mutex busyMutex, sleepMutex;
  std::condition_variable wake;
  std::atomic<uint64_t> ticket{0};
  std::atomic<int> pending{0}, sleeping{0};
  bool stopping = false; // under sleepMutex
  const std::function<void(int64_t, int64_t)> *job = nullptr;
  int64_t jobN = 0;

  /// Claims and runs chunks of generation `gen` until none is left.
  void work(uint64_t gen) {
    for (;;) {
      uint64_t t = ticket.load(std::memory_order_acquire);
      int64_t chunks = int64_t(t >> 16 & 0xffff), c = int64_t(t & 0xffff);
      if (t >> 32 != gen || c >= chunks)
        return;
      if (!ticket.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel))
        continue;
      int64_t base = jobN / chunks, extra = jobN % chunks;
      auto begin = [&](int64_t i) { return i * base + std::min(i, extra); };
      (*job)(begin(c), begin(c + 1));
      pending.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  void workerLoop() {
    inParallelRegion = true;
    uint64_t seen = ticket.load(std::memory_order_acquire) >> 32;
    for (;;) {
      auto start = std::chrono::steady_clock::now();
      uint64_t gen = seen;
      // A few microseconds of plain spinning, then yielding between looks:
      // on an idle core yield returns at once, on an oversubscribed one
      // (ranks sharing cores) it hands the core to the thread that has work.
      for (int i = 0; gen == seen; ++i) {
        gen = ticket.load(std::memory_order_acquire) >> 32;
        if (gen != seen || i < 256)
          continue;
        if (std::chrono::steady_clock::now() - start >
            std::chrono::microseconds(50))
          break;
        std::this_thread::yield();
      }
      if (gen == seen) {
        std::unique_lock<std::mutex> lock(sleepMutex);
        sleeping.fetch_add(1, std::memory_order_seq_cst);
        wake.wait(lock, [&] {
          return stopping ||
                 ticket.load(std::memory_order_seq_cst) >> 32 != seen;
        });
        sleeping.fetch_sub(1, std::memory_order_relaxed);
        if (stopping)
          return;
        gen = ticket.load(std::memory_order_acquire) >> 32;
      }
      seen = gen;
      work(gen);
    }
  }

  /// Keeps exactly `n` workers (called with busyMutex held).
  void resize(int n) {
    if (int(workers.size()) == n)
      return;
    {
      std::lock_guard<std::mutex> lock(sleepMutex);
      stopping = true;
    }
    wake.notify_all();
    for (std::thread &w : workers)
      w.join();
    workers.clear();
    stopping = false;
    for (int i = 0; i < n; ++i)
      workers.emplace_back([this] { workerLoop(); });
  }
};

ThreadPool &pool() {
  // Never destroyed: workers may still be asleep when the process exits.
  static ThreadPool *p = new ThreadPool;
  return *p;
}
} // namespace

void lamina::rt::detail::parallelFor(
    int64_t n, int64_t minChunk,
    const std::function<void(int64_t, int64_t)> &body) {
  if (n <= 0)
    return;
  int64_t chunks = n / std::max<int64_t>(minChunk, 1);
  int threads = inParallelRegion
                    ? 1
                    : int(std::min<int64_t>({getNumThreads(), chunks, 0xffff}));
  if (threads <= 1 || !pool().run(threads, n, body))
    body(0, n);
}

//===----------------------------------------------------------------------===//
// Messages and checks
//===----------------------------------------------------------------------===//

std::string lamina::rt::detail::shapeString(const int64_t *shape, int rank) {
  std::string s = "[";
  for (int i = 0; i < rank; ++i)
    s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string lamina::rt::detail::describe(const Tensor &t) {
  return shapeString(t.shape, t.rank) + "x" + dtypeName(t.dtype);
}

bool lamina::rt::detail::sameShape(const Tensor &a, const Tensor &b) {
  if (a.rank != b.rank)
    return false;
  for (int i = 0; i < a.rank; ++i)
    if (a.shape[i] != b.shape[i])
      return false;
  return true;
}

bool lamina::rt::detail::hasShape(const Tensor &t,
                                  const std::vector<int64_t> &shape) {
  if (size_t(t.rank) != shape.size())
    return false;
  for (int i = 0; i < t.rank; ++i)
    if (t.shape[i] != shape[i])
      return false;
  return true;
}

bool lamina::rt::detail::normaliseAxis(int64_t &axis, int rank) {
  if (axis < 0)
    axis += rank;
  return axis >= 0 && axis < rank;
}
