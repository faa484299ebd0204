//===- Status.h - kernel result: success or an error message ----*- C++ -*-===//
//
// The runtime reports errors by value, never by exception: generated code
// may be built with -fno-exceptions, and an error (an out-of-range gather
// index, a shape that does not match) must reach the caller with a message.
// The type is Lamina's one error type (lamina/Support/Status.h), which the
// schedule and plan libraries use too.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_STATUS_H
#define LAMINA_RUNTIME_STATUS_H

#include "lamina/Support/Status.h"

namespace lamina::rt {
using lamina::Status;
} // namespace lamina::rt

#endif // LAMINA_RUNTIME_STATUS_H
