//===- Status.h - kernel result: success or an error message ----*- C++ -*-===//
//
// The runtime reports errors by value, never by exception: generated code
// may be built with -fno-exceptions, and an error (an out-of-range gather
// index, a shape that does not match) must reach the caller with a message.
//
//===----------------------------------------------------------------------===//

#ifndef LAMINA_RUNTIME_STATUS_H
#define LAMINA_RUNTIME_STATUS_H

#include <string>
#include <utility>

namespace lamina::rt {

class [[nodiscard]] Status {
public:
  /// Success.
  Status() = default;
  static Status success() { return Status(); }
  static Status error(std::string message) {
    Status s;
    s.failed_ = true;
    s.message_ = std::move(message);
    return s;
  }

  bool ok() const { return !failed_; }
  /// Empty on success.
  const std::string &message() const { return message_; }

private:
  bool failed_ = false;
  std::string message_;
};

} // namespace lamina::rt

#endif // LAMINA_RUNTIME_STATUS_H
