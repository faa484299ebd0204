//===- SupportTest.cpp - the runtime's thread pool and GEMM libraries -----===//

#include "RuntimeTestUtil.h"

#include "Internal.h"

#include <atomic>
#include <thread>

using namespace lamina::rt;
using namespace lamina::rt::test;

namespace {

/// Runs parallelFor over [0, n) and checks every index is visited once and
/// each chunk is contiguous and in range.
void expectCoversOnce(int64_t n, int64_t minChunk) {
  std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
  std::atomic<int> bad{0};
  detail::parallelFor(n, minChunk, [&](int64_t begin, int64_t end) {
    if (begin < 0 || end > n || begin >= end)
      ++bad;
    for (int64_t i = begin; i < end; ++i)
      seen[size_t(i)]++;
  });
  ASSERT_EQ(bad.load(), 0) << "n " << n;
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(seen[size_t(i)].load(), 1) << "n " << n << " index " << i;
}

TEST(RuntimeThreads, EveryIndexOnceAcrossManyJobsAndThreadCounts) {
  for (int threads : {2, 3, 5, 1, 4}) {
    setNumThreads(threads);
    for (int64_t n : {1, 2, 3, 7, 64, 1000, 4097})
      for (int round = 0; round < 50; ++round)
        expectCoversOnce(n, 1);
  }
  setNumThreads(0);
}

TEST(RuntimeThreads, BackToBackJobsSeeTheirOwnBody) {
  // Thousands of short jobs in a row: a worker late for one job must not
  // run a chunk of the next with the old body.
  setNumThreads(4);
  std::vector<int64_t> sums(2000);
  for (size_t j = 0; j < sums.size(); ++j) {
    std::atomic<int64_t> sum{0};
    detail::parallelFor(8, 1, [&, j](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        sum += int64_t(j) * 8 + i;
    });
    sums[j] = sum.load();
  }
  for (size_t j = 0; j < sums.size(); ++j)
    ASSERT_EQ(sums[j], int64_t(j) * 64 + 28) << "job " << j;
  setNumThreads(0);
}

TEST(RuntimeThreads, NestedSplitsRunInline) {
  setNumThreads(4);
  std::atomic<int64_t> total{0};
  detail::parallelFor(4, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      detail::parallelFor(100, 1, [&](int64_t b, int64_t e) {
        total += e - b;
      });
  });
  EXPECT_EQ(total.load(), 400);
  setNumThreads(0);
}

TEST(RuntimeThreads, CallersOnOtherThreadsShareThePool) {
  // Callers that are not the pool's workers, at once: each gets its whole
  // range (on the pool or, while it is busy, inline).
  setNumThreads(3);
  std::atomic<int> failures{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&] {
      for (int round = 0; round < 300; ++round) {
        std::atomic<int64_t> count{0};
        detail::parallelFor(1000, 10, [&](int64_t b, int64_t e) {
          count += e - b;
        });
        if (count.load() != 1000)
          ++failures;
      }
    });
  for (std::thread &c : callers)
    c.join();
  EXPECT_EQ(failures.load(), 0);
  setNumThreads(0);
}

TEST(RuntimeGemm, NamesTheLibrariesAndTheKernelFamily) {
  std::string k = gemmKernels();
  EXPECT_NE(k.find("oneDNN"), std::string::npos) << k;
  EXPECT_NE(k.find("(f32)"), std::string::npos) << k;
  EXPECT_NE(k.find("OpenBLAS"), std::string::npos) << k;
}

} // namespace
