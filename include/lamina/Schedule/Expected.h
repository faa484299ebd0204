//===- Expected.h - error-or-value results for the schedule library -------===//
//
// The schedule library is plain C++17 (no LLVM/MLIR) and is built without
// exceptions, so every operation that can fail returns a Status or an
// Expected<T> carrying a human-readable message: Lamina's one error type
// (lamina/Support/Status.h), which the runtime uses too.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_SCHEDULE_EXPECTED_H
#define LAMINA_SCHEDULE_EXPECTED_H

#include "lamina/Support/Status.h"

namespace lamina::schedule {
using lamina::Expected;
using lamina::Status;
} // namespace lamina::schedule

#endif // LAMINA_SCHEDULE_EXPECTED_H
