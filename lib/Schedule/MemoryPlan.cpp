//===- MemoryPlan.cpp - greedy-by-size arena planning ---------------------===//

#include "lamina/Schedule/MemoryPlan.h"

#include <algorithm>
#include <numeric>

using namespace lamina;

static int64_t alignUp(int64_t v, int64_t a) { return (v + a - 1) & ~(a - 1); }

static bool overlapInTime(const BufferRequest &a, const BufferRequest &b) {
  return a.first <= b.last && b.first <= a.last;
}

MemoryPlan lamina::planMemory(const std::vector<BufferRequest> &requests,
                              int64_t alignment) {
  MemoryPlan plan;
  plan.offsets.assign(requests.size(), 0);
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first; among equals, the earliest first (deterministic).
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (requests[a].bytes != requests[b].bytes)
      return requests[a].bytes > requests[b].bytes;
    return requests[a].first < requests[b].first;
  });

  struct Placed {
    int64_t offset, end;
  };
  // What is placed, with its lifetime, contiguous: the scan below is the
  // planner's inner loop (thousands of values in a long pipeline's step).
  struct Live {
    int64_t first, last, offset, end;
  };
  std::vector<Live> placed;
  std::vector<Placed> conflicts;
  for (size_t i : order) {
    const BufferRequest &r = requests[i];
    int64_t size = alignUp(r.bytes, alignment);
    plan.totalBytes += size;
    if (size == 0)
      continue;
    conflicts.clear();
    for (const Live &p : placed)
      if (r.first <= p.last && p.first <= r.last)
        conflicts.push_back({p.offset, p.end});
    std::sort(conflicts.begin(), conflicts.end(),
              [](const Placed &a, const Placed &b) {
                return a.offset < b.offset;
              });
    // Best fit: the smallest gap between conflicting buffers that holds the
    // request; else after the highest one.
    int64_t best = -1, bestGap = INT64_MAX, cursor = 0;
    for (const Placed &c : conflicts) {
      if (c.offset > cursor) {
        int64_t gap = c.offset - cursor;
        if (gap >= size && gap < bestGap) {
          best = cursor;
          bestGap = gap;
        }
      }
      cursor = std::max(cursor, c.end);
    }
    if (best < 0)
      best = cursor;
    plan.offsets[i] = best;
    plan.peakBytes = std::max(plan.peakBytes, best + size);
    placed.push_back({r.first, r.last, best, best + size});
  }
  return plan;
}

bool lamina::isValidPlan(const std::vector<BufferRequest> &requests,
                         const MemoryPlan &plan) {
  if (plan.offsets.size() != requests.size())
    return false;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].bytes == 0)
      continue;
    if (plan.offsets[i] < 0 || plan.offsets[i] + requests[i].bytes > plan.peakBytes)
      return false;
    for (size_t j = i + 1; j < requests.size(); ++j) {
      if (requests[j].bytes == 0 || !overlapInTime(requests[i], requests[j]))
        continue;
      int64_t a0 = plan.offsets[i], a1 = a0 + requests[i].bytes;
      int64_t b0 = plan.offsets[j], b1 = b0 + requests[j].bytes;
      if (a0 < b1 && b0 < a1)
        return false;
    }
  }
  return true;
}
