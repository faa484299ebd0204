//===- Support.cpp - threads, type names, messages ------------------------===//

#include "Internal.h"

#include <algorithm>
#include <atomic>
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
  setBlasThreads(getNumThreads());
}

void lamina::rt::detail::parallelFor(
    int64_t n, int64_t minChunk,
    const std::function<void(int64_t, int64_t)> &body) {
  if (n <= 0)
    return;
  int64_t chunks = n / std::max<int64_t>(minChunk, 1);
  int threads =
      inParallelRegion ? 1 : int(std::min<int64_t>(getNumThreads(), chunks));
  if (threads <= 1) {
    body(0, n);
    return;
  }
  int64_t base = n / threads, extra = n % threads;
  auto begin = [&](int t) { return t * base + std::min<int64_t>(t, extra); };
  std::vector<std::thread> workers;
  workers.reserve(threads - 1);
  for (int t = 1; t < threads; ++t)
    workers.emplace_back([&, t] {
      inParallelRegion = true;
      body(begin(t), begin(t + 1));
    });
  inParallelRegion = true;
  body(0, begin(1));
  inParallelRegion = false;
  for (std::thread &w : workers)
    w.join();
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
