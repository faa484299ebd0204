//===- MemoryPlan.h - static arena offsets for buffers ----------*- C++ -*-===//
//
// Offline memory planning: every buffer has a size and a lifetime [first,
// last] (op indices, inclusive); buffers whose lifetimes overlap get
// disjoint byte ranges. Greedy by size: the largest buffer is placed first,
// each at the lowest aligned offset that fits between the buffers already
// placed that it overlaps in time (the "greedy by size" planner of TFLite
// and of Pisarchyk & Lee, 2020). No MLIR dependency, so it is unit tested
// on its own.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_SCHEDULE_MEMORYPLAN_H
#define LAMINA_SCHEDULE_MEMORYPLAN_H

#include <cstdint>
#include <vector>

namespace lamina {

struct BufferRequest {
  int64_t bytes = 0;
  int64_t first = 0; ///< index of the defining op
  int64_t last = 0;  ///< index of the last op that reads it (>= first)
};

struct MemoryPlan {
  std::vector<int64_t> offsets; ///< per request, aligned
  int64_t peakBytes = 0;        ///< arena size: max over offset + size
  int64_t totalBytes = 0;       ///< sum of the aligned sizes (no reuse)
};

/// Plans `requests`; `alignment` is a power of two. Zero-byte requests get
/// offset 0 and occupy nothing.
MemoryPlan planMemory(const std::vector<BufferRequest> &requests,
                      int64_t alignment);

/// True when no two requests that are live at the same time overlap in the
/// plan: the property every plan must have (used by tests and asserts).
bool isValidPlan(const std::vector<BufferRequest> &requests,
                 const MemoryPlan &plan);

} // namespace lamina

#endif
